// The overhead estimator (core/overhead.hpp) and the budget's schedule rules (details/line_policy.hpp),
// on hand-made step sequences whose answers are worked out in the comments.
#include <steptrace/core/overhead.hpp>
#include <steptrace/details/line_policy.hpp>

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
    o.gpu_busy_share = busy;
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
  CHECK(r.method == "launch_model");
  CHECK(*r.traced_extra_ms == Approx(1.1));          // 1000 launches x 1.1 us
  CHECK(*r.fraction == Approx(1.1 / 50.0));          // every step traced: no residual
  CHECK(*r.residual_ms == Approx(1000 * 0.6e-3 * 0.01));  // 0.6 us per launch x 1 % idle GPU
  // budget 0.5 %: room = 0.005 - 0.006/50; every = ceil(1.1 / (room x 50)) = ceil(4.51) = 5
  CHECK(r.every == 5);
  CHECK_FALSE(r.within_budget);  // at the interval in force (every step): 2.2 %
  CHECK(e.estimate(5).within_budget);  // 1.1 / 250 + 0.006 / 50 = 0.45 %
}

TEST_CASE("with untraced steps the cost is measured from the step times", "[overhead]") {
  OverheadEstimator e({0.005, 1000, true});
  // every 4: the traced step runs 52 ms, the one after it 50.5 ms, the others 50 ms. The warm-up
  // steps (the first 8) are slow and not compared.
  for (uint64_t i = 0; i < 8; ++i) e.observe(step(i, true, 400.0));
  for (uint64_t i = 8; i < 64; ++i) {
    const uint64_t k = i % 4;
    e.observe(step(i, k == 0, k == 0 ? 52.0 : k == 1 ? 50.5 : 50.0));
  }
  const auto r = e.estimate(4);
  REQUIRE(r.fraction);
  CHECK(r.method == "measured");
  CHECK(*r.clean_step_ms == Approx(50.0));
  CHECK(*r.traced_extra_ms == Approx(2.5));  // the traced step's 2 ms and the next step's 0.5 ms
  CHECK(*r.fraction == Approx(2.5 / (4 * 50.0) + *r.residual_ms / 50.0));
  // room = 0.005 - 0.006/50 = 0.00488; every = ceil(2.5 / (0.00488 x 50)) = ceil(10.25) = 11
  CHECK(r.every == 11);
}

TEST_CASE("a cost the budget cannot hold: the longest interval, and said so", "[overhead]") {
  // Launch-bound: 10 000 launches, the GPU idle 80 % of the step. Kept attached, untraced steps still
  // pay 10 000 x 0.6 us x 0.8 = 4.8 ms of a 34 ms step: 14 %, above any interval's reach.
  OverheadEstimator e({0.01, 1000, true});
  e.observe(step(0, true, 45.0, 10000, 0.2));
  e.observe(step(1, true, 45.0, 10000, 0.2));
  const auto r = e.estimate(1);
  REQUIRE(r.fraction);
  CHECK(r.every == 1000);
  CHECK_FALSE(r.within_budget);
  // Detached between traced steps (keep_attached false) there is no residual: an interval suffices.
  OverheadEstimator d({0.01, 1000, false});
  d.observe(step(0, true, 45.0, 10000, 0.2));
  const auto rd = d.estimate(1);
  CHECK(*rd.residual_ms == 0);
  CHECK(rd.every == 25);  // 10 000 x 1.1 us = 11 ms; ceil(11 / (0.01 x 45)) = 25
  CHECK(d.estimate(25).within_budget);
  CHECK_FALSE(d.estimate(24).within_budget);
}

TEST_CASE("noise never makes the cost negative; impossible step times are not observed", "[overhead]") {
  OverheadEstimator e({0.005, 1000, true});
  for (uint64_t i = 0; i < 40; ++i) e.observe(step(i, i % 8 == 0, i % 8 == 0 ? 49.0 : 50.0));
  e.observe(step(39, false, 5000.0));  // one odd slow step (a checkpoint): the medians ignore it
  e.observe(step(40, false, std::nan("")));
  e.observe(step(41, false, -3));
  const auto r = e.estimate(8);
  REQUIRE(r.fraction);
  CHECK(*r.traced_extra_ms == 0);
  CHECK(r.every == 1);
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
  CHECK(next_trace_every(1, 5, 3, true) == 1);     // too soon after the last change (8 steps)
  CHECK(next_trace_every(1, 5, 8, true) == 5);
  CHECK(next_trace_every(10, 11, 40, false) == 10);  // within a quarter and inside the budget: stays
  CHECK(next_trace_every(10, 11, 40, true) == 11);   // over the budget: up, however little
  CHECK(next_trace_every(10, 9, 40, false) == 10);   // down by less than a quarter: stays
  CHECK(next_trace_every(10, 14, 19, true) == 10);   // two intervals not yet run
  CHECK(next_trace_every(10, 14, 20, false) == 14);
  CHECK(next_trace_every(10, 1, 20, false) == 1);    // back to every step
}
