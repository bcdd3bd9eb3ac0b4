// steptrace/core/overhead_parts.hpp - everything steptrace spends, part by part, as a fraction of the
// program's step time (the line's `overhead.parts`; docs/schema.md "Overhead"). Pure C++17.
//
// Parts and how each is known:
//   tracing     traced steps (CUPTI records and callbacks, and the hardware counters, which run only
//               around traced steps while overhead_budget decides): measured against the clean steps
//               (core/overhead.hpp), or modelled from the launch count until it can be
//   attached    CUPTI's callbacks on untraced steps while it stays attached: modelled (overhead.hpp)
//   host_api    steptrace's scopes and calls on the training thread (a TRACE_STEP, each phase scope,
//               each record()): paid on every step, so no step shows it; modelled as calls x the
//               cost of one (kScopeNs, 120 ns: above every median `scope_cost` measured on the GPU
//               hosts, 54-101 ns per scope with the tick counter or steady_clock, the step boundary's
//               share included, benchmarks/README.md "A phase scope without a lock" and its H100
//               reading; from Python kPythonScopeNs, 670-720 ns, docs/python.md), plus what a binding
//               measured of its own bookkeeping per step beyond that model (the framework callbacks time
//               one step in 37: python/steptrace/_callback_steps.py; stamped on each step as the next
//               begins, StepRecord::binding_extra_ns, and charged at its latest value on every step),
//               plus the stream markers' CUDA event records, measured on the training thread as they
//               are made (or, where it resolves more, marked steps against unmarked ones in the run:
//               core/marked_steps.hpp): a marked step's typical cost x the share of steps the pace marks now
//   background  the background thread's readings (device memory, NVML, PM-sampling decodes): its CPU
//               time in them, measured (not their wall time: a reading may wait for a lock the
//               training thread's CUDA call holds, which costs neither of them a core)
//   captures    the flight recorder's captures: the background thread's CPU time writing them, measured
// The background thread runs beside the program: on a free core what it does costs the program's
// steps (almost) nothing, on a busy one up to its whole CPU time. So the estimate is an interval:
//   low  = tracing + attached + host_api   (`estimated_fraction`: the step time the budget holds)
//   high = low + background + captures      (`estimated_fraction_high`: its CPU time charged in full)
//          + the markers' upper excess      (host_api charges a marked step at the in-run comparison's value
//                                            less two standard errors, or the records' own time; the high
//                                            end takes the upper end, value plus two: none while the markers
//                                            mark and the comparison has not measured - then no high end)
// The background parts have governors of their own: device-memory and NVML readings are paced to a
// tenth of the budget each, PM samples are taken around traced steps only, captures spend a quarter.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "marked_steps.hpp"
#include "measured.hpp"
#include "overhead.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// How a part of the estimate is known (the line's `overhead.parts.*.basis`).
enum class PartBasis : uint8_t { none, measured, modelled, in_tracing, not_measured, off };
inline const char* basis_name(PartBasis b) {
  switch (b) {
    case PartBasis::measured: return "measured";
    case PartBasis::modelled: return "modelled";
    case PartBasis::in_tracing: return "in_tracing";
    case PartBasis::not_measured: return "not_measured";
    case PartBasis::off: return "off";
    case PartBasis::none: break;
  }
  return "";
}

/// One part of the estimate.
struct OverheadPart {
  Measured<double> fraction{reason_text(Reason::parts_not_computed)};  // share of the step, or why not
  PartBasis basis = PartBasis::none;
};

struct OverheadParts {
  bool present = false;  // the breakdown was computed for this line
  OverheadPart tracing, attached, counters, host_api, background, captures;
  // background, by reading (since the warm-up): device memory, NVML, PM-sampling decodes
  std::optional<double> background_memory, background_device_state, background_counters;
  // host_api's high end: the stream markers at the in-run comparison's upper end (OverheadLedger::
  // markers_upper_extra_at); null while the markers mark and the comparison has not measured
  Measured<double> host_api_high{reason_text(Reason::parts_not_computed)};
  std::optional<double> high;  // the interval's high end (its low end is the estimate's fraction)
  std::string high_reason;     // why `high` is null when the estimate is not (empty: the estimate's reason)
  // A framework's callbacks opened the step: the estimate is a lower end of the cost (make_overhead_parts),
  // so a line over the budget is over it, one under it cannot say it is under (`within_budget` null).
  bool lower_end_only = false;
};

