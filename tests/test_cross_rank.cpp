// Cross-rank aggregation with simulated ranks (pure core): culprit rank and phase, skew, scores,
// ranks that stop reporting, the float wire format.
#include <steptrace/core/cross_rank.hpp>
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "fake_exchange.hpp"
#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

namespace {
// A synchronous data-parallel step: every rank's step takes as long as the slowest rank's work plus
// the all-reduce; faster ranks wait inside their 'nccl' phase.
std::vector<RankSummary> simulate(int world, int64_t step, int slow_rank, PhaseId slow_phase, double extra_ms,
                                  unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(-0.2, 0.2);
  const double base[kSummaryPhases] = {5, 1, 20, 40, 3, 0};
  const double allreduce_ms = 4;
  std::vector<RankSummary> s(static_cast<std::size_t>(world));
  double slowest_work = 0;
  for (int r = 0; r < world; ++r) {
    RankSummary& x = s[static_cast<std::size_t>(r)];
    x.rank = r;
    x.step = step;
    x.valid = true;
    double work = 0;
    for (int p = 0; p < kSummaryPhases; ++p) {
      if (p == kSummaryCommPhase) continue;
      x.phase_ms[p] = base[p] + jitter(rng) + (r == slow_rank && p == slow_phase ? extra_ms : 0);
      work += x.phase_ms[p];
    }
    slowest_work = std::max(slowest_work, work);
  }
  for (auto& x : s) {
    double work = 0;
    for (int p = 0; p < kSummaryPhases; ++p)
      if (p != kSummaryCommPhase) work += x.phase_ms[p];
    x.phase_ms[kSummaryCommPhase] = allreduce_ms + (slowest_work - work);  // waiting for the slowest
    x.step_ms = work + x.phase_ms[kSummaryCommPhase];
  }
  return s;
}
}  // namespace

TEST_CASE("cross-rank: the slow rank and its phase are found at every world size", "[cross_rank]") {
  for (int world : {2, 3, 8, 64, 256, 1024}) {
    INFO("world " << world);
    const int slow = world / 2;
    const auto s = simulate(world, 41, slow, phase_tag::input, 30.0 * 0.69 * 0.3 + 6);
    const auto v = aggregate_ranks(s, 41);
    CHECK(v.reporting == world);
    CHECK(v.missing_count == 0);
    CHECK(v.slowest_rank == slow);
    REQUIRE(v.culprit_phase);
    CHECK(*v.culprit_phase == phase_tag::input);
    CHECK(v.culprit_gap_ms > 10);
    CHECK(v.skew > (world == 2 ? 0.07 : 0.15));  // two ranks: the median is their mean
    // Step times are equal across ranks (everyone waits for the slowest): step time alone cannot tell.
    CHECK(v.step_ms_max - v.step_ms_min < 1e-9);
    REQUIRE_FALSE(v.lowest_scores.empty());
    CHECK(v.lowest_scores.front().rank == slow);
    CHECK(v.lowest_scores.front().score < 0.9);
    CHECK(v.lowest_scores.size() == std::min<std::size_t>(kMaxListed, static_cast<std::size_t>(world)));
  }
}

TEST_CASE("cross-rank: a slow backward on rank 0 of 1024", "[cross_rank]") {
  const auto v = aggregate_ranks(simulate(1024, 7, 0, phase_tag::backward, 25), 7);
  CHECK(v.slowest_rank == 0);
  CHECK(*v.culprit_phase == phase_tag::backward);
  CHECK(v.culprit_gap_ms == Approx(25).margin(1));
}

TEST_CASE("cross-rank: balanced ranks give a small skew and scores near 1", "[cross_rank]") {
  const auto v = aggregate_ranks(simulate(512, 3, -1, phase_tag::input, 0), 3);
  CHECK(v.skew < 0.03);
  CHECK(v.lowest_scores.front().score > 0.97);
}

