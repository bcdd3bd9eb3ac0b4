// steptrace/core/end_line.hpp - the record that ends a run's lines: {"event":"end", ...}, written
// after the last step line at stop(), on SIGTERM and at exit without stop() (docs/schema.md, "The end
// record"). A reader tells it from a step line by its `event` key; step lines have none.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>

#include "json_writer.hpp"
#include "line_sections.hpp"
#include "run_info.hpp"
#include "trace_trigger.hpp"

STEPTRACE_BEGIN_NAMESPACE

inline constexpr const char* kEndSchemaVersion = "steptrace.end/1";

struct EndRecord {
  std::string reason;             // "stop", "SIGTERM", "exit"
  int64_t unix_ns = 0;            // when it was written
  int64_t last_global_step = -1;  // the last step with a line (written or not), -1 = none
  uint64_t lines_written = 0, lines_unwritten_total = 0, steps_dropped_total = 0;
  uint64_t lines_incomplete = 0;  // lines written without all of their GPU records (cut short by the ending)
  uint64_t lines_cut_at_end = 0;  // lines an ending (SIGTERM, exit) had no time left for
  TraceStats traces;              // the flight recorder's
  // What ran after the last step's scope ended (evaluation, a checkpoint before stop()): its time and
  // the GPU work launched in it (known when the last step was traced).
  std::optional<int64_t> after_last_step_ns;
  std::optional<BetweenGpu> after_last_step_gpu;
  std::string after_last_step_gpu_null_reason;
};

/// The flight recorder's counts: traces written, refused, failed; what its ring held.
inline void write_trace_stats(LineOut& out, const TraceStats& t) {
  details::JsonWriter& w = out.w;
  w.key("traces");
  if (!t.on) {
    w.null();
    out.nulls.emplace_back("traces", "flight recorder off (trace_keep_steps=0)");
    return;
  }
  w.begin_object();
  w.field("captures", t.captures).field("written", t.written).field("failed", t.failed);
  w.field("refused_max_files", t.refused_max_files);
  w.field("refused_budget", t.refused_budget);
  w.field("slow_suppressed", t.slow_suppressed);
  w.field("capture_cpu_ms", t.capture_cpu_ms);
  w.key("requests").begin_object().field("read", t.requests).field("refused", t.requests_refused);
  w.field("planned", t.requests_planned).field("late", t.requests_late).end_object();
  w.key("ring").begin_object();
  w.field("keep_steps", static_cast<int64_t>(t.keep_steps)).field("bytes_max", t.max_bytes);
  w.field("bytes", t.bytes).field("bytes_peak", t.bytes_peak).field("step_bytes_max", t.step_bytes_max);
  w.field("steps_kept", t.steps_kept).field("steps_evicted_for_bytes", t.steps_evicted_for_bytes);
  w.field("records_left_out", t.records_left_out);
  w.end_object().end_object();
}

/// The identity fields event records share with step lines (rank, host, run and job, the GPU).
inline void write_event_identity(LineOut& out, const RunInfo& run, int64_t unix_ns) {
  details::JsonWriter& w = out.w;
  w.field("timestamp", details::iso8601_utc(unix_ns));
  w.field("rank", run.rank).field("local_rank", run.local_rank).field("world_size", run.world_size);
  w.field("hostname", run.hostname).field("pid", run.pid);
  w.field("run_id", run.run_id);
  out.optional_text("job_id", run.job_id, run.job_id_source);
  out.optional_text("device_uuid", run.device ? run.device->uuid : std::string(),
                    run.device ? "the GPU reported no UUID" : run.device_null_reason);
}

inline void write_null_reasons(LineOut& out) {
  out.w.key("null_reasons").begin_object();
  for (const auto& [k, why] : out.nulls) out.w.field(k, why);
  out.w.end_object();
}

inline std::string make_end_line(const EndRecord& e, const RunInfo& run) {
  LineOut out;
  details::JsonWriter& w = out.w;
  w.begin_object();
  w.field("event", "end").field("schema", kEndSchemaVersion).field("reason", e.reason);
  write_event_identity(out, run, e.unix_ns);
  w.key("last_global_step");
  if (e.last_global_step >= 0) {
    w.value(e.last_global_step);
  } else {
    w.null();
    out.nulls.emplace_back("last_global_step", "no step had a line");
  }
  w.field("lines_written", e.lines_written).field("lines_incomplete", e.lines_incomplete);
  w.key("dropped").begin_object();
  w.field("steps_total", e.steps_dropped_total).field("lines_unwritten_total", e.lines_unwritten_total);
  w.field("lines_cut_at_end", e.lines_cut_at_end);
  w.end_object();
  write_trace_stats(out, e.traces);
  w.key("after_last_step");
  if (e.after_last_step_ns) {
    w.begin_object().field("host_ms", ns_to_ms(*e.after_last_step_ns));
    write_between_gpu(out, "after_last_step.gpu", e.after_last_step_gpu, e.after_last_step_gpu_null_reason);
    w.end_object();
  } else {
    w.null();
    out.nulls.emplace_back("after_last_step", "no step, or the last step's scope was still open at the end");
  }
  write_null_reasons(out);
  w.end_object();
  return w.str();
}

STEPTRACE_END_NAMESPACE  // steptrace
