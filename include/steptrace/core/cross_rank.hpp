// steptrace/core/cross_rank.hpp - who holds the step back under synchronous data parallelism: the
// rank the others wait for, and the part of its step that makes it late. Pure C++17: every rank
// contributes one fixed-size RankSummary (gathered through the job's own communicator, see
// steptrace/nccl.hpp, or Python's gloo group); rank 0 aggregates them into a CrossRankView for its line.
//
// Semantics. In a synchronous data-parallel job every rank's step takes as long as the slowest rank's:
// the fast ranks wait inside the collectives (an all-reduce, an all-gather) for the late one. Step times
// therefore agree and cannot name anyone; what differs is how long each rank waits. So each summary
// carries the rank's *collective wait* per step, measured on its GPU where it can be (details/
// cross_rank_link.hpp says how, `WaitBasis` says which evidence), and its *own work* = its iteration
// (the step, its tagged phases between steps and the untagged time after its work until the next step)
// less that wait:
//   slowest_rank  = the rank with the most own work: the one the others wait for (in a synchronous job,
//                   the one that waits least)
//   gap_ms        = slowest own work - median own work: what the median rank waits for it, per step
//   step_skew     = gap_ms / median iteration: the share of every rank's step lost to the slowest one
//   wait_share    = (largest wait - smallest wait) / median iteration: the share of the step the rank
//                   that waits most spends waiting for another; `balanced` = every rank measured its wait
//                   and wait_share < kBalancedWaitShare. Not "step times agree": under a synchronous
//                   collective they always do.
//   culprit_phase = the part of the slowest rank's iteration that exceeds the median of that part over
//                   the other ranks by the most: a built-in phase but `nccl`, `untagged` (time in the
//                   step in no built-in phase) or `between_steps` (after the step's work until the next
//                   step: a loop's own code, a batch fetch watch() does not see, a host read). A rank's
//                   excess wait is taken out of its `between_steps` first: a loop that reads the loss
//                   there waits for its GPU, which waits for the slow rank.
//   score         = best own work / this rank's own work, 1 = as fast as the best rank (the relative
//                   performance score of NVIDIA's nvidia-resiliency-ext straggler detection)
// When a reporting rank measured no wait, the view falls back on the host: own work = step less the
// host time of its `nccl` phase (what a loop that syncs in a tagged collective shows), and `balanced`
// is not judged. A rank whose summary is missing, invalid or of another step "stopped reporting" and
// is listed, not counted.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "phase.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The built-in phases a summary carries, in this order (custom phases are not exchanged).
inline constexpr int kSummaryPhases = 6;  // input, h2d, forward, backward, optimizer, nccl
inline constexpr int kSummaryCommPhase = 5;

/// Where a rank's collective wait comes from (details/cross_rank_link.hpp measures them).
enum class WaitBasis : uint8_t {
  none = 0,          // nothing measured it
  host_nccl = 1,     // the host time of the `nccl` phase (a loop that syncs inside its tagged collective)
  markers = 2,       // the `nccl` phase's span on the GPU, from the stream markers
  backward_end = 3,  // Python: the GPU time from the end of backward's kernels to the end of the
                     // collectives the framework waits for there (DDP's all-reduce, FSDP's reduce-scatter)
  trace = 4,         // a traced step's NCCL kernel time not overlapped by its other kernels
};
/// The order a window's evidence is taken in (details/cross_rank_link.hpp says why).
inline constexpr WaitBasis kWaitPreference[] = {WaitBasis::backward_end, WaitBasis::markers, WaitBasis::trace,
                                                WaitBasis::host_nccl};
inline const char* wait_basis_name(WaitBasis b) {
  switch (b) {
    case WaitBasis::host_nccl: return "host_nccl";
    case WaitBasis::markers: return "markers";
    case WaitBasis::backward_end: return "backward_end";
    case WaitBasis::trace: return "trace";
    case WaitBasis::none: break;
  }
  return "none";
}

