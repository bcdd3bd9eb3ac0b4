// steptrace/core/cross_rank.hpp - which rank holds the step back, and in which phase. Pure C++17:
// every rank contributes one fixed-size RankSummary (gathered through the job's own communicator,
// see steptrace/nccl.hpp); rank 0 aggregates them into a CrossRankView for its line.
//
// Semantics (culprit / victim, as TraceML describes stragglers): in synchronous data-parallel training
// the fast ranks wait for the slow one, inside the collective (the 'nccl' phase) or after the step (a
// host sync such as loss.item(), outside the step's own time). What differs is the time a rank spends in
// its step outside communication, its `work` time (the step's own time minus the host time of its 'nccl'
// phase): the culprit has the most work, its victims show the delay in 'nccl' or between steps. So:
//   slowest_rank  = the rank with the largest work time
//   gap_ms        = slowest work - median work: the time the others wait for the slowest rank
//   step_skew     = gap_ms / median step time, the headline: the share of every rank's step lost to
//                   the slowest one. Relative to the step, not to the work: when communication fills
//                   most of the step, the work is small and a fraction of a millisecond of noise in it
//                   reads as a large `skew` (on 2 H200s with a 6 ms step of 0.5 ms work, a balanced
//                   run read skew 0.08-0.65). Balanced below kBalancedStepSkew.
//   skew          = (slowest work - median work) / median work
//   culprit_phase = the non-communication phase whose time on the slowest rank exceeds the median of
//                   that phase over the other ranks by the most (the gap that explains the delay)
//   (with two ranks the median of both is their mean, so skew is half the pair's difference)
//   score         = best work time / this rank's work time, 1 = as fast as the best rank (the relative
//                   performance score of NVIDIA's nvidia-resiliency-ext straggler detection, which
//                   rates each rank against the best one)
// A rank whose summary is missing, invalid or of another step "stopped reporting" and is listed, not
// counted.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "phase.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The built-in phases a summary carries, in this order (custom phases are not exchanged).
inline constexpr int kSummaryPhases = 6;  // input, h2d, forward, backward, optimizer, nccl
inline constexpr int kSummaryCommPhase = 5;

/// One rank's step, as exchanged: fixed size, plain floats (the wire format is this struct as
/// kSummaryFloats floats, see to_floats / from_floats).
struct RankSummary {
  int32_t rank = -1;
  int64_t step = -1;          // global_step summarised
  // The step's own time (to its scope's end, not the next step's start) and the host time per built-in
  // phase (scopes on the step thread not nested in one of the same phase), both with the outermost
  // built-in phases tagged between the previous step and this one (details/cross_rank_link.hpp).
  double step_ms = 0;
  double phase_ms[kSummaryPhases] = {};
  bool valid = false;
  // An operator's capture request this rank holds (core/capture_request.hpp): its tag (< 2^24; 0 =
  // none) and steps, and how many steps this rank's training thread ran ahead of its last gathered view.
  uint32_t ask_tag = 0;
  int32_t ask_steps = 0;
  int32_t lag_steps = 0;
  int32_t every = 0;  // this rank's cross_rank_every (the exchange's cadence)
};

inline constexpr int kSummaryFloats = 8 + kSummaryPhases;  // valid, rank, step, step_ms, phases, ask tag/steps, lag, every

/// Floats on the wire: step numbers up to 2^24 are exact in a float; the step is sent as two halves.
inline void to_floats(const RankSummary& s, float* out) {
  out[0] = s.valid ? 1.f : 0.f;
  out[1] = static_cast<float>(s.rank);
  out[2] = static_cast<float>(s.step >= 0 ? s.step % (1 << 20) : -1);  // low bits; exact
  out[3] = static_cast<float>(s.step_ms);
  for (int p = 0; p < kSummaryPhases; ++p) out[4 + p] = static_cast<float>(s.phase_ms[p]);
  out[4 + kSummaryPhases] = static_cast<float>(s.ask_tag & 0xffffffu);  // exact below 2^24
  out[5 + kSummaryPhases] = static_cast<float>(s.ask_steps);
  out[6 + kSummaryPhases] = static_cast<float>(std::clamp<int32_t>(s.lag_steps, 0, 1 << 20));
  out[7 + kSummaryPhases] = static_cast<float>(std::clamp<int32_t>(s.every, 0, 1 << 20));
}
inline RankSummary from_floats(const float* in, int64_t expected_step) {
  RankSummary s;
  s.valid = in[0] == 1.f;
  s.rank = static_cast<int32_t>(in[1]);
  const int64_t low = static_cast<int64_t>(in[2]);
  // Restore the full step from the expected one (a summary is never 2^19 steps stale).
  s.step = low < 0 ? -1 : expected_step - ((expected_step - low) % (1 << 20) + (1 << 20)) % (1 << 20);
  s.step_ms = in[3];
  for (int p = 0; p < kSummaryPhases; ++p) s.phase_ms[p] = in[4 + p];
  const float tag = in[4 + kSummaryPhases], steps = in[5 + kSummaryPhases], lag = in[6 + kSummaryPhases];
  s.ask_tag = tag >= 0 && tag < 16777216.f ? static_cast<uint32_t>(tag) : 0;
  s.ask_steps = steps >= 0 && steps < 1e6f ? static_cast<int32_t>(steps) : 0;
  s.lag_steps = lag >= 0 && lag < 1e7f ? static_cast<int32_t>(lag) : 0;
  const float every = in[7 + kSummaryPhases];
  s.every = every >= 0 && every < 1e7f ? static_cast<int32_t>(every) : 0;
  return s;
}

