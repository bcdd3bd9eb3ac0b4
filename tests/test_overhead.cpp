// The overhead estimator (core/overhead.hpp) and the budget's schedule rules (details/line_policy.hpp),
// on hand-made step sequences whose answers are worked out in the comments. The controller that drives
// them is tests/test_trace_controller.cpp's.
#include <steptrace/core/overhead.hpp>
#include <steptrace/core/overhead_parts.hpp>
#include <steptrace/details/line_policy.hpp>

#include <cmath>

#include <catch2/catch.hpp>

using steptrace::OverheadEstimator;
using steptrace::OverheadObservation;

namespace {
OverheadObservation step(uint64_t i, bool traced, double ms, uint32_t launches = 1000, double busy = 0.99) {
  OverheadObservation o;
  o.index = i;
  o.traced = traced;
  o.step_ms = ms;
  if (traced) {
    o.launches = launches;
    o.host_bound_share = 1.0 - busy;  // "GPU busy x" below: the GPU waited for the host at 1 - x of the launches
  }
  return o;
}
}  // namespace

TEST_CASE("before any untraced step the model decides: launches x 1.1 us", "[overhead]") {
  OverheadEstimator e({/*budget*/ 0.005, /*max_every*/ 1000, /*keep_attached*/ true});
  CHECK_FALSE(e.estimate(1).fraction);  // nothing observed
  for (uint64_t i = 0; i < 4; ++i) e.observe(step(i, true, 50.0));
  const auto r = e.estimate(1);
  REQUIRE(r.fraction);
  CHECK(r.method == steptrace::EstimateMethod::launch_model);
  CHECK(*r.traced_extra_ms == Approx(1.1));          // 1000 launches x 1.1 us
  CHECK(*r.fraction == Approx(1.1 / 50.0));          // every step traced: the model's whole cost
  CHECK(*r.residual_ms == Approx(1000 * 0.79e-3));   // kept attached: 0.79 us per launch, charged whole
  CHECK(*r.residual_low_ms == Approx(1000 * 0.79e-3 * 0.01));  // at least x the 1 % of launches the GPU waited for
  CHECK(*r.fraction_low == Approx((1.1 - 0.79) / 50.0 + 0.0079 / 50.0));
  CHECK(*r.fraction_high == Approx(*r.fraction));    // the model has no spread
  // Staying attached alone costs 0.79 / 50 = 1.6 %, past 0.8 x 0.5 %: no interval holds it.
  CHECK(r.every == 1000);
  CHECK_FALSE(e.estimate(1000).within_budget);
  // 100 launches: 0.079 ms attached (0.16 %), a trace 0.11 ms: cost(n) = 0.031 / (50 n) + 0.079 / 50
  // is 0.22 % at n = 1, inside the aim.
  OverheadEstimator few({0.005, 1000, true});
  for (uint64_t i = 0; i < 4; ++i) few.observe(step(i, true, 50.0, 100));
  CHECK(few.estimate(1).every == 1);
  CHECK(few.estimate(1).within_budget);
  // Detached (no residual): cost(n) = (1.1 + 8.3) / (45 n) for n > 1; <= 0.4 % from n = ceil(52.2) = 53.
  OverheadEstimator d({0.005, 1000, false});
  for (uint64_t i = 0; i < 4; ++i) d.observe(step(i, true, 45.0));
  CHECK(d.estimate(1).every == 53);
  CHECK(d.estimate(42).within_budget);  // 9.4 / 1890 = 0.497 %
  CHECK_FALSE(d.estimate(41).within_budget);
}

TEST_CASE("with untraced steps the cost is measured from the step times", "[overhead]") {
  OverheadEstimator e({0.005, 1000, /*keep_attached=*/false});
  // every 4: the traced step runs 52 ms, the one after it 50.5 ms, the others 50 ms. The warm-up
  // steps (the first 8) are slow and not compared.
  for (uint64_t i = 0; i < 8; ++i) e.observe(step(i, true, 400.0));
  for (uint64_t i = 8; i < 64; ++i) {
    const uint64_t k = i % 4;
    e.observe(step(i, k == 0, k == 0 ? 52.0 : k == 1 ? 50.5 : 50.0));
  }
  const auto r = e.estimate(4);
  REQUIRE(r.fraction);
  CHECK(r.method == steptrace::EstimateMethod::measured);
  CHECK(*r.clean_step_ms == Approx(50.0));
  CHECK(*r.traced_extra_ms == Approx(2.5));  // the traced step's 2 ms and the next step's 0.5 ms
  CHECK(*r.traced_extra_se_ms == 0);         // no spread in these steps
  CHECK(*r.residual_ms == 0);                // detached between traced steps
  CHECK(*r.fraction == Approx(2.5 / (4 * 50.0)));
  CHECK(*r.fraction_low == Approx(*r.fraction));
  CHECK(*r.fraction_high == Approx(*r.fraction));
  CHECK(e.estimate(1).fraction.value() == Approx(2.5 / 50.0));
  // cost(n) = 2.5 / (50 n) <= 0.8 x 0.5 % from n = ceil(12.5) = 13
  CHECK(r.every == 13);
  CHECK(e.estimate(10).within_budget);  // 0.5 % at 10
  CHECK_FALSE(e.estimate(9).within_budget);
  CHECK_FALSE(e.estimate(12).within_aim);   // 0.417 %: inside the budget, above the aim
  CHECK(e.estimate(13).within_aim);         // 0.385 %
  // The other parts (scopes, background readings, captures: 0.1 %) are in the fraction, and the
  // interval is chosen for what they leave of the aim: 2.5 / (50 n) <= 0.4 % - 0.1 % from n = 17.
  const auto with_other = e.estimate(13, 0.001);
  CHECK(*with_other.fraction == Approx(*e.estimate(13).fraction + 0.001));
  CHECK(*with_other.tracing_fraction == Approx(2.5 / (13 * 50.0)));
  CHECK(*with_other.attached_fraction == 0);
  CHECK(with_other.other_fraction == 0.001);
  CHECK(with_other.every == 17);
  CHECK_FALSE(with_other.within_aim);
  // Other parts past the whole aim but not the budget: the shortest interval within the budget itself,
  // 2.5 / (50 n) <= 0.5 % - 0.45 % from n = 100; past the budget: the longest interval.
  CHECK(e.estimate(13, 0.0045).every == 100);
  CHECK(e.estimate(13, 0.0055).every == 1000);
}