/// What the background thread and the training thread's scopes spent over the recent steps.
class OverheadLedger {
 public:
  static constexpr double kScopeNs = 120;         // C++ scope: above every median measured (54-101 ns; see the top)
  static constexpr double kPythonScopeNs = 720;   // a scope or call from Python (docs/python.md)
  static constexpr std::size_t kWindow = 512;     // steps the fractions are over

  enum class Work { memory, device_state, counters };

  explicit OverheadLedger(double ns_per_call = kScopeNs) : ns_per_call_(ns_per_call) {}

  /// The background thread spent `ms` of CPU time on a reading.
  void spent(Work w, double ms) {
    if (!(ms > 0)) return;
    pending_background_ms_ += ms;
    by_work_[static_cast<int>(w)] += ms;
  }
  /// One step's line: its time and steptrace calls on the training thread (scopes, records, the step).
  /// `warm_up`: the start-up steps, whose one-off costs (first readings, CUDA on a new thread) would
  /// stay in the window for hundreds of steps, are not counted.
  /// `measured_ms`: the training thread's own measured time in steptrace's work since the last step
  /// (the stream markers' event records). `extra_ms`: a binding's bookkeeping beyond its calls as
  /// modelled, as it measured it (the Python framework callbacks': details::set_binding_step_extra_ns),
  /// in force as the step closed; negative (or not finite): not taken for this step (the step stop()
  /// closes), the last one taken stands. `step_ms` is the step's own time (its scope, the line's
  /// step_time_ms): the calls', the markers' and a binding's costs are shares of it. `interval_ms`, from
  /// its begin to the next step's (not above 0: step_ms), is what the background thread's readings are
  /// a share of: they are paced by the clock, between steps too.
  void step(double step_ms, uint64_t calls, bool warm_up = false, double measured_ms = 0, double extra_ms = 0,
            double interval_ms = 0) {
    if (warm_up) {
      pending_background_ms_ = 0;
      for (double& w : by_work_) w = 0;
      return;
    }
    if (!(step_ms > 0)) return;
    if (!(interval_ms > step_ms) || !std::isfinite(interval_ms)) interval_ms = step_ms;
    total_interval_ms_ += interval_ms;
    measured_ms = std::max(0.0, measured_ms);
    const double measured_steps = measured_ms > 0 ? 1 : 0;
    if (std::isfinite(extra_ms) && extra_ms >= 0) latest_extra_ms_ = extra_ms;
    steps_.push_back({step_ms, interval_ms, pending_background_ms_, static_cast<double>(calls), measured_ms, measured_steps});
    sum_.step_ms += step_ms;
    sum_.interval_ms += interval_ms;
    sum_.background_ms += pending_background_ms_;
    sum_.calls += static_cast<double>(calls);
    sum_.measured_steps += measured_steps;
    pending_background_ms_ = 0;
    if (steps_.size() > kWindow) {
      sum_.step_ms -= steps_.front().step_ms;
      sum_.interval_ms -= steps_.front().interval_ms;
      sum_.background_ms -= steps_.front().background_ms;
      sum_.calls -= steps_.front().calls;
      sum_.measured_steps -= steps_.front().measured_steps;
      steps_.pop_front();
    }
  }

