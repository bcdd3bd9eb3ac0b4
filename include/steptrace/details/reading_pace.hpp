// steptrace/details/reading_pace.hpp - how often the background thread reads device memory and NVML
// under overhead_budget, and what one steptrace call on the training thread is modelled to cost
// (core/overhead_parts.hpp). Pure: no vendor call, no clock read.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "../core/overhead_parts.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// What one steptrace call on the training thread costs, for the overhead's host_api part
/// (core/overhead_parts.hpp): the C++ scope's by default; the Python package sets its own before start().
inline std::atomic<double>& host_call_ns() {
  static std::atomic<double> ns{OverheadLedger::kScopeNs};
  return ns;
}

/// What a binding's bookkeeping costs per step beyond its calls as modelled (ns), as the binding measured
/// it (details::set_binding_step_extra_ns: the Python framework callbacks'); 0 from each start().
inline std::atomic<double>& binding_step_extra_ns_now() {
  static std::atomic<double> ns{0};
  return ns;
}
/// Whether the next step this thread opens is a framework's (details::set_next_step_framework); the
/// step's opening takes it back.
inline bool& next_step_framework_here() {
  thread_local bool on = false;
  return on;
}
/// Step boundaries so far that switched tracing on or off, or attached CUPTI ahead of a traced step
/// (their cost is the lines' tracing part): a binding timing its own calls leaves out a step that met one.
inline std::atomic<uint64_t>& tracing_boundaries() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// Under overhead_budget each kind of background reading (device memory, NVML) may spend this share of
// the budget in CPU time: its period grows past memory_sample_ms when one reading costs more.
inline constexpr double kReadingShare = 0.1;

/// When a kind of reading is due: every `period_ms` (memory_sample_ms), or less often when its measured
/// CPU cost per reading would spend more than its share of the budget at that rate.
class ReadingPace {
 public:
  ReadingPace(double period_ms, double budget) : period_ms_(period_ms), budget_(budget) {}
  bool due(int64_t now_ns) const { return now_ns >= next_ns_; }
  /// A reading was taken at `now_ns` and cost `cpu_ms`.
  void taken(int64_t now_ns, double cpu_ms) {
    cost_ms_ = cost_ms_ < 0 ? cpu_ms : 0.8 * cost_ms_ + 0.2 * cpu_ms;  // smoothed: one slow reading moves it little
    next_ns_ = now_ns + static_cast<int64_t>(period_ms() * 1e6);
  }
  double period_ms() const {
    if (!(budget_ > 0) || cost_ms_ <= 0) return period_ms_;
    return std::max(period_ms_, cost_ms_ / (kReadingShare * budget_));
  }

 private:
  double period_ms_, budget_;
  double cost_ms_ = -1;
  int64_t next_ns_ = 0;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
