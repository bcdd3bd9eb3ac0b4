// steptrace/core/overhead.hpp - what steptrace costs the program while it runs, and the trace rate that
// keeps that cost inside Config::overhead_budget. Pure: fed one observation per step, in step order.
//
// The cost of tracing shows in the program's own step times: a traced step (CUPTI records and launch
// callbacks on; detached, the attach too) and the steps right after it (records handed over, graph
// settling, the detach) run longer than the steps far from a trace. Each step is observed with its own
// time (its TRACE_STEP scope: what runs between two steps - an evaluation, a checkpoint, logging - is
// never in it), and a step that follows an unusually long gap between steps is not compared (the work
// in the gap may have cooled caches or recompiled: "polluted"). Over the last steps observed:
//   clean    = median own time of untraced steps at least kCleanDistance steps after a traced one
//   extra    = sum over d < kCleanDistance of (median own time d steps after a trace - clean)
//              (what one trace costs, the steps after it included; d = 0 is the traced step)
//   fraction = extra / (every x clean) + residual / clean
// over the last max(128, 8 x every) steps, each median over at least 3 steps (5 clean ones); in detach
// mode the steps that paid for a detach (cuptiFinalize, which waits for the device, in the step or the
// gap before it: its time counted with the step's) are a class of their own, added to `extra` the same
// way. Each median's standard error is estimated from its spread (1.2533 x sigma / sqrt(n) for the
// median of a normal sample, Kendall & Stuart, "The Advanced Theory of Statistics" vol. 1, 10.10;
// sigma from the median absolute deviation x 1.4826, Rousseeuw & Croux 1993, never less than the clean
// steps'; widened by Student's t for small n), and `extra` carries a 95 % interval (+- 1.96 standard
// errors): the line's fraction_low / fraction_high. The interval the budget asks
// for is chosen on the interval's high end, so that a noisy "0" never sends it to 1, and never below
// kMinMeasuringEvery while a measurement speaks (shorter, no step is clean and nothing is measured).
// `residual` is what CUPTI costs every untraced step while it stays attached (untraced_cupti=keep):
// its callbacks' ~0.79 us per launch on the launching thread (kKeepNsPerLaunch). No step shows it
// (every step pays it), so it is a model, and a range: it delays the step by the whole amount where
// the launching thread is what the step waits for, and at least by the share of launches the GPU
// waited for (StepGpu::launch_waited). On a torch.compile GPT-2 step with the GPU busy 96 % of the
// time it cost the whole amount (2 700 launches x 0.79 us ~ 1.5 %, measured side by side on an H100:
// issue #48), so `fraction` charges the whole amount and fraction_low the weighted one. Until untraced
// steps exist to compare with, `extra` is a model too: launches x kModelTracedNsPerLaunch, a traced
// step against no CUPTI at all, so then
//   fraction = (extra + (every - 1) x residual) / (every x clean).
// The interval asked for is the shortest whose fraction is at most kAim x the budget (headroom for the
// costs the estimate cannot see); `within_budget` compares the fraction with the budget itself.
// With CUPTI detached between traced steps (untraced_cupti=detach) there is no residual: everything
// steptrace's CUPTI use costs lands in the traced step and the ones after it (the attach in the
// traced step, the detach after its line), and is measured; the model adds one attach and detach
// (kModelAttachDetachMs) until then. Each half of that is replaced, once this run has timed its own past
// the start-up (steps from kCycleSteadyFrom: the probe's first cycles ran slower), by the mean of the last
// kCycleHistory attaches (ahead of a traced step or in it) or detaches (cuptiFinalize at the next API
// exit, on whichever thread), as long as they took on the threads that made them. That is an upper end:
// cuptiFinalize waits for the work queued on the device, which the program would mostly have waited
// for too (an H200 host: detaches timed 12-38 ms on average where a detach's step ran ~2 ms long), and
// an attach between steps overlaps the device's work where the program runs ahead of it. Measured, the
// per-distance medians leave out the odd trace that costs several times the usual (the same host: a
// trace's steps ~10-15 ms over the clean ones, one in a few ~45 ms more): each class's mean excess over
// its median is added to `extra` (with its standard error), each step's excess capped at the longest
// attach or detach timed (what CUPTI's calls took bounds what they can have cost; an evaluation or a
// checkpoint inside a step near a trace is not charged past that), and only where cycles were timed.
// Keep or detach (untraced_cupti=auto): staying attached costs residual / clean whatever the interval;
// when that alone exceeds the aim and detaching is modelled cheaper, detach_pays() says so and the
// runtime detaches from then on (never back: detaching ends PM sampling).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