  /// The stream markers' measured cost of one step that has them, over the step time of one step (the
  /// window's mean): what marking every step would cost. The records' own time on the training thread,
  /// the median over the window's marked steps, not the mean: the training thread can be preempted inside
  /// a record, and one such ms would otherwise thin the markers for the whole window (a CTest run on a
  /// loaded 2-core machine did that: 0.05 % where every record's own time was 0.006 %); or, where it
  /// resolves more, what marked steps took beyond the unmarked ones beside them in this run (marking(),
  /// core/marked_steps.hpp: the records' GPU-side cost is in no call's time). host_api_fraction_at()
  /// charges this x the share marked now. nullopt before a marked step was counted.
  std::optional<double> marked_step_fraction() const {
    if (!(sum_.step_ms > 0)) return std::nullopt;
    std::optional<double> per_marked_ms = own_marked_ms();
    if (!per_marked_ms) return std::nullopt;
    // What marked steps cost beyond unmarked ones in this run, where it resolves more (core/marked_steps.hpp).
    if (const std::optional<double> in_run = in_run_.beyond(*per_marked_ms)) per_marked_ms = *in_run;
    return *per_marked_ms / (sum_.step_ms / static_cast<double>(steps_.size()));
  }
  /// Step `index`, untraced, its marking known (marked, or left unmarked by the markers' pace), in step
  /// order; std::nullopt: a step not compared (traced or just after a trace, its marking not known). Its
  /// step time is its own.
  void marking(uint64_t index, double step_ms, std::optional<bool> marked) {
    if (marked) in_run_.step(index, step_ms, *marked);
  }
  /// The comparison's differences forgotten (CUPTI detached: what a step costs changed).
  void reset_marking() { in_run_.reset(); }
  /// What marking every step may cost, as a fraction of the step: the in-run comparison's upper end
  /// (value plus two standard errors), or the records' own time where that is more. nullopt: the
  /// comparison has not measured (too few blocks of marked and unmarked steps since it last forgot them).
  std::optional<double> marked_step_upper_fraction() const {
    if (!(sum_.step_ms > 0)) return std::nullopt;
    const std::optional<double> own = own_marked_ms();
    const std::optional<double> upper = own ? in_run_.upper(*own) : std::nullopt;
    if (!upper) return std::nullopt;
    return *upper / (sum_.step_ms / static_cast<double>(steps_.size()));
  }
  /// What the stream markers at 1 step in `markers_every` may cost beyond what host_api_fraction_at()
  /// charges them (the high end of the estimate's interval): the in-run comparison's upper end
  /// (marked_step_upper_fraction) less the charge (marked_step_fraction), x the share marked. 0 when not
  /// marking, or before a marked step was counted (none charged, none paid in the window). nullopt: marking,
  /// and the comparison has not measured - nothing bounds a marked step's cost from above then: on the C++
  /// transformer of benchmarks/step_workloads (H200) the comparison read 2-4x the records' own time
  /// (sessions 76-77: 0.104-0.126 ms against 0.027-0.059) and up to 9x (session 71).
  std::optional<double> markers_upper_extra_at(int markers_every) const {
    if (markers_every < 1 || !(sum_.step_ms > 0)) return 0.0;
    // The records' own time once (a median over the window): marked_step_fraction() and
    // marked_step_upper_fraction() would each take it again.
    const std::optional<double> own = own_marked_ms();
    if (!own) return 0.0;
    const std::optional<double> upper = in_run_.upper(*own);
    if (!upper) return std::nullopt;
    const double charged = in_run_.beyond(*own).value_or(*own);  // as marked_step_fraction()
    return (*upper - charged) / (sum_.step_ms / static_cast<double>(steps_.size())) / markers_every;
  }
  /// What the pace's decisions read, for its log: the records' own time on a marked step (ms; nullopt:
  /// none counted), the comparison's measurement (nullopt: fewer than kLeastBlocks blocks) and its blocks.
  struct MarkedCostView {
    std::optional<double> own_ms;
    std::optional<MarkedStepCost::Measurement> in_run;
    std::size_t blocks = 0;
  };
  MarkedCostView marked_cost_view() const { return {own_marked_ms(), in_run_.measured(), in_run_.blocks()}; }
  /// Whether marked_step_fraction() is the in-run comparison's (else the records' own time).
  bool marked_cost_in_run() const {
    const std::optional<double> own = own_marked_ms();
    return own && in_run_.beyond(*own).has_value();
  }

