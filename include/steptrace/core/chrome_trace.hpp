// steptrace/core/chrome_trace.hpp - a TraceDocument (core/trace_events.hpp) rendered as one trace in
// the Trace Event Format that chrome://tracing and Perfetto open: the steps on a track of their own,
// phase scopes on their host threads, kernels, copies and memsets on their streams, a flow arrow from
// each launch to its record. Pure C++17; tested without a GPU.
//
// Format: "Trace Event Format" (Google, the document chrome://tracing and Perfetto's JSON importer
// follow): complete events ph "X" with ts/dur in microseconds, metadata ph "M" (process_name,
// thread_name, *_sort_index), flow events ph "s"/"f" paired by id, "bp":"e" binding the end to the
// enclosing slice. Perfetto draws X events of one track only if they nest, so records of one stream
// that overlap (graph branches) go to lanes of their own.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "json_writer.hpp"
#include "trace_events.hpp"

STEPTRACE_BEGIN_NAMESPACE

namespace details {

/// Writes one document's events in a fixed order: metadata of the two processes and the step track,
/// the steps, the phase scopes (known threads, then lanes of unknown ones), the GPU records stream by
/// stream with their launches, the host threads' names, then otherData.
class ChromeTraceWriter {
 public:
  explicit ChromeTraceWriter(const TraceDocument& d)
      : d_(d), origin_(origin_of(d)), gpu_pid_(kGpuPidBase + d.rank * 64 + d.device) {}

  std::string render() {
    w_.begin_object().key("traceEvents").begin_array();
    processes();
    steps();
    phases();
    unknown_thread_phases();
    gpu_records();
    host_thread_names();
    w_.end_array();
    other_data();
    w_.end_object();
    return w_.release();
  }

 private:
  /// Time zero: the earliest thing shown (a loader thread's scope may open before the first step).
  static int64_t origin_of(const TraceDocument& d) {
    int64_t origin = INT64_MAX;
    for (const KeptStep* s : d.steps) {
      origin = std::min(origin, s->begin_ns);
      for (const PhaseSpan& p : s->spans) origin = std::min(origin, p.begin_ns);
      for (const KeptRecord& r : s->records) {
        origin = std::min(origin, r.start_ns - d.gpu_clock_offset_ns);
        if (r.launch_ns > 0) origin = std::min(origin, r.launch_ns - d.gpu_clock_offset_ns);
      }
    }
    return origin == INT64_MAX ? 0 : origin;
  }
  double host_ts(int64_t ns) const { return trace_us(ns - origin_); }
  double gpu_ts(int64_t gpu_ns) const { return trace_us(gpu_ns - d_.gpu_clock_offset_ns - origin_); }
  bool is_captured(uint64_t step) const {
    return std::find(d_.captured.begin(), d_.captured.end(), step) != d_.captured.end();
  }

  void meta(const char* what, int32_t pid, int64_t tid, const std::string& name, bool with_tid) {
    w_.begin_object().field("ph", "M").field("name", what).field("pid", static_cast<int64_t>(pid));
    if (with_tid) w_.field("tid", tid);
    w_.key("args").begin_object().field("name", name).end_object().end_object();
  }
  void sort_index(const char* what, int32_t pid, int64_t tid, int64_t index, bool with_tid) {
    w_.begin_object().field("ph", "M").field("name", what).field("pid", static_cast<int64_t>(pid));
    if (with_tid) w_.field("tid", tid);
    w_.key("args").begin_object().field("sort_index", index).end_object().end_object();
  }
  /// A complete event's common part, up to its args object (left open).
  void complete(const char* cat, const std::string& name, int32_t pid, int64_t tid, double ts, double dur) {
    w_.begin_object().field("ph", "X").field("cat", cat).field("name", name);
    w_.field("pid", static_cast<int64_t>(pid)).field("tid", tid);
    w_.field("ts", ts).field("dur", dur);
    w_.key("args").begin_object();
  }

  void processes() {
    const std::string rank = "rank " + std::to_string(d_.rank);
    meta("process_name", d_.pid, 0, rank + " host (pid " + std::to_string(d_.pid) + ")", false);
    sort_index("process_sort_index", d_.pid, 0, 2 * d_.rank, false);
    meta("process_name", gpu_pid_, 0,
         rank + " GPU " + std::to_string(d_.device) + (d_.device_name.empty() ? std::string() : " (" + d_.device_name + ")"),
         false);
    sort_index("process_sort_index", gpu_pid_, 0, 2 * d_.rank + 1, false);
    meta("thread_name", d_.pid, kStepTrackTid, "steps", true);
    sort_index("thread_sort_index", d_.pid, kStepTrackTid, -1, true);
  }