/// One rank's steps since its previous summary, as exchanged: fixed size, plain floats (the wire format
/// is this struct as kSummaryFloats floats, see to_floats / from_floats). Times are means per step over
/// the `steps` steps closed since the previous exchange (details/cross_rank_link.hpp).
struct RankSummary {
  int32_t rank = -1;
  int64_t step = -1;          // global_step of the exchange (the last step of the window)
  // The step's own time (to its scope's end, or where Python marked its training work done) with the
  // outermost built-in phases tagged between the previous step and this one, and the host time per
  // built-in phase (scopes on the step thread not nested in one of the same phase).
  double step_ms = 0;
  double phase_ms[kSummaryPhases] = {};
  double untagged_ms = 0;     // step time in no built-in phase (outermost scopes), to the work's end
  double between_ms = 0;      // after the work's end until the next step, in no built-in phase
  // The collective wait per step as each kind of evidence measured it (index: WaitBasis; the mean over
  // the basis_steps steps that had it, or the median of the measures carried from earlier windows:
  // details/cross_rank_link.hpp). A view compares ranks on a kind every rank has (aggregate_ranks).
  double basis_wait_ms[5] = {};
  int32_t basis_steps[5] = {};
  // This rank's best evidence (kWaitPreference), what its own line says: derived by set_wait.
  double wait_ms = 0;
  WaitBasis wait_basis = WaitBasis::none;
  int32_t wait_steps = 0;
  int32_t steps = 0;          // steps in the window
  bool valid = false;
  // An operator's capture request this rank holds (core/capture_request.hpp): its tag (< 2^24; 0 =
  // none) and steps, and how many steps this rank's training thread ran ahead of its last gathered view.
  uint32_t ask_tag = 0;
  int32_t ask_steps = 0;
  int32_t lag_steps = 0;
  int32_t every = 0;  // this rank's cross_rank_every (the exchange's cadence)

  double iteration_ms() const { return step_ms + between_ms; }
  /// Records one kind's mean wait and re-derives the best.
  void set_wait(WaitBasis b, double ms, int32_t n) {
    const int i = static_cast<int>(b);
    if (i < 1 || i > 4) return;
    basis_wait_ms[i] = ms;
    basis_steps[i] = n;
    derive_best();
  }
  /// Whether kind `b` measured a wait this window can hold: some steps, not more than the iteration (a
  /// wait happens within it; a trace's lines reach the window late and in bursts, and can read more).
  bool plausible(WaitBasis b) const {
    const int i = static_cast<int>(b);
    return i >= 1 && i <= 4 && basis_steps[i] > 0 && basis_wait_ms[i] >= 0 && basis_wait_ms[i] <= iteration_ms();
  }
  void derive_best() {
    wait_basis = WaitBasis::none, wait_ms = 0, wait_steps = 0;
    for (const WaitBasis b : kWaitPreference) {
      const int i = static_cast<int>(b);
      if (plausible(b)) {
        wait_basis = b, wait_ms = basis_wait_ms[i], wait_steps = basis_steps[i];
        return;
      }
    }
  }
};

