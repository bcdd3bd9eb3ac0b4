// steptrace/details/worker_overhead.hpp - the background thread's part in the overhead budget: each
// line's overhead section from the step series (TraceController decides the interval and keep or
// detach), and switching CUPTI to detach mode (Worker's members; included at the end of worker.hpp).
#pragma once
#include "worker_decl.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline OverheadLine Worker::observe_overhead(const StepRecord& r, const std::optional<StepGpu>& gpu) {
  const Config& cfg = lines_.context().cfg;
  OverheadLine o;
  o.trace_every = static_cast<int>(r.trace_every);
  o.untraced_cupti = untraced_cupti_of(r);
  if (s_.attribution) o.kernel_timestamps = s_.gpu->kernel_timestamps();  // asked again at every attach
  if (budget_decides(cfg)) o.budget = cfg.overhead_budget;
  else o.no_budget_reason = reason_text(cfg.trace_every >= 1 ? Reason::budget_trace_every_set : Reason::budget_zero);
  // The stream markers' records this step, as measured on the step's thread (taken as the next step
  // began; the last step has none: its markers' cost goes uncounted).
  // A traced step's markers are not what a marked untraced step costs (at a short interval most marked
  // steps are traced ones): left out here. Measured, they are in the traced step's extra where the pace
  // leaves its clean steps unmarked (1 in 4 or fewer); under the launch model they are charged nowhere.
  double marked_ms = 0;
  if (r.markers_ns_at_close >= 0)
    marked_ms = ns_to_ms(std::max<int64_t>(0, r.markers_ns_at_close - std::exchange(marked_ns_seen_, r.markers_ns_at_close)));
  if (r.traced) marked_ms = 0;
  // Per-step costs over the step's own time (its scope where it has one, as the estimator's and the
  // line's step_time_ms): what ran between steps (an evaluation, a data wait outside the scope, a
  // benchmark's steps without steptrace) is no step time that a marker's or a call's cost is a share of.
  // Counted in, it thinned every per-step share: the C++ transformer timed in groups of 10 steps with
  // steptrace's calls and 10 without (H200, session 76) read 124 ms steps for 62, charged a marked
  // step's measured 0.10 ms as 0.08 % for 0.16 %, and its markers went from 1 in 4 back to 1 in 2. The
  // background thread's readings, paced by the clock and made between steps too, stay a share of the
  // steps' intervals (the last argument).
  ledger_.step(ns_to_ms(r.own_end_ns() - r.begin_ns), 1 + r.spans.size() + r.scalars.size(), r.index < kProbeAfterSteps,
               marked_ms, r.binding_extra_ns >= 0 ? r.binding_extra_ns * 1e-6 : -1.0, ns_to_ms(r.end_ns - r.begin_ns));
  // The markers' pace from here on, set before anything reads their cost: the estimate and the interval
  // charge the markers at the pace the steps will pay, never at the one this line's measurement is
  // about to end (an H200 run, session 67: the line that first thinned a 5 ms step's markers from every
  // step to 1 in 16 charged them at every step, 0.54 % of the step, and the budget, taking it for a cost
  // no interval could fix, chose the longest interval: one trace in 4000 steps). Read once: the line's
  // markers_every and what the steps pay for the markers (host_api_fraction_at, below) say the same.
  if (s_.attribution && budget_decides(cfg) && r.index >= kProbeAfterSteps) pace_markers(cfg, r.index);
  const int markers_pace = marker_ring().armed() ? marker_ring().wanted_every() : 0;
  if (markers_pace > 0) o.markers_every = markers_pace;
  else o.markers_every.unknown(cfg.stream_markers ? marker_ring().why_off() : std::string(reason_text(Reason::markers_setting_off)));
  if (!s_.attribution) {
    o.null_reason = reason_text(Reason::estimate_without_attribution, lines_.context().gpu_null_reason) +
                    "): steptrace costs its scopes only (benchmarks/README.md, scope_cost)";
    return o;
  }
  ControllerStep step;
  step.index = r.index;
  step.records_on = r.traced;
  step.traced = r.traced && gpu.has_value();
  step.scheduled = schedule_of(r, cfg).traced(r.index);
  step.detached = detached(r);
  step.every = o.trace_every;
  // The step's own time (its scope), never what ran between steps (evaluation, checkpoints, logging);
  // the gap before it tells the estimator whether such work may have slowed it.
  step.step_ms = ns_to_ms(r.own_end_ns() - r.begin_ns);
  step.between_ms = ns_to_ms(r.between_ns());
  // A detach (cuptiFinalize: it waits for the device) in this step or the gap before it, or one the
  // background thread heard of late: charged here.
  while (!detach_times_.empty() && detach_times_.front() <= r.own_end_ns()) {
    detach_times_.pop_front();
    step.detached_in = true;
  }
  // An attach made ahead of a traced step (detach mode) ran in the gap before it: charged to it.
  while (!attach_times_.empty() && attach_times_.front() <= r.own_end_ns()) {
    attach_times_.pop_front();
    step.attached_before = true;
  }
  step.attach_ms.swap(cycle_attach_ms_);  // measured since the last step: the estimator's cost of a CUPTI cycle
  step.detach_ms.swap(cycle_detach_ms_);
  feed_marking(r, marked_ms, step.detached_in || step.attached_before);
  if (step.traced) {
    uint32_t launches = gpu->kernels;
    for (const auto& [id, pg] : gpu->phases)
      for (const CopyTotals& c : pg.copies) launches += c.count;
    step.launches = launches;
    if (gpu->launch_timed) step.host_bound_share = static_cast<double>(gpu->launch_waited) / gpu->launch_timed;
  }
  const std::optional<double> host_api = ledger_.host_api_fraction_at(markers_pace);  // the estimate's and its part's
  step.host_api_fraction = host_api.value_or(0);
  const ControllerDecision d = controller_.observe(step);
  if (d.stopped) {
    o.null_reason = reason_text(Reason::tracing_stopped);
    return o;
  }
  // The step-time estimate: tracing (its measurement holds what the counters and the background
  // thread's work around traced steps cost the steps), CUPTI attached, the scopes. What the
  // background thread spends beside them (readings, decodes, captures) is its CPU time, paced by
  // governors of its own (ReadingPace, counters around traced steps, CaptureBudget): the high end of the interval.
  o.estimate = *d.estimate;
  attached_fraction_ = o.estimate.attached_fraction.value_or(0);  // the markers' pace reads it on the next line
  const LineContext& ctx = lines_.context();
  o.parts = make_overhead_parts(o.estimate, ledger_,
                                !ctx.counters_on           ? CountersRun::off
                                : ctx.counters_traced_only ? CountersRun::around_traced_steps
                                                           : CountersRun::every_step,
                                flight_.on() ? std::optional<double>(flight_.budget().fraction()) : std::nullopt, host_api,
                                r.framework_steps, ledger_.markers_upper_extra_at(markers_pace));
  if (d.detach) {
    switch_to_detach(r, o.estimate);
    attached_fraction_ = 0;  // detached from here on: the kept mode's share is no one's to leave room for
  }
  if (d.next_every) s_.recorder->set_trace_every(*d.next_every, d.trace_at_once);
  return o;
}