  void steps() {
    for (const KeptStep* s : d_.steps) {
      complete("step", "step " + std::to_string(s->index), d_.pid, kStepTrackTid, host_ts(s->begin_ns),
               trace_us(s->end_ns - s->begin_ns));
      w_.field("global_step", s->index).field("captured", is_captured(s->index));
      // The event spans to the next step's start; the step's own time is its line's step_time_ms.
      w_.field("step_time_ms", static_cast<double>(s->own_end() - s->begin_ns) / 1e6);
      w_.field("traced", s->traced);
      if (!s->gpu_note.empty()) w_.field("gpu_records", s->gpu_note);
      if (s->traced) w_.field("gpu_complete", s->gpu_complete);
      if (s->records_truncated) w_.field("records_left_out", s->records_truncated);
      w_.end_object().end_object();
    }
  }

  /// Phase scopes on their threads, made to nest (make_nest). Spans of an unknown thread (tid 0) are
  /// set aside for lanes of their own.
  void phases() {
    std::map<int32_t, std::vector<HostSpan>> by_thread;
    for (const KeptStep* s : d_.steps)
      for (const PhaseSpan& p : s->spans) {
        if (p.tid == 0) {
          unknown_.emplace_back(&p, s->index);
          continue;
        }
        host_threads_[p.tid] = host_threads_[p.tid] || p.on_step_thread;
        by_thread[p.tid].push_back({p.begin_ns, p.end_ns, &p, s->index});
      }
    for (auto& [tid, spans] : by_thread) {
      make_nest(spans, fix_);
      for (const HostSpan& h : spans) {
        complete("phase", d_.phase_name(h.span->phase), d_.pid, tid, host_ts(h.begin), trace_us(h.end - h.begin));
        w_.field("global_step", h.step).field("depth", static_cast<int64_t>(h.span->depth));
        w_.end_object().end_object();
      }
    }
  }

  void unknown_thread_phases() {
    std::vector<std::pair<int64_t, int64_t>> iv;
    iv.reserve(unknown_.size());
    for (const auto& [p, step] : unknown_) iv.emplace_back(p->begin_ns, p->end_ns);
    const std::vector<int> lane = overlap_lanes(iv);
    int lanes = 0;
    for (std::size_t i = 0; i < unknown_.size(); ++i) {
      const PhaseSpan& p = *unknown_[i].first;
      lanes = std::max(lanes, lane[i] + 1);
      complete("phase", d_.phase_name(p.phase), d_.pid, kUnknownThreadTid - lane[i], host_ts(p.begin_ns),
               trace_us(p.end_ns - p.begin_ns));
      w_.field("global_step", unknown_[i].second).end_object().end_object();
    }
    for (int l = 0; l < lanes; ++l)
      meta("thread_name", d_.pid, kUnknownThreadTid - l, "thread unknown (lane " + std::to_string(l) + ")", true);
  }

  /// GPU records on their streams (lanes where one stream's records overlap), launches on their
  /// threads, and a flow from each launch to its record.
  void gpu_records() {
    std::map<uint32_t, std::vector<std::pair<const KeptRecord*, uint64_t>>> by_stream;
    for (const KeptStep* s : d_.steps)
      for (const KeptRecord& r : s->records) by_stream[r.stream].emplace_back(&r, s->index);
    for (auto& [stream, recs] : by_stream) {
      std::vector<std::pair<int64_t, int64_t>> iv;
      iv.reserve(recs.size());
      for (const auto& [r, step] : recs) iv.emplace_back(r->start_ns, r->end_ns);
      const std::vector<int> lane = overlap_lanes(iv);
      int lanes = 0;
      for (std::size_t i = 0; i < recs.size(); ++i) {
        lanes = std::max(lanes, lane[i] + 1);
        record(*recs[i].first, recs[i].second, static_cast<int64_t>(stream) + lane[i] * kLaneStride);
      }
      for (int l = 0; l < lanes; ++l) {
        const int64_t tid = static_cast<int64_t>(stream) + l * kLaneStride;
        meta("thread_name", gpu_pid_, tid,
             "stream " + std::to_string(stream) + (l ? " (overlapping records, lane " + std::to_string(l) + ")" : ""),
             true);
        sort_index("thread_sort_index", gpu_pid_, tid, tid, true);
      }
    }
  }

