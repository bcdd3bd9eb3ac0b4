// steptrace/core/step_gpu.hpp - what a step's GPU work comes to: the interval measures (intersection,
// exposed communication, time-weighted SM efficiency) and the per-step, per-phase results (StepGpu,
// PhaseGpu, top kernels, copies, work between steps) that core/attribution.hpp fills. Pure C++17.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu_records.hpp"
#include "intervals.hpp"
#include "phase.hpp"

STEPTRACE_BEGIN_NAMESPACE

// ---- pure interval functions ------------------------------------------------------------------

/// Length of the intersection of two sorted disjoint interval lists.
inline int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return total;
}

/// Communication time not hidden behind computation: |U(comm)| - |U(comm) ∩ U(compute)|.
inline int64_t exposed_time(const std::vector<Interval>& comm, const std::vector<Interval>& compute) {
  const auto c = merge_intervals(comm);
  int64_t total = 0;
  for (const auto& iv : c) total += iv.second - iv.first;
  return total - intersection_length(c, merge_intervals(compute));
}

/// An interval carrying a weight (a kernel and its SM-efficiency estimate).
struct WeightedInterval {
  int64_t begin = 0, end = 0;
  double weight = 0;
};

/// Time-weighted SM efficiency over the busy time: at each instant the sum of the running kernels'
/// estimates, capped at 1 (concurrent kernels share the SMs), integrated and divided by the length of
/// the union. Kineto's aggregate definition (pytorch/kineto, libkineto "sm_efficiency" of a time
/// window: sum of blocks/SMs of concurrent kernels, clamped to 1). Returns 0 for no busy time.
inline double time_weighted_sm_efficiency(const std::vector<WeightedInterval>& kernels) {
  struct Event {
    int64_t time;
    int delta_active;  // -1 sorts first: a kernel ending at t and one starting at t never overlap
    double delta_weight;
    bool operator<(const Event& o) const { return time != o.time ? time < o.time : delta_active < o.delta_active; }
  };
  std::vector<Event> events;
  events.reserve(kernels.size() * 2);
  for (const auto& k : kernels) {
    if (k.end <= k.begin) continue;
    events.push_back({k.begin, +1, k.weight});
    events.push_back({k.end, -1, -k.weight});
  }
  std::sort(events.begin(), events.end());
  double integral = 0, level = 0;
  int64_t busy = 0;
  int active = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i > 0) {
      const int64_t dt = events[i].time - events[i - 1].time;
      if (active > 0 && dt > 0) {
        integral += std::min(1.0, std::max(0.0, level)) * static_cast<double>(dt);
        busy += dt;
      }
    }
    level += events[i].delta_weight;
    active += events[i].delta_active;
  }
  return busy > 0 ? integral / static_cast<double>(busy) : 0;
}

// ---- per-step GPU metrics ----------------------------------------------------------------------

struct TopKernel {
  std::string name;  // as recorded (mangled); the backend demangles for display
  int64_t total_ns = 0;
  uint32_t calls = 0;
  double sm_efficiency = 0;  // time-weighted over its calls
};

struct CopyTotals {
  uint64_t bytes = 0;
  int64_t total_ns = 0;
  uint32_t count = 0;
};

struct PhaseGpu {
  int64_t kernel_ns = 0;   // sum of kernel durations
  int64_t busy_ns = 0;     // union of kernel, copy and memset intervals
  uint32_t kernels = 0;
  uint32_t streams = 0;      // distinct (device, stream) its kernels ran on
  double sm_efficiency = 0;  // time_weighted_sm_efficiency of the phase's kernels
  double occupancy = 0;      // kernel-time-weighted estimate; 0 if unknown
  CopyTotals copies[kCopyKindCount];
  std::vector<TopKernel> top_kernels;
  std::vector<Interval> busy;  // the phase's GPU busy intervals (merged), for hardware-counter attribution
};