inline void Worker::feed_marking(const StepRecord& r, double marked_ms, bool cupti_switched) {
  // The in-run comparison of marked and unmarked untraced steps (core/marked_steps.hpp). Left out: a
  // traced step and the two after it (its aftermath), one where CUPTI was attached or detached, the
  // warm-up, and a step whose marking the evidence does not settle: marked is the pace's pick with its
  // records timed, unmarked the pace's leaving out with none.
  if (r.traced) last_traced_index_ = static_cast<int64_t>(r.index);
  const bool aftermath = last_traced_index_ >= 0 && r.index <= static_cast<uint64_t>(last_traced_index_) + 2;
  if (r.traced || aftermath || cupti_switched || r.index < kProbeAfterSteps || !marker_ring().armed()) {
    ledger_.marking(r.index, 0, std::nullopt);
    return;
  }
  const bool thinned = marker_ring().thinned(r.index).has_value();
  std::optional<bool> marked;
  if (thinned && marked_ms == 0) marked = false;
  else if (!thinned && marked_ms > 0) marked = true;
  ledger_.marking(r.index, ns_to_ms(r.own_end_ns() - r.begin_ns), marked);
}

inline void Worker::pace_markers(const Config& cfg, uint64_t index) {
  MarkerRing& ring = marker_ring();
  const std::optional<double> marked = ledger_.marked_step_fraction();
  if (!marked || !std::isfinite(*marked) || !ring.armed()) return;
  // Beside the markers, per step: CUPTI kept attached (the last estimate's) and steptrace's calls.
  const double others = attached_fraction_ + ledger_.calls_fraction().value_or(0);
  // Every step is marked only where the in-run comparison has measured and its upper end fits
  // (markers_pace, core/overhead_parts.hpp); else 1 in 2 at least. A change of what decides the pace is
  // said even at the same pace (the lines' reason is the one in force).
  const std::optional<double> upper = ledger_.marked_step_upper_fraction();
  const MarkersPace pace = markers_pace(*marked, upper, cfg.overhead_budget, ring.wanted_every(), others);
  const int every = pace.every;
  // The unmarked lines' reason says the cost it was decided on: written again at the same pace where
  // what is charged moved by over a quarter or changed its basis (the records' own time, the in-run
  // comparison), so that a full line never says one cost while host_api charges another (a compact line's
  // code keeps the sentence first said with it: a new basis is new words, so a new code; a new figure is
  // not). At most once in kReasonRewriteSteps steps, and not at 1 in 1 (no unmarked line carries it):
  // each write is an entry of the ring's thinning history, which lines still in flight read.
  const bool in_run = ledger_.marked_cost_in_run();
  const bool cost_moved = every > 1 && index >= markers_said_index_ + kReasonRewriteSteps &&
                          (!(*marked <= 1.25 * markers_said_charge_ && *marked >= 0.8 * markers_said_charge_) ||
                           in_run != markers_said_in_run_);
  if (every == ring.wanted_every() && pace.why == markers_why_ && !cost_moved) return;
  // Logged where the pace changes, not where only its reason does (at 1 in 2 the cost and the hold can
  // take turns from one line to the next: an H200 run's log had a few dozen such turns in 200 steps).
  if (every != ring.wanted_every()) log_markers_pace(index, pace, *marked, others, upper, cfg.overhead_budget);
  markers_said_index_ = index;
  markers_why_ = pace.why;
  markers_said_charge_ = *marked;
  markers_said_in_run_ = in_run;
  if (pace.why != MarkersPace::Why::cost) {  // held at 1 in 2 by the comparison, not by the cost
    char detail[400];
    if (pace.why == MarkersPace::Why::unmeasured)
      std::snprintf(detail, sizeof detail,
                    "%d (traced steps always) until marked and unmarked steps have been compared in this run "
                    "(%zu blocks of %llu steps; again after CUPTI is detached; overhead_budget=%s): at every step "
                    "there is nothing to compare with, and the records' own time alone (%.3f %% of step time for "
                    "every step) can read several times low",
                    every, MarkedStepCost::kLeastBlocks, static_cast<unsigned long long>(MarkedStepCost::kBlockSteps),
                    format_fraction(cfg.overhead_budget).c_str(), 100 * *marked);
    else
      std::snprintf(detail, sizeof detail,
                    "%d (traced steps always) while marked steps compared with unmarked ones in this run leave "
                    "marking every step at up to %.3f %% of step time (the comparison's upper end), over 80 %% of "
                    "the markers' share of overhead_budget=%s",
                    every, 100 * upper.value_or(0), format_fraction(cfg.overhead_budget).c_str());
    const std::string why = reason_text(Reason::markers_thinned, detail);
    ring.want_every(every, why);
    if (!std::exchange(markers_held_said_, true))
      logger()->info("{} (the unmarked lines say so; said once)", why);
    return;
  }
  char detail[448];
  std::snprintf(detail, sizeof detail,
                "%d (traced steps always): marking every step costs %.3f %% of step time (%s), over their share of "
                "overhead_budget=%s (half of it, or what 80 %% of it leaves beside CUPTI attached and the calls, "
                "%.3f %% of step time now, where less; a tenth of it at least)",
                every, 100 * *marked,
                in_run ? "marked steps against unmarked ones in this run" : "the records' own time",
                format_fraction(cfg.overhead_budget).c_str(), 100 * others);
  const std::string why = reason_text(Reason::markers_thinned, detail);
  ring.want_every(every, every > 1 ? why : std::string());
  if (every > 1) warn_once("markers.thinned", why + " (the unmarked lines say so; said once)");
}