/// One step as the estimator sees it.
struct OverheadObservation {
  uint64_t index = 0;
  bool traced = false;     // CUPTI records were on for this step and its line has them
  double step_ms = 0;      // the step's own time: its scope (never what runs between two steps)
  double between_ms = 0;   // the gap before it: the previous step's scope end to its begin (0: none)
  bool detached_in = false;  // CUPTI was detached (cuptiFinalize) in it or in the gap before it
  bool attached_before = false;  // CUPTI was attached in the gap before it, ahead of it (a traced step)
  std::vector<double> attach_ms, detach_ms;  // CUPTI's attaches / detaches timed since the last step (ms)
  std::optional<uint32_t> launches;      // traced steps: kernels + copies + memsets recorded
  std::optional<double> host_bound_share;  // traced steps: share of launches the GPU waited for (0-1)
};

/// How an estimate was had (the line's `overhead.method`).
enum class EstimateMethod : uint8_t {
  none,          // nothing to estimate yet
  launch_model,  // the traced steps' launches times a per-launch cost (no untraced step to compare with yet)
  measured,      // traced steps against the clean untraced ones
};
inline const char* method_name(EstimateMethod m) {
  switch (m) {
    case EstimateMethod::launch_model: return "launch_model";
    case EstimateMethod::measured: return "measured";
    case EstimateMethod::none: break;
  }
  return "";
}

/// The estimate a line carries (`overhead`).
struct OverheadEstimate {
  std::optional<double> fraction;      // of the program's step time without steptrace
  EstimateMethod method = EstimateMethod::none;
  std::optional<double> traced_extra_ms;  // what one traced step (and its aftermath) costs
  std::optional<double> clean_step_ms;    // step time far from a trace
  std::optional<double> residual_ms;      // per untraced step, keep mode (model, the whole amount)
  std::optional<double> residual_low_ms;  // ... weighted by the share of launches the GPU waited for
  std::optional<double> fraction_low, fraction_high;  // the 95 % interval (measurement spread, residual's range)
  std::optional<double> traced_extra_se_ms;  // the standard error of traced_extra_ms (method measured)
  uint64_t polluted_steps = 0;            // steps not compared: they followed an unusually long gap
  std::optional<double> launches_per_step;
  int every = 1;                       // the trace interval the budget asks for
  bool within_budget = true;           // fraction (at the interval in force) <= the budget
  bool within_aim = true;              // fraction_high <= kAim x the budget: no reason to trace less often
  std::optional<double> tracing_fraction;   // the traced steps' share of `fraction` at the interval in force
  std::optional<double> attached_fraction;  // CUPTI attached on untraced steps (keep mode)
  std::optional<double> floor_fraction;     // `fraction` at the longest interval (Settings::max_every):
                                            // the least the budget can reach with CUPTI's mode in force
  double other_fraction = 0;                // the parts the caller added (core/overhead_parts.hpp)
};