  /// What the steps pay at the markers' pace in force (1 step in `markers_every`; 0: not marking): the
  /// calls as modelled over the window, a binding's measured bookkeeping beyond them (the last
  /// `extra_ms` taken, on every step), and one marked step's typical cost (marked_step_fraction) times the share marked now. The line's host_api and the interval's decision read this, not the window's
  /// sum of the records' time: that sum held the steps marked before overhead_budget thinned the markers for up to kWindow
  /// steps (session 65, a 5 ms GPU-bound step marked every step at ~20 us for 40 steps: the sum still
  /// said 0.2 % of the step 40 steps after the markers went to 1 in 16, ~0.03 %, and the budget, taking
  /// it for a cost no interval could fix, set the longest interval), and a record the thread was
  /// preempted in, or waited in for a driver lock, is no cost of the markers' pace. A traced step's
  /// markers are in its measured extra (tracing), not here.
  std::optional<double> host_api_fraction_at(int markers_every) const {
    if (!(sum_.step_ms > 0)) return std::nullopt;
    // A binding's extra at its latest measurement, on every step of the window: it is what a step costs
    // now, and the steps before its first measurement (stamped 0, not measured yet) are no evidence of a
    // lower cost (session 70, Lightning on an H200: 46 us a step measured from step ~220 on, charged at
    // under half of it for the next 500 steps while the window still held the unmeasured ones).
    const double calls = (sum_.calls * ns_per_call_ * 1e-6 + latest_extra_ms_ * static_cast<double>(steps_.size())) /
                         sum_.step_ms;
    const std::optional<double> marked = markers_every >= 1 ? marked_step_fraction() : std::nullopt;
    return std::max(0.0, calls + (marked ? *marked / markers_every : 0.0));
  }
  /// What the steps pay for steptrace's calls (as modelled) and a binding's measured bookkeeping,
  /// without the markers: a cost no interval and no pace changes.
  std::optional<double> calls_fraction() const { return host_api_fraction_at(0); }
  std::optional<double> background_fraction() const {
    if (!(sum_.interval_ms > 0)) return std::nullopt;
    return std::max(0.0, sum_.background_ms / sum_.interval_ms);
  }
  /// One kind of reading's CPU time over all the steps' intervals counted (since the warm-up).
  std::optional<double> work_fraction(Work w) const {
    if (!(total_interval_ms_ > 0)) return std::nullopt;
    return by_work_[static_cast<int>(w)] / total_interval_ms_;
  }

 private:
  struct Entry {
    double step_ms = 0, interval_ms = 0, background_ms = 0, calls = 0, measured_ms = 0, measured_steps = 0;
  };
  /// The records' own time on a marked step: the median over the window's marked steps (nullopt: none).
  std::optional<double> own_marked_ms() const {
    if (!(sum_.measured_steps > 0)) return std::nullopt;
    std::vector<double> marked;
    marked.reserve(steps_.size());
    for (const Entry& e : steps_)
      if (e.measured_steps > 0) marked.push_back(e.measured_ms);
    if (marked.empty()) return std::nullopt;
    const auto mid = marked.begin() + static_cast<std::ptrdiff_t>(marked.size() / 2);
    std::nth_element(marked.begin(), mid, marked.end());
    double per_marked_ms = *mid;
    if (marked.size() % 2 == 0) per_marked_ms = (per_marked_ms + *std::max_element(marked.begin(), mid)) / 2;
    return per_marked_ms;
  }
  double ns_per_call_;
  std::deque<Entry> steps_;
  Entry sum_;
  double pending_background_ms_ = 0;
  double latest_extra_ms_ = 0;  // the last `extra_ms` taken: what host_api charges each step
  MarkedStepCost in_run_;       // marked against unmarked untraced steps (marking())
  double by_work_[3] = {0, 0, 0};  // CPU ms per kind of reading, since the warm-up
  double total_interval_ms_ = 0;  // the steps' intervals (begin to the next begin) since the warm-up
};

