// steptrace/details/trace_controller.hpp - how often steps are traced, and whether CUPTI stays attached
// between them, decided from the steps already seen. Pure: one call per step (also the steps whose line
// log_every does not write), in step order, with what its line knows (step time, whether it was
// traced, its launches); it answers the estimate the line carries, the interval the recorder should use
// from the next step on, and whether to detach. No clock, no thread, no backend: tests feed it recorded
// or synthetic step series (tests/test_overhead.cpp, "[controller]"). The background thread
// (worker.hpp) applies what it answers.
//
// The rules, each in its own place: the cost estimate (core/overhead.hpp, OverheadEstimator), the
// interval's hysteresis (next_trace_every) and the schedule of traced steps (TraceSchedule), both in
// line_policy.hpp. Here: the probe (an interval of kProbeEvery while only the launch model speaks, so
// that untraced steps exist to measure against; the recorder starts it on its own at the end of the
// warm-up, budget_start_every), and keep or detach (untraced_cupti=auto, decided once).
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/overhead.hpp"
#include "line_policy.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

// The longest interval overhead_budget chooses. 4000: host-bound loops whose traced step costs more
// than a step (the detached launch-bound step on an H200: 12 ms extra on 7 ms steps, the PyTorch eager
// GPT 15 ms on 14 ms) need 400-700 to stay under 0.3 % (benchmarks/results/2026-11-25-h200-alternate),
// 1 500-2 500 under the default 0.1 % once the markers' and scopes' share is taken out. A step in 4000
// still traces one every 30-60 s on such loops (7-16 ms steps), and every line between carries the last
// traced step's diagnosis.
inline constexpr int kMaxBudgetTraceEvery = 4000;
// Keep or detach is decided on the detached trace's cost spread over kDetachHorizonSteps, not over the
// longest interval: the decision ends the hardware counters for the run, and an interval past 100 is
// what the budget reaches for only on loops whose traced step costs more than a step. Except where
// staying attached is certain to cost more than the budget's aim: the residual's low end (its launches
// weighted by the share the GPU waited for, OverheadEstimate::residual_low_ms) alone over it. Then
// detaching is the only way back under the budget, however long the interval it needs, and the horizon
// is the longest interval (short framework steps with few launches, all waited for: Lightning's 5 ms
// step with 71 launches paid 1.4 % attached; detached, a trace every ~2 700 steps fits 0.1 %;
// benchmarks/results/2026-11-29-h200-session64). A GPU-bound step whose launches the GPU never waited
// for keeps its counters (its residual may cost it nothing). The log and every line say when.
inline constexpr int kDetachHorizonSteps = 100;
inline constexpr int kDetachHorizonCertainSteps = kMaxBudgetTraceEvery;

/// One step as the controller sees it: the step's record and its line's GPU part.
struct ControllerStep {
  uint64_t index = 0;
  bool records_on = false;         // the step ran with CUPTI records on
  bool traced = false;             // ... and its line has them
  bool scheduled = false;          // the schedule in force said to trace it
  bool detached = false;           // it ran with CUPTI detached between traced steps
  int every = 1;                   // the interval it ran under (its estimate is at that interval)
  double step_ms = 0;              // the step's own time (its scope)
  double between_ms = 0;           // the gap before it (the previous step's scope end to its begin)
  bool detached_in = false;        // CUPTI was detached in it or in the gap before it
  bool attached_before = false;    // CUPTI was attached in the gap before it (ahead of a traced step)
  std::vector<double> attach_ms, detach_ms;  // CUPTI's attaches / detaches timed since the last step (ms)
  std::optional<uint32_t> launches;          // traced: kernels + copies + memsets recorded
  std::optional<double> host_bound_share;    // traced: share of launches the GPU waited for
  double host_api_fraction = 0;    // steptrace's calls on the training thread, share of the step (modelled)
};

/// What the controller answers for one step.
struct ControllerDecision {
  std::optional<OverheadEstimate> estimate;  // none: tracing stopped for good (`stopped`)
  bool stopped = false;            // a scheduled step went untraced: CUPTI could not be switched back on
  std::optional<int> next_every;   // a new interval for the recorder, from the next step on
  bool trace_at_once = false;      // ... whose first step is traced even where it is longer (line_policy.hpp's
                                   // next_schedule): the first interval after CUPTI detached
  bool detach = false;             // untraced_cupti=auto: switch to detach now (said once)
};

class TraceController {
 public:
  struct Settings {
    double budget = 0;        // overhead_budget (what within_budget compares with)
    bool decides = false;     // the budget decides the interval (trace_every 0): else the interval is fixed
    bool detach_from_start = false;  // untraced_cupti=detach
    bool may_detach = false;  // untraced_cupti=auto under the budget
  };
  explicit TraceController(Settings s)
      : s_(s), estimator_(OverheadEstimator::Settings{s.budget, kMaxBudgetTraceEvery, /*keep_attached=*/!s.detach_from_start}) {}