/// On an estimate over the budget, what keeps it there (the line's `overhead.over_budget_by`):
/// "interval" where the floor (the longest interval) fits the budget - the interval in force is
/// shorter than the one asked and the budget is lengthening it - else the floor's largest part, which no
/// interval cuts: "host_api" (steptrace's calls on the training thread, `other_fraction`), "attached"
/// (CUPTI kept attached) or "tracing" (a trace at the longest interval); "none" within the budget.
/// nullptr: no estimate. (Full lines only: a compact line's `within_budget` and floor tell `interval`
/// from the rest, and its size is held: python/tests/test_steptrace.py.)
inline const char* over_budget_by(const OverheadEstimate& e, double budget) {
  if (!e.fraction || !e.floor_fraction) return nullptr;
  if (e.within_budget) return "none";
  if (*e.floor_fraction <= budget) return "interval";  // as the controller's move over the budget reads it
  const double attached = e.attached_fraction.value_or(0), calls = e.other_fraction;
  const double tracing = std::max(0.0, *e.floor_fraction - attached - calls);
  if (calls >= attached && calls >= tracing) return "host_api";
  return attached >= tracing ? "attached" : "tracing";
}

class OverheadEstimator {
 public:
  static constexpr double kModelTracedNsPerLaunch = 1100;  // H100, transformer step: benchmarks/README.md
  // Kept attached between traced steps: 600 ns measured with records and callbacks off
  // (benchmarks/README.md, third session, run I), plus CUPTI's dispatch of a callback that returns at
  // once, which now stays on (+190 ns for an empty callback, same README: "callback dispatch").
  static constexpr double kKeepNsPerLaunch = 790;
  static constexpr double kModelAttachMs = 6.8;            // benchmarks/README.md, third session: cupti_cycle (H100)
  static constexpr double kModelDetachMs = 1.5;            // same
  static constexpr double kModelAttachDetachMs = kModelAttachMs + kModelDetachMs;
  static constexpr std::size_t kCycleHistory = 16;         // timed attaches and detaches remembered, each
  static constexpr uint64_t kCycleSteadyFrom = 64;         // cycles timed in earlier steps are not kept
  static constexpr int kCleanDistance = 3;                 // steps after a traced one that still pay for it
  static constexpr int kMinMeasuringEvery = kCleanDistance + 1;  // shorter: no step is clean, nothing is measured
  static constexpr double kZ95 = 1.96;                     // two-sided 95 % of a normal distribution
  // A gap between steps longer than this many times the recent median gap, plus kGapStepShare of the
  // median step, pollutes the step after it (an evaluation, a checkpoint, torch.compile recompiling).
  static constexpr double kGapFactor = 3.0, kGapStepShare = 0.05;
  static constexpr std::size_t kGapHistory = 64;
  static constexpr std::size_t kWindow = 512;              // steps remembered, at least (window())
  static constexpr int kMinClean = 5;                      // clean steps needed for a measurement
  static constexpr int kMinTraced = 3;                     // steps at each distance from a trace, likewise
  static constexpr std::size_t kRecentSteps = 128;         // steps compared, at least kRecentIntervals intervals
  static constexpr std::size_t kRecentIntervals = 8;       // ~8 traced steps in each comparison
  // The interval is chosen for an estimate of at most kAim x the budget; the rest is headroom for what
  // the estimate cannot see - steptrace's host side (scopes, samplers, lines: +0.09 % in `host` mode on
  // the GPU-bound transformer step, H100, benchmarks/README.md) and its own spread (0.39 - 0.48 % between
  // runs of one program). Aimed at the budget itself, the defaults measured +0.63 % there.
  static constexpr double kAim = 0.8;

  struct Settings {
    double budget = 0.005;
    int max_every = 1000;
    bool keep_attached = true;  // untraced_cupti=keep: the residual applies
    uint64_t warmup_steps = 8;  // steps whose times are not compared (start-up: CUDA, libraries, caches)
  };

  explicit OverheadEstimator(Settings s) : s_(s) {}

  /// CUPTI now detached between traced steps: the steps seen so far were timed under the other mode
  /// and are forgotten (the launch counts and host-bound shares are kept).
  void switch_to_detach() {
    s_.keep_attached = false;
    steps_.clear();
    last_traced_.reset();
  }
  bool keep_attached() const { return s_.keep_attached; }