namespace {
/// A deterministic normal sample (Box-Muller on splitmix64): the step-time noise of a real GPU loop.
struct Noise {
  uint64_t state = 20261127;
  double uniform() {
    return (static_cast<double>(steptrace::details::TraceSchedule::mix(state++) >> 11) + 0.5) / 9007199254740992.0;
  }
  double normal() { return std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }
};
}  // namespace

TEST_CASE("real loops: evaluation between steps, noise, a noisy zero", "[overhead]") {
  // A torch.compile GPT step: 142 ms own time, spread 0.3 % (0.43 ms, what a GPU-bound loop repeats
  // within), one step in 16 traced costing 3 ms and the step after it 1 ms. Every 100 steps an
  // evaluation of 2.3 s runs between steps, and the step after it runs 30 % slower (caches cooled,
  // torch.compile switching graphs back). Steps reach the estimator with their own time and the gap.
  const auto run = [](double traced_extra, double next_extra, uint64_t steps) {
    OverheadEstimator e({0.003, 1000, /*keep_attached=*/false});
    Noise noise;
    for (uint64_t i = 0; i < steps; ++i) {
      const bool traced = i % 16 == 5;
      const bool after_eval = i > 0 && i % 100 == 0;
      double ms = 142.0 + 0.43 * noise.normal() + (traced ? traced_extra : 0) + (i % 16 == 6 ? next_extra : 0);
      if (after_eval) ms *= 1.3;
      OverheadObservation o = step(i, traced, ms, 2700);
      o.between_ms = after_eval ? 2300.0 : 0.05 + 0.01 * noise.uniform();
      e.observe(o);
    }
    return e;
  };
  const auto e = run(3.0, 1.0, 2000);
  const auto r = e.estimate(16);
  REQUIRE(r.method == steptrace::EstimateMethod::measured);
  CHECK(r.polluted_steps == 19);  // the steps after each evaluation, none other
  const double truth = 4.0 / (16 * 142.0);  // 0.176 %
  INFO("estimate " << *r.fraction << " in [" << *r.fraction_low << ", " << *r.fraction_high << "], truth " << truth);
  CHECK(std::abs(*r.fraction - truth) < 0.0015);  // within 0.15 points
  CHECK(*r.fraction_low <= truth);
  CHECK(*r.fraction_high >= truth);
  CHECK(*r.fraction_high - *r.fraction_low < 0.003);  // at most 0.3 points wide
  CHECK(*r.traced_extra_se_ms > 0);
  // A trace that costs nothing measured through the same noise: the estimate says ~0 with a range
  // above 0, and the interval is chosen on the range's high end - never 1.
  const auto z = run(0.0, 0.0, 2000).estimate(16);
  REQUIRE(z.method == steptrace::EstimateMethod::measured);
  CHECK(*z.fraction_high > 0);
  CHECK(*z.fraction_low == 0);
  CHECK(z.every >= OverheadEstimator::kMinMeasuringEvery);
  // The same loop with the steps' whole interval (the evaluation inside the step before it) would
  // charge 2.3 s to whichever step ran before an evaluation: with own times nothing of it is seen.
  CHECK(*r.traced_extra_ms < 5.0);
}

TEST_CASE("detach mode: the step that paid for a detach is measured, also when it ran between steps", "[overhead]") {
  // One step in 10 traced (the attach inside it: +3 ms); CUPTI detaches 4 steps later, in the gap
  // before that step (cuptiFinalize waiting for the device: 5 ms). Without the detach marked, that
  // step would count as clean (its own time is 50 ms) and the gap as pollution: the detach unseen.
  const auto run = [](bool marked) {
    OverheadEstimator e({0.003, 1000, /*keep_attached=*/false});
    for (uint64_t i = 0; i < 400; ++i) {
      const bool traced = i % 10 == 0;
      const bool detach = i % 10 == 4;
      OverheadObservation o = step(i, traced, traced ? 53.0 : 50.0, 500);
      o.between_ms = detach ? 5.05 : 0.05;
      o.detached_in = marked && detach;
      e.observe(o);
    }
    return e;
  };
  const auto marked = run(true);
  const auto r = marked.estimate(10);
  REQUIRE(r.method == steptrace::EstimateMethod::measured);
  CHECK(*r.traced_extra_ms == Approx(3.0 + 5.0));  // the gap's excess over the usual 0.05 ms counted once
  CHECK(r.polluted_steps == 0);
  CHECK(*r.fraction == Approx(8.0 / (10 * 50.0)).epsilon(0.01));
  const auto unmarked = run(false);
  const auto u = unmarked.estimate(10);
  CHECK(*u.traced_extra_ms == Approx(3.0));
  CHECK(u.polluted_steps > 0);
}

TEST_CASE("detach mode: an attach made in the gap before a traced step is that step's cost", "[overhead]") {
  // One step in 10 traced; CUPTI is attached in the gap before it (+8 ms there), its own time is an
  // untraced step's but for the records (+1 ms); detached 4 steps later (+5 ms in that gap). Marked,
  // the traced step's class holds 1 + 8 ms and the gap is not pollution; unmarked, each traced step's
  // gap reads as the program's own work between steps, and the step is left out of the comparison.
  const auto run = [](bool marked) {
    OverheadEstimator e({0.003, 1000, /*keep_attached=*/false});
    for (uint64_t i = 0; i < 400; ++i) {
      const bool traced = i % 10 == 0;
      const bool detach = i % 10 == 4;
      OverheadObservation o = step(i, traced, traced ? 51.0 : 50.0, 500);
      o.between_ms = detach ? 5.05 : traced ? 8.05 : 0.05;
      o.detached_in = detach;
      o.attached_before = marked && traced;
      e.observe(o);
    }
    return e;
  };
  const auto r = run(true).estimate(10);
  REQUIRE(r.method == steptrace::EstimateMethod::measured);
  CHECK(*r.traced_extra_ms == Approx(1.0 + 8.0 + 5.0));
  CHECK(r.polluted_steps == 0);
  const auto u = run(false).estimate(10);
  CHECK(u.polluted_steps > 0);  // every traced step left out: its gap read as the program's work
  if (u.traced_extra_ms) CHECK(*u.traced_extra_ms < 1.0 + 8.0);
}

