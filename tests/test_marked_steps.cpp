// The stream markers' pace and the in-run comparison of marked and unmarked steps (core/marked_steps.hpp),
// and how the overhead ledger charges it (core/overhead_parts.hpp), on hand-made step sequences.
#include <steptrace/core/marked_steps.hpp>
#include <steptrace/core/overhead_parts.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>

#include <catch2/catch.hpp>

using steptrace::MarkedStepCost;

namespace {
/// A deterministic normal sample (Box-Muller on splitmix64): the step-time noise of a real GPU loop.
struct Noise {
  uint64_t state = 20261130;
  double uniform() { return (static_cast<double>(steptrace::mix64(state++) >> 11) + 0.5) / 9007199254740992.0; }
  double normal() { return std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }
};

/// `n` steps of a 62 ms GPU-bound loop with `noise_ms` of noise; marked ones (1 in `every`, marked_at's
/// pick) cost `marker_ms` more; `pattern_ms` more on every odd step (the program's own).
void feed(MarkedStepCost& c, Noise& noise, uint64_t first, uint64_t n, int every, double marker_ms, double noise_ms,
          double pattern_ms = 0) {
  for (uint64_t i = first; i < first + n; ++i) {
    const bool marked = steptrace::marked_at(i, every);
    c.step(i, 62.0 + noise_ms * noise.normal() + (marked ? marker_ms : 0) + (i % 2 ? pattern_ms : 0), marked);
  }
}
}  // namespace

TEST_CASE("the markers' pace: one step in each block of N, at an offset each block's hash picks", "[markers]") {
  for (int every : {2, 4, 16, 64}) {
    std::set<uint64_t> offsets;
    for (uint64_t block = 0; block < 200; ++block) {
      int marked = 0;
      for (uint64_t k = 0; k < uint64_t(every); ++k)
        if (steptrace::marked_at(block * every + k, every)) ++marked, offsets.insert(k);
      CHECK(marked == 1);
    }
    CHECK(offsets.size() > 1);  // not always the block's first step
  }
  CHECK(steptrace::marked_at(12345, 1));
  CHECK(steptrace::marked_at(12345, 0));
}