TEST_CASE("cross-rank: step_skew is the gap relative to the step, steady when communication dominates",
          "[cross_rank]") {
  // Two ranks, a 6 ms step of which ~0.5 ms is work and the rest all-reduce (as on 2 H200s with
  // examples/dp_train). 0.1 ms of noise in the work is a 20 % `skew` but 1.7 % of the step.
  auto two = [](double work0, double work1) {
    std::vector<RankSummary> s(2);
    for (int r = 0; r < 2; ++r) {
      s[static_cast<std::size_t>(r)].rank = r;
      s[static_cast<std::size_t>(r)].step = 9;
      s[static_cast<std::size_t>(r)].valid = true;
      s[static_cast<std::size_t>(r)].phase_ms[phase_tag::backward] = r == 0 ? work0 : work1;
    }
    const double slowest = std::max(work0, work1);
    for (auto& x : s) {
      x.phase_ms[kSummaryCommPhase] = 5.5 + (slowest - x.phase_ms[phase_tag::backward]);
      x.step_ms = x.phase_ms[phase_tag::backward] + x.phase_ms[kSummaryCommPhase];
    }
    return aggregate_ranks(s, 9);
  };
  const auto noisy = two(0.5, 0.7);
  CHECK(noisy.skew > 0.15);                        // the work-relative ratio reads a false alarm
  CHECK(noisy.gap_ms == Approx(0.1));              // two ranks: the median is their mean
  CHECK(noisy.step_skew == Approx(0.1 / 6.2));
  CHECK(noisy.step_skew < kBalancedStepSkew);
  // One rank 3 ms slower in backward: everyone loses a third of the step waiting for it.
  const auto slow = two(0.5, 3.5);
  CHECK(slow.slowest_rank == 1);
  CHECK(*slow.culprit_phase == phase_tag::backward);
  CHECK(slow.gap_ms == Approx(1.5));
  CHECK(slow.step_skew == Approx(1.5 / 9.0));
  CHECK(slow.step_skew > kBalancedStepSkew);
  // Many ranks, balanced: far below the threshold; a slow one: above it.
  CHECK(aggregate_ranks(simulate(256, 3, -1, phase_tag::input, 0), 3).step_skew < kBalancedStepSkew);
  CHECK(aggregate_ranks(simulate(256, 3, 5, phase_tag::backward, 15), 3).step_skew > kBalancedStepSkew);
}

TEST_CASE("cross-rank: ranks that stop reporting are listed, not counted", "[cross_rank]") {
  auto s = simulate(1024, 100, 17, phase_tag::forward, 15);
  s[5].valid = false;          // never filled in
  s[900].step = 99;            // still on an older step
  s[901].rank = 3;             // garbage in the slot
  s[1023].step_ms = std::nan("");
  const auto v = aggregate_ranks(s, 100);
  CHECK(v.reporting == 1020);
  CHECK(v.missing_count == 4);
  CHECK(v.missing_ranks == std::vector<int>{5, 900, 901, 1023});
  CHECK(v.slowest_rank == 17);
  CHECK(*v.culprit_phase == phase_tag::forward);
  // Everyone silent: an empty view, no culprit, nothing made up.
  std::vector<RankSummary> silent(16);
  const auto none = aggregate_ranks(silent, 100);
  CHECK(none.reporting == 0);
  CHECK(none.missing_count == 16);
  CHECK(none.missing_ranks.size() == kMaxListed);
  CHECK(none.slowest_rank == -1);
  CHECK_FALSE(none.culprit_phase);
}

