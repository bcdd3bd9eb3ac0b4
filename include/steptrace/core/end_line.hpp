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
#include "reasons.hpp"
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
  uint64_t steps_cut_at_end = 0;  // steps begun before an ending whose line could never reach the writer
  Measured<uint64_t> stall_records{reason_text(Reason::stall_watchdog_off)};  // the stall records written
  TraceStats traces;              // the flight recorder's
  // What ran after the last step's scope ended (evaluation, a checkpoint before stop()): its time and
  // the GPU work launched in it (known when the last step was traced).
  std::optional<int64_t> after_last_step_ns;
  Measured<BetweenGpu> after_last_step_gpu{reason_text(Reason::no_step_ended)};
};

/// The flight recorder's counts: traces written, refused, failed; what its ring held.
inline void write_trace_stats(LineOut& out, const TraceStats& t) {
  if (!t.on) {
    out.null(STEPTRACE_END_ROW("/traces"), t.off_reason);
    return;
  }
  out.begin_object(STEPTRACE_END_ROW("/traces"));
  out.field(STEPTRACE_END_ROW("/traces/captures"), t.captures)
      .field(STEPTRACE_END_ROW("/traces/written"), t.written)
      .field(STEPTRACE_END_ROW("/traces/failed"), t.failed);
  out.field(STEPTRACE_END_ROW("/traces/refused_max_files"), t.refused_max_files);
  out.field(STEPTRACE_END_ROW("/traces/refused_budget"), t.refused_budget);
  out.field(STEPTRACE_END_ROW("/traces/slow_suppressed"), t.slow_suppressed);
  out.field(STEPTRACE_END_ROW("/traces/capture_cpu_ms"), t.capture_cpu_ms);
  out.begin_object(STEPTRACE_END_ROW("/traces/requests"))
      .field(STEPTRACE_END_ROW("/traces/requests/read"), t.requests)
      .field(STEPTRACE_END_ROW("/traces/requests/refused"), t.requests_refused);
  out.field(STEPTRACE_END_ROW("/traces/requests/planned"), t.requests_planned)
      .field(STEPTRACE_END_ROW("/traces/requests/late"), t.requests_late)
      .end_object();
  out.begin_object(STEPTRACE_END_ROW("/traces/ring"));
  out.field(STEPTRACE_END_ROW("/traces/ring/keep_steps"), static_cast<int64_t>(t.keep_steps))
      .field(STEPTRACE_END_ROW("/traces/ring/bytes_max"), t.max_bytes);
  out.field(STEPTRACE_END_ROW("/traces/ring/bytes"), t.bytes)
      .field(STEPTRACE_END_ROW("/traces/ring/bytes_peak"), t.bytes_peak)
      .field(STEPTRACE_END_ROW("/traces/ring/step_bytes_max"), t.step_bytes_max);
  out.field(STEPTRACE_END_ROW("/traces/ring/steps_kept"), t.steps_kept)
      .field(STEPTRACE_END_ROW("/traces/ring/steps_evicted_for_bytes"), t.steps_evicted_for_bytes);
  out.field(STEPTRACE_END_ROW("/traces/ring/records_left_out"), t.records_left_out);
  out.end_object().end_object();
}

/// The identity fields event records share with step lines (rank, host, run and job, the GPU), written
/// through record R's rows: the end record's, and the stall and resumed records' (core/stall.hpp), which
/// declare the same keys and types (core/line_fields_events.hpp).
template <Record R>
inline void write_event_identity(LineOut& out, const RunInfo& run, int64_t unix_ns) {
  using line_field::Row;
  using line_field::rows::index_of;
  out.field(Row<R, index_of<R>("/timestamp")>{}, details::iso8601_utc(unix_ns));
  write_run_identity<R>(out, run);
  out.optional_text(Row<R, index_of<R>("/device_uuid")>{}, run.device ? run.device->uuid : std::string(),
                    run.device ? std::string(reason_text(Reason::gpu_no_uuid)) : run.device_null_reason);
}

/// `fields` (optional): the record's leaves as written (core/json_writer.hpp's record_leaves).
inline std::string make_end_line(const EndRecord& e, const RunInfo& run, FlatJson* fields = nullptr) {
  LineOut out(nullptr, fields, &details::RowTree::end());  // each value checked against its row as written
  out.begin();
  out.field(STEPTRACE_END_ROW("/event"), "end")
      .field(STEPTRACE_END_ROW("/schema"), kEndSchemaVersion)
      .field(STEPTRACE_END_ROW("/reason"), e.reason);
  write_event_identity<Record::end>(out, run, e.unix_ns);
  out.field(STEPTRACE_END_ROW("/last_global_step"), e.last_global_step >= 0 ? std::optional<int64_t>(e.last_global_step) : std::nullopt,
            reason_text(Reason::no_step_had_line));
  out.field(STEPTRACE_END_ROW("/lines_written"), e.lines_written)
      .field(STEPTRACE_END_ROW("/lines_incomplete"), e.lines_incomplete);
  out.field(STEPTRACE_END_ROW("/stall_records"), e.stall_records);
  out.begin_object(STEPTRACE_END_ROW("/dropped"));
  out.field(STEPTRACE_END_ROW("/dropped/steps_total"), e.steps_dropped_total)
      .field(STEPTRACE_END_ROW("/dropped/lines_unwritten_total"), e.lines_unwritten_total);
  out.field(STEPTRACE_END_ROW("/dropped/lines_cut_at_end"), e.lines_cut_at_end)
      .field(STEPTRACE_END_ROW("/dropped/steps_cut_at_end"), e.steps_cut_at_end);
  out.end_object();
  write_trace_stats(out, e.traces);
  if (e.after_last_step_ns) {
    out.begin_object(STEPTRACE_END_ROW("/after_last_step"))
        .field(STEPTRACE_END_ROW("/after_last_step/host_ms"), ns_to_ms(*e.after_last_step_ns));
    write_between_gpu(out, STEPTRACE_END_ROW("/after_last_step/gpu"), e.after_last_step_gpu);
    out.end_object();
  } else {
    out.null(STEPTRACE_END_ROW("/after_last_step"), reason_text(Reason::no_after_last_step));
  }
  return out.finish();
}

STEPTRACE_END_NAMESPACE  // steptrace
