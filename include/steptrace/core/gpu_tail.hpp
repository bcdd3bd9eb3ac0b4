// steptrace/core/gpu_tail.hpp - how long a traced step's GPU work runs on after its host end, learned
// from the traced steps whose records are all in. With counters on traced steps only, PM sampling
// pauses once its samples cover a traced step's host end plus this allowance, instead of running until
// the step's records arrive (CUPTI hands records over hundreds of milliseconds late, and each sample
// decoded costs the background thread ~0.7 ms of CPU on an H100: the default's own measurement,
// benchmarks/results/2026-11-25-h100-default/NOTES.md). Pure; one owner thread.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>

STEPTRACE_BEGIN_NAMESPACE

class GpuTail {
 public:
  static constexpr std::size_t kRemembered = 8;        // traced steps whose tails count
  static constexpr int64_t kMarginNs = 3'000'000;      // beyond the longest tail seen (3 counter samples)

  /// A complete traced step: its last GPU record ended `tail_ns` after the step's host end (negative:
  /// before it; counts as 0).
  void saw(int64_t tail_ns) {
    tails_.push_back(std::max<int64_t>(0, tail_ns));
    if (tails_.size() > kRemembered) tails_.pop_front();
  }

  /// How long after a traced step's host end its samples must reach; nullopt until a complete
  /// traced step was seen (then the caller waits for the step's records instead).
  std::optional<int64_t> allowance_ns() const {
    if (tails_.empty()) return std::nullopt;
    return *std::max_element(tails_.begin(), tails_.end()) + kMarginNs;
  }

 private:
  std::deque<int64_t> tails_;
};

STEPTRACE_END_NAMESPACE