TEST_CASE("detach mode: the attaches and detaches timed in this run replace the model's; measured, the odd slow trace is charged by the mean, capped by them",
          "[overhead]") {
  // Before traced steps are compared, a trace detached costs launches x 1.1 us + an attach and a detach:
  // the model's 6.8 + 1.5 ms until this run has timed its own past the start-up, then their means, each
  // half on its own.
  OverheadEstimator e({0.001, 1000, /*keep_attached=*/false});
  e.observe(step(0, true, 60.0, 1000));
  CHECK(e.cycle_ms() == Approx(8.3));
  OverheadObservation early = step(30, false, 60.0);
  early.attach_ms = {90.0};  // the probe's start-up cycles: not kept
  early.detach_ms = {70.0};
  e.observe(early);
  CHECK(e.cycle_ms() == Approx(8.3));
  CHECK(e.cycle_cap_ms() == 0);
  CHECK(*e.estimate(100).traced_extra_ms == Approx(1.1 + 8.3));
  OverheadObservation o = step(100, false, 60.0);
  o.detach_ms = {2.0, 44.0};  // one usual detach, one as slow as an H200 host showed (session 72)
  e.observe(o);
  CHECK(e.cycle_ms() == Approx(6.8 + 23.0));  // no attach timed yet: the model's for that half
  o = step(101, false, 60.0);
  o.attach_ms = {9.0, 7.0, std::nan(""), -1.0};  // what is not a duration is not kept
  e.observe(o);
  CHECK(e.cycle_ms() == Approx(8.0 + 23.0));
  CHECK(e.cycle_cap_ms() == 44.0);
  const auto r = e.estimate(100);
  REQUIRE(r.method == steptrace::EstimateMethod::launch_model);
  CHECK(*r.traced_extra_ms == Approx(1.1 + 31.0));
  CHECK(*r.fraction == Approx(32.1 / (100 * 60.0)));
  // Only the last 16 of each are remembered: 16 more 2 ms detaches and the 44 ms one is forgotten.
  for (int i = 0; i < 16; ++i) {
    OverheadObservation d = step(102 + i, false, 60.0);
    d.detach_ms = {2.0};
    e.observe(d);
  }
  CHECK(e.cycle_ms() == Approx(8.0 + 2.0));
  CHECK(e.cycle_cap_ms() == 9.0);

  // Measured: one step in 10 traced (+1 ms records, +8 ms attach in the gap before it), the detach in
  // the gap 4 steps later (+5 ms, but every fourth +45 ms), cycles timed from the start. Of the last 128
  // steps the detach class holds 13 steps (274, 284, ..., 394), 4 of them slow (the 28th, 32nd, 36th and
  // 40th detaches): its median 55 ms, its mean 40 x 4 / 13 ms over it - charged on top of the medians'
  // 1 + 8 + 5 ms. Each step's excess is capped at the longest cycle timed (45 ms): a 2 s checkpoint in a
  // traced step (at 390, in the traced class of 12: 280, ..., 390) adds 45 / 12 ms, not 2 000 / 12.
  const auto run = [](bool keep, bool timed, bool checkpoint) {
    OverheadEstimator m({0.003, 1000, keep});
    int detaches = 0;
    for (uint64_t i = 0; i < 400; ++i) {
      const bool traced = i % 10 == 0;
      const bool detach = i % 10 == 4;
      const bool slow = detach && detaches % 4 == 3;
      OverheadObservation x = step(i, traced, traced ? (checkpoint && i == 390 ? 2051.0 : 51.0) : 50.0, 500);
      x.between_ms = detach ? (slow ? 45.05 : 5.05) : traced ? 8.05 : 0.05;
      x.detached_in = detach;
      x.attached_before = traced;
      if (traced && timed) x.attach_ms = {8.0};
      if (detach && timed) x.detach_ms = {slow ? 45.0 : 5.0};
      if (detach) ++detaches;
      m.observe(x);
    }
    return m.estimate(10);
  };
  const auto mr = run(false, true, false);
  REQUIRE(mr.method == steptrace::EstimateMethod::measured);
  CHECK(*mr.traced_extra_ms == Approx(1.0 + 8.0 + 5.0 + 160.0 / 13));
  // Untimed (no cap, no tail): the medians alone, as before cycles were timed.
  CHECK(*run(false, false, false).traced_extra_ms == Approx(1.0 + 8.0 + 5.0));
  // Kept attached there is no cycle to pay and none timed to cap with: the medians alone.
  CHECK(*run(true, true, false).traced_extra_ms == Approx(1.0 + 8.0 + 5.0));
  // The checkpoint: capped.
  CHECK(*run(false, true, true).traced_extra_ms == Approx(1.0 + 8.0 + 5.0 + 160.0 / 13 + 45.0 / 12));
  // The tail's spread widens the interval's high end.
  CHECK(*mr.traced_extra_se_ms > *run(false, false, false).traced_extra_se_ms);
}

TEST_CASE("a cost the budget cannot hold: the longest interval, and said so", "[overhead]") {
  // Launch-bound: 10 000 launches, the GPU idle 80 % of the step. Kept attached, untraced steps still
  // pay 10 000 x 0.79 us = 7.9 ms of a 45 ms step (at least x 0.8 = 6.32 ms): 18 %, above any interval's reach.
  OverheadEstimator e({0.01, 1000, true});
  e.observe(step(0, true, 45.0, 10000, 0.2));
  e.observe(step(1, true, 45.0, 10000, 0.2));
  const auto r = e.estimate(1);
  REQUIRE(r.fraction);
  CHECK(r.every == 1000);
  CHECK_FALSE(r.within_budget);
  CHECK_FALSE(e.estimate(1000).within_budget);
  CHECK(e.estimate(1000).fraction.value() == Approx((11.0 - 7.9) / 45000 + 7.9 / 45));
  CHECK(e.estimate(1000).fraction_low.value() == Approx((11.0 - 7.9) / 45000 + 6.32 / 45));
  // Detached between traced steps (keep_attached false) there is no residual: an interval suffices.
  OverheadEstimator d({0.01, 1000, false});
  d.observe(step(0, true, 45.0, 10000, 0.2));
  const auto rd = d.estimate(1);
  CHECK(*rd.residual_ms == 0);
  // 10 000 x 1.1 us + 8.3 ms for an attach and a detach = 19.3 ms; ceil(19.3 / (0.8 x 0.01 x 45)) = 54
  CHECK(rd.every == 54);
  CHECK(d.estimate(43).within_budget);
  CHECK_FALSE(d.estimate(42).within_budget);
}