/// The stream markers' share of overhead_budget: above it, only 1 step in N is marked (our choice: half,
/// so that a step's own GPU view and its traces share the budget, and the trace interval still fits).
inline constexpr double kMarkersShareOfBudget = 0.5;
/// The most steps between two marked ones.
inline constexpr int kMaxMarkersEvery = 64;

/// Where the per-step costs no interval changes leave less, the markers' share never goes below this
/// part of the budget: the interval is the longest then anyway, and thinning cheap markers further would
/// take the per-step GPU view away for nothing.
inline constexpr double kMarkersLeastShareOfBudget = 0.1;

/// The markers' share of `budget` beside `others` (markers_every's cap), as a fraction of step time.
inline double markers_share(double budget, double others = 0) {
  const double left = OverheadEstimator::kAim * budget - std::max(0.0, others);
  return std::max(kMarkersLeastShareOfBudget * budget, std::min(kMarkersShareOfBudget * budget, left));
}

/// 1 step in how many the stream markers mark (a power of two), so that they cost at most
/// kMarkersShareOfBudget of `budget`, and at most what the budget's aim (OverheadEstimator::kAim)
/// leaves beside `others` (the per-step costs no interval changes: CUPTI kept attached, steptrace's
/// calls): markers charged into a share the aim does not have would leave the budget nothing to trace
/// with, and it would choose the longest interval (the least tracing) while fewer markers would do.
/// Never under kMarkersLeastShareOfBudget. (The markers can still take all the aim leaves, and the
/// interval then grows long: a split of what is left between markers and traces is not decided yet.)
/// `marked_fraction` is what marking every step costs (OverheadLedger::marked_step_fraction). From
/// `current`, it goes down only with room to spare (the halved interval under 80 % of the cap), so that
/// it does not swing between two values.
inline int markers_every(double marked_fraction, double budget, int current, double others = 0) {
  if (!(marked_fraction > 0) || !(budget > 0)) return 1;
  const double cap = markers_share(budget, others);
  current = std::max(1, std::min(current, kMaxMarkersEvery));
  int every = current;
  while (every < kMaxMarkersEvery && marked_fraction / every > cap) every *= 2;
  while (every > 1 && marked_fraction / (every / 2) <= 0.8 * cap) every /= 2;
  return every;
}

/// The markers' pace and what decides it (Worker::pace_markers writes the unmarked lines' reason from it).
struct MarkersPace {
  enum class Why : uint8_t {
    cost,        // marking every step costs over the markers' share (markers_every), or it fits (every 1)
    unmeasured,  // 1 in 2 held: the in-run comparison has not measured yet
    upper_over,  // 1 in 2 held: its upper end for every step is over 80 % of the share (over it, at 1 in 1)
  };
  int every = 1;
  Why why = Why::cost;
};

/// The markers' pace from `current`: markers_every() on `marked_fraction` (what a marked step is charged:
/// the records' own time, or the in-run comparison's lower end where it resolves more), but every step
/// only where the in-run comparison has measured and `upper_fraction` (its upper end, at least the
/// records' own time; nullopt: not measured) fits: from more than 1 in 1 with room to spare (80 % of
/// the share), at 1 in 1 while within the share (markers_every's hysteresis). Otherwise 1 in 2 at
/// least: at 1 in 1 there is no unmarked step to compare with, and the records' own time alone can read
/// 2.5-9x low (session 71, the C++ transformer on an H200: 0.011-0.04 ms charged, 0.10 ms paid a marked step).
inline MarkersPace markers_pace(double marked_fraction, std::optional<double> upper_fraction, double budget, int current,
                                double others = 0) {
  MarkersPace p;
  const int by_cost = markers_every(marked_fraction, budget, current, others);
  const bool shown = upper_fraction && markers_every(*upper_fraction, budget, current <= 1 ? 1 : 2, others) == 1;
  p.every = shown ? by_cost : std::max(2, by_cost);
  if (p.every > by_cost) p.why = upper_fraction ? MarkersPace::Why::upper_over : MarkersPace::Why::unmeasured;
  return p;
}

