// steptrace/details/line_policy.hpp - the runtime's rules as pure functions: which steps are traced,
// when the background thread asks CUPTI for records, and when a line stops waiting for them. The
// runtime calls these; tests/test_runtime.cpp and tests/test_step_timing.cpp check them without a GPU.
#pragma once
#include "../version.hpp"
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "../config.hpp"
#include "../core/hash.hpp"
#include "../core/records.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline std::string format_fraction(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// CUPTI hands over a buffer of GPU records by itself only once the buffer is full; partly filled
// ones come only when asked (cuptiActivityFlushAll). Asking costs GPU time: measured on an H200, a
// flush every 20 ms slowed a 770-kernel, 62 ms step by 0.5-0.6 ms (benchmarks/README.md). So the
// background thread asks only once the oldest waiting line has waited Config::flush_after_ms (200 by
// default), and at most that often: fast steps then get their lines about that late, in batches. A
// line is not declared incomplete before its records have had min_record_lag_ms(): two flushes and a
// margin (on an H200 the records of a step sometimes came only with the second flush).
inline double min_record_lag_ms(double flush_after_ms) { return 2 * flush_after_ms + 150; }
// Launch-heavy programs ask sooner, so that what waits in CUPTI's buffers is bounded by a launch
// count rather than by the launch rate (the pool of 8 x 4 MiB holds roughly 140 000 kernel records):
// after kFlushAfterLaunches launches since the last flush, but not more often than kMinFlushGapMs. A
// CUDA Graph launch counts once however many kernels it runs.
inline constexpr uint64_t kFlushAfterLaunches = 16384;
inline constexpr double kMinFlushGapMs = 20;

/// Which steps are traced: one step in every `every`, counted in blocks of `every` steps from `anchor`
/// (0 for a fixed trace_every; under the budget the step at which the interval took effect, or the trace
/// the interval before a longer one had due: next_schedule). A fixed trace_every traces
/// the first step of each block (the multiples of N). The budget's schedule (`jitter`) traces the
/// anchor and then a pseudo-random step of each block, so that a program whose steps repeat with a
/// period (gradient accumulation, an evaluation every k steps) is not always traced at the same point
/// of its period, which would charge that point's cost to tracing. The one place that says whether a
/// step is traced.
struct TraceSchedule {
  int every = 1;
  uint64_t anchor = 0;
  bool jitter = false;
  bool traced(uint64_t step) const {
    if (every <= 1) return true;
    if (step < anchor) return false;
    const uint64_t k = step - anchor, n = static_cast<uint64_t>(every), block = k / n;
    return k % n == offset(block);
  }
  /// The first step at or after `from` that it traces.
  uint64_t next_traced(uint64_t from) const {
    if (every <= 1) return from;
    if (from <= anchor) return anchor;
    const uint64_t n = static_cast<uint64_t>(every), block = (from - anchor) / n;
    const uint64_t at = anchor + block * n + offset(block);
    return at >= from ? at : anchor + (block + 1) * n + offset(block + 1);
  }
  static uint64_t mix(uint64_t x) { return mix64(x); }

 private:
  uint64_t offset(uint64_t block) const {  // the traced step's place in its block
    return jitter && block ? mix(block ^ (anchor << 20)) % static_cast<uint64_t>(every) : 0;
  }
};

/// The schedule from step `index` on when the interval asked for is `wanted`. A longer interval than the
/// one in force (the budget backing off) is anchored at the trace the interval in force had due next
/// (at `index` or later): it adds no trace, and delays none already due. Anchored at `index` itself,
/// each rise traced its own step at once: the launch model doubling its interval over the budget traced
/// steps 323, 324, 332 and 340 where one was due, each trace timing a CUPTI cycle that raised the
/// model's charge again (a 62 ms C++ transformer, H200, session 74). Anchored a whole new interval after
/// the last trace, a measurement's rises starved it of the traces that narrow it (a GPU-bound 5 ms step
/// traced none in 400 steps after its markers armed; same machine). A shorter interval (a cost lower than
/// thought, the probe after the launch model), the end of the warm-up's every-step tracing, and a longer
/// one asked `at_once` (the first interval after CUPTI detached, whose cost nothing measured yet) start
/// at `index`, traced: measuring sooner is what they are for.
inline TraceSchedule next_schedule(const TraceSchedule& now, int wanted, uint64_t index, bool at_once = false) {
  if (wanted == now.every) return now;
  const bool rise = wanted > now.every && now.every > 1 && !at_once;
  return TraceSchedule{wanted, rise ? now.next_traced(index) : index, true};
}