TEST_CASE("noise never makes the cost negative; impossible step times are not observed", "[overhead]") {
  OverheadEstimator e({0.005, 1000, /*keep_attached=*/false});
  for (uint64_t i = 0; i < 40; ++i) e.observe(step(i, i % 8 == 0, i % 8 == 0 ? 49.0 : 50.0));
  e.observe(step(39, false, 5000.0));  // one odd slow step (a checkpoint): the medians ignore it
  const auto r = e.estimate(8);
  REQUIRE(r.fraction);
  CHECK(*r.traced_extra_ms == 0);
  // A measured "0" never asks for every step: that would leave no clean step to measure with.
  CHECK(r.every == OverheadEstimator::kMinMeasuringEvery);
  // Traced steps of 52 ms against 50; then as many traced "steps" of -3 ms and NaN, which must not
  // count (they would pull the traced median to 24.5 ms).
  OverheadEstimator f({0.005, 1000, true});
  for (uint64_t i = 0; i < 40; ++i) f.observe(step(i, i % 8 == 0, i % 8 == 0 ? 52.0 : 50.0));
  for (uint64_t i = 40; i < 48; ++i) f.observe(step(i, true, i % 2 ? std::nan("") : -3.0));
  CHECK(*f.estimate(8).traced_extra_ms == Approx(2.0));
}

TEST_CASE("the schedule: an interval counts from its anchor; the budget moves it with hysteresis", "[overhead]") {
  using steptrace::details::next_trace_every;
  using steptrace::details::TraceSchedule;
  const TraceSchedule s{4, 10};
  CHECK(s.traced(10));
  CHECK_FALSE(s.traced(11));
  CHECK(s.traced(14));
  CHECK_FALSE(s.traced(9));
  CHECK(TraceSchedule{1, 7}.traced(3));
  // The budget's schedule: the anchor, then one step per block of 4 at a varying place in it.
  const TraceSchedule j{4, 10, true};
  CHECK(j.traced(10));
  CHECK_FALSE(j.traced(9));
  int offsets[4] = {};
  for (uint64_t block = 1; block < 400; ++block) {
    int in_block = 0;
    for (uint64_t k = 0; k < 4; ++k)
      if (j.traced(10 + block * 4 + k)) ++in_block, ++offsets[k];
    CHECK(in_block == 1);
  }
  for (int k = 0; k < 4; ++k) CHECK(offsets[k] > 60);  // every place in the block, ~100 times each
  CHECK(next_trace_every(1, 5, 3, true) == 1);     // too soon after the last change (8 steps)
  CHECK(next_trace_every(1, 5, 8, false) == 4);     // up by 4x at most on the model
  CHECK(next_trace_every(1, 5, 8, true) == 4);      // over the aim too
  CHECK(next_trace_every(1, 5, 8, true, /*measured=*/true) == 5);
  CHECK(next_trace_every(2, 5, 8, true) == 5);
  CHECK(next_trace_every(10, 11, 40, false) == 10);  // within a quarter and inside the budget: stays
  CHECK(next_trace_every(10, 11, 40, true) == 11);   // over the budget: up, however little
  CHECK(next_trace_every(10, 9, 40, false) == 10);   // down by less than a quarter: stays
  CHECK(next_trace_every(10, 14, 19, false) == 10);  // inside the aim: two intervals not yet run
  CHECK(next_trace_every(10, 14, 8, true, /*measured=*/true) == 14);  // a measurement over it: 8 steps for a quarter more
  CHECK(next_trace_every(10, 14, 8, true) == 10);    // the model waits two intervals
  CHECK(next_trace_every(10, 12, 8, true, true) == 10);  // ... a smaller rise waits two intervals (noise)
  CHECK(next_trace_every(10, 12, 20, true) == 12);
  CHECK(next_trace_every(10, 6, 19, true) == 10);    // down: two intervals, over the aim or not
  CHECK(next_trace_every(10, 14, 20, false) == 14);
  CHECK(next_trace_every(10, 1, 20, false) == 1);    // back to every step
  CHECK(next_trace_every(8, 90, 16, false) == 32);    // up by 4x at most on the launch model
  CHECK(next_trace_every(8, 90, 16, true) == 32);     // over the aim too
  CHECK(next_trace_every(8, 90, 16, false, /*measured=*/true) == 90);  // a measurement's interval whole
  CHECK(next_trace_every(218, 430, 8, true, false, /*over_budget=*/true) == 430);  // over the budget: 8 steps
  CHECK(next_trace_every(218, 1000, 8, true, false, true) == 436);  // ... twice the interval at most
  CHECK(next_trace_every(218, 250, 8, true, false, true) == 218);   // ... a quarter more or it waits
  CHECK(next_trace_every(218, 430, 7, true, false, true) == 218);   // ... and 8 steps
  CHECK(next_trace_every(8, 90, 15, false, /*measured=*/true) == 8);   // ... two intervals after a change
  CHECK(next_trace_every(90, 60, 180, false, /*measured=*/true) == 60);  // down as before
}

TEST_CASE("the warm-up is not compared, and a measurement needs enough steps", "[overhead]") {
  OverheadEstimator e({0.005, 1000, true});
  for (uint64_t i = 0; i < 8; ++i) e.observe(step(i, true, 400.0));  // start-up: slow, traced
  // After the warm-up: one traced step (52 ms) and three clean ones (50 ms): too few to measure.
  e.observe(step(8, true, 52.0));
  for (uint64_t i = 9; i < 12; ++i) e.observe(step(i, false, 50.0));
  CHECK(e.estimate(8).method == steptrace::EstimateMethod::launch_model);
  // Every 8 up to step 39: 4 traced steps, 16 clean ones; the warm-up's 400 ms steps stay out.
  for (uint64_t i = 12; i < 40; ++i) e.observe(step(i, i % 8 == 0, i % 8 == 0 ? 52.0 : 50.0));
  const auto r = e.estimate(8);
  CHECK(r.method == steptrace::EstimateMethod::measured);
  CHECK(*r.traced_extra_ms == Approx(2.0));
  CHECK(*r.clean_step_ms == Approx(50.0));
}