/// step_skew below this: balanced. Measured on 2 H200s with examples/dp_train (tests/checks/dp_skew_check.py,
/// 6 ms steps): balanced runs read 0.005 median, 0.024 at p95, 0.066 at most (one host stall); a rank
/// 25 % slower in backward read 0.105-0.147 from the first view on. docs/multi-gpu-validation.md.
inline constexpr double kBalancedStepSkew = 0.05;

struct RankScore {
  int rank = -1;
  double score = 1;
  double work_ms = 0;
};

struct CrossRankView {
  int64_t step = -1;
  int world_size = 0;
  int reporting = 0;
  std::vector<int> missing_ranks;  // at most kMaxListed, ascending
  uint32_t missing_count = 0;
  double step_ms_median = 0, step_ms_min = 0, step_ms_max = 0;
  double work_ms_median = 0, work_ms_min = 0, work_ms_max = 0;
  int slowest_rank = -1;
  double skew = 0;
  double gap_ms = 0;     // slowest work - median work
  double step_skew = 0;  // gap_ms / median step time (the headline; balanced below kBalancedStepSkew)
  std::optional<PhaseId> culprit_phase;
  double culprit_gap_ms = 0;
  std::vector<RankScore> lowest_scores;  // the kMaxListed lowest, ascending by score
};

inline constexpr std::size_t kMaxListed = 8;

namespace details {
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  const double hi = v[n / 2];
  if (n % 2) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + n / 2)) / 2;
}
inline double work_of(const RankSummary& s) {
  return std::max(0.0, s.step_ms - s.phase_ms[kSummaryCommPhase]);
}
}  // namespace details

/// Aggregates one exchange. `summaries` holds one slot per rank (index = rank); a slot that is
/// invalid, names another rank, or describes another step than `step` counts as missing.
inline CrossRankView aggregate_ranks(const std::vector<RankSummary>& summaries, int64_t step) {
  CrossRankView v;
  v.step = step;
  v.world_size = static_cast<int>(summaries.size());
  std::vector<const RankSummary*> ok;
  for (std::size_t r = 0; r < summaries.size(); ++r) {
    const RankSummary& s = summaries[r];
    const bool good = s.valid && s.rank == static_cast<int>(r) && s.step == step && std::isfinite(s.step_ms);
    if (good) {
      ok.push_back(&s);
    } else {
      ++v.missing_count;
      if (v.missing_ranks.size() < kMaxListed) v.missing_ranks.push_back(static_cast<int>(r));
    }
  }
  v.reporting = static_cast<int>(ok.size());
  if (ok.empty()) return v;
  std::vector<double> steps, works;
  for (const auto* s : ok) {
    steps.push_back(s->step_ms);
    works.push_back(details::work_of(*s));
  }
  v.step_ms_median = details::median_of(steps);
  v.step_ms_min = *std::min_element(steps.begin(), steps.end());
  v.step_ms_max = *std::max_element(steps.begin(), steps.end());
  v.work_ms_median = details::median_of(works);
  v.work_ms_min = *std::min_element(works.begin(), works.end());
  v.work_ms_max = *std::max_element(works.begin(), works.end());
  const auto slowest = std::max_element(ok.begin(), ok.end(), [](const RankSummary* a, const RankSummary* b) {
    return details::work_of(*a) < details::work_of(*b);
  });
  v.slowest_rank = (*slowest)->rank;
  v.skew = v.work_ms_median > 0 ? (v.work_ms_max - v.work_ms_median) / v.work_ms_median : 0;
  v.gap_ms = v.work_ms_max - v.work_ms_median;
  v.step_skew = v.step_ms_median > 0 ? v.gap_ms / v.step_ms_median : 0;
  // The phase that explains the slowest rank's extra work.
  for (int p = 0; p < kSummaryPhases; ++p) {
    if (p == kSummaryCommPhase) continue;
    std::vector<double> col;
    for (const auto* s : ok)
      if (s != *slowest) col.push_back(s->phase_ms[p]);
    if (col.empty()) break;  // one rank reporting: nothing to compare with
    const double gap = (*slowest)->phase_ms[p] - details::median_of(col);
    if (gap > v.culprit_gap_ms) {
      v.culprit_gap_ms = gap;
      v.culprit_phase = static_cast<PhaseId>(p);
    }
  }
  // Scores relative to the best rank.
  std::vector<RankScore> scores;
  for (const auto* s : ok) {
    const double w = details::work_of(*s);
    scores.push_back({s->rank, w > 0 ? v.work_ms_min / w : 1.0, w});
  }
  const std::size_t k = std::min(kMaxListed, scores.size());
  std::partial_sort(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(k), scores.end(),
                    [](const RankScore& a, const RankScore& b) { return a.score < b.score || (a.score == b.score && a.rank < b.rank); });
  scores.resize(k);
  v.lowest_scores = std::move(scores);
  return v;
}

STEPTRACE_END_NAMESPACE  // steptrace
