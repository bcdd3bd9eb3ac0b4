// steptrace/core/capture_budget.hpp - what the flight recorder's captures may spend: a share of
// Config::overhead_budget, as a token bucket over step time. Pure C++17; tested without a GPU.
//
// Every step earns share x budget x its step time in credit; writing a capture spends what it cost
// (the background thread's CPU time building and writing the file, measured). An automatic capture
// (slow step, diagnosis change) goes out only while the credit is not negative; one the program asked
// for (capture_steps, STEPTRACE_CAPTURE_STEPS) always goes out and is charged all the same, so the
// automatic ones wait until it is paid back. Credit is capped at kCapCaptures captures' worth, so a
// long quiet stretch does not buy a burst. Charging the background thread's CPU time as if the
// training thread paid it is the upper end of what a capture can cost (a free core makes it nearly
// nothing); the line's overhead shows it as such.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>

STEPTRACE_BEGIN_NAMESPACE

class CaptureBudget {
 public:
  static constexpr double kShare = 0.25;         // of overhead_budget, for captures
  static constexpr double kCapCaptures = 2;      // credit kept at most: this many captures at the last cost
  static constexpr double kFirstCostMs = 20;     // the cap's unit until a capture was measured

  /// `budget`: overhead_budget (0: captures are not limited by cost).
  explicit CaptureBudget(double budget) : rate_(std::max(0.0, budget) * kShare) {}

  bool limited() const { return rate_ > 0; }

  /// One step's line: its time earns credit.
  void earn(double step_ms) {
    if (!(step_ms > 0) || !std::isfinite(step_ms)) return;
    elapsed_ms_ += step_ms;
    if (!limited()) return;
    credit_ms_ = std::min(credit_ms_ + rate_ * step_ms, kCapCaptures * (last_cost_ms_ > 0 ? last_cost_ms_ : kFirstCostMs));
  }
  /// Whether an automatic capture may go out now.
  bool affordable() const { return !limited() || credit_ms_ >= -1e-9; }  // paid back, up to rounding
  /// A capture was written (or tried): what it cost.
  void spend(double cost_ms) {
    if (!(cost_ms >= 0) || !std::isfinite(cost_ms)) return;
    spent_ms_ += cost_ms;
    last_cost_ms_ = cost_ms;
    if (limited()) credit_ms_ -= cost_ms;
  }

  double credit_ms() const { return credit_ms_; }
  double spent_ms() const { return spent_ms_; }
  /// What captures have cost so far, as a fraction of the step time seen.
  double fraction() const { return elapsed_ms_ > 0 ? spent_ms_ / elapsed_ms_ : 0; }
  /// Steps of `step_ms` needed to pay back the current debt (0 when there is none).
  double steps_to_afford(double step_ms) const {
    return credit_ms_ >= 0 || !limited() || !(step_ms > 0) ? 0 : -credit_ms_ / (rate_ * step_ms);
  }

 private:
  double rate_;             // credit per ms of step time
  double credit_ms_ = 0;
  double spent_ms_ = 0;
  double elapsed_ms_ = 0;
  double last_cost_ms_ = 0;
};

STEPTRACE_END_NAMESPACE  // steptrace