TEST_CASE("only recent steps are compared: a baseline that moved is not charged to tracing", "[overhead]") {
  OverheadEstimator e({0.005, 1000, true});
  // Every 8 for 200 steps at 50 ms (traced 52), then every 8 at 80 ms (traced 82).
  for (uint64_t i = 0; i < 400; ++i) {
    const double base = i < 200 ? 50.0 : 80.0;
    e.observe(step(i, i % 8 == 0, i % 8 == 0 ? base + 2 : base));
  }
  const auto r = e.estimate(8);
  REQUIRE(r.method == steptrace::EstimateMethod::measured);
  CHECK(*r.clean_step_ms == Approx(80.0));
  CHECK(*r.traced_extra_ms == Approx(2.0));
  // With every 2 nothing recent is 3 steps from a trace: back to the model (the runtime then probes).
  OverheadEstimator f({0.005, 1000, true});
  for (uint64_t i = 0; i < 400; ++i) f.observe(step(i, i < 200 ? i % 8 == 0 : i % 2 == 0, 50.0));
  CHECK(f.estimate(2).method == steptrace::EstimateMethod::launch_model);
}

TEST_CASE("keep or detach: detaching pays when staying attached alone exceeds the budget", "[overhead]") {
  // Launch-bound: 10 000 launches in 32 ms, GPU busy 20 %. Kept attached, every step pays up to
  // 10 000 x 0.79 us = 7.9 ms = 25 % whatever the interval. Detached, the model's trace costs
  // 10 000 x 1.1 us + 8.3 ms = 19.3 ms, over 100 steps of 32 ms: 0.6 %.
  OverheadEstimator launch_bound({0.005, 100, true});
  for (uint64_t i = 0; i < 10; ++i) launch_bound.observe(step(i, true, 32.0, 10000, 0.2));
  const auto keep = launch_bound.estimate(1);
  REQUIRE(keep.residual_ms);
  CHECK(*keep.residual_ms == Approx(7.9));
  CHECK(*keep.residual_low_ms == Approx(6.32));
  CHECK(OverheadEstimator::detach_pays(keep, 0.005, 100));
  CHECK_FALSE(OverheadEstimator::detach_pays(keep, 0.4, 100));  // a 40 % budget is kept attached
  // GPU-bound: 770 launches in 61 ms, GPU busy 99 %. The launching thread still pays 770 x 0.79 us =
  // 0.61 ms (1.0 %) per step, which the step pays wherever that thread is on its critical path (a
  // torch.compile GPT-2 step with the GPU 96 % busy paid it all): detaching (0.15 % over 100 steps) pays.
  OverheadEstimator gpu_bound({0.005, 100, true});
  for (uint64_t i = 0; i < 10; ++i) gpu_bound.observe(step(i, true, 61.0, 770, 0.99));
  CHECK(OverheadEstimator::detach_pays(gpu_bound.estimate(1), 0.005, 100));
  // Few launches: 100 in 61 ms cost 0.13 % attached, under the aim: kept attached (counters go on).
  OverheadEstimator few({0.005, 100, true});
  for (uint64_t i = 0; i < 10; ++i) few.observe(step(i, true, 61.0, 100, 0.99));
  CHECK_FALSE(OverheadEstimator::detach_pays(few.estimate(1), 0.005, 100));
  // Tiny steps: 100 launches in 0.1 ms, GPU idle. Attached: 79 %. Detached: (0.11 + 8.3) / (100 x 0.1)
  // = 84 %: an attach every 100 steps costs more than staying attached.
  OverheadEstimator tiny({0.005, 100, true});
  for (uint64_t i = 0; i < 10; ++i) tiny.observe(step(i, true, 0.1, 100, 0.0));
  CHECK_FALSE(OverheadEstimator::detach_pays(tiny.estimate(1), 0.005, 100));
  CHECK(OverheadEstimator::detach_pays(tiny.estimate(1), 0.005, 1000));  // over 1000 steps: 8.4 %
  CHECK_FALSE(OverheadEstimator::detach_pays(steptrace::OverheadEstimate{}, 0.005, 100));  // no estimate

  // After the switch: no residual, the steps so far forgotten, the model adds an attach and a detach.
  launch_bound.switch_to_detach();
  CHECK_FALSE(launch_bound.keep_attached());
  CHECK_FALSE(launch_bound.estimate(1).fraction);  // no step observed in this mode yet
  launch_bound.observe(step(10, true, 50.0, 10000, 0.2));
  const auto d = launch_bound.estimate(1);
  REQUIRE(d.fraction);
  CHECK(d.method == steptrace::EstimateMethod::launch_model);
  CHECK(*d.residual_ms == 0);
  CHECK(*d.traced_extra_ms == Approx(11.0));  // every step traced: never detached, no attach to pay
  CHECK(*d.fraction == Approx(11.0 / 50.0));
  CHECK(d.every == 97);  // an interval > 1 pays the attach: ceil(19.3 / 50 / 0.004)
  const auto d2 = launch_bound.estimate(2);
  CHECK(*d2.traced_extra_ms == Approx(11.0 + 8.3));
  CHECK(*d2.fraction == Approx(19.3 / 100.0));
}

TEST_CASE("host_api charges a binding's measured bookkeeping beyond the calls' model at its latest measurement",
          "[overhead]") {
  // 10 ms steps of 5 calls at the Python call's 0.72 us; the callbacks measured 6 us a step beyond them
  // from step 100 on (as details::set_binding_step_extra_ns hands it to the worker's ledger), then
  // forgot it at the end of training: each step is charged what the last measurement says a step
  // costs, from the first step it came with (the steps before it were not measured, not free).
  steptrace::OverheadLedger ledger(steptrace::OverheadLedger::kPythonScopeNs);
  const double calls = 5 * steptrace::OverheadLedger::kPythonScopeNs * 1e-6 / 10;
  for (int i = 0; i < 100; ++i) ledger.step(10, 5);
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls));
  ledger.step(10, 5, false, 0, 0.006);
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls + 0.006 / 10));  // at once, not a 101st of it
  for (int i = 0; i < 100; ++i) ledger.step(10, 5, false, 0, 0.006);
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls + 0.006 / 10));
  for (int i = 0; i < 100; ++i) ledger.step(10, 5, false, 0, 0.009);  // measured again, higher
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls + 0.009 / 10));
  // On 20 ms steps (the window's mean step moves, the charge per step stays 9 us).
  for (int i = 0; i < 1000; ++i) ledger.step(20, 10, false, 0, 0.009);
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls + 0.009 / 20));
  ledger.step(20, 10, false, 0, -1.0);  // a step whose value was not taken (the one stop() closes)
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls + 0.009 / 20));  // the last one taken stands
  ledger.step(20, 10, false, 0, 0.0);
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls));  // forgotten: none from here on
  // What cannot be a cost is none: negative, NaN.
  steptrace::OverheadLedger odd(steptrace::OverheadLedger::kPythonScopeNs);
  for (int i = 0; i < 10; ++i) odd.step(10, 5, false, 0, i % 2 ? -1.0 : std::nan(""));
  CHECK(*odd.host_api_fraction_at(0) == Approx(calls));
}