  /// One kernel, copy or memset on its stream's lane `tid`, then its launch and the flow between them.
  void record(const KeptRecord& r, uint64_t step, int64_t tid) {
    std::string name;
    const char* cat = "kernel";
    if (r.kernel) {
      name = d_.names && r.name < d_.names->size() ? (*d_.names)[r.name] : std::string("kernel");
    } else if (r.copy_kind == CopyKind::memset) {
      name = "memset";
      cat = "memset";
    } else {
      name = std::string("memcpy ") + copy_kind_name(r.copy_kind);
      cat = "memcpy";
    }
    complete(cat, name, gpu_pid_, tid, gpu_ts(r.start_ns), trace_us(r.end_ns - r.start_ns));
    w_.field("global_step", step).field("phase", d_.phase_name(r.phase));
    w_.field("correlation", static_cast<uint64_t>(r.correlation)).field("stream", static_cast<uint64_t>(r.stream));
    if (r.kernel) {
      w_.field("grid_blocks", r.bytes_or_blocks).field("threads_per_block", static_cast<uint64_t>(r.threads_per_block));
      w_.field("est_sm_efficiency", static_cast<double>(r.sm_efficiency));
      if (r.occupancy > 0) w_.field("est_occupancy", static_cast<double>(r.occupancy));
    } else {
      w_.field("bytes", r.bytes_or_blocks);
    }
    w_.end_object().end_object();
    if (r.launch_ns <= 0 || r.launch_tid == 0) return;
    host_threads_.emplace(r.launch_tid, false);
    const double launch_ts = gpu_ts(r.launch_ns);
    ++flow_id_;
    complete("launch", "launch", d_.pid, r.launch_tid, launch_ts, 0.0);
    w_.field("correlation", static_cast<uint64_t>(r.correlation)).field("record", name);
    w_.field("duration", "not measured: the launch call's entry only").end_object().end_object();
    w_.begin_object().field("ph", "s").field("cat", "launch").field("name", "launch").field("id", flow_id_);
    w_.field("pid", static_cast<int64_t>(d_.pid)).field("tid", static_cast<int64_t>(r.launch_tid)).field("ts", launch_ts);
    w_.end_object();
    w_.begin_object().field("ph", "f").field("bp", "e").field("cat", "launch").field("name", "launch").field("id", flow_id_);
    w_.field("pid", static_cast<int64_t>(gpu_pid_)).field("tid", tid).field("ts", gpu_ts(r.start_ns));
    w_.end_object();
  }

  void host_thread_names() {
    for (const auto& [tid, step_thread] : host_threads_) {
      std::string name = d_.thread_name ? d_.thread_name(tid) : std::string();
      if (name.empty()) name = "thread";
      name += " (tid " + std::to_string(tid) + (step_thread ? ", step thread)" : ")");
      meta("thread_name", d_.pid, tid, name, true);
      if (step_thread) sort_index("thread_sort_index", d_.pid, tid, 0, true);
    }
  }

  void other_data() {
    w_.field("displayTimeUnit", "ms");
    w_.key("otherData").begin_object().field("schema", "steptrace.trace/1").field("run_id", d_.run_id);
    w_.field("rank", static_cast<int64_t>(d_.rank)).field("device", static_cast<int64_t>(d_.device));
    w_.field("origin_unix_ns", origin_ + d_.unix_minus_monotonic_ns).field("time_unit", "us since origin_unix_ns");
    w_.field("host_scopes_adjusted", fix_.adjusted).field("host_scopes_adjusted_max_ns", fix_.max_ns);
    w_.key("steps").begin_array();
    for (const KeptStep* s : d_.steps) w_.value(s->index);
    w_.end_array().key("captured").begin_array();
    for (uint64_t s : d_.captured) w_.value(s);
    w_.end_array().key("reasons").begin_array();
    for (const std::string& r : d_.reasons) w_.value(r);
    w_.end_array().end_object();
  }

  const TraceDocument& d_;
  const int64_t origin_;
  const int32_t gpu_pid_;
  JsonWriter w_;
  std::map<int32_t, bool> host_threads_;  // tid -> it is the step thread
  std::vector<std::pair<const PhaseSpan*, uint64_t>> unknown_;  // scopes of threads with no id, and their step
  NestingFix fix_;
  uint64_t flow_id_ = 0;
};

}  // namespace details

/// Renders the document as one JSON object ({"traceEvents": [...], "otherData": {...}}). Times are
/// microseconds since the earliest thing shown; GPU records are moved onto the host clock.
inline std::string make_chrome_trace(const TraceDocument& d) { return details::ChromeTraceWriter(d).render(); }

STEPTRACE_END_NAMESPACE  // steptrace
