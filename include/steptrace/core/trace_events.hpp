// steptrace/core/trace_events.hpp - kept steps (what the flight recorder holds of a step: its phase
// spans and its GPU records), the document a trace file shows, and the track layout rules (overlap
// lanes, host scopes made to nest) that its rendering (core/chrome_trace.hpp) follows. Pure C++17;
// tested without a GPU.
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
  int64_t begin_ns = 0, end_ns = 0;  // monotonic_ns(): the step's start to the next step's start
  int64_t own_end_ns = 0;            // its own end, as its line's step_time_ms counts it (0: end_ns)
  bool traced = false;               // CUPTI attributed it (its records are here)
  bool gpu_complete = true;          // every launch's record came before the line
  std::string gpu_note;              // why it has no records ("" when traced)
  std::vector<PhaseSpan> spans;
  std::vector<KeptRecord> records;   // kernels, copies, memsets, in delivery order
  uint64_t records_truncated = 0;    // left out by the ring's byte bound
  /// Its own end: own_end_ns, else end_ns.
  int64_t own_end() const { return own_end_ns > begin_ns ? own_end_ns : end_ns; }
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

STEPTRACE_END_NAMESPACE  // steptrace