TEST_CASE("stream markers' pace: what marking a step costs, and 1 step in N under half of the budget", "[overhead]") {
  steptrace::OverheadLedger ledger;
  CHECK_FALSE(ledger.marked_step_fraction());  // nothing marked yet
  // 10 ms steps; every second one marked at 0.05 ms: a marked step costs 0.5 % of a step.
  for (int i = 0; i < 100; ++i) ledger.step(10, 4, false, i % 2 ? 0.05 : 0.0);
  REQUIRE(ledger.marked_step_fraction());
  CHECK(*ledger.marked_step_fraction() == Approx(0.005));
  // A record the thread was preempted in (20 ms once, +2 % of the window's time) moves the typical
  // marked step's cost nowhere, nor host_api.
  steptrace::OverheadLedger stalled;
  for (int i = 0; i < 100; ++i) stalled.step(10, 4, false, i == 51 ? 20.0 : i % 2 ? 0.05 : 0.0);
  CHECK(*stalled.marked_step_fraction() == Approx(0.005));
  // At the pace in force: the calls, and a typical marked step's cost x the share marked now. Every
  // second step marked, as fed: the calls and 0.025 ms a step.
  const double calls = 4 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 10;
  CHECK(*ledger.host_api_fraction_at(2) == Approx((4 * steptrace::OverheadLedger::kScopeNs * 1e-6 + 0.025) / 10));
  CHECK(*stalled.host_api_fraction_at(2) == Approx(*ledger.host_api_fraction_at(2)));
  CHECK(*ledger.host_api_fraction_at(16) == Approx(calls + 0.005 / 16));  // thinned: what is paid from now on
  CHECK(*ledger.host_api_fraction_at(0) == Approx(calls));                // not marking
  // Steps marked at every step until the budget thinned them to 1 in 16 (session 65's 5 ms GPU-bound
  // step, ~20 us a marked step): the window still holds 40 fully marked steps (their records' sum is
  // ~0.2 % of the window's time, what the line used to charge); the pace in force charges 0.4 % / 16.
  steptrace::OverheadLedger thinned;
  for (int i = 0; i < 80; ++i) thinned.step(5, 3, false, i < 40 || i % 16 == 0 ? 0.02 : 0.0);
  CHECK(*thinned.host_api_fraction_at(16) == Approx(3 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 5 + 0.004 / 16));

  using steptrace::markers_every;
  const double budget = 0.003;  // half: 0.15 %
  CHECK(markers_every(0.0005, budget, 1) == 1);    // 0.05 %: every step
  CHECK(markers_every(0.0015, budget, 1) == 1);    // at the cap: still every step
  CHECK(markers_every(0.0016, budget, 1) == 2);    // just over: every second
  CHECK(markers_every(0.005, budget, 1) == 4);     // 0.5 %: 0.125 % at 4
  CHECK(markers_every(0.5, budget, 1) == steptrace::kMaxMarkersEvery);  // never past 64
  // Down only with room: at 2, a cost of 0.13 % stays (at every step it is over 80 % of the cap) ...
  CHECK(markers_every(0.0013, budget, 2) == 2);
  // ... and comes back to every step once it is under 80 % of the cap.
  CHECK(markers_every(0.0011, budget, 2) == 1);
  CHECK(markers_every(0.0011, budget, 64) == 1);
  CHECK(markers_every(0.005, budget, 64) == 8);  // 0.125 % at 4 is over 80 % of the cap: 8 holds
  CHECK(markers_every(0.005, 0.0, 4) == 1);  // no budget: nothing thinned
  // Beside other per-step costs the markers get what the aim (80 % of the budget, 0.24 %) leaves, if less
  // than half: with 0.05 % taken (CUPTI attached, the calls) half (0.15 %) still caps; with 0.2 % taken
  // the cap is 0.04 %, so 0.5 % needs 1 in 16 (0.031 %); with 0.21 % or more taken, a tenth of the
  // budget (0.03 %): 1 in 32 (0.016 %) ...
  CHECK(markers_every(0.005, budget, 1, 0.0) == 4);
  CHECK(markers_every(0.005, budget, 1, 0.0005) == 4);
  CHECK(markers_every(0.005, budget, 1, 0.002) == 16);
  CHECK(markers_every(0.005, budget, 1, 0.0024) == 32);
  CHECK(markers_every(0.005, budget, 4, 0.01) == 32);
  // ... and markers cheaper than that tenth are not thinned, however much else costs.
  CHECK(markers_every(0.0002, budget, 1, 0.01) == 1);
  CHECK(markers_every(0.005, 0.0, 4, 0.01) == 1);  // no budget: nothing thinned, whatever else costs
  // What the steps pay for steptrace's calls, the markers left out.
  steptrace::OverheadLedger calls_only;
  for (int i = 0; i < 20; ++i) calls_only.step(5, 3, false, i % 2 ? 0.02 : 0.0);
  CHECK(*calls_only.calls_fraction() == Approx(3 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 5));
  CHECK(*calls_only.host_api_fraction_at(2) == Approx(3 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 5 + 0.004 / 2));
}

