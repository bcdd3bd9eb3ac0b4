// steptrace/core/marked_steps.hpp - which steps the stream markers' pace marks, and what a marked step
// costs the program, measured in the run: untraced marked steps against the unmarked steps beside them.
// Pure C++17.
//
// The training thread times its own event records (the ledger's `measured_ms`), but a record costs the
// step more than its call: each one holds the GPU between two kernels until the one before has finished
// (~3 us an event on an H200 with kernels queued behind it, benchmarks/marker_gpu_cost), and those on a
// step's boundary, where the GPU waits for the host, delay its first kernels by the calls' time. On the
// C++ transformer of benchmarks/step_workloads (62 ms, GPU-bound; H200, session 70,
// benchmarks/results/2026-11-30-h200x2-session70) the records' own time said 0.051-0.079 % of the step
// for a marked step, and marking 1 step in 2 cost 0.056-0.10 % a step against not marking (so ~0.11-0.2 %
// a marked step).
//
// Where the markers are thinned (1 step in N: marked_at), marked and unmarked untraced steps mix in
// the same run, at offsets the pace's hash picks: within each block of kBlockSteps consecutive steps
// the difference of the two kinds' mean step times is one measurement of what a marked step costs, and
// the trimmed mean of the last kBlocks blocks (within kMaxAgeSteps) is the measurement, its standard
// error from their spread (the blocks share no step). Every untraced step counts, where the triplets
// this replaced (each marked step against its two neighbours, 128 kept) used about a third of them: under
// independent noise at 1 in 2 over 4096 steps that is ~3.5x finer; on the C++ transformer's lines
// (session 71, 800 steps) 0.118 +- 0.004 ms from 27 blocks against 0.124 +- 0.005 from 147 triplets. It
// needs 16 blocks (512 steps, each block holding both kinds) before it says anything, where 32 triplets
// came in ~210 steps at 1 in 2 (session 71's lines: a marked step's two neighbours are both unmarked
// less often than one step in four); aged below 16 (at 1 in 1 no new block forms) it is forgotten whole.
// It is charged only where it resolves: its value less two standard errors above the records' own time;
// that lower value is what is charged (noise widens its error - a host-bound loop's, or a program's own
// pattern of long and short steps - and then the records' own time stands). At 1 in 1 there is no
// unmarked step to compare with: the pace (markers_pace in core/overhead_parts.hpp) stays at 1 in 2 or
// more until it has measured and its upper end fits every step. What a marked step's end delays in the next (unmarked)
// step's GPU work counts against the unmarked steps: the comparison reads low by about that delay times
// N/(N-1) at 1 in N (twice it at 1 in 2, about once at 1 in 64).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "hash.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Whether the markers' pace of 1 step in `every` marks `step`: one step in each block of `every`
/// (blocks from step 0), at an offset the block's hash picks (salted: not the sampled traces' pick).
/// Not always the block's first: a program whose steps alternate (a longer step every second one) would
/// otherwise always be marked on the same kind of step, and the comparison below would read the
/// program's pattern as the markers' cost.
inline bool marked_at(uint64_t step, int every) {
  if (every <= 1) return true;
  constexpr uint64_t kSalt = 0x6d61726b65727321ULL;  // any constant: the markers' picks, not the traces'
  const uint64_t n = static_cast<uint64_t>(every);
  return step % n == mix64((step / n) ^ kSalt) % n;
}

class MarkedStepCost {
 public:
  static constexpr uint64_t kBlockSteps = 32;     // step indices per block (a block holds the untraced ones seen)
  static constexpr std::size_t kBlocks = 128;     // the blocks' differences kept (the last ones)
  static constexpr std::size_t kLeastBlocks = 16; // fewer: no measurement
  static constexpr uint64_t kMaxAgeSteps = 8192;  // older blocks are dropped (a pace back at 1 makes none new)
  static constexpr double kTrim = 0.1;            // each tail's share left out of the mean

  struct Measurement {
    double ms = 0;     // what a marked step costs beyond an unmarked one (trimmed mean of the blocks')
    double se_ms = 0;  // its standard error
    std::size_t blocks = 0;
  };