  /// With CUPTI kept attached (`e` estimated so): whether detaching between traced steps is the way
  /// to the budget (its kAim share, which the interval aims at). Staying attached costs residual / clean
  /// at any interval; detached, the model's
  /// cost of a trace (launches x kModelTracedNsPerLaunch + one attach and detach) spread over the
  /// longest interval. The cycle is the model's (kModelAttachDetachMs, an H100's): nothing is timed
  /// before the first detach, and an H200 host's cycles ran several times that (session 72), so the
  /// switch can be made where detaching costs more than the model said (the detached estimate then
  /// charges what the cycles cost).
  static bool detach_pays(const OverheadEstimate& e, double budget, int max_every) {
    if (!e.residual_ms || !e.clean_step_ms || !e.launches_per_step || !(*e.clean_step_ms > 0) || !(budget > 0)) return false;
    const double keep_floor = *e.residual_ms / *e.clean_step_ms;
    const double detached = (*e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 + kModelAttachDetachMs) /
                            (std::max(1, max_every) * *e.clean_step_ms);
    return keep_floor > budget * kAim && detached < keep_floor;
  }

  void observe(const OverheadObservation& o) {
    for (double ms : o.attach_ms)
      if (std::isfinite(ms) && ms >= 0 && o.index >= kCycleSteadyFrom) attach_ms_.push_back(ms);
    for (double ms : o.detach_ms)
      if (std::isfinite(ms) && ms >= 0 && o.index >= kCycleSteadyFrom) detach_ms_.push_back(ms);
    trim(attach_ms_, kCycleHistory);
    trim(detach_ms_, kCycleHistory);
    Step st;
    st.ms = o.step_ms;
    st.traced = o.traced;
    st.detach = o.detached_in && !o.traced;
    st.since_traced = o.traced ? 0 : (last_traced_ ? static_cast<int64_t>(o.index - *last_traced_) : -1);
    if (o.traced) {
      last_traced_ = o.index;
      if (o.launches) launches_.push_back(*o.launches);
      if (o.host_bound_share) host_bound_.push_back(std::clamp(*o.host_bound_share, 0.0, 1.0));
      trim(launches_, 32);
      trim(host_bound_, 32);
    }
    if (!(o.step_ms > 0) || !std::isfinite(o.step_ms)) return;
    st.compared = o.index >= s_.warmup_steps;
    const double gap = std::isfinite(o.between_ms) ? std::max(0.0, o.between_ms) : 0.0;
    const double usual_gap = gaps_.empty() ? 0.0 : median(std::vector<double>(gaps_.begin(), gaps_.end()));
    // The detach may have run in the gap before the step, the attach ahead of a traced step did: the
    // gap's excess over the usual one is its cost, the step's.
    const bool paid_in_gap = st.detach || (o.attached_before && o.traced);
    if (paid_in_gap) st.ms += std::max(0.0, gap - usual_gap);
    if (st.compared && !paid_in_gap && gaps_.size() >= 8) {
      const double limit = kGapFactor * usual_gap + kGapStepShare * median(std::vector<double>(recent_ms_.begin(), recent_ms_.end()));
      if (gap > limit) {
        st.compared = false;
        ++polluted_;
      }
    }
    if (o.index >= s_.warmup_steps && !(o.attached_before && o.traced)) {  // the usual gap: no attach in it
      gaps_.push_back(gap);
      recent_ms_.push_back(o.step_ms);
      trim(gaps_, kGapHistory);
      trim(recent_ms_, kGapHistory);
    }
    steps_.push_back(st);
    if (steps_.size() > window()) steps_.pop_front();
  }
  /// What one attach and detach cost: the timed ones' means where this run has had them, else the
  /// model's (kModelAttachMs, kModelDetachMs), each on its own.
  double cycle_ms() const {
    return (attach_ms_.empty() ? kModelAttachMs : mean(attach_ms_)) + (detach_ms_.empty() ? kModelDetachMs : mean(detach_ms_));
  }
  /// The longest attach or detach timed (0: none): what one step's excess can owe to CUPTI's calls at most.
  double cycle_cap_ms() const {
    double cap = 0;
    for (double ms : attach_ms_) cap = std::max(cap, ms);
    for (double ms : detach_ms_) cap = std::max(cap, ms);
    return cap;
  }
  /// Steps remembered: enough for the comparison at the longest interval (kRecentIntervals intervals, kMinTraced
  /// traced steps among them), never fewer than kWindow.
  std::size_t window() const {
    return std::max(kWindow, kRecentIntervals * static_cast<std::size_t>(std::max(1, s_.max_every)) + 2 * kCleanDistance);
  }

