// steptrace/core/counters.hpp - hardware-counter samples (PM sampling) attributed to steps and phases.
// Pure C++17: samples are plain structs, so the attribution is tested without a GPU.
//
// A sample covers [start_ns, end_ns) on the GPU clock and carries fractions 0-1 (NaN = not measured);
// its value is the average over its whole interval, idle time included. One rule for steps and phases:
// - the samples lying whole inside the window's span are used, each weighted by the time the window's
//   work took in it. A step's work is its whole window (host times on the GPU clock); a phase's work
//   is its GPU busy intervals (PhaseGpu::busy: typically hundreds of kernels a few microseconds apart)
//   and its span runs from its first record's start to its last record's end. Kernel gaps inside the
//   span do not break a sample, so a phase gets every sample its work spans but the two at its ends;
//   those ends hold idle time or other work that would dilute or mix its values.
// - a window without a whole sample inside its span falls back to every sample overlapping its work,
//   weighted the same way, and says so (edge_only).
// When phases run one after another on a busy GPU, a sample at a boundary belongs to neither phase,
// the others to exactly one: the phases' values weighted by their sample time give back the step's
// value up to the boundary samples (tested: within 0.02 for phases of >= 5 samples). Phases whose
// spans interleave (one nested in another, per-layer phases taking turns, concurrent streams) read the
// samples they share; shared_ns says how much of the GPU work in a phase's samples was not its own.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "intervals.hpp"

STEPTRACE_BEGIN_NAMESPACE

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
  double coverage = 0;     // sample_ns / the window's work time (step: its window; phase: its busy time)
  bool edge_only = false;  // no whole sample inside the span: the values come from samples at its edges
  int64_t sample_ns = 0;   // the window's work time inside the samples used (the weight of its values)
  int64_t shared_ns = 0;   // phase: other phases' busy time inside the samples used (they read them too)
};

/// A sample's values are ratios of a fully busy interval (pct_of_peak / 100): [0, 1]. The hardware's
/// ratio of a fully busy interval comes out up to ~1e-3 above 1 (seen on H100: 1.0006); such a value
/// reads as 1. Anything further outside [0, 1] cannot be (seen on H100: 1.02 - 1.71 in samples cut
/// short where sampling paused): that value is left out (NaN), never clamped, and counted.
inline constexpr double kCounterRatioSlack = 1e-3;

/// Leaves out the sample's impossible values; returns how many it left out.
inline uint32_t exclude_impossible_values(CounterSample& s) {
  uint32_t excluded = 0;
  for (double* v : {&s.sm_active, &s.tensor_active, &s.dram, &s.occupancy}) {
    if (std::isnan(*v)) continue;
    if (*v > 1.0 && *v <= 1.0 + kCounterRatioSlack) {
      *v = 1.0;
    } else if (!(*v >= 0.0 && *v <= 1.0)) {
      *v = std::numeric_limits<double>::quiet_NaN();
      ++excluded;
    }
  }
  return excluded;
}

namespace details {
inline void add_weighted(double v, double w, double& sum, double& weight) {
  if (std::isnan(v) || w <= 0) return;
  sum += v * w;
  weight += w;
}

/// The rule above: `work` sorted and disjoint, inside `span`; `samples` in time order.
inline int64_t overlap_with(const std::vector<Interval>& ivs, std::size_t& k, const CounterSample& smp) {
  while (k < ivs.size() && ivs[k].second <= smp.start_ns) ++k;  // samples come in time order
  int64_t overlap = 0;
  for (std::size_t j = k; j < ivs.size() && ivs[j].first < smp.end_ns; ++j) {
    const Interval c = clip(ivs[j], smp.start_ns, smp.end_ns);
    if (c.second > c.first) overlap += c.second - c.first;
  }
  return overlap;
}

inline CounterSummary summarize_work(const std::deque<CounterSample>& samples, Interval span,
                                     const std::vector<Interval>& work, const std::vector<Interval>& others = {}) {
  CounterSummary out;
  int64_t work_ns = 0;
  for (const auto& [b, e] : work) work_ns += std::max<int64_t>(0, e - b);
  const int64_t lo = span.first, hi = span.second;
  if (work.empty() || work_ns <= 0 || hi <= lo) return out;
  const auto first = std::lower_bound(samples.begin(), samples.end(), lo,
                                      [](const CounterSample& smp, int64_t t) { return smp.end_ns <= t; });
  auto whole = [&](const CounterSample& smp) { return smp.start_ns >= lo && smp.end_ns <= hi; };
  bool have_whole = false;
  for (auto it = first; it != samples.end() && it->start_ns < hi && !have_whole; ++it)
    have_whole = it->end_ns > it->start_ns && whole(*it);
  std::size_t k = 0, k_others = 0;  // first intervals that may overlap the current sample
  double s[4] = {}, w[4] = {};
  for (auto it = first; it != samples.end() && it->start_ns < hi; ++it) {
    const CounterSample& smp = *it;
    if (smp.end_ns <= smp.start_ns || (have_whole && !whole(smp))) continue;
    const int64_t overlap = overlap_with(work, k, smp);
    if (overlap <= 0) continue;
    ++out.samples;
    out.sample_ns += overlap;
    out.shared_ns += overlap_with(others, k_others, smp);
    const double wt = static_cast<double>(overlap);
    add_weighted(smp.sm_active, wt, s[0], w[0]);
    add_weighted(smp.tensor_active, wt, s[1], w[1]);
    add_weighted(smp.dram, wt, s[2], w[2]);
    add_weighted(smp.occupancy, wt, s[3], w[3]);
  }
  auto value = [&](int i) { return w[i] > 0 ? std::optional<double>(s[i] / w[i]) : std::nullopt; };
  out.sm_active = value(0);
  out.tensor_active = value(1);
  out.dram = value(2);
  out.occupancy = value(3);
  out.edge_only = out.samples > 0 && !have_whole;
  out.coverage = std::min(1.0, static_cast<double>(out.sample_ns) / static_cast<double>(work_ns));
  return out;
}
}  // namespace details

/// A step's counters: its window [begin, end) on the GPU clock.
inline CounterSummary summarize_counters(const std::deque<CounterSample>& samples, Interval window) {
  return details::summarize_work(samples, window, std::vector<Interval>{window});
}

/// A phase's counters: its GPU busy intervals (sorted, disjoint; PhaseGpu::busy). `others`: the other
/// phases' busy intervals (merged), whose time inside the samples used is reported as shared_ns.
inline CounterSummary summarize_phase_counters(const std::deque<CounterSample>& samples,
                                               const std::vector<Interval>& busy,
                                               const std::vector<Interval>& others = {}) {
  if (busy.empty()) return {};
  return details::summarize_work(samples, Interval{busy.front().first, busy.back().second}, busy, others);
}

STEPTRACE_END_NAMESPACE  // steptrace
