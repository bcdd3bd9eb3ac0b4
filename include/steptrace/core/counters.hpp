// steptrace/core/counters.hpp - hardware-counter samples (PM sampling) attributed to steps and phases.
// Pure C++17: samples are plain structs, so the attribution is tested without a GPU.
//
// A sample covers [start_ns, end_ns) on the GPU clock and carries fractions 0-1 (NaN = not measured).
// A step's value is the mean of the samples overlapping its window, each weighted by its overlap
// with the window; a phase's value weights each sample by its overlap with the phase's GPU busy
// intervals. With a sampling interval I, a window shorter than a few I is summarised by the few
// samples around it (see coverage): values of work shorter than I mix in what ran next to it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "intervals.hpp"

namespace steptrace {

struct CounterSample {
  int64_t start_ns = 0, end_ns = 0;
  double sm_active = std::numeric_limits<double>::quiet_NaN();
  double tensor_active = std::numeric_limits<double>::quiet_NaN();
  double dram = std::numeric_limits<double>::quiet_NaN();
  double occupancy = std::numeric_limits<double>::quiet_NaN();
};

struct CounterSummary {
  std::optional<double> sm_active, tensor_active, dram, occupancy;
  uint32_t samples = 0;   // samples overlapping the window
  double coverage = 0;    // overlapped time / window time (1 = the samples cover the window)
};

namespace details {
inline void add_weighted(double v, double w, double& sum, double& weight) {
  if (std::isnan(v) || w <= 0) return;
  sum += v * w;
  weight += w;
}
}  // namespace details

/// Overlap-weighted means of the samples over `windows` (sorted, disjoint; e.g. merge_intervals()).
inline CounterSummary summarize_counters(const std::deque<CounterSample>& samples, const std::vector<Interval>& windows) {
  CounterSummary out;
  int64_t window_ns = 0;
  for (const auto& [b, e] : windows) window_ns += std::max<int64_t>(0, e - b);
  if (windows.empty() || window_ns <= 0) return out;
  const int64_t lo = windows.front().first, hi = windows.back().second;
  double s[4] = {}, w[4] = {};
  int64_t covered = 0;
  for (const auto& smp : samples) {
    if (smp.end_ns <= lo || smp.start_ns >= hi || smp.end_ns <= smp.start_ns) continue;
    int64_t overlap = 0;
    for (const auto& [b, e] : windows) {
      const Interval c = clip({smp.start_ns, smp.end_ns}, b, e);
      if (c.second > c.first) overlap += c.second - c.first;
    }
    if (overlap <= 0) continue;
    ++out.samples;
    covered += overlap;
    const double wt = static_cast<double>(overlap);
    details::add_weighted(smp.sm_active, wt, s[0], w[0]);
    details::add_weighted(smp.tensor_active, wt, s[1], w[1]);
    details::add_weighted(smp.dram, wt, s[2], w[2]);
    details::add_weighted(smp.occupancy, wt, s[3], w[3]);
  }
  auto value = [&](int i) { return w[i] > 0 ? std::optional<double>(s[i] / w[i]) : std::nullopt; };
  out.sm_active = value(0);
  out.tensor_active = value(1);
  out.dram = value(2);
  out.occupancy = value(3);
  out.coverage = std::min(1.0, static_cast<double>(covered) / static_cast<double>(window_ns));
  return out;
}

inline CounterSummary summarize_counters(const std::deque<CounterSample>& samples, Interval window) {
  return summarize_counters(samples, std::vector<Interval>{window});
}

}  // namespace steptrace