  /// The current estimate for a trace interval of `every` (the one in force), and the interval the
  /// budget asks for. `other`: what steptrace spends besides tracing (scopes, background readings,
  /// captures: core/overhead_parts.hpp), a fraction of step time; it is in `fraction`, and the
  /// interval is chosen for what is left of the aim.
  OverheadEstimate estimate(int every, double other = 0) const {
    OverheadEstimate e;
    e.other_fraction = std::max(0.0, other);
    e.every = std::max(1, every);
    const int in_force = e.every;
    if (!launches_.empty()) e.launches_per_step = median(std::vector<double>(launches_.begin(), launches_.end()));
    // Only recent steps are compared, so that the clean baseline is as current as the traced steps
    // (with an interval of 3 or less no step is clean: the estimate falls back to the model and the
    // runtime probes with a longer interval).
    // After a shorter interval took over from a longer one, its 8 intervals may hold fewer traced steps
    // than a measurement needs: the comparison then reaches back to the (kMinTraced + 1)-th last one (the
    // last may not have the steps after it yet), so that a measurement made at the longer interval still
    // speaks. Else the launch model spoke again, moved the interval on its own charge, and the
    // measurement was lost until the shorter interval had traced enough.
    const std::size_t recent = std::max<std::size_t>(kRecentSteps, kRecentIntervals * static_cast<std::size_t>(e.every));
    std::size_t from = steps_.size() > recent ? steps_.size() - recent : 0;
    int traced_since = 0;
    for (std::size_t i = steps_.size(); i-- > 0 && traced_since <= kMinTraced;)
      if (steps_[i].traced && steps_[i].compared && ++traced_since > kMinTraced) from = std::min(from, i);
    std::vector<double> clean, all, near[kCleanDistance], detach;
    const std::size_t last = steps_.size() > kWindow ? steps_.size() - kWindow : 0;
    for (std::size_t i = std::min(from, last); i < steps_.size(); ++i) {
      const Step& st = steps_[i];
      if (i >= last) all.push_back(st.ms);  // the launch model's step time: the last kWindow steps
      if (!st.compared || i < from) continue;
      if (st.detach) detach.push_back(st.ms);
      else if (st.since_traced >= kCleanDistance && !st.traced) clean.push_back(st.ms);
      else if (st.since_traced >= 0 && st.since_traced < kCleanDistance) near[st.since_traced].push_back(st.ms);
    }
    bool enough = static_cast<int>(clean.size()) >= kMinClean && static_cast<int>(near[0].size()) >= kMinTraced;
    for (const auto& d : near) enough = enough && (d.empty() || static_cast<int>(d.size()) >= kMinTraced);
    bool measured = false;
    double extra_high = 0, extra_low = 0;
    if (enough) {
      // Per distance from the last trace, the median step time over the clean one: robust to the odd
      // slow step (a checkpoint inside the step) that a plain sum would charge to tracing.
      const double c = median(clean);
      const double sigma_c = robust_sigma(clean);
      const double se_c = median_se(sigma_c, clean.size());
      double extra = 0, var = 0;
      int distances = 0;
      const auto add = [&](const std::vector<double>& d) {
        // A class of a few steps says little about its own spread: never less than the clean steps'.
        const double se = median_se(std::max(robust_sigma(d), sigma_c), d.size());
        extra += median(d) - c;
        var += se * se;
        ++distances;
      };
      // Detached, the odd slow cycle the medians leave out: each class's mean excess over its median,
      // each step's capped at the longest cycle timed (none timed: no cap, no tail).
      const double cap = s_.keep_attached ? 0.0 : cycle_cap_ms();
      const auto tail = [&](const std::vector<double>& d) {
        if (!(cap > 0) || d.size() < 2) return;
        const double m = median(d);
        double sum = 0, sum2 = 0;
        for (double x : d) {
          const double excess = std::min(x - m, cap);
          sum += excess;
          sum2 += excess * excess;
        }
        const double n = static_cast<double>(d.size()), mean_excess = sum / n;
        extra += std::max(0.0, mean_excess);
        var += std::max(0.0, sum2 / n - mean_excess * mean_excess) / (n - 1);  // the mean's variance
      };
      for (const auto& d : near)
        if (!d.empty()) add(d), tail(d);
      // The steps that paid for a detach (detach mode: cuptiFinalize waits for the device), wherever
      // they fell after the trace: a class of their own.
      if (static_cast<int>(detach.size()) >= kMinTraced) add(detach), tail(detach);
      var += (distances * se_c) * (distances * se_c);  // the clean median is subtracted at each distance
      const double se = std::sqrt(var);
      e.clean_step_ms = c;
      e.traced_extra_ms = std::max(0.0, extra);
      e.traced_extra_se_ms = se;
      extra_high = std::max(0.0, extra + kZ95 * se);
      extra_low = std::max(0.0, extra - kZ95 * se);
      e.method = EstimateMethod::measured;
      measured = true;
    } else if (e.launches_per_step && !all.empty()) {
      e.clean_step_ms = median(all);
      // Detached, a trace also costs an attach and a detach - unless every step is traced (no detach).
      e.traced_extra_ms = *e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 +
                          (s_.keep_attached || in_force == 1 ? 0 : cycle_ms());
      e.method = EstimateMethod::launch_model;
    } else {
      return e;  // nothing traced yet, or no launch count
    }
    e.polluted_steps = polluted_;
    double residual = 0, residual_low = 0;
    if (s_.keep_attached && e.launches_per_step) {
      residual = *e.launches_per_step * kKeepNsPerLaunch * 1e-6;
      const double waited = host_bound_.empty() ? 1.0 : median(std::vector<double>(host_bound_.begin(), host_bound_.end()));
      residual_low = residual * waited;
    }
    e.residual_ms = residual;
    e.residual_low_ms = residual_low;
    const double clean_ms = *e.clean_step_ms;
    if (!(clean_ms > 0)) return e;
    // cost(n) = a / n + b. Every step pays the residual while CUPTI stays attached. Measured: `extra`
    // is the traced step against untraced steps that pay the residual too, so a = extra. Model: the
    // 1.1 us per launch is a traced step against no CUPTI at all, so a = extra - residual.
    const double b = residual / clean_ms, b_low = residual_low / clean_ms;
    const double attach = measured || s_.keep_attached ? 0 : cycle_ms() / clean_ms;
    const double model_a = std::max(0.0, *e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 - residual) / clean_ms;
    const double a = measured ? *e.traced_extra_ms / clean_ms : model_a;
    const double a_high = measured ? extra_high / clean_ms : model_a, a_low = measured ? extra_low / clean_ms : model_a;
    const auto cost = [&](double a_, int n) { return (a_ + (n > 1 ? attach : 0)) / n + b; };
    e.tracing_fraction = cost(a, e.every) - b;
    e.attached_fraction = b;
    e.fraction = cost(a, e.every) + e.other_fraction;
    e.fraction_high = cost(a_high, e.every) + e.other_fraction;
    e.fraction_low = cost(a_low, e.every) - b + b_low + e.other_fraction;
    e.floor_fraction = cost(a, std::max(1, s_.max_every)) + e.other_fraction;
    e.within_budget = *e.fraction <= s_.budget * (1 + 1e-9);
    // The shortest interval whose cost, at the high end of the measurement, fits kAim of the budget
    // less the other parts (the longest allowed if none does).
    const double aim = s_.budget * kAim - e.other_fraction;
    const double whole_aim = s_.budget * kAim;
    e.within_aim = *e.fraction_high <= whole_aim * (1 + 1e-9);
    int want = 1;
    if (cost(a_high, 1) > aim) {
      // None fits the aim (CUPTI attached costs it alone): the shortest interval that fits the budget
      // itself, where one does; else the longest (the least it can cost).
      const double room = s_.budget - e.other_fraction;
      const double n = b < aim    ? std::ceil((a_high + attach) / (aim - b))
                       : b < room ? std::ceil((a_high + attach) / (room - b))
                                  : static_cast<double>(s_.max_every);
      want = static_cast<int>(std::clamp(n, 2.0, static_cast<double>(s_.max_every)));
    }
    // A measurement needs clean steps: never shorter than kMinMeasuringEvery once one speaks.
    if (measured) want = std::max(want, std::min(kMinMeasuringEvery, s_.max_every));
    e.every = want;
    return e;
  }

