// steptrace/core/trace_events.hpp - kept steps (what the flight recorder holds of a step: its phase
// spans and its GPU records) and their rendering as one trace in the Trace Event Format that
// chrome://tracing and Perfetto open: phase scopes on their host threads, kernels, copies and memsets
// on their streams, a flow arrow from each launch to its record. Pure C++17; tested without a GPU.
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
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu_records.hpp"
#include "json_writer.hpp"
#include "phase.hpp"
#include "records.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// A GPU record as kept: times on the GPU record clock (CUPTI), the launch's entry on the same clock
/// (0 = unknown), names as indices into the recorder's name table.
struct KeptRecord {
  int64_t start_ns = 0, end_ns = 0;
  int64_t launch_ns = 0;
  int32_t launch_tid = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;
  uint32_t name = 0;          // kernels: index into the name table; copies: unused
  PhaseId phase = kNoPhase;
  bool kernel = true;         // false: a copy or memset
  CopyKind copy_kind = CopyKind::other;
  uint64_t bytes_or_blocks = 0;  // copies: bytes; kernels: grid size in blocks
  uint32_t threads_per_block = 0;
  float sm_efficiency = 0, occupancy = 0;  // kernels: the estimates the line is made of
};

/// One step as the flight recorder keeps it.
struct KeptStep {
  uint64_t index = 0;
  int64_t begin_ns = 0, end_ns = 0;  // monotonic_ns(): the step's span as its line counts it
  bool traced = false;               // CUPTI attributed it (its records are here)
  bool gpu_complete = true;          // every launch's record came before the line
  std::string gpu_note;              // why it has no records ("" when traced)
  std::vector<PhaseSpan> spans;
  std::vector<KeptRecord> records;   // kernels, copies, memsets, in delivery order
  uint64_t records_truncated = 0;    // left out by the ring's byte bound
  std::size_t bytes() const {
    return sizeof(KeptStep) + gpu_note.capacity() + spans.capacity() * sizeof(PhaseSpan) +
           records.capacity() * sizeof(KeptRecord);
  }
};

/// What one trace file shows.
struct TraceDocument {
  std::vector<const KeptStep*> steps;        // in step order
  std::vector<uint64_t> captured;            // the steps the capture was for (the rest are neighbours)
  std::vector<std::string> reasons;          // why they were captured ("slow_step", ...)
  const std::vector<std::string>* names = nullptr;  // kernel names (demangled), by KeptRecord::name
  std::function<std::string(PhaseId)> phase_name;
  std::function<std::string(int32_t)> thread_name;  // a host thread's name ("" = unknown)
  int32_t pid = 0;                            // the host process
  int rank = 0;
  int device = 0;
  std::string device_name;
  std::string run_id;
  int64_t gpu_clock_offset_ns = 0;            // GPU record clock - monotonic_ns()
  int64_t unix_minus_monotonic_ns = 0;        // wall clock - monotonic_ns(), for otherData.origin_unix_ns
};

namespace details {

/// Host-thread track of the steps themselves.
inline constexpr int32_t kStepTrackTid = 0;
/// Scopes of threads with no id (the open-phase table was full): lanes from here down.
inline constexpr int32_t kUnknownThreadTid = 0x7fff0000;
/// GPU tracks live in a process of their own: pid = this + rank * 64 + device.
inline constexpr int32_t kGpuPidBase = 1 << 30;
/// A stream's overlap lanes: tid = stream + lane * this.
inline constexpr int64_t kLaneStride = 1 << 20;

inline double trace_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

/// Assigns each interval (begin, end) a lane such that intervals of one lane never overlap; returns
/// the lane of each, in input order. Greedy over start times.
inline std::vector<int> overlap_lanes(const std::vector<std::pair<int64_t, int64_t>>& iv) {
  std::vector<std::size_t> order(iv.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return iv[a].first < iv[b].first; });
  std::vector<int64_t> lane_end;
  std::vector<int> lane(iv.size(), 0);
  for (std::size_t i : order) {
    int chosen = -1;
    for (std::size_t l = 0; l < lane_end.size(); ++l)
      if (lane_end[l] <= iv[i].first) {
        chosen = static_cast<int>(l);
        break;
      }
    if (chosen < 0) {
      chosen = static_cast<int>(lane_end.size());
      lane_end.push_back(0);
    }
    lane_end[chosen] = iv[i].second;
    lane[i] = chosen;
  }
  return lane;
}

/// A phase scope as drawn on its thread's track.
struct HostSpan {
  int64_t begin = 0, end = 0;
  const PhaseSpan* span = nullptr;
  uint64_t step = 0;
};
struct NestingFix {
  uint64_t adjusted = 0;
  int64_t max_ns = 0;
};

