// steptrace/core/marked_steps.hpp - what a marked step costs the program, measured in the run: the
// stream markers' untraced marked steps against the unmarked steps beside them. Pure C++17.
//
// The training thread times its own event records (the ledger's `measured_ms`), but a record costs the
// step more than its call: each one holds the GPU between two kernels until the one before has finished
// (~3 us an event on an H200 with kernels queued behind it, benchmarks/marker_gpu_cost), and those on a
// step's boundary, where the GPU waits for the host, delay its first kernels by the calls' time. On the
// C++ transformer of benchmarks/step_workloads (62 ms, GPU-bound; H200, session 70) a marked step cost
// 0.056-0.10 % of the step more than an unmarked one, against 0.03 % by the records' own time.
//
// Where the markers are thinned (1 step in N: marked_at), marked and unmarked untraced steps alternate in
// the same run: each marked step between two unmarked ones gives one difference (its time minus its neighbours'
// mean), and their trimmed mean over the last kPairs is the measurement. It stands only when it is
// resolved: enough pairs, and above the records' own time by more than twice its standard error
// (a host-bound loop's noise leaves it unresolved, and the records' own time stands).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

/// splitmix64's finaliser (Steele, Lea, Flood: "Fast splittable PRNGs", 2014): a step's block's hash.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Whether the markers' pace of 1 step in `every` marks `step`: one step in each block of `every`
/// (blocks from step 0), at an offset the block's hash picks. Not always the block's first: a program
/// whose steps alternate (a longer step every second one) would otherwise always be marked on the same
/// kind of step, and the in-run comparison below would read the program's pattern as the markers' cost.
inline bool marked_at(uint64_t step, int every) {
  if (every <= 1) return true;
  const uint64_t n = static_cast<uint64_t>(every);
  return step % n == mix64(step / n) % n;
}

class MarkedStepCost {
 public:
  static constexpr std::size_t kPairs = 128;      // the differences kept (the last ones)
  static constexpr std::size_t kLeastPairs = 32;  // fewer: no measurement
  static constexpr double kTrim = 0.1;            // each tail's share left out of the mean

  struct Measurement {
    double ms = 0;     // what a marked step costs beyond an unmarked one (trimmed mean)
    double se_ms = 0;  // its standard error
    std::size_t pairs = 0;
  };

  /// An untraced step whose marking is known, in step order.
  void step(double step_ms, bool marked) {
    if (!(step_ms > 0) || !std::isfinite(step_ms)) return gap();
    if (!marked && last_.size() == 2 && !last_[0].marked && last_[1].marked) {
      diffs_.push_back(last_[1].ms - (last_[0].ms + step_ms) / 2);
      if (diffs_.size() > kPairs) diffs_.pop_front();
    }
    last_.push_back({step_ms, marked});
    if (last_.size() > 2) last_.pop_front();
  }
  /// A step that breaks the sequence (traced, or its marking unknown): no pair spans it.
  void gap() { last_.clear(); }
  void reset() {
    last_.clear();
    diffs_.clear();
  }

  std::optional<Measurement> measured() const {
    if (diffs_.size() < kLeastPairs) return std::nullopt;
    std::vector<double> d(diffs_.begin(), diffs_.end());
    std::sort(d.begin(), d.end());
    const std::size_t cut = static_cast<std::size_t>(kTrim * static_cast<double>(d.size()));
    const auto first = d.begin() + static_cast<std::ptrdiff_t>(cut), last = d.end() - static_cast<std::ptrdiff_t>(cut);
    const double n = static_cast<double>(last - first);
    double sum = 0;
    for (auto it = first; it != last; ++it) sum += *it;
    const double mean = sum / n;
    // The trimmed mean's standard error: the winsorised variance over (1 - 2 trim)^2 (Tukey and McLaughlin's
    // estimator, as in Wilcox, "Introduction to Robust Estimation and Hypothesis Testing", ch. 4).
    const double m = static_cast<double>(d.size());
    double wsum = 0;
    for (double x : d) wsum += std::min(std::max(x, *first), *(last - 1));
    const double wmean = wsum / m;
    double ss = 0;
    for (double x : d) {
      const double w = std::min(std::max(x, *first), *(last - 1)) - wmean;
      ss += w * w;
    }
    const double winsorised_sd = std::sqrt(ss / (m - 1));
    Measurement out;
    out.ms = mean;
    out.se_ms = winsorised_sd / ((1 - 2 * kTrim) * std::sqrt(m));
    out.pairs = d.size();
    return out;
  }

  /// The measurement where it resolves more than `own_ms` (the records' own time on a marked step):
  /// above it by more than twice its standard error. nullopt: the records' own time stands.
  std::optional<double> beyond(double own_ms) const {
    const std::optional<Measurement> m = measured();
    if (!m || !(m->ms - 2 * m->se_ms > own_ms)) return std::nullopt;
    return m->ms;
  }

 private:
  struct Seen {
    double ms;
    bool marked;
  };
  std::deque<Seen> last_;     // the last two untraced steps
  std::deque<double> diffs_;  // marked minus its neighbours' mean, ms
};

STEPTRACE_END_NAMESPACE