// valid, rank, step, step_ms, phases, ask tag/steps, lag, every, untagged, between, steps, then per
// basis (host_nccl, markers, backward_end, trace) its wait and its steps
inline constexpr int kSummaryFloats = 11 + kSummaryPhases + 8;
/// Where a basis's wait sits in the floats (its steps follow it).
inline constexpr int summary_wait_index(WaitBasis b) { return 9 + kSummaryPhases + 2 * static_cast<int>(b); }

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
  out[8 + kSummaryPhases] = static_cast<float>(s.untagged_ms);
  out[9 + kSummaryPhases] = static_cast<float>(s.between_ms);
  out[10 + kSummaryPhases] = static_cast<float>(std::clamp<int32_t>(s.steps, 0, 1 << 20));
  for (int b = 1; b <= 4; ++b) {
    out[9 + kSummaryPhases + 2 * b] = static_cast<float>(s.basis_wait_ms[b]);
    out[10 + kSummaryPhases + 2 * b] = static_cast<float>(std::clamp<int32_t>(s.basis_steps[b], 0, 1 << 20));
  }
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
  auto count = [](float f, float below) { return f >= 0 && f < below ? static_cast<int32_t>(f) : 0; };
  const float tag = in[4 + kSummaryPhases];
  s.ask_tag = tag >= 0 && tag < 16777216.f ? static_cast<uint32_t>(tag) : 0;
  s.ask_steps = count(in[5 + kSummaryPhases], 1e6f);
  s.lag_steps = count(in[6 + kSummaryPhases], 1e7f);
  s.every = count(in[7 + kSummaryPhases], 1e7f);
  s.untagged_ms = in[8 + kSummaryPhases];
  s.between_ms = in[9 + kSummaryPhases];
  s.steps = count(in[10 + kSummaryPhases], 1e7f);
  for (int b = 1; b <= 4; ++b) {
    s.basis_wait_ms[b] = in[9 + kSummaryPhases + 2 * b];
    s.basis_steps[b] = count(in[10 + kSummaryPhases + 2 * b], 1e7f);
    if (!std::isfinite(s.basis_wait_ms[b]) || s.basis_wait_ms[b] < 0) s.basis_steps[b] = 0;  // not a wait: not measured
  }
  s.derive_best();
  return s;
}

/// wait_share below this: balanced (the rank that waits most loses under 5 % of its step to another).
/// A rank made 20 ms slower in a ~150 ms step makes the others wait ~13 %; balanced 2-GPU runs read
/// docs/multi-gpu-validation.md's numbers.
inline constexpr double kBalancedWaitShare = 0.05;
/// The host-only fallback's threshold on step_skew (no rank measured its wait). Measured on 2 H200s with
/// examples/dp_train, whose collective syncs in its `nccl` phase (tests/checks/dp_skew_check.py, 6 ms
/// steps): balanced runs read 0.005 median, 0.024 at p95; a rank 25 % slower in backward 0.105-0.147.
inline constexpr double kBalancedStepSkew = 0.05;

struct RankScore {
  int rank = -1;
  double score = 1;
  double work_ms = 0;  // own work
  double wait_ms = 0;
};

/// One rank as a view names it.
struct RankWork {
  int rank = -1;
  double work_ms = 0;   // own work per step
  double wait_ms = 0;   // collective wait per step
  double step_ms = 0;   // iteration per step
  WaitBasis basis = WaitBasis::none;
};

struct CrossRankView {
  int64_t step = -1;
  int world_size = 0;
  int reporting = 0;
  std::vector<int> missing_ranks;  // at most kMaxListed, ascending
  uint32_t missing_count = 0;
  double step_ms_median = 0, step_ms_min = 0, step_ms_max = 0;  // iterations
  double work_ms_median = 0, work_ms_min = 0, work_ms_max = 0;  // own work
  double wait_ms_median = 0, wait_ms_min = 0, wait_ms_max = 0;
  bool waits_measured = false;  // every reporting rank measured its wait (else: the host fallback)
  std::string wait_basis;       // the kind of wait compared (one every rank measured), "none" without
  int slowest_rank = -1;
  double skew = 0;
  double gap_ms = 0;     // slowest own work - median own work
  double step_skew = 0;  // gap_ms / median iteration
  double wait_share = 0; // (largest wait - smallest wait) / median iteration
  RankWork culprit, median_rank;
  std::string culprit_phase;  // a built-in phase, "untagged" or "between_steps"; empty: none exceeds
  double culprit_gap_ms = 0;
  std::vector<RankScore> lowest_scores;  // the kMaxListed lowest, ascending by score