  ControllerDecision observe(const ControllerStep& step) {
    ControllerDecision d;
    // A step the schedule traced that ran untraced: CUPTI could not be switched back on, and no step
    // is traced from here on (the recorder's tracing_failed): no estimate either.
    if (!step.records_on && step.scheduled) stopped_ = true;
    if (stopped_) {
      d.stopped = true;
      return d;
    }
    // The estimator starts over with the first step run detached (steps before it paid the other mode).
    if (step.detached && estimator_.keep_attached()) {
      estimator_.switch_to_detach();
      mode_switched_ = true;
    }
    OverheadObservation ob;
    ob.index = step.index;
    ob.traced = step.traced;
    ob.step_ms = step.step_ms;
    ob.between_ms = step.between_ms;
    ob.detached_in = step.detached_in;
    ob.attached_before = step.attached_before;
    ob.attach_ms = step.attach_ms;
    ob.detach_ms = step.detach_ms;
    if (step.traced) ob.launches = step.launches, ob.host_bound_share = step.host_bound_share;
    estimator_.observe(ob);
    // The step-time estimate at the interval in force: tracing, CUPTI attached, the scopes.
    d.estimate = estimator_.estimate(step.every, step.host_api_fraction);
    const OverheadEstimate& e = *d.estimate;
    const bool deciding = s_.decides;
    // The recorder's own switch to the probe's interval at the end of the warm-up (budget_start_every),
    // seen in the interval this step ran under: counted as this controller's change.
    if (deciding && every_changed_at_ == 0 && current_every_ == 1 && step.index >= kProbeAfterSteps &&
        step.every == budget_start_every(kProbeAfterSteps)) {
      current_every_ = step.every;
      every_changed_at_ = kProbeAfterSteps;
    }
    if (s_.may_detach && deciding && !detach_asked_ && e.fraction && step.index >= kProbeAfterSteps &&
        OverheadEstimator::detach_pays(e, s_.budget, detach_horizon(e))) {
      d.detach = detach_asked_ = true;
    }
    if (deciding && e.fraction) {
      // Tracing every step leaves nothing to compare with: the model decides, and the model cannot see
      // every cost. Once the warm-up is over, leave some steps untraced (kProbeEvery) to measure; the
      // estimator keeps 8 intervals of the longest (OverheadEstimator::window()), so a measurement
      // holds at any interval the budget picks, and once it is forgotten the probe repeats.
      int wanted = e.every;
      if (e.method == EstimateMethod::launch_model && wanted < kProbeEvery && step.index >= kProbeAfterSteps) wanted = kProbeEvery;
      // Over the budget itself, on a line that ran at the interval in force (lines come tens of steps
      // late on short steps: one from before the last change says nothing of it), where a longer
      // interval can bring it within (its floor is not over the budget: else the model asks for the
      // longest whatever, moving again and again).
      const bool over_budget = !e.within_budget && step.every == current_every_ && e.floor_fraction &&
                               *e.floor_fraction <= s_.budget;
      int next = next_trace_every(current_every_, wanted, step.index - every_changed_at_, !e.within_aim,
                                  e.method == EstimateMethod::measured, over_budget);
      // Asked to detach, not yet detached: the kept mode's estimate (its floor over the aim: the longest
      // interval) is about to be obsolete. The interval is the probe's until the first detached step:
      // the switch waits for a traced step's records to go off, so a long interval would put it off
      // (up to 4000 steps), and every step traced would cost the kept mode's trace. Then the detached
      // estimate's interval is taken whole (a long interval chosen for the kept mode would otherwise
      // hold for two of its intervals: 8 000 steps).
      if (detach_asked_ && estimator_.keep_attached()) next = kProbeEvery;
      // That first detached interval traces its first step: the estimate starts over in the new mode
      // and nothing has measured it yet.
      const bool first_detached = mode_switched_;
      if (mode_switched_) next = wanted, mode_switched_ = false;
      if (next != current_every_) {
        current_every_ = next;
        every_changed_at_ = step.index;
        d.next_every = next;
        d.trace_at_once = first_detached;
      }
    }
    return d;
  }

  int current_every() const { return current_every_; }
  bool decides() const { return s_.decides; }
  /// The steps a detached trace's cost is spread over in keep-or-detach (kDetachHorizonSteps above).
  int detach_horizon(const OverheadEstimate& e) const {
    const bool certain = e.residual_low_ms && e.clean_step_ms && *e.clean_step_ms > 0 &&
                         *e.residual_low_ms / *e.clean_step_ms > s_.budget * OverheadEstimator::kAim;
    return certain ? kDetachHorizonCertainSteps : kDetachHorizonSteps;
  }
  bool detach_asked() const { return detach_asked_; }  // a decision said detach (the switch is the backend's)
  bool stopped() const { return stopped_; }

 private:
  Settings s_;
  OverheadEstimator estimator_;
  bool stopped_ = false;
  bool detach_asked_ = false;
  bool mode_switched_ = false;  // the estimator has just switched to detach: its first interval is taken whole
  int current_every_ = 1;          // the interval last asked of the recorder
  uint64_t every_changed_at_ = 0;  // the step whose line moved it
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
