// steptrace/core/overhead.hpp - what steptrace costs the program while it runs, and the trace rate that
// keeps that cost inside Config::overhead_budget. Pure: fed one observation per step, in step order.
//
// The cost of tracing shows in the program's own step times: a traced step (CUPTI records and launch
// callbacks on) and the steps right after it (records handed over, graph settling) run longer than the
// steps far from a trace. Over the last steps observed:
//   clean    = median step time of untraced steps at least kCleanDistance steps after a traced one
//   extra    = sum over d < kCleanDistance of (median step time d steps after a trace - clean)
//              (what one trace costs, the steps after it included; d = 0 is the traced step)
//   fraction = extra / (every x clean) + residual / clean
// over the last max(128, 4 x every) steps, each median over at least 3 steps (5 clean ones), where
// `residual` is what CUPTI costs every step while it stays attached
// (untraced_cupti=keep): ~0.6 us per launch on the host with records and callbacks off (measured:
// benchmarks/README.md, third session, run I: untraced steps ran +17 % on 10 001 launches of 34 ms),
// ~0.8 us with the callbacks left on (kKeepNsPerLaunch). That cost delays the GPU only where the host is what the step waits for,
// so it is weighted by the share of the traced steps' launches whose work started right after the
// launch call (the GPU waiting for the host: StepGpu::launch_waited). It cannot be seen in the
// step times (every step pays it), hence a model. Until untraced steps exist to compare with, `extra`
// is a model too: launches x kModelTracedNsPerLaunch, a traced step against no CUPTI at all, so then
//   fraction = (extra + (every - 1) x residual) / (every x clean).
// The interval asked for is the shortest whose fraction is at most kAim x the budget (headroom for the
// costs the estimate cannot see); `within_budget` compares the fraction with the budget itself.
// With CUPTI detached between traced steps (untraced_cupti=detach) there is no residual, and the model
// adds what one attach and detach cost (kModelAttachDetachMs).
// Keep or detach (untraced_cupti=auto): staying attached costs at least residual / clean whatever the
// interval; when that alone exceeds the budget and detaching is modelled cheaper at the longest interval,
// detach_pays() says so and the runtime detaches from then on (never back: detaching ends PM sampling).
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
  double step_ms = 0;      // begin to the next step's begin
  std::optional<uint32_t> launches;      // traced steps: kernels + copies + memsets recorded
  std::optional<double> host_bound_share;  // traced steps: share of launches the GPU waited for (0-1)
};

/// The estimate a line carries (`overhead`).
struct OverheadEstimate {
  std::optional<double> fraction;      // of the program's step time without steptrace
  std::string method;                  // "measured" | "launch_model" | "" (nothing to estimate yet)
  std::optional<double> traced_extra_ms;  // what one traced step (and its aftermath) costs
  std::optional<double> clean_step_ms;    // step time far from a trace
  std::optional<double> residual_ms;      // per untraced step, keep mode (model)
  std::optional<double> launches_per_step;
  int every = 1;                       // the trace interval the budget asks for
  bool within_budget = true;           // fraction (at the interval in force) <= the budget
  bool within_aim = true;              // fraction <= kAim x the budget: no reason to trace less often
  std::optional<double> tracing_fraction;   // the traced steps' share of `fraction` at the interval in force
  std::optional<double> attached_fraction;  // CUPTI attached on untraced steps (keep mode)
  double other_fraction = 0;                // the parts the caller added (core/overhead_parts.hpp)
};

class OverheadEstimator {
 public:
  static constexpr double kModelTracedNsPerLaunch = 1100;  // H100, transformer step: benchmarks/README.md
  // Kept attached between traced steps: 600 ns measured with records and callbacks off
  // (benchmarks/README.md, third session, run I), plus CUPTI's dispatch of a callback that returns at
  // once, which now stays on (+190 ns for an empty callback, same README: "callback dispatch").
  static constexpr double kKeepNsPerLaunch = 790;
  static constexpr double kModelAttachDetachMs = 8.3;      // benchmarks/README.md, third session: cupti_cycle, attach 6.8 + detach 1.5 ms
  static constexpr int kCleanDistance = 3;                 // steps after a traced one that still pay for it
  static constexpr std::size_t kWindow = 512;              // steps remembered, at least (window())
  static constexpr int kMinClean = 5;                      // clean steps needed for a measurement
  static constexpr int kMinTraced = 3;                     // steps at each distance from a trace, likewise
  static constexpr std::size_t kRecentSteps = 128;         // steps compared (at least 4 intervals)
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
  /// longest interval.
  static bool detach_pays(const OverheadEstimate& e, double budget, int max_every) {
    if (!e.residual_ms || !e.clean_step_ms || !e.launches_per_step || !(*e.clean_step_ms > 0) || !(budget > 0)) return false;
    const double keep_floor = *e.residual_ms / *e.clean_step_ms;
    const double detached = (*e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 + kModelAttachDetachMs) /
                            (std::max(1, max_every) * *e.clean_step_ms);
    return keep_floor > budget * kAim && detached < keep_floor;
  }