  /// Balanced: judged only when every rank reported, at least two, each with its wait measured
  /// (nullopt otherwise; `why` says which).
  std::optional<bool> balanced(const char** why = nullptr) const {
    const char* w = reporting < 2             ? reason_text(Reason::fewer_than_two_ranks)
                    : missing_count            ? reason_text(Reason::rank_summary_missing)
                    : !(step_ms_median > 0)    ? reason_text(Reason::no_positive_median)
                    : !waits_measured          ? reason_text(Reason::no_common_wait)
                                               : nullptr;
    if (why) *why = w;
    if (w) return std::nullopt;
    return wait_share < kBalancedWaitShare;
  }
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
/// A rank's collective wait by `basis` (a kind every rank measured); none: the host fallback, the host
/// time of its `nccl` phase.
inline double wait_of(const RankSummary& s, WaitBasis basis) {
  return std::max(0.0, basis != WaitBasis::none ? s.basis_wait_ms[static_cast<int>(basis)] : s.phase_ms[kSummaryCommPhase]);
}
/// Own work: with a measured wait, the iteration less it; the host fallback, the step less its `nccl`
/// phase (the time after the step's work, where a victim's host read waits, left out: it would hide the
/// culprit).
inline double work_of(const RankSummary& s, WaitBasis basis) {
  return std::max(0.0, basis != WaitBasis::none ? s.iteration_ms() - wait_of(s, basis)
                                                : s.step_ms - s.phase_ms[kSummaryCommPhase]);
}
}  // namespace details

/// The parts a culprit is named by: the built-in phases but `nccl`, then the untagged time in the step
/// and the time between steps.
inline constexpr int kCulpritParts = kSummaryPhases + 1;  // 5 phases, untagged, between_steps
inline const char* culprit_part_name(int k) {
  static constexpr const char* kNames[kCulpritParts] = {"input", "h2d", "forward", "backward", "optimizer",
                                                        "untagged", "between_steps"};  // phase_tag's order
  return k >= 0 && k < kCulpritParts ? kNames[k] : "";
}