/// The schedule a step was taken under.
inline TraceSchedule schedule_of(const StepRecord& r, const Config& cfg) {
  return TraceSchedule{static_cast<int>(r.trace_every), r.trace_anchor, cfg.trace_every == 0};
}

/// trace_every 0 with a budget: the interval follows the estimated cost while the program runs.
inline bool budget_decides(const Config& cfg) { return cfg.trace_every == 0 && cfg.overhead_budget > 0; }
/// The interval at start: trace_every if set, else every step until the budget says otherwise.
inline int initial_trace_every(const Config& cfg) { return cfg.trace_every >= 1 ? cfg.trace_every : 1; }
/// Whether CUPTI may be switched between steps (a fixed interval > 1, or one the budget may raise).
inline bool sampling_possible(const Config& cfg) { return cfg.trace_every > 1 || budget_decides(cfg); }

inline constexpr int kProbeEvery = 8;               // the interval that measures a cost the model cannot
inline constexpr uint64_t kProbeAfterSteps = 8;     // steps traced before the first probe (warm-up)

/// The budget's interval before its first decision reaches the recorder, from step `index` on: every
/// step for the warm-up, then the probe's. The recorder switches on its own at step kProbeAfterSteps and
/// the controller counts the switch as its own (TraceController::observe): lines reach the controller in
/// batches, tens of steps late on short steps, and the warm-up's every-step tracing lasted until the
/// first decision landed (Lightning's 5 ms step traced its first 40 steps, a GPT-2 step its first 13;
/// H200, session 64).
inline int budget_start_every(uint64_t index) { return index < kProbeAfterSteps ? 1 : kProbeEvery; }

/// The interval the budget moves to, given the one in force, the estimator's recommendation, how many
/// steps ran since the last change and whether the cost now exceeds what the budget aims at
/// (OverheadEstimator::kAim of it).
/// A measurement over the aim that asks for an interval more than a quarter longer is taken whole once 8
/// steps ran since the last change: the budget is what the user asked for, and a longer interval can only
/// cost less (what it gives up - traces - each line says). Smaller rises wait two intervals, so that noise
/// does not move the schedule (next_schedule keeps each rise's first trace where it was due). The launch
/// model is not trusted that far: on a
/// detached step it charges an attach per trace, which a step may not pay, and an interval it set too long
/// would hold off the measurement that corrects it (a measurement needs 8 intervals). (After CUPTI
/// detaches, TraceController takes the detached estimate's first interval whole: Lightning's 5 ms step
/// climbing 4x two intervals apart stayed over the 0.1 % budget for 1 300 steps; H200, session 64.)
/// A line over the budget itself (not only over the aim; `over_budget`: the caller asks that the line ran
/// at the interval in force and that a longer interval can bring it within) whose model asks for an
/// interval more than a quarter longer moves after 8 steps too, to at most twice the interval in force:
/// a GPU-bound C++ transformer (61.6 ms, 770 launches, detached) read 0.100-0.125 % on 1 194 of 1 200
/// lines with its interval unchanged after the detach, its markers' cost settled after the model had
/// chosen (H200, session 69). Twice at most: the model may charge an attach the step does not pay.
/// (tests/test_overhead.cpp's simulations show the C++ step brought within, late lines and a floor over
/// the budget staying bounded; they do not isolate the caller's two conditions, which only keep a move
/// from resting on a stale line or chasing a floor no interval can reach.)
/// Otherwise it waits two intervals' worth of steps (at least 8) after a change, then moves only
/// by more than a quarter, so that noise in the estimate does not move the schedule; up by 4x at most at
/// a time while only the launch model speaks (`measured` false: a model can be wrong by more than that on
/// a host-bound step); a measured estimate's recommendation is taken whole, being chosen on its 95 %
/// interval's high end (noise there asks for a shorter interval, not a longer one).
inline int next_trace_every(int current, int recommended, uint64_t steps_since_change, bool over_aim,
                            bool measured = false, bool over_budget = false) {
  if (recommended == current || steps_since_change < 8) return current;
  if (recommended > current && over_aim && measured && recommended > 1.25 * current) return recommended;
  if (recommended > current && over_budget && !measured && recommended > 1.25 * current)
    return std::min(recommended, 2 * current);
  if (steps_since_change < 2 * static_cast<uint64_t>(current)) return current;
  if (recommended > current && !measured) recommended = std::min(recommended, 4 * current);  // a model moves it 4x at most
  if (recommended > current && over_aim) return recommended;  // over the aim: up, however little
  const double ratio = static_cast<double>(recommended) / current;
  return (ratio > 1.25 || ratio < 0.8 || recommended == 1) ? recommended : current;
}