TEST_CASE("cross-rank: the float wire format round-trips", "[cross_rank]") {
  RankSummary s;
  s.rank = 1023;
  s.step = 3'000'123;  // beyond float's exact integers: sent as low bits, restored from the expected step
  s.step_ms = 61.25;
  s.phase_ms[phase_tag::input] = 12.5;
  s.phase_ms[kSummaryCommPhase] = 4.75;
  s.valid = true;
  float wire[kSummaryFloats];
  to_floats(s, wire);
  const RankSummary back = from_floats(wire, 3'000'123);
  CHECK(back.valid);
  CHECK(back.rank == 1023);
  CHECK(back.step == 3'000'123);
  CHECK(back.step_ms == Approx(61.25));
  CHECK(back.phase_ms[phase_tag::input] == Approx(12.5));
  CHECK(from_floats(wire, 3'000'124).step == 3'000'123);  // one step stale: detected as another step
}


namespace {
/// A host-only session as rank 0 of the simulated four-rank exchange (tests/fake_exchange.hpp).
steptrace::Config four_ranks_config(const std::string& log) {
  auto cfg = steptrace_test::host_config(log);
  cfg.rank = 0;
  cfg.world_size = 4;
  return cfg;
}
}  // namespace

TEST_CASE("cross-rank: rank 0's line names the slow rank and phase (session, simulated exchange)", "[cross_rank]") {
  const auto log = steptrace_test::fresh_log("cross_rank_session");
  steptrace::Config cfg = four_ranks_config(log);
  REQUIRE(steptrace::start(cfg));
  auto fake = std::make_unique<steptrace_test::FakeExchange>();
  const std::shared_ptr<int> posts = fake->posts;
  REQUIRE(steptrace::details::Session::current().set_exchange(std::move(fake), 2));
  steptrace_test::run_input_nccl_steps(7);
  steptrace::stop();
  CHECK(*posts == 3);  // steps 0, 2, 4 closed with an exchange due (step 6 closes in stop())
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 7);
  int views = 0;
  for (const auto& l : lines) {
    if (l["cross_rank"].is_null()) {
      CHECK(l["null_reasons"].contains("cross_rank"));
      continue;
    }
    ++views;
    const auto& v = l["cross_rank"];
    CHECK(int(v["step"]) % 2 == 0);
    CHECK(int(v["step"]) <= int(l["global_step"]));  // a view never lands on an earlier step's line
    CHECK(v["world_size"] == 4);
    CHECK(v["reporting"] == 4);
    CHECK(v["slowest_rank"] == 2);
    CHECK(v["culprit_phase"] == "input");
    CHECK(double(v["culprit_gap_ms"]) == Approx(20).margin(0.5));
    CHECK(v["lowest_scores"][0]["rank"] == 2);
    CHECK(double(v["gap_ms"]) == Approx(20).margin(0.5));
    CHECK(double(v["step_skew"]) == Approx(double(v["gap_ms"]) / double(v["step_time_ms"]["median"])));
    CHECK(v["balanced"] == false);
  }
  CHECK(views == 3);
  for (const auto& l : lines) CHECK(l["run_id"] == "feedfacecafebeef");  // rank 0's, taken at set_exchange
  CHECK(steptrace_test::read_events(log).back()["run_id"] == "feedfacecafebeef");
}