/// Aggregates one exchange. `summaries` holds one slot per rank (index = rank); a slot that is
/// invalid, names another rank, or describes another step than `step` counts as missing.
inline CrossRankView aggregate_ranks(const std::vector<RankSummary>& summaries, int64_t step) {
  CrossRankView v;
  v.step = step;
  v.world_size = static_cast<int>(summaries.size());
  std::vector<const RankSummary*> ok;
  for (std::size_t r = 0; r < summaries.size(); ++r) {
    const RankSummary& s = summaries[r];
    bool good = s.valid && s.rank == static_cast<int>(r) && s.step == step && std::isfinite(s.step_ms) &&
                std::isfinite(s.between_ms) && std::isfinite(s.untagged_ms);
    for (int b = 1; b <= 4; ++b) good = good && (s.basis_steps[b] == 0 || std::isfinite(s.basis_wait_ms[b]));
    for (int p = 0; p < kSummaryPhases; ++p) good = good && std::isfinite(s.phase_ms[p]);
    if (good) {
      ok.push_back(&s);
    } else {
      ++v.missing_count;
      if (v.missing_ranks.size() < kMaxListed) v.missing_ranks.push_back(static_cast<int>(r));
    }
  }
  v.reporting = static_cast<int>(ok.size());
  if (ok.empty()) return v;
  // The waits compared: the first kind (kWaitPreference) every reporting rank measured, so that no rank's
  // wait is read against another kind of evidence (a C++ loop's traced step measures its NCCL kernel,
  // 0.5 ms, where its `nccl` phase's host time, 5.4 ms, includes the queue the sync waited for).
  WaitBasis basis = WaitBasis::none;
  for (const WaitBasis b : kWaitPreference) {
    bool all = true;
    for (const auto* s : ok) all = all && s->plausible(b);
    if (all) {
      basis = b;
      break;
    }
  }
  v.waits_measured = basis != WaitBasis::none;
  const bool measured = v.waits_measured;
  v.wait_basis = wait_basis_name(basis);
  std::vector<double> steps, works, waits;
  for (const auto* s : ok) {
    steps.push_back(measured ? s->iteration_ms() : s->step_ms);
    works.push_back(details::work_of(*s, basis));
    waits.push_back(details::wait_of(*s, basis));
  }
  auto spread = [](const std::vector<double>& x, double& med, double& lo, double& hi) {
    med = details::median_of(x);
    lo = *std::min_element(x.begin(), x.end());
    hi = *std::max_element(x.begin(), x.end());
  };
  spread(steps, v.step_ms_median, v.step_ms_min, v.step_ms_max);
  spread(works, v.work_ms_median, v.work_ms_min, v.work_ms_max);
  spread(waits, v.wait_ms_median, v.wait_ms_min, v.wait_ms_max);
  auto rank_work = [&](std::size_t i) { return RankWork{ok[i]->rank, works[i], waits[i], steps[i], basis}; };
  // The slowest: most own work (ties: the lower rank).
  std::size_t slow = 0;
  for (std::size_t i = 1; i < ok.size(); ++i)
    if (works[i] > works[slow]) slow = i;
  // The median rank: the rank whose own work is the lower middle of the ordering.
  std::vector<std::size_t> order(ok.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return works[a] < works[b] || (works[a] == works[b] && ok[a]->rank < ok[b]->rank);
  });
  v.culprit = rank_work(slow);
  v.median_rank = rank_work(order[(order.size() - 1) / 2]);
  v.slowest_rank = ok[slow]->rank;
  v.skew = v.work_ms_median > 0 ? (v.work_ms_max - v.work_ms_median) / v.work_ms_median : 0;
  v.gap_ms = v.work_ms_max - v.work_ms_median;
  v.step_skew = v.step_ms_median > 0 ? v.gap_ms / v.step_ms_median : 0;
  v.wait_share = v.step_ms_median > 0 ? std::min(1.0, (v.wait_ms_max - v.wait_ms_min) / v.step_ms_median) : 0;
  // The part that explains the slowest rank's extra own work. Each rank's wait beyond the smallest is
  // taken out of its time between steps first (a host read there waits for the GPU, which waits for
  // the others); without measured waits the time between steps is not compared (the host fallback).
  auto part = [&](std::size_t i, int k) {
    const RankSummary& s = *ok[i];
    if (k < kSummaryCommPhase) return s.phase_ms[k];
    if (k == kSummaryCommPhase) return s.untagged_ms;
    return measured ? std::max(0.0, s.between_ms - (waits[i] - v.wait_ms_min)) : 0.0;
  };
  for (int k = 0; k < kCulpritParts; ++k) {
    std::vector<double> col;
    for (std::size_t i = 0; i < ok.size(); ++i)
      if (i != slow) col.push_back(part(i, k));
    if (col.empty()) break;  // one rank reporting: nothing to compare with
    const double gap = part(slow, k) - details::median_of(col);
    if (gap > v.culprit_gap_ms) {
      v.culprit_gap_ms = gap;
      v.culprit_phase = culprit_part_name(k);
    }
  }
  // Scores relative to the best rank.
  std::vector<RankScore> scores;
  for (std::size_t i = 0; i < ok.size(); ++i)
    scores.push_back({ok[i]->rank, works[i] > 0 ? v.work_ms_min / works[i] : 1.0, works[i], waits[i]});
  const std::size_t k = std::min(kMaxListed, scores.size());
  std::partial_sort(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(k), scores.end(),
                    [](const RankScore& a, const RankScore& b) { return a.score < b.score || (a.score == b.score && a.rank < b.rank); });
  scores.resize(k);
  v.lowest_scores = std::move(scores);
  return v;
}

STEPTRACE_END_NAMESPACE  // steptrace