TEST_CASE("marked steps against the unmarked ones beside them: what a marked step costs in the run", "[markers]") {
  // A 62 ms GPU-bound step with 0.03 ms of noise (the C++ transformer on an H200), marked 1 in 2; a
  // marked step costs 0.06 ms more, its records' own time 0.02.
  Noise noise;
  MarkedStepCost c;
  feed(c, noise, 0, 60, 2, 0.06, 0.03);
  CHECK_FALSE(c.measured());  // one block closed, fewer than kLeastBlocks
  feed(c, noise, 60, 1500, 2, 0.06, 0.03);
  REQUIRE(c.measured());
  CHECK(c.measured()->blocks == 1560 / MarkedStepCost::kBlockSteps);  // the last block still open
  CHECK(c.measured()->ms == Approx(0.06).margin(0.01));
  CHECK(c.measured()->se_ms < 0.005);
  // What is charged: the value less two standard errors, where that is above the records' own time.
  REQUIRE(c.beyond(0.02));
  CHECK(*c.beyond(0.02) == Approx(c.measured()->ms - 2 * c.measured()->se_ms));
  CHECK(*c.beyond(0.02) > 0.045);
  CHECK_FALSE(c.beyond(0.07));  // the records' own time is more: it stands

  // 1 in 16: the same; at most kBlocks blocks are kept.
  MarkedStepCost sixteen;
  feed(sixteen, noise, 0, 20000, 16, 0.06, 0.03);
  REQUIRE(sixteen.measured());
  CHECK(sixteen.measured()->blocks == MarkedStepCost::kBlocks);
  CHECK(sixteen.measured()->ms == Approx(0.06).margin(0.01));

  // Each block's difference is its marked steps' mean less its unmarked ones': U M U M ... with marked
  // steps 1 ms longer gives exactly 1 ms a block, one difference per block of kBlockSteps steps.
  MarkedStepCost alternating_exact;
  for (uint64_t i = 0; i < 20 * MarkedStepCost::kBlockSteps + 1; ++i)
    alternating_exact.step(i, 62.0 + (i % 2 ? 1.0 : 0), i % 2 == 1);
  REQUIRE(alternating_exact.measured());
  CHECK(alternating_exact.measured()->blocks == 20);
  CHECK(alternating_exact.measured()->ms == Approx(1.0));
  CHECK(alternating_exact.measured()->se_ms == Approx(0.0).margin(1e-9));

  // Steps left out (a traced step, its aftermath, a step dropped): a block holds those it was given.
  MarkedStepCost gaps;
  for (uint64_t i = 0; i < 800; ++i)
    if (i % 4 != 0) gaps.step(i, 62.0 + (i % 4 == 2 ? 5.0 : 0), i % 4 == 2);  // left out, U M U
  REQUIRE(gaps.measured());
  CHECK(gaps.measured()->ms == Approx(5.0));
  // A block holding one kind only gives nothing: marked and unmarked steps in separate blocks.
  MarkedStepCost apart;
  for (uint64_t i = 0; i < 64 * MarkedStepCost::kBlockSteps; ++i) {
    const bool marked = (i / MarkedStepCost::kBlockSteps) % 2 == 0;
    apart.step(i, 62.0 + (marked ? 5.0 : 0), marked);
  }
  CHECK_FALSE(apart.measured());
  // A step at or before the last one given (a count started again) forgets every block: the blocks after
  // it are the only ones measured, and they age by the new count.
  MarkedStepCost back;
  for (uint64_t i = 0; i < 20 * MarkedStepCost::kBlockSteps; ++i) back.step(i, 62.0 + (i % 2 ? 1.0 : 0), i % 2 == 1);
  REQUIRE(back.measured());
  CHECK(back.measured()->ms == Approx(1.0));
  for (uint64_t i = 0; i < 17 * MarkedStepCost::kBlockSteps; ++i) back.step(i, 62.0 + (i % 2 ? 3.0 : 0), i % 2 == 1);
  REQUIRE(back.measured());
  CHECK(back.measured()->blocks == 16);
  CHECK(back.measured()->ms == Approx(3.0));

  // A host-bound loop: 4 ms steps with 10 % noise, the markers' real cost 0.02 ms: not resolved over
  // the records' own 0.01 ms (its error is larger than the difference), whatever the mean reads.
  MarkedStepCost noisy;
  for (uint64_t i = 0; i < 4000; ++i) {
    const bool marked = steptrace::marked_at(i, 2);
    noisy.step(i, 4.0 * (1 + 0.1 * noise.normal()) + (marked ? 0.02 : 0), marked);
  }
  REQUIRE(noisy.measured());
  CHECK(noisy.measured()->se_ms > 0.01);
  CHECK_FALSE(noisy.beyond(0.01));
  // At 5 % noise the blocks resolve finer (SE ~0.008 ms): the value lies within three of its standard
  // errors of the markers' 0.02 ms, and the lower end charged, if any, is below that 0.02.
  MarkedStepCost five;
  for (uint64_t i = 0; i < 4000; ++i) {
    const bool marked = steptrace::marked_at(i, 2);
    five.step(i, 4.0 * (1 + 0.05 * noise.normal()) + (marked ? 0.02 : 0), marked);
  }
  REQUIRE(five.measured());
  CHECK(five.measured()->se_ms > 0.004);
  CHECK(five.measured()->se_ms < 0.012);
  CHECK(std::abs(five.measured()->ms - 0.02) < 3 * five.measured()->se_ms);
  if (const auto low = five.beyond(0.0)) CHECK(*low < 0.02 + five.measured()->se_ms);

  // One preempted marked step (20 ms) among the pairs moves the trimmed mean nowhere.
  MarkedStepCost preempted;
  for (uint64_t i = 0; i < 1500; ++i) {
    const bool marked = steptrace::marked_at(i, 2);
    preempted.step(i, 62.0 + 0.03 * noise.normal() + (marked ? 0.06 : 0) + (i == 1401 ? 20.0 : 0), marked);
  }
  CHECK(preempted.measured()->ms == Approx(0.06).margin(0.01));

  // Old blocks age out: none newer than kMaxAgeSteps, none kept (a pace back at 1 marks every step).
  MarkedStepCost aging;
  feed(aging, noise, 0, 1500, 2, 0.06, 0.03);
  REQUIRE(aging.measured());
  for (uint64_t i = 1500; i < 1500 + MarkedStepCost::kMaxAgeSteps + 10; ++i) aging.step(i, 62.0, true);
  CHECK_FALSE(aging.measured());
  feed(aging, noise, 10000, 1500, 2, 0.06, 0.03);
  CHECK(aging.measured());
  // Aged below 16 blocks it is forgotten whole: at 1 in 1 (no new block) the 47 blocks age out one by
  // one, and one new block beside 15 old ones is no measurement; 16 new ones are.
  MarkedStepCost stale;
  feed(stale, noise, 0, 1500, 2, 0.06, 0.03);
  REQUIRE(stale.measured());
  uint64_t i = 1500;
  while (stale.measured()) stale.step(i, 62.0, true), ++i;
  CHECK(i > MarkedStepCost::kMaxAgeSteps);
  feed(stale, noise, i, MarkedStepCost::kBlockSteps * 2, 2, 0.06, 0.03);
  CHECK_FALSE(stale.measured());
  feed(stale, noise, i + MarkedStepCost::kBlockSteps * 2, MarkedStepCost::kBlockSteps * 16, 2, 0.06, 0.03);
  CHECK(stale.measured());
  aging.reset();
  CHECK_FALSE(aging.measured());
}

