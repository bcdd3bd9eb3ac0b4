// steptrace/core/counters.hpp - hardware-counter samples (PM sampling) attributed to steps and phases.
// Pure C++17: samples are plain structs, so the attribution is tested without a GPU.
//
// A sample covers [start_ns, end_ns) on the GPU clock and carries fractions 0-1 (NaN = not measured);
// its value is the average over its whole interval.
// - A step's window (one interval) is summarised by the samples lying whole inside it, weighted by
//   duration. A step too short to hold a whole sample falls back to the samples overlapping it,
//   weighted by overlap (edge_only).
// - A phase's window is its GPU busy intervals: typically hundreds of kernels a few microseconds
//   apart, so hardly any sample lies whole inside one interval. Each sample is shared among the
//   phases whose work ran in it, in proportion to their busy time in it (summarize_phase_counters):
//   a phase gets every sample its work touched, weighted by the time it ran there. When phases run
//   one after another and keep the GPU busy, the phases' values weighted by that time give back the
//   step's value; a sample that straddles two phases mixes their values in both, in proportion.
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
  uint32_t samples = 0;    // samples used
  double coverage = 0;     // time of the samples used / window time (overlap only, for edge_only)
  bool edge_only = false;  // step: no whole sample inside the window; phase: no sample half filled by it
  int64_t sample_ns = 0;   // sample time given to the window (the weight of its values)
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
  auto inside = [&](const CounterSample& smp) {  // whole sample within one interval of the window
    for (const auto& [b, e] : windows)
      if (smp.start_ns >= b && smp.end_ns <= e) return true;
    return false;
  };
  bool have_whole = false;
  for (const auto& smp : samples)
    if (smp.end_ns > smp.start_ns && smp.end_ns > lo && smp.start_ns < hi && inside(smp)) {
      have_whole = true;
      break;
    }
  out.edge_only = !have_whole;
  double s[4] = {}, w[4] = {};
  int64_t covered = 0;
  for (const auto& smp : samples) {
    if (smp.end_ns <= lo || smp.start_ns >= hi || smp.end_ns <= smp.start_ns) continue;
    int64_t overlap = 0;
    if (have_whole) {
      if (!inside(smp)) continue;
      overlap = smp.end_ns - smp.start_ns;
    } else {
      for (const auto& [b, e] : windows) {
        const Interval c = clip({smp.start_ns, smp.end_ns}, b, e);
        if (c.second > c.first) overlap += c.second - c.first;
      }
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
  out.sample_ns = covered;
  return out;
}

/// A phase's counters: every sample overlapping its busy intervals (sorted, disjoint; PhaseGpu::busy),
/// weighted by the phase's busy time inside the sample. `samples` must be in time order.
inline CounterSummary summarize_phase_counters(const std::deque<CounterSample>& samples,
                                               const std::vector<Interval>& busy) {
  CounterSummary out;
  int64_t busy_ns = 0;
  for (const auto& [b, e] : busy) busy_ns += std::max<int64_t>(0, e - b);
  if (busy.empty() || busy_ns <= 0) return out;
  const int64_t lo = busy.front().first, hi = busy.back().second;
  // First sample that ends after the phase's first busy instant.
  auto it = std::lower_bound(samples.begin(), samples.end(), lo,
                             [](const CounterSample& smp, int64_t t) { return smp.end_ns <= t; });
  std::size_t k = 0;  // first busy interval that may overlap the current sample
  double s[4] = {}, w[4] = {};
  bool half_filled = false;
  for (; it != samples.end() && it->start_ns < hi; ++it) {
    const CounterSample& smp = *it;
    if (smp.end_ns <= smp.start_ns) continue;
    while (k < busy.size() && busy[k].second <= smp.start_ns) ++k;
    int64_t overlap = 0;
    for (std::size_t j = k; j < busy.size() && busy[j].first < smp.end_ns; ++j) {
      const Interval c = clip(busy[j], smp.start_ns, smp.end_ns);
      if (c.second > c.first) overlap += c.second - c.first;
    }
    if (overlap <= 0) continue;
    ++out.samples;
    out.sample_ns += overlap;
    if (2 * overlap >= smp.end_ns - smp.start_ns) half_filled = true;
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
  out.edge_only = out.samples > 0 && !half_filled;
  out.coverage = std::min(1.0, static_cast<double>(out.sample_ns) / static_cast<double>(busy_ns));
  return out;
}

inline CounterSummary summarize_counters(const std::deque<CounterSample>& samples, Interval window) {
  return summarize_counters(samples, std::vector<Interval>{window});
}

}  // namespace steptrace