TEST_CASE("overhead parts: the step-time parts sum to the estimate, the background ones to its high end", "[overhead]") {
  OverheadEstimator e({0.005, 1000, true});
  for (uint64_t i = 0; i < 4; ++i) e.observe(step(i, true, 50.0));
  steptrace::OverheadLedger ledger;
  ledger.spent(steptrace::OverheadLedger::Work::memory, 1.0);
  ledger.step(100, 10);  // 1 ms of background CPU and 10 calls over 100 ms
  const auto host_api = ledger.host_api_fraction_at(1);
  const auto est = e.estimate(4, *host_api);
  const auto p = steptrace::make_overhead_parts(est, ledger, steptrace::CountersRun::around_traced_steps, 0.002, host_api);
  REQUIRE(p.present);
  CHECK(*p.host_api.fraction == Approx(10 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 100));
  CHECK(*p.background.fraction == Approx(0.01));
  CHECK(*p.background_memory == Approx(0.01));
  CHECK(*p.tracing.fraction + *p.attached.fraction + *p.host_api.fraction == Approx(*est.fraction));
  CHECK(*p.high == Approx(*est.fraction + 0.01 + 0.002));
  CHECK(p.tracing.basis == steptrace::PartBasis::modelled);  // launch model: nothing untraced yet
  CHECK(p.counters.basis == steptrace::PartBasis::in_tracing);
  CHECK_FALSE(p.counters.fraction);
  CHECK(p.captures.basis == steptrace::PartBasis::measured);
  const auto off = steptrace::make_overhead_parts(est, ledger, steptrace::CountersRun::off, std::nullopt, host_api);
  REQUIRE(off.counters.fraction);
  CHECK(*off.counters.fraction == 0.0);
  CHECK(off.captures.basis == steptrace::PartBasis::off);
  CHECK(*off.high == Approx(*est.fraction + 0.01));
  CHECK(p.high_reason.empty());
  // A framework's callbacks opened the step: the same parts, no high end, said why.
  const auto framework = steptrace::make_overhead_parts(est, ledger, steptrace::CountersRun::off, std::nullopt, host_api,
                                                        /*framework_steps=*/true);
  CHECK_FALSE(framework.high);
  CHECK(framework.high_reason == steptrace::reason_text(steptrace::Reason::framework_steps_unbounded));
  CHECK(framework.lower_end_only);  // the line's within_budget: false over the budget, null under it
  CHECK_FALSE(off.lower_end_only);
  CHECK(*framework.host_api.fraction == Approx(*off.host_api.fraction));
  CHECK(*framework.background.fraction == Approx(*off.background.fraction));
  // The warm-up's one-off costs are not counted.
  steptrace::OverheadLedger warm;
  warm.spent(steptrace::OverheadLedger::Work::counters, 500.0);
  warm.step(10, 1, /*warm_up=*/true);
  warm.step(10, 1);
  CHECK(*warm.background_fraction() == 0.0);
}

TEST_CASE("the markers' high end: the in-run comparison's upper end, and none while the markers mark unmeasured",
          "[overhead]") {
  // Steps of 10 ms marked 1 in 2, a marked step's records 0.01 ms on the training thread, the marked
  // steps 0.2 ms longer (with a little spread): the charge is the comparison's value less two standard
  // errors, the high end its value plus two.
  steptrace::OverheadLedger ledger;
  CHECK(*ledger.markers_upper_extra_at(2) == 0.0);  // no marked step counted: none charged, none paid
  const auto feed = [&ledger](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      const bool marked = i % 2 == 0;
      const double ms = 10.0 + (marked ? 0.2 + 0.01 * static_cast<double>(i / 2 % 5) : 0.0);
      ledger.step(ms, 3, false, marked ? 0.01 : 0.0);
      ledger.marking(i, ms, marked);
    }
  };
  feed(0, 100);
  CHECK(*ledger.markers_upper_extra_at(0) == 0.0);  // not marking: nothing to bound
  CHECK_FALSE(ledger.markers_upper_extra_at(2));     // marking, 3 of 16 blocks: no upper end
  CHECK_FALSE(ledger.markers_upper_extra_at(64));
  OverheadEstimator e({0.005, 1000, true});
  for (uint64_t i = 0; i < 4; ++i) e.observe(step(i, true, 50.0));
  const auto host_api = ledger.host_api_fraction_at(2);
  const auto est = e.estimate(4, *host_api);
  const auto open = steptrace::make_overhead_parts(est, ledger, steptrace::CountersRun::off, std::nullopt, host_api, false,
                                                   ledger.markers_upper_extra_at(2));
  CHECK_FALSE(open.high);
  CHECK(open.high_reason == steptrace::reason_text(steptrace::Reason::markers_cost_unbounded));
  CHECK_FALSE(open.host_api_high);
  CHECK(open.host_api_high.why() == steptrace::reason_text(steptrace::Reason::markers_cost_unbounded));
  CHECK(*open.host_api.fraction == Approx(*host_api));  // the estimate and its parts stay
  // A framework's steps keep their own reason (it bounds nothing either way).
  const auto framework = steptrace::make_overhead_parts(est, ledger, steptrace::CountersRun::off, std::nullopt, host_api,
                                                        true, std::nullopt);
  CHECK(framework.high_reason == steptrace::reason_text(steptrace::Reason::framework_steps_unbounded));
  feed(100, 17 * 32);
  const auto view = ledger.marked_cost_view();
  REQUIRE(view.in_run);
  REQUIRE(view.in_run->se_ms > 0);
  CHECK(view.in_run->ms == Approx(0.22).margin(0.01));
  const double mean_step = 10.0 + 0.22 / 2;  // the window's mean step (the marked half 0.22 ms longer)
  for (const int every : {2, 8}) {
    INFO("1 in " << every);
    const auto extra = ledger.markers_upper_extra_at(every);
    REQUIRE(extra);
    // (value + 2 se) - (value - 2 se), over the mean step, at the share marked.
    CHECK(*extra == Approx(4 * view.in_run->se_ms / mean_step / every).epsilon(0.02));
    const auto h = ledger.host_api_fraction_at(every);
    const auto est2 = e.estimate(4, *h);
    const auto p = steptrace::make_overhead_parts(est2, ledger, steptrace::CountersRun::off, std::nullopt, h, false, extra);
    REQUIRE(p.high);
    REQUIRE(p.host_api_high);
    CHECK(*p.host_api_high == Approx(*h + *extra));
    CHECK(*p.high == Approx(*est2.fraction + *extra + *p.background.fraction));
    // The high end's markers: at the comparison's upper end, every marked step.
    CHECK(*p.host_api_high - *p.host_api.fraction ==
          Approx(((view.in_run->ms + 2 * view.in_run->se_ms) - (view.in_run->ms - 2 * view.in_run->se_ms)) / mean_step / every)
              .epsilon(0.02));
  }
  // CUPTI detached: the comparison starts again, and the high end with it.
  ledger.reset_marking();
  CHECK_FALSE(ledger.markers_upper_extra_at(2));
}