 private:
  struct Step {
    double ms = 0;
    bool traced = false;
    int64_t since_traced = -1;  // steps since the last traced one (-1: none yet)
    bool compared = false;      // past the warm-up: its time takes part in the measurement
    bool detach = false;        // paid for a detach (its time includes the gap before it)
  };
  template <class T>
  static void trim(std::deque<T>& d, std::size_t n) {
    while (d.size() > n) d.pop_front();
  }
  /// A sample's spread: 1.4826 x its median absolute deviation (sigma for a normal sample; Rousseeuw &
  /// Croux 1993). 0 for fewer than 2 values.
  static double robust_sigma(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = median(v);
    std::vector<double> dev;
    dev.reserve(v.size());
    for (double x : v) dev.push_back(std::abs(x - m));
    return 1.4826 * median(std::move(dev));
  }
  /// The standard error of the median of n values of spread sigma: 1.2533 x sigma / sqrt(n) (Kendall &
  /// Stuart, vol. 1, 10.10), widened for small n by Student's t: t(0.975, n - 1) / 1.96.
  static double median_se(double sigma, std::size_t n) {
    if (n < 2) return 0;
    return 1.2533 * sigma / std::sqrt(static_cast<double>(n)) * student_t975(static_cast<int>(n) - 1) / kZ95;
  }
  /// Student's t, two-sided 95 %, df degrees of freedom (NIST/SEMATECH e-Handbook of Statistical
  /// Methods, 1.3.6.7.2, "Critical values of the Student's t distribution"); 1.96 in the limit.
  static double student_t975(int df) {
    static constexpr double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                   2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                   2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1) return t[0];
    if (df <= 30) return t[df - 1];
    return kZ95 + (t[29] - kZ95) * 30.0 / df;
  }
  static double mean(const std::deque<double>& d) {
    double s = 0;
    for (double x : d) s += x;
    return d.empty() ? 0.0 : s / static_cast<double>(d.size());
  }
  static double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double hi = v[v.size() / 2];
    if (v.size() % 2) return hi;
    return (hi + *std::max_element(v.begin(), v.begin() + v.size() / 2)) / 2;
  }

  Settings s_;
  std::deque<Step> steps_;
  std::deque<uint32_t> launches_;
  std::deque<double> host_bound_;
  std::deque<double> attach_ms_, detach_ms_;  // the last kCycleHistory timed attaches / detaches (kept across switch_to_detach)
  std::optional<uint64_t> last_traced_;
  std::deque<double> gaps_, recent_ms_;  // the last kGapHistory gaps and own times past the warm-up
  uint64_t polluted_ = 0;
};

STEPTRACE_END_NAMESPACE  // steptrace