inline std::string Worker::marked_cost_words() const {
  const OverheadLedger::MarkedCostView v = ledger_.marked_cost_view();
  char own[48] = "none counted", in_run[160];
  if (v.own_ms) std::snprintf(own, sizeof own, "%.4f ms", *v.own_ms);
  if (v.in_run)
    std::snprintf(in_run, sizeof in_run, "%+.4f ms +- %.4f (standard error) over %zu blocks", v.in_run->ms, v.in_run->se_ms,
                  v.in_run->blocks);
  else
    std::snprintf(in_run, sizeof in_run, "not measured (%zu of %zu blocks)", v.blocks, MarkedStepCost::kLeastBlocks);
  return std::string("a marked step: the records' own time ") + own + ", marked against unmarked steps in this run " +
         in_run;
}

inline void Worker::log_markers_pace(uint64_t index, const MarkersPace& pace, double charged, double others,
                                     std::optional<double> upper, double budget) {
  // A change of the markers' pace, with what decided it (info; the first kMarkersPaceLogged changes):
  // what a run's pace did is read from its log, not reconstructed from its lines.
  if (markers_pace_logged_ >= kMarkersPaceLogged) return;
  const char* why = pace.why == MarkersPace::Why::cost          ? "by cost"
                    : pace.why == MarkersPace::Why::unmeasured ? "held: the comparison has not measured"
                                                               : "held: the comparison's upper end is over";
  char upper_text[64] = "";
  if (upper) std::snprintf(upper_text, sizeof upper_text, " (upper end %.4f %%)", 100 * *upper);
  logger()->info("stream markers: 1 step in {}, decided on step {}'s line ({}); {}; charged {:.4f} % of step time for "
                 "marking every step{}, against the markers' share {:.4f} % (others per step {:.4f} %){}",
                 pace.every, index, why, marked_cost_words(), 100 * charged, upper_text,
                 100 * markers_share(budget, others), 100 * others,
                 ++markers_pace_logged_ == kMarkersPaceLogged ? " (the last change logged)" : "");
}