TEST_CASE("the markers' high end: a comparison that does not resolve leaves the records' own time charged and "
          "bounds it; every step marked, nothing bounds it", "[overhead]") {
  // Marked steps no longer than unmarked ones (a spread of +-0.05 ms): the comparison measures about 0 ms
  // +- ~0.001, its lower end under the records' own 0.001 ms, which stays the charge, its upper end above
  // them: the high end takes the upper end.
  steptrace::OverheadLedger ledger;
  for (uint64_t i = 0; i < 17 * 32; ++i) {
    const bool marked = i % 2 == 0;
    const double ms = 10.0 + 0.05 * (static_cast<double>(i % 7) - 3) / 3;
    ledger.step(ms, 3, false, marked ? 0.001 : 0.0);
    ledger.marking(i, ms, marked);
  }
  const auto view = ledger.marked_cost_view();
  REQUIRE(view.in_run);
  REQUIRE(view.own_ms);
  CHECK(*view.own_ms == Approx(0.001));
  const double lower_ms = view.in_run->ms - 2 * view.in_run->se_ms, upper_ms = view.in_run->ms + 2 * view.in_run->se_ms;
  INFO("the comparison " << view.in_run->ms << " +- " << view.in_run->se_ms << " ms");
  REQUIRE(lower_ms < 0.001);  // the case this is about: unresolved, the records' own time charged ...
  REQUIRE(upper_ms > 0.001);  // ... and the upper end above it
  CHECK_FALSE(ledger.marked_cost_in_run());
  const double mean_step = 10.0;  // the pattern's mean over the window, to ~3e-6 relative
  CHECK(*ledger.marked_step_fraction() == Approx(0.001 / mean_step).epsilon(1e-4));
  const auto extra = ledger.markers_upper_extra_at(2);
  REQUIRE(extra);
  CHECK(*extra > 0);
  CHECK(*extra == Approx((upper_ms - 0.001) / mean_step / 2).epsilon(0.001));
  // Every step marked (a fixed trace_every): no block holds both kinds, so no measurement, no upper end.
  steptrace::OverheadLedger every;
  for (uint64_t i = 0; i < 17 * 32; ++i) {
    every.step(10.0, 3, false, 0.01);
    every.marking(i, 10.0, true);
  }
  CHECK(every.marked_step_fraction());
  CHECK_FALSE(every.markers_upper_extra_at(1));
}

TEST_CASE("the ledger: per-step costs over the steps' own time, the background's readings over their intervals",
          "[overhead]") {
  // 10 ms steps (their scopes), each 20 ms from its begin to the next step's; 2 calls and 0.1 ms of a
  // binding's bookkeeping a step, 1 ms of readings a step: host_api over the 10 ms, the readings over
  // the 20 (they run by the clock, between steps too).
  steptrace::OverheadLedger ledger;
  for (int i = 0; i < 100; ++i) {
    ledger.spent(steptrace::OverheadLedger::Work::memory, 1.0);
    ledger.step(10, 2, false, 0, 0.1, 20);
  }
  const double calls = 2 * steptrace::OverheadLedger::kScopeNs * 1e-6;
  CHECK(*ledger.calls_fraction() == Approx((0.1 + calls) / 10));
  CHECK(*ledger.background_fraction() == Approx(1.0 / 20));
  CHECK(*ledger.work_fraction(steptrace::OverheadLedger::Work::memory) == Approx(1.0 / 20));
  // Past the window (512 steps) the intervals leave it with their steps: 600 more at 40 ms a step.
  for (int i = 0; i < 600; ++i) {
    ledger.spent(steptrace::OverheadLedger::Work::memory, 1.0);
    ledger.step(10, 2, false, 0, 0.1, 40);
  }
  CHECK(*ledger.background_fraction() == Approx(1.0 / 40));
  CHECK(*ledger.calls_fraction() == Approx((0.1 + calls) / 10));
  CHECK(*ledger.work_fraction(steptrace::OverheadLedger::Work::memory) == Approx(700.0 / (100 * 20 + 600 * 40)));
  // An interval not given, or shorter than the step (a clock's jitter): the step's own time.
  steptrace::OverheadLedger own;
  own.spent(steptrace::OverheadLedger::Work::memory, 1.0);
  own.step(10, 2, false, 0, 0.1);
  own.spent(steptrace::OverheadLedger::Work::memory, 1.0);
  own.step(10, 2, false, 0, 0.1, 5);
  CHECK(*own.background_fraction() == Approx(1.0 / 10));
}

TEST_CASE("over the budget, the line names what keeps it there: the interval while the floor fits, else the floor's largest part",
          "[overhead]") {
  using steptrace::over_budget_by;
  steptrace::OverheadEstimate e;
  CHECK(over_budget_by(e, 0.001) == nullptr);  // no estimate
  e.fraction = 0.0008;
  e.within_budget = true;
  CHECK(over_budget_by(e, 0.001) == nullptr);  // no floor: not estimated
  e.floor_fraction = 0.0004;
  CHECK(std::string(over_budget_by(e, 0.001)) == "none");  // within
  e.fraction = 0.004;
  e.within_budget = false;
  e.floor_fraction = 0.0009;  // the longest interval fits: the budget is lengthening it
  CHECK(std::string(over_budget_by(e, 0.001)) == "interval");
  e.floor_fraction = 0.001;  // at the budget: fits
  CHECK(std::string(over_budget_by(e, 0.001)) == "interval");
  // A floor over the budget: its largest part. A framework's hooks (host_api 1 %):
  e.floor_fraction = 0.0105;
  e.other_fraction = 0.01;
  e.attached_fraction = 0;
  CHECK(std::string(over_budget_by(e, 0.001)) == "host_api");
  // CUPTI kept attached (0.9 % a step) beside 0.1 % of calls:
  e.floor_fraction = 0.0101;
  e.other_fraction = 0.001;
  e.attached_fraction = 0.009;
  CHECK(std::string(over_budget_by(e, 0.001)) == "attached");
  // One trace worth more than 4000 steps' share:
  e.floor_fraction = 0.02;
  e.other_fraction = 0.0005;
  e.attached_fraction = 0;
  CHECK(std::string(over_budget_by(e, 0.001)) == "tracing");
}