TEST_CASE("cross-rank: a rank's summary is its own step time, not the wait between steps (a loss.item() after "
          "the step), with the built-in phases tagged before it", "[cross_rank]") {
  // A recorded step series, made by hand (times in ns): no clock, no sleep.
  using steptrace::PhaseSpan;
  namespace tag = steptrace::phase_tag;
  steptrace::details::CrossRankLink link;
  auto fake = std::make_unique<steptrace_test::FakeExchange>();
  const auto sent = fake->sent;
  REQUIRE(link.set(std::move(fake), 2));
  const auto ms = [](double v) { return static_cast<int64_t>(v * 1e6); };
  steptrace::StepRecord first;  // step 0: nothing before it counts
  first.index = 0;
  first.begin_ns = ms(100), first.scope_end_ns = ms(105), first.end_ns = ms(140);
  first.spans = {PhaseSpan{tag::input, 0, true, false, 1, ms(100), ms(102)}};
  first.between_spans = {PhaseSpan{tag::input, 0, true, false, 1, ms(90), ms(99)}};  // before step 0: not a gap
  steptrace::StepRecord odd = first;  // step 1: not an exchange step (every 2)
  odd.index = 1;
  steptrace::StepRecord r;  // step 2: 4 ms in its scope, then 30 ms of loss.item() before step 3 begins
  r.index = 2;
  r.prev_scope_end_ns = ms(160);
  r.begin_ns = ms(200), r.scope_end_ns = ms(204), r.end_ns = ms(234);
  r.spans = {PhaseSpan{tag::input, 0, true, false, 1, ms(200), ms(202)},
             PhaseSpan{tag::nccl, 0, true, false, 1, ms(202), ms(203)},
             PhaseSpan{tag::input, 1, true, true, 1, ms(200), ms(201)}};  // inside an input scope: once
  r.between_spans = {
      PhaseSpan{tag::input, 0, true, false, 1, ms(190), ms(193)},     // tagged before the step: its work
      PhaseSpan{tag::forward, 1, true, false, 1, ms(180), ms(181)},   // inside an evaluation's scope: not
      PhaseSpan{tag::optimizer, 0, true, false, 1, ms(158), ms(161)},  // began in the step before: its 1 ms after
      PhaseSpan{tag::backward, 0, false, false, 2, ms(170), ms(175)}};  // another thread: not
  link.post(first);
  link.post(odd);
  link.post(r);
  REQUIRE(sent->size() == 2);
  const auto& s0 = (*sent)[0];
  CHECK(s0[3] == Approx(5));  // its scope's 5 ms, not the 40 ms to the next step
  CHECK(s0[4 + tag::input] == Approx(2));
  const auto& s2 = (*sent)[1];
  CHECK(s2[3] == Approx(4 + 3 + 1));  // own time, the input tagged before it, the optimizer's last ms
  CHECK(s2[4 + tag::input] == Approx(2 + 3));
  CHECK(s2[4 + tag::nccl] == Approx(1));
  CHECK(s2[4 + tag::optimizer] == Approx(1));
  CHECK(s2[4 + tag::forward] == 0);
  CHECK(s2[4 + tag::backward] == 0);
  link.reset();
}

TEST_CASE("cross-rank: a run_id from rank 0 that is not 16 hex digits is refused, the rank keeps its own", "[cross_rank]") {
  const auto log = steptrace_test::fresh_log("cross_rank_bad_run_id");
  steptrace::Config cfg = four_ranks_config(log);
  REQUIRE(steptrace::start(cfg));
  auto fake = std::make_unique<steptrace_test::FakeExchange>();
  fake->rank0_run_id = "not-an-id\n";
  REQUIRE(steptrace::details::Session::current().set_exchange(std::move(fake), 2));
  steptrace_test::run_input_nccl_steps(3);
  steptrace::stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 3);
  const std::string own = lines[0]["run_id"];
  CHECK(own.size() == 16);
  CHECK(own != "not-an-id\n");
  for (const auto& l : lines) CHECK(l["run_id"] == own);
}

TEST_CASE("cross-rank: with log_every, the written lines carry the views (unwritten lines take none)",
          "[cross_rank]") {
  const auto log = steptrace_test::fresh_log("cross_rank_log_every");
  steptrace::Config cfg = four_ranks_config(log);
  cfg.log_every = 5;
  REQUIRE(steptrace::start(cfg));
  REQUIRE(steptrace::details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 5));
  for (int i = 0; i < 15; ++i) {
    TRACE_STEP();
    TRACE_PHASE(input);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  steptrace::stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 3);  // steps 4, 9, 14
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO("line of step " << lines[i]["global_step"]);
    REQUIRE(lines[i]["cross_rank"].is_object());
    CHECK(lines[i]["cross_rank"]["step"] == 5 * int(i));  // views of steps 0, 5, 10
  }
}