/// One thread's scopes nest by construction, but their times are clock readings converted to
/// nanoseconds with an anchor the recorder refreshes, so two scopes can overlap by a few nanoseconds
/// where one ended before the other began. A viewer draws only nested events: a scope that starts
/// inside the open one and ends after it is moved to start at its end (when it overlaps less than it
/// extends: back-to-back scopes) or cut at its end (a nested one). Counted, with the largest move.
inline void make_nest(std::vector<HostSpan>& spans, NestingFix& fix) {
  std::sort(spans.begin(), spans.end(), [](const HostSpan& a, const HostSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<int64_t> open_ends;
  for (HostSpan& h : spans) {
    while (!open_ends.empty() && open_ends.back() <= h.begin) open_ends.pop_back();
    if (!open_ends.empty() && h.end > open_ends.back()) {
      const int64_t overlap = open_ends.back() - h.begin, excess = h.end - open_ends.back();
      ++fix.adjusted;
      if (overlap <= excess) {  // back to back: starts where the open one ends
        fix.max_ns = std::max(fix.max_ns, overlap);
        h.begin = open_ends.back();
        open_ends.pop_back();
        while (!open_ends.empty() && open_ends.back() <= h.begin) open_ends.pop_back();
        if (!open_ends.empty() && h.end > open_ends.back()) {
          fix.max_ns = std::max(fix.max_ns, h.end - open_ends.back());
          h.end = open_ends.back();
        }
      } else {  // nested: ends where the open one ends
        fix.max_ns = std::max(fix.max_ns, excess);
        h.end = open_ends.back();
      }
    }
    open_ends.push_back(h.end);
  }
  // Moved starts can reorder events of equal begin: sort again for the writer (a stable order).
  std::stable_sort(spans.begin(), spans.end(), [](const HostSpan& a, const HostSpan& b) { return a.begin < b.begin; });
}

}  // namespace details

/// Renders the document as one JSON object ({"traceEvents": [...], "otherData": {...}}). Times are
/// microseconds since the first step's begin; GPU records are moved onto the host clock.
inline std::string make_chrome_trace(const TraceDocument& d) {
  using details::trace_us;
  details::JsonWriter w;
  // Time zero: the earliest thing shown (a loader thread's scope may open before the first step).
  int64_t origin = INT64_MAX;
  for (const KeptStep* s : d.steps) {
    origin = std::min(origin, s->begin_ns);
    for (const PhaseSpan& p : s->spans) origin = std::min(origin, p.begin_ns);
    for (const KeptRecord& r : s->records) {
      origin = std::min(origin, r.start_ns - d.gpu_clock_offset_ns);
      if (r.launch_ns > 0) origin = std::min(origin, r.launch_ns - d.gpu_clock_offset_ns);
    }
  }
  if (origin == INT64_MAX) origin = 0;
  auto host_ts = [&](int64_t ns) { return trace_us(ns - origin); };
  auto gpu_ts = [&](int64_t gpu_ns) { return trace_us(gpu_ns - d.gpu_clock_offset_ns - origin); };
  const int32_t gpu_pid = details::kGpuPidBase + d.rank * 64 + d.device;
  auto is_captured = [&](uint64_t step) {
    return std::find(d.captured.begin(), d.captured.end(), step) != d.captured.end();
  };

  w.begin_object().key("traceEvents").begin_array();
  auto meta = [&](const char* what, int32_t pid, int64_t tid, const std::string& name, bool with_tid) {
    w.begin_object().field("ph", "M").field("name", what).field("pid", static_cast<int64_t>(pid));
    if (with_tid) w.field("tid", tid);
    w.key("args").begin_object().field("name", name).end_object().end_object();
  };
  auto sort_index = [&](const char* what, int32_t pid, int64_t tid, int64_t index, bool with_tid) {
    w.begin_object().field("ph", "M").field("name", what).field("pid", static_cast<int64_t>(pid));
    if (with_tid) w.field("tid", tid);
    w.key("args").begin_object().field("sort_index", index).end_object().end_object();
  };
  meta("process_name", d.pid, 0, "rank " + std::to_string(d.rank) + " host (pid " + std::to_string(d.pid) + ")", false);
  sort_index("process_sort_index", d.pid, 0, 2 * d.rank, false);
  meta("process_name", gpu_pid, 0,
       "rank " + std::to_string(d.rank) + " GPU " + std::to_string(d.device) +
           (d.device_name.empty() ? std::string() : " (" + d.device_name + ")"),
       false);
  sort_index("process_sort_index", gpu_pid, 0, 2 * d.rank + 1, false);
  meta("thread_name", d.pid, details::kStepTrackTid, "steps", true);
  sort_index("thread_sort_index", d.pid, details::kStepTrackTid, -1, true);

  // Steps.
  for (const KeptStep* s : d.steps) {
    w.begin_object().field("ph", "X").field("cat", "step").field("name", "step " + std::to_string(s->index));
    w.field("pid", static_cast<int64_t>(d.pid)).field("tid", static_cast<int64_t>(details::kStepTrackTid));
    w.field("ts", host_ts(s->begin_ns)).field("dur", trace_us(s->end_ns - s->begin_ns));
    w.key("args").begin_object().field("global_step", s->index).field("captured", is_captured(s->index));
    w.field("traced", s->traced);
    if (!s->gpu_note.empty()) w.field("gpu_records", s->gpu_note);
    if (s->traced) w.field("gpu_complete", s->gpu_complete);
    if (s->records_truncated) w.field("records_left_out", s->records_truncated);
    w.end_object().end_object();
  }

  // Phase scopes on their threads. Spans of an unknown thread (tid 0) get lanes of their own.
  std::map<int32_t, bool> host_threads;
  std::vector<std::pair<int64_t, int64_t>> unknown_iv;
  std::vector<std::pair<const PhaseSpan*, uint64_t>> unknown;
  std::map<int32_t, std::vector<details::HostSpan>> by_thread;
  for (const KeptStep* s : d.steps)
    for (const PhaseSpan& p : s->spans) {
      if (p.tid == 0) {
        unknown.emplace_back(&p, s->index);
        unknown_iv.emplace_back(p.begin_ns, p.end_ns);
        continue;
      }
      host_threads[p.tid] = host_threads[p.tid] || p.on_step_thread;
      by_thread[p.tid].push_back({p.begin_ns, p.end_ns, &p, s->index});
    }
  details::NestingFix fix;
  for (auto& [tid, spans] : by_thread) {
    details::make_nest(spans, fix);
    for (const details::HostSpan& h : spans) {
      w.begin_object().field("ph", "X").field("cat", "phase").field("name", d.phase_name(h.span->phase));
      w.field("pid", static_cast<int64_t>(d.pid)).field("tid", static_cast<int64_t>(tid));
      w.field("ts", host_ts(h.begin)).field("dur", trace_us(h.end - h.begin));
      w.key("args").begin_object().field("global_step", h.step).field("depth", static_cast<int64_t>(h.span->depth));
      w.end_object().end_object();
    }
  }
  const std::vector<int> unknown_lane = details::overlap_lanes(unknown_iv);
  int unknown_lanes = 0;
  for (std::size_t i = 0; i < unknown.size(); ++i) {
    const PhaseSpan& p = *unknown[i].first;
    unknown_lanes = std::max(unknown_lanes, unknown_lane[i] + 1);
    w.begin_object().field("ph", "X").field("cat", "phase").field("name", d.phase_name(p.phase));
    w.field("pid", static_cast<int64_t>(d.pid)).field("tid", static_cast<int64_t>(details::kUnknownThreadTid - unknown_lane[i]));
    w.field("ts", host_ts(p.begin_ns)).field("dur", trace_us(p.end_ns - p.begin_ns));
    w.key("args").begin_object().field("global_step", unknown[i].second).end_object().end_object();
  }
  for (int l = 0; l < unknown_lanes; ++l)
    meta("thread_name", d.pid, details::kUnknownThreadTid - l, "thread unknown (lane " + std::to_string(l) + ")", true);

  // GPU records on their streams (lanes where one stream's records overlap), launches on their
  // threads, and a flow from each launch to its record.
  std::map<uint32_t, std::vector<std::pair<const KeptRecord*, uint64_t>>> by_stream;
  for (const KeptStep* s : d.steps)
    for (const KeptRecord& r : s->records) by_stream[r.stream].emplace_back(&r, s->index);
  uint64_t flow_id = 0;
  for (auto& [stream, recs] : by_stream) {
    std::vector<std::pair<int64_t, int64_t>> iv;
    iv.reserve(recs.size());
    for (const auto& [r, step] : recs) iv.emplace_back(r->start_ns, r->end_ns);
    const std::vector<int> lane = details::overlap_lanes(iv);
    int lanes = 0;
    for (std::size_t i = 0; i < recs.size(); ++i) {
      const KeptRecord& r = *recs[i].first;
      const uint64_t step = recs[i].second;
      lanes = std::max(lanes, lane[i] + 1);
      const int64_t tid = static_cast<int64_t>(stream) + lane[i] * details::kLaneStride;
      std::string name;
      const char* cat = "kernel";
      if (r.kernel) {
        name = d.names && r.name < d.names->size() ? (*d.names)[r.name] : std::string("kernel");
      } else if (r.copy_kind == CopyKind::memset) {
        name = "memset";
        cat = "memset";
      } else {
        name = std::string("memcpy ") + copy_kind_name(r.copy_kind);
        cat = "memcpy";
      }
      w.begin_object().field("ph", "X").field("cat", cat).field("name", name);
      w.field("pid", static_cast<int64_t>(gpu_pid)).field("tid", tid);
      w.field("ts", gpu_ts(r.start_ns)).field("dur", trace_us(r.end_ns - r.start_ns));
      w.key("args").begin_object().field("global_step", step).field("phase", d.phase_name(r.phase));
      w.field("correlation", static_cast<uint64_t>(r.correlation)).field("stream", static_cast<uint64_t>(r.stream));
      if (r.kernel) {
        w.field("grid_blocks", r.bytes_or_blocks).field("threads_per_block", static_cast<uint64_t>(r.threads_per_block));
        w.field("est_sm_efficiency", static_cast<double>(r.sm_efficiency));
        if (r.occupancy > 0) w.field("est_occupancy", static_cast<double>(r.occupancy));
      } else {
        w.field("bytes", r.bytes_or_blocks);
      }
      w.end_object().end_object();
      if (r.launch_ns <= 0 || r.launch_tid == 0) continue;
      host_threads.emplace(r.launch_tid, false);
      const double launch_ts = gpu_ts(r.launch_ns);
      ++flow_id;
      w.begin_object().field("ph", "X").field("cat", "launch").field("name", "launch");
      w.field("pid", static_cast<int64_t>(d.pid)).field("tid", static_cast<int64_t>(r.launch_tid));
      w.field("ts", launch_ts).field("dur", 0.0);
      w.key("args").begin_object().field("correlation", static_cast<uint64_t>(r.correlation)).field("record", name);
      w.field("duration", "not measured: the launch call's entry only").end_object().end_object();
      w.begin_object().field("ph", "s").field("cat", "launch").field("name", "launch").field("id", flow_id);
      w.field("pid", static_cast<int64_t>(d.pid)).field("tid", static_cast<int64_t>(r.launch_tid)).field("ts", launch_ts);
      w.end_object();
      w.begin_object().field("ph", "f").field("bp", "e").field("cat", "launch").field("name", "launch").field("id", flow_id);
      w.field("pid", static_cast<int64_t>(gpu_pid)).field("tid", tid).field("ts", gpu_ts(r.start_ns));
      w.end_object();
    }
    for (int l = 0; l < lanes; ++l) {
      const int64_t tid = static_cast<int64_t>(stream) + l * details::kLaneStride;
      meta("thread_name", gpu_pid, tid,
           "stream " + std::to_string(stream) + (l ? " (overlapping records, lane " + std::to_string(l) + ")" : ""),
           true);
      sort_index("thread_sort_index", gpu_pid, tid, tid, true);
    }
  }
  for (const auto& [tid, step_thread] : host_threads) {
    std::string name = d.thread_name ? d.thread_name(tid) : std::string();
    if (name.empty()) name = "thread";
    name += " (tid " + std::to_string(tid) + (step_thread ? ", step thread)" : ")");
    meta("thread_name", d.pid, tid, name, true);
    if (step_thread) sort_index("thread_sort_index", d.pid, tid, 0, true);
  }
  w.end_array();

  w.field("displayTimeUnit", "ms");
  w.key("otherData").begin_object().field("schema", "steptrace.trace/1").field("run_id", d.run_id);
  w.field("rank", static_cast<int64_t>(d.rank)).field("device", static_cast<int64_t>(d.device));
  w.field("origin_unix_ns", origin + d.unix_minus_monotonic_ns).field("time_unit", "us since origin_unix_ns");
  w.field("host_scopes_adjusted", fix.adjusted).field("host_scopes_adjusted_max_ns", fix.max_ns);
  w.key("steps").begin_array();
  for (const KeptStep* s : d.steps) w.value(s->index);
  w.end_array().key("captured").begin_array();
  for (uint64_t s : d.captured) w.value(s);
  w.end_array().key("reasons").begin_array();
  for (const std::string& r : d.reasons) w.value(r);
  w.end_array().end_object();
  w.end_object();
  return w.release();
}

STEPTRACE_END_NAMESPACE  // steptrace