  /// Untraced step `index`, its own time and whether it was marked, in step order. A step that comes
  /// past its block's span closes that block; one before the last seen (a count started again) forgets
  /// everything.
  void step(uint64_t index, double step_ms, bool marked) {
    if (!(step_ms > 0) || !std::isfinite(step_ms)) return;
    if (seen_ && index <= last_index_) reset();
    seen_ = true, last_index_ = index;
    if (open_ && index - block_.first >= kBlockSteps) close_block();
    if (!open_) block_ = Block{}, block_.first = index - index % kBlockSteps, open_ = true;
    (marked ? block_.marked : block_.unmarked).add(step_ms);
    bool aged = false;
    while (!diffs_.empty() && index >= kMaxAgeSteps && diffs_.front().first < index - kMaxAgeSteps) {
      diffs_.pop_front();
      cached_ = false, aged = true;
    }
    // Aged below what a measurement needs (at 1 in 1 no new block forms): forgotten whole, so that the
    // next measurement is made of blocks as new as each other, not 15 old ones and a new one.
    if (aged && diffs_.size() < kLeastBlocks) diffs_.clear();
  }
  /// Everything forgotten (CUPTI detached: the steps cost otherwise from here).
  void reset() {
    open_ = seen_ = false;
    diffs_.clear();
    cached_ = false;
  }

  /// Blocks with both kinds kept so far (a measurement needs kLeastBlocks).
  std::size_t blocks() const { return diffs_.size(); }
  /// The measurement (nullopt: fewer than kLeastBlocks blocks), computed once per change of the blocks.
  std::optional<Measurement> measured() const {
    if (!cached_) cache_ = compute(), cached_ = true;
    return cache_;
  }

  /// The records' own time `own_ms` or, where the measurement is above it, the measurement's upper end
  /// (value plus two standard errors): what a marked step may cost. nullopt: not measured.
  std::optional<double> upper(double own_ms) const {
    const std::optional<Measurement> m = measured();
    if (!m) return std::nullopt;
    return std::max(own_ms, m->ms + 2 * m->se_ms);
  }
  /// Where the measurement resolves more than `own_ms` (the records' own time on a marked step): its
  /// value less two standard errors, when that is above `own_ms` (a value moving smoothly with the data,
  /// not a switch between the two). nullopt: the records' own time stands.
  std::optional<double> beyond(double own_ms) const {
    const std::optional<Measurement> m = measured();
    if (!m) return std::nullopt;
    const double low = m->ms - 2 * m->se_ms;
    if (!(low > own_ms)) return std::nullopt;
    return low;
  }

 private:
  std::optional<Measurement> compute() const {
    if (diffs_.size() < kLeastBlocks) return std::nullopt;
    std::vector<double> d;
    d.reserve(diffs_.size());
    for (const Diff& x : diffs_) d.push_back(x.ms);
    std::sort(d.begin(), d.end());
    const std::size_t cut = static_cast<std::size_t>(kTrim * static_cast<double>(d.size()));
    const double lo = d[cut], hi = d[d.size() - 1 - cut];
    double sum = 0;
    for (std::size_t i = cut; i < d.size() - cut; ++i) sum += d[i];
    const double mean = sum / static_cast<double>(d.size() - 2 * cut);
    // The trimmed mean's standard error: the winsorised standard deviation over (1 - 2 trim) sqrt(n)
    // (Tukey and McLaughlin's estimator, as in Wilcox, "Introduction to Robust Estimation and Hypothesis
    // Testing", ch. 4).
    const double m = static_cast<double>(d.size());
    double wsum = 0;
    for (double x : d) wsum += std::min(std::max(x, lo), hi);
    const double wmean = wsum / m;
    double ss = 0;
    for (double x : d) {
      const double w = std::min(std::max(x, lo), hi) - wmean;
      ss += w * w;
    }
    Measurement out;
    out.ms = mean;
    out.se_ms = std::sqrt(ss / (m - 1)) / ((1 - 2 * kTrim) * std::sqrt(m));
    out.blocks = d.size();
    return out;
  }

  struct Sum {
    double ms = 0;
    uint32_t n = 0;
    void add(double x) { ms += x, ++n; }
    double mean() const { return ms / n; }
  };
  struct Block {
    uint64_t first = 0;  // its first step index (a multiple of kBlockSteps)
    Sum marked, unmarked;
  };
  struct Diff {
    uint64_t first;  // the block's first step index
    double ms;       // the marked steps' mean minus the unmarked ones'
  };
  /// The open block ends: a difference where it holds both kinds.
  void close_block() {
    open_ = false;
    if (block_.marked.n == 0 || block_.unmarked.n == 0) return;
    diffs_.push_back({block_.first, block_.marked.mean() - block_.unmarked.mean()});
    if (diffs_.size() > kBlocks) diffs_.pop_front();
    cached_ = false;
  }
  bool open_ = false;
  bool seen_ = false;       // a step was given since the last reset
  uint64_t last_index_ = 0;  // the last step given
  Block block_;
  std::deque<Diff> diffs_;
  mutable bool cached_ = false;
  mutable std::optional<Measurement> cache_;
};

STEPTRACE_END_NAMESPACE