struct StepGpu {
  std::map<PhaseId, PhaseGpu> phases;  // kNoPhase = launched inside the step but outside every phase
  int64_t busy_ns = 0;                 // union over everything the step launched
  int64_t kernel_ns = 0;
  uint32_t kernels = 0;
  uint32_t streams = 0;          // distinct (device, stream) its kernels ran on
  std::map<uint32_t, int64_t> stream_busy_ns;  // busy time per stream id of its kernels (NCCL's left out) and copies
  double sm_efficiency = 0;
  int64_t nccl_ns = 0;           // NCCL kernels' durations, whatever phase launched them
  int64_t nccl_exposed_ns = 0;   // NCCL time not overlapped by the step's other kernels
  std::map<std::string, std::pair<int64_t, uint32_t>> nccl_collectives;  // collective -> (time, kernels)
  bool complete = true;          // every launch of the step produced its records before the line
  uint32_t missing_launches = 0;
  uint64_t late_records = 0;          // records that arrived after their step's line (since the last line)
  uint64_t unattributed_records = 0;  // records whose launch was never seen (since the last line)
  // Records whose launch was not seen because records were off when it was called: its correlation id
  // is below a launch seen since (ids grow with each call), e.g. a thread launching as tracing switched
  // on; excluded (since the last line).
  uint64_t launched_untraced_records = 0;
  int64_t before_first_step_ns = 0;   // GPU time launched before the first step (first line only)
  uint32_t before_first_step_records = 0;
  // Records excluded as impossible (core/plausibility.hpp), by reason (index = Implausible - 1).
  uint64_t excluded[kImplausibleKinds] = {};
  uint64_t excluded_records = 0;
  uint32_t implausible_phases = 0;  // phases whose busy time failed busy_time_plausible (left out)
  // Records whose launch call's entry is known, and those of them that started within
  // kHostBoundStartNs of it: the GPU had (nearly) nothing queued and waited for the host, so whatever
  // slows the launching thread slows the step (the overhead estimate weights host costs by this share).
  uint32_t launch_timed = 0, launch_waited = 0;
};

/// A step's GPU work from its first record's start to its last record's end; nullopt without work.
inline std::optional<Interval> gpu_work_interval(const StepGpu& g) {
  std::optional<Interval> out;
  for (const auto& [id, pg] : g.phases) {
    if (pg.busy.empty()) continue;
    out = out ? Interval{std::min(out->first, pg.busy.front().first), std::max(out->second, pg.busy.back().second)}
              : Interval{pg.busy.front().first, pg.busy.back().second};
  }
  return out;
}
inline int64_t gpu_span_ns(const StepGpu& g) {
  const std::optional<Interval> w = gpu_work_interval(g);
  return w ? w->second - w->first : 0;
}

/// The window a step's GPU busy time is read against: its time, or the span of its work where that is
/// longer (work the host queued ahead runs on after the step's end: a loop that does not wait for the
/// GPU every step). gpu_utilization = busy / window; busy above the window means broken sums.
inline int64_t gpu_window_ns(const StepGpu& g, int64_t step_time_ns) { return std::max(step_time_ns, gpu_span_ns(g)); }

/// A record that starts this soon after its launch call entered found the GPU's queue (nearly) empty.
inline constexpr int64_t kHostBoundStartNs = 50'000;

/// A record filed under its step: the phase that launched it, and the launch call's entry (CUPTI
/// clock, 0 = unknown) and thread (0 = unknown).
template <class R>
struct Placed {
  R record;
  PhaseId phase = kNoPhase;
  int64_t launch_ns = 0;
  int32_t launch_tid = 0;
  bool from_graph = false;  // launched by a CUDA graph launch (its records share the launch's id)
};

/// GPU work launched between two steps (after a step's scope ended, before the next began: evaluation,
/// checkpointing) or after the last step: reported apart, never in a step's sums.
struct BetweenGpu {
  int64_t busy_ns = 0;   // union of its kernel, copy and memset intervals
  int64_t kernel_ns = 0;
  uint32_t kernels = 0;
  uint32_t copies = 0;   // copies and memsets
  uint64_t copy_bytes = 0;
  bool complete = true;  // every launch produced its records
  uint32_t missing_launches = 0;
  uint64_t excluded_records = 0;  // impossible records left out (core/plausibility.hpp)
  std::vector<TopKernel> top_kernels;
};

/// A step's records as filed (what the flight recorder keeps: details/flight_recorder.hpp), the
/// impossible ones left out as they are left out of the line's sums.
struct StepActivity {
  std::vector<Placed<KernelRecord>> kernels;
  std::vector<Placed<CopyRecord>> copies;
};

STEPTRACE_END_NAMESPACE  // steptrace