/// How the hardware counters run, for the `counters` part.
enum class CountersRun { around_traced_steps, every_step, off };

/// The line's `overhead.parts`: the estimator's tracing and attached shares (core/overhead.hpp), the
/// ledger's host and background ones, the captures' (`captures`: CaptureBudget::fraction(); nullopt
/// without the flight recorder).
/// `host_api`: the ledger's host_api_fraction_at() the estimate was made with (computed once per line).
/// `framework_steps`: a framework's callbacks opened the step (StepRecord::framework_steps): what they
/// cost the framework's own code around their calls is in no measurement (inside one run they cost
/// several times what the lines estimate: Lightning ~110 us a step against ~30, the HF Trainer ~260
/// against ~33, the cause not known; two H200s, session 69, benchmarks/framework_budget.py
/// --interleave), so no high end is claimed; the estimate stays what was measured, a lower end
/// (`lower_end_only`: the line's `within_budget` is false over the budget, null under it).
/// `markers_upper_extra`: OverheadLedger::markers_upper_extra_at() at the pace host_api was taken at;
/// nullopt (the markers mark, their cost not measured in the run) leaves host_api's and the estimate's
/// high ends null, said why.
inline OverheadParts make_overhead_parts(const OverheadEstimate& e, const OverheadLedger& ledger, CountersRun counters,
                                         std::optional<double> captures, std::optional<double> host_api,
                                         bool framework_steps = false,
                                         std::optional<double> markers_upper_extra = 0.0) {
  OverheadParts p;
  p.present = true;
  const std::string pending = reason_text(Reason::no_traced_step_yet), untimed = reason_text(Reason::no_step_timed);
  p.tracing.fraction.set(e.tracing_fraction, pending);
  p.tracing.basis = e.method == EstimateMethod::measured ? PartBasis::measured : PartBasis::modelled;
  p.attached.fraction.set(e.attached_fraction, pending);
  p.attached.basis = PartBasis::modelled;
  switch (counters) {
    case CountersRun::around_traced_steps:
      p.counters.basis = PartBasis::in_tracing;
      p.counters.fraction.unknown(reason_text(Reason::counters_in_tracing));
      break;
    case CountersRun::every_step:
      p.counters.basis = PartBasis::not_measured;
      p.counters.fraction.unknown(reason_text(Reason::counters_every_step));
      break;
    case CountersRun::off:
      p.counters.basis = PartBasis::off;
      p.counters.fraction = 0.0;
      break;
  }
  p.host_api.fraction.set(host_api, untimed);
  p.host_api.basis = PartBasis::modelled;
  p.background.fraction.set(ledger.background_fraction(), untimed);
  p.background.basis = PartBasis::measured;
  p.background_memory = ledger.work_fraction(OverheadLedger::Work::memory);
  p.background_device_state = ledger.work_fraction(OverheadLedger::Work::device_state);
  p.background_counters = ledger.work_fraction(OverheadLedger::Work::counters);
  p.captures.fraction = captures.value_or(0);
  p.captures.basis = captures ? PartBasis::measured : PartBasis::off;
  const char* unbounded = reason_text(Reason::markers_cost_unbounded);
  if (host_api && markers_upper_extra) p.host_api_high = *host_api + *markers_upper_extra;
  else p.host_api_high.unknown(host_api ? std::string(unbounded) : untimed);
  p.lower_end_only = framework_steps;
  if (e.fraction && framework_steps) p.high_reason = reason_text(Reason::framework_steps_unbounded);
  else if (e.fraction && !markers_upper_extra) p.high_reason = unbounded;
  else if (e.fraction)
    p.high = *e.fraction + *markers_upper_extra + p.background.fraction.value_or(0) + p.captures.fraction.value_or(0);
  return p;
}

STEPTRACE_END_NAMESPACE  // steptrace