  void observe(const OverheadObservation& o) {
    Step st;
    st.ms = o.step_ms;
    st.traced = o.traced;
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
    steps_.push_back(st);
    if (steps_.size() > window()) steps_.pop_front();
  }
  /// Steps remembered: enough for the comparison at the longest interval (4 intervals, kMinTraced
  /// traced steps among them), never fewer than kWindow.
  std::size_t window() const {
    return std::max(kWindow, 4 * static_cast<std::size_t>(std::max(1, s_.max_every)) + 2 * kCleanDistance);
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
    const std::size_t recent = std::max<std::size_t>(kRecentSteps, 4 * static_cast<std::size_t>(e.every));
    const std::size_t from = steps_.size() > recent ? steps_.size() - recent : 0;
    std::vector<double> clean, all, near[kCleanDistance];
    const std::size_t last = steps_.size() > kWindow ? steps_.size() - kWindow : 0;
    for (std::size_t i = std::min(from, last); i < steps_.size(); ++i) {
      const Step& st = steps_[i];
      if (i >= last) all.push_back(st.ms);  // the launch model's step time: the last kWindow steps
      if (!st.compared || i < from) continue;
      if (st.since_traced >= kCleanDistance && !st.traced) clean.push_back(st.ms);
      else if (st.since_traced >= 0 && st.since_traced < kCleanDistance) near[st.since_traced].push_back(st.ms);
    }
    bool enough = static_cast<int>(clean.size()) >= kMinClean && static_cast<int>(near[0].size()) >= kMinTraced;
    for (const auto& d : near) enough = enough && (d.empty() || static_cast<int>(d.size()) >= kMinTraced);
    bool measured = false;
    if (enough) {
      // Per distance from the last trace, the median step time over the clean one: robust to the odd
      // slow step (a checkpoint, an evaluation) that a plain sum would charge to tracing.
      const double c = median(clean);
      double extra = 0;
      for (const auto& d : near)
        if (!d.empty()) extra += median(d) - c;
      e.clean_step_ms = c;
      e.traced_extra_ms = std::max(0.0, extra);
      e.method = "measured";
      measured = true;
    } else if (e.launches_per_step && !all.empty()) {
      e.clean_step_ms = median(all);
      // Detached, a trace also costs an attach and a detach - unless every step is traced (no detach).
      e.traced_extra_ms = *e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 +
                          (s_.keep_attached || in_force == 1 ? 0 : kModelAttachDetachMs);
      e.method = "launch_model";
    } else {
      return e;  // nothing traced yet, or no launch count
    }
    double residual = 0;
    if (s_.keep_attached && e.launches_per_step && !host_bound_.empty()) {
      const double waited = median(std::vector<double>(host_bound_.begin(), host_bound_.end()));
      residual = *e.launches_per_step * kKeepNsPerLaunch * 1e-6 * waited;
    }
    e.residual_ms = residual;
    const double clean_ms = *e.clean_step_ms;
    if (!(clean_ms > 0)) return e;
    // cost(n) = a / n + b. Every step pays the residual while CUPTI stays attached. Measured: `extra`
    // is the traced step against untraced steps that pay the residual too, so a = extra. Model: the
    // 1.1 us per launch is a traced step against no CUPTI at all, so a = extra - residual.
    const double b = residual / clean_ms;
    const double attach = measured || s_.keep_attached ? 0 : kModelAttachDetachMs / clean_ms;
    const double a = (measured ? *e.traced_extra_ms : *e.launches_per_step * kModelTracedNsPerLaunch * 1e-6 - residual) / clean_ms;
    const auto cost = [&](int n) { return (a + (n > 1 ? attach : 0)) / n + b; };
    e.tracing_fraction = cost(e.every) - b;
    e.attached_fraction = b;
    e.fraction = cost(e.every) + e.other_fraction;
    e.within_budget = *e.fraction <= s_.budget * (1 + 1e-9);
    // The shortest interval whose cost fits kAim of the budget, less the other parts (the longest
    // allowed if none does).
    const double aim = s_.budget * kAim - e.other_fraction;
    const double whole_aim = s_.budget * kAim;
    e.within_aim = *e.fraction <= whole_aim * (1 + 1e-9);
    int want = 1;
    if (cost(1) > aim) {
      const double n = b < aim ? std::ceil((a + attach) / (aim - b)) : static_cast<double>(s_.max_every);
      want = static_cast<int>(std::clamp(n, 2.0, static_cast<double>(s_.max_every)));
    }
    e.every = want;
    return e;
  }

 private:
  struct Step {
    double ms = 0;
    bool traced = false;
    int64_t since_traced = -1;  // steps since the last traced one (-1: none yet)
    bool compared = false;      // past the warm-up: its time takes part in the measurement
  };
  template <class T>
  static void trim(std::deque<T>& d, std::size_t n) {
    while (d.size() > n) d.pop_front();
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
  std::optional<uint64_t> last_traced_;
};

STEPTRACE_END_NAMESPACE  // steptrace