TEST_CASE("a program's own alternating steps read as noise, not as the markers' cost", "[markers]") {
  // Every second step 1 ms longer, marked 1 in 2 at marked_at's picks: a block's marked steps are the
  // longer kind about half the time, so its difference is the markers' 0.06 ms +- ~0.25 ms, and the
  // blocks' mean is the markers' cost within its (larger) error.
  Noise noise;
  MarkedStepCost alternating;
  feed(alternating, noise, 0, 4000, 2, 0.06, 0.03, 1.0);
  REQUIRE(alternating.measured());
  CHECK(alternating.measured()->se_ms > 0.01);
  CHECK(std::abs(alternating.measured()->ms - 0.06) < 3 * alternating.measured()->se_ms);
  // Marking the even steps only (the first of each block, as the pace did before), the pattern would read
  // as -0.94 ms, resolved.
  MarkedStepCost even_only;
  for (uint64_t i = 0; i < 4000; ++i) even_only.step(i, 62.0 + (i % 2 ? 1.0 : 0) + (i % 2 == 0 ? 0.06 : 0), i % 2 == 0);
  CHECK(even_only.measured()->ms == Approx(-0.94));
  CHECK(even_only.measured()->se_ms < 0.01);
}

TEST_CASE("the ledger charges marked steps at the in-run comparison where it resolves, and the pace reads it",
          "[markers][overhead]") {
  // A 62 ms step whose records take 0.02 ms (0.03 % of the step) under the pace's 1 in 2, a marked step
  // costing 0.06 ms in the run (0.097 %, over half the default budget's 0.1 %).
  Noise noise;
  steptrace::OverheadLedger ledger, own_only;
  for (uint64_t i = 0; i < 1500; ++i) {
    const bool marked = steptrace::marked_at(i, 2);
    const double ms = 62.0 + 0.03 * noise.normal() + (marked ? 0.06 : 0);
    ledger.step(ms, 6, false, marked ? 0.02 : 0.0);
    ledger.marking(i, ms, marked);
    own_only.step(ms, 6, false, marked ? 0.02 : 0.0);
  }
  REQUIRE(ledger.marked_step_fraction());
  CHECK(ledger.marked_cost_in_run());
  CHECK_FALSE(own_only.marked_cost_in_run());
  CHECK(*own_only.marked_step_fraction() == Approx(0.02 / 62.03).epsilon(0.01));
  CHECK(*ledger.marked_step_fraction() > 0.045 / 62.03);
  CHECK(*ledger.marked_step_fraction() < 0.065 / 62.03);
  // At 1 in 2 the records' own time keeps every second step marked (it would come back to every step);
  // the comparison's keeps 1 in 2 (0.048 % a step, under the 0.05 % share).
  CHECK(steptrace::markers_every(*own_only.marked_step_fraction(), 0.001, 2) == 1);
  CHECK(steptrace::markers_every(*ledger.marked_step_fraction(), 0.001, 2) == 2);
  // What marking every step may cost: the comparison's upper end (value plus two standard errors) where
  // it has measured, the records' own time where that is more; nothing before it has measured.
  REQUIRE(ledger.marked_step_upper_fraction());
  CHECK_FALSE(own_only.marked_step_upper_fraction());
  CHECK(*ledger.marked_step_upper_fraction() > 0.06 / 62.03);
  CHECK(*ledger.marked_step_upper_fraction() < 0.075 / 62.03);
  // host_api at the pace: the calls and the compared cost, halved.
  const double calls = 6 * steptrace::OverheadLedger::kScopeNs * 1e-6 / 62.03;
  CHECK(*ledger.host_api_fraction_at(2) == Approx(calls + *ledger.marked_step_fraction() / 2));
  // Forgotten (CUPTI detached): the records' own time again.
  ledger.reset_marking();
  CHECK_FALSE(ledger.marked_cost_in_run());
  CHECK(*ledger.marked_step_fraction() == Approx(*own_only.marked_step_fraction()));
}

TEST_CASE("the markers' pace: every step only where the in-run comparison has measured and its upper end fits",
          "[markers][overhead]") {
  using Why = steptrace::MarkersPace::Why;
  // overhead_budget 0.1 %: the markers' share 0.05 % of the step, 80 % of it 0.04 %.
  struct Case {
    double marked;
    std::optional<double> upper;  // the comparison's upper end (nullopt: not measured)
    int current, every;
    Why why;
    const char* what;
  };
  const Case cases[] = {
      {0.0001, std::nullopt, 1, 2, Why::unmeasured, "cheap by their own time, not measured: 1 in 2, held"},
      {0.005, std::nullopt, 1, 16, Why::cost, "dear by their own time: the cost decides (0.005 / 16 in the share)"},
      {0.0001, 0.0003, 2, 1, Why::cost, "measured, the upper end within 80 % of the share: every step"},
      {0.0001, 0.00045, 1, 1, Why::cost, "between 80 % of the share and the share: kept at 1 in 1"},
      {0.0001, 0.00045, 2, 2, Why::upper_over, "... and not released from 1 in 2 (hysteresis)"},
      {0.0001, 0.0006, 1, 2, Why::upper_over, "over the share: held at 1 in 2 from 1 in 1"},
      {0.003, 0.004, 2, 8, Why::cost, "thinned past 2 by the cost: the cost's, measured or not"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const steptrace::MarkersPace p = steptrace::markers_pace(c.marked, c.upper, 0.001, c.current);
    CHECK(p.every == c.every);
    CHECK(p.why == c.why);
  }
}