inline void Worker::log_markers_at_stop() const {
  const MarkerRing& ring = marker_ring();
  if (!ring.armed()) {
    if (ledger_.marked_cost_view().own_ms) logger()->info("stream markers at the end: off ({}); {}", ring.why_off(), marked_cost_words());
    return;
  }
  logger()->info("stream markers' pace at the end: 1 step in {}; {}", ring.wanted_every(), marked_cost_words());
}

inline std::string Worker::untraced_cupti_of(const StepRecord& r) const {
  if (!s_.attribution) return {};
  return detached(r) ? "detach" : "keep";
}

inline void Worker::switch_to_detach(const StepRecord& r, const OverheadEstimate& keep) {
  const Config& cfg = lines_.context().cfg;
  char share[32];
  std::snprintf(share, sizeof share, "%.1f", 100 * *keep.residual_ms / *keep.clean_step_ms);
  switch_why_ = std::string("CUPTI kept attached costs ~") + share +
                " % of step time at any interval (> 80 % of overhead_budget=" + format_fraction(cfg.overhead_budget) + ")";
  s_.gpu->switch_to_detach();
  ledger_.reset_marking();  // the steps cost otherwise without CUPTI attached
  warn_once("overhead.detach", switch_why_ + ": after step " + std::to_string(r.index) +
                                   ", CUPTI is detached between traced steps (untraced_cupti=auto; "
                                   "hardware counters stop; untraced_cupti=keep prevents it)");
}

inline void Worker::stop_counters_for_detach() {
  readings_.stop_counters(reason_text(Reason::counters_stopped_detached, std::to_string(*detach_since_)) +
                          " on: overhead_budget detaches CUPTI between traced steps (" + switch_why_ +
                          "), which ends PM sampling; set untraced_cupti=keep to keep them");
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