/// PM sampling's interval and hardware buffer, from the settings.
inline uint64_t counters_interval_ns(const Config& cfg) { return static_cast<uint64_t>(cfg.counters_interval_us * 1000.0); }
inline std::size_t counters_buffer_bytes(const Config& cfg) { return static_cast<std::size_t>(cfg.counters_buffer_mib) << 20; }

/// What the background thread knows when it decides whether to ask CUPTI for partly filled buffers.
struct FlushInputs {
  int64_t now = 0;
  std::optional<int64_t> oldest_end;  // end of the oldest line waiting for records, if any
  int64_t last_flush = 0;
  uint64_t launches_since_flush = 0;
  bool detach_waits = false;  // untraced_cupti=detach: a traced step's line waits; CUPTI detaches after it
  double flush_after_ms = 200;  // Config::flush_after_ms
};

/// Ask once the oldest waiting line has waited flush_after_ms (at most that often), or sooner after
/// kFlushAfterLaunches launches (at most every kMinFlushGapMs). In detach mode a traced step's line
/// is asked for at once (at most every kMinFlushGapMs): until it is out, CUPTI stays attached and
/// every launch of the untraced steps pays for it.
inline bool should_flush_records(const FlushInputs& in) {
  const auto after = static_cast<int64_t>(in.flush_after_ms * 1e6);
  if (in.oldest_end && in.now - *in.oldest_end >= after && in.now - in.last_flush >= after) return true;
  return (in.launches_since_flush >= kFlushAfterLaunches || (in.detach_waits && in.oldest_end)) &&
         in.now - in.last_flush >= static_cast<int64_t>(kMinFlushGapMs * 1e6);
}

/// A traced step's line, waiting for its GPU records and hardware-counter samples.
struct LineWait {
  bool records_complete = false;  // every launch of the step has its records
  bool counters_in = true;        // samples up to the step's end have been read (or counters are off)
  std::size_t lines_waiting = 0;  // this one included
  double waited_ms = 0;           // since the step ended
  bool stopping = false;          // stop(): everything has been flushed
};

/// Whether the line goes out now. Overdue (out, marked incomplete): max_lag_steps newer steps have
/// closed and CUPTI has had min_record_lag_ms to deliver, or max_lag_ms has passed, or the queue
/// bound is reached.
inline bool line_due(const LineWait& w, const Config& cfg) {
  if ((w.records_complete && w.counters_in) || w.stopping) return true;
  return (w.lines_waiting > static_cast<std::size_t>(cfg.max_lag_steps) &&
          w.waited_ms >= min_record_lag_ms(cfg.flush_after_ms)) ||
         w.waited_ms >= cfg.max_lag_ms || w.lines_waiting > cfg.max_pending_steps;
}

/// Why a step has no GPU attribution although CUPTI runs (its line's gpu null reason).
/// `detach`: the step ran with CUPTI detached between traced steps (set, or chosen by the budget).
inline std::string untraced_reason(const StepRecord& step, const Config& cfg, bool detach) {
  if (step.trace_every > 1 && !schedule_of(step, cfg).traced(step.index))
    return reason_text(Reason::not_traced_interval, std::to_string(step.trace_every)) +
           (budget_decides(cfg) ? " (chosen by overhead_budget=" + format_fraction(cfg.overhead_budget) + ")" : "") +
           " attributes one step in " + std::to_string(step.trace_every) + "; host timings only" +
           (detach ? cfg.untraced_cupti == UntracedCupti::detach
                         ? " (CUPTI detached between traced steps: untraced_cupti=detach)"
                         : " (CUPTI detached between traced steps: chosen by overhead_budget, untraced_cupti=auto)"
                   : "");
  return reason_text(Reason::not_traced_stopped);
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
