// Cross-rank aggregation with simulated ranks (pure core): culprit rank and phase, skew, scores,
// ranks that stop reporting, the float wire format.
#include <steptrace/core/cross_rank.hpp>
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <chrono>
#include <cstdlib>
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
    x.set_wait(WaitBasis::host_nccl, x.phase_ms[kSummaryCommPhase], 10);  // the loop syncs in its nccl phase
    x.steps = 10;
  }
  return s;
}

// A DDP job as a GPU sees it: no `nccl` phase (the all-reduce runs inside backward), every rank's
// iteration the same, each rank's wait measured on its GPU (basis trace or backward_end). `extra_ms` of
// the slow rank's own work sits in `part` (a phase index, kSummaryCommPhase = untagged, or
// kSummaryPhases = between steps); `read_ms` > 0: the listed ranks read the loss after the step, their
// host waiting there for their GPU (and so for the slow rank).
struct Ddp {
  int world = 2;
  int slow = -1;
  int part = phase_tag::input;
  double extra_ms = 0;
  double transfer_ms = 2.5;
  std::vector<int> readers;
  unsigned seed = 1;
  WaitBasis basis = WaitBasis::trace;
};
std::vector<RankSummary> ddp(const Ddp& d, int64_t step = 30) {
  std::mt19937 rng(d.seed);
  std::uniform_real_distribution<double> jitter(-0.3, 0.3);
  const double base[kSummaryPhases] = {1, 0.5, 40, 80, 10, 0};
  std::vector<double> own(static_cast<std::size_t>(d.world));
  std::vector<RankSummary> s(static_cast<std::size_t>(d.world));
  for (int r = 0; r < d.world; ++r) {
    RankSummary& x = s[static_cast<std::size_t>(r)];
    x.rank = r, x.step = step, x.valid = true, x.steps = 10;
    for (int p = 0; p < kSummaryCommPhase; ++p) x.phase_ms[p] = base[p] + jitter(rng);
    x.untagged_ms = 2 + jitter(rng);
    x.between_ms = 1 + jitter(rng);
    if (r == d.slow) {
      if (d.part < kSummaryCommPhase) x.phase_ms[d.part] += d.extra_ms;
      else if (d.part == kSummaryCommPhase) x.untagged_ms += d.extra_ms;
      else x.between_ms += d.extra_ms;
    }
    double o = x.untagged_ms + x.between_ms;
    for (int p = 0; p < kSummaryCommPhase; ++p) o += x.phase_ms[p];
    own[static_cast<std::size_t>(r)] = o;
  }
  const double slowest = *std::max_element(own.begin(), own.end());
  for (int r = 0; r < d.world; ++r) {
    RankSummary& x = s[static_cast<std::size_t>(r)];
    const double wait = d.transfer_ms + (slowest - own[static_cast<std::size_t>(r)]);
    // Where the host sees the wait: a reader in its read after the step, the others nowhere in
    // particular (spread over the phases whose launches block): here, backward.
    const bool reads = std::find(d.readers.begin(), d.readers.end(), r) != d.readers.end();
    (reads ? x.between_ms : x.phase_ms[phase_tag::backward]) += wait;
    double step = x.untagged_ms;
    for (int p = 0; p < kSummaryCommPhase; ++p) step += x.phase_ms[p];
    x.step_ms = step;
    x.set_wait(d.basis, wait, 10);
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
    CHECK(v.culprit_phase == "input");
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
  CHECK(v.culprit_phase == "backward");
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
  CHECK(slow.culprit_phase == "backward");
  CHECK(slow.gap_ms == Approx(1.5));
  CHECK(slow.step_skew == Approx(1.5 / 9.0));
  CHECK(slow.step_skew > kBalancedStepSkew);
  // No rank measured its wait (the host fallback): balanced is not judged.
  CHECK_FALSE(slow.waits_measured);
  CHECK_FALSE(slow.balanced().has_value());
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
  CHECK(v.culprit_phase == "forward");
  // Everyone silent: an empty view, no culprit, nothing made up.
  std::vector<RankSummary> silent(16);
  const auto none = aggregate_ranks(silent, 100);
  CHECK(none.reporting == 0);
  CHECK(none.missing_count == 16);
  CHECK(none.missing_ranks.size() == kMaxListed);
  CHECK(none.slowest_rank == -1);
  CHECK(none.culprit_phase.empty());
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
  CHECK(back.wait_basis == WaitBasis::none);
  s.untagged_ms = 3.25, s.between_ms = 17.5, s.steps = 10;
  s.set_wait(WaitBasis::backward_end, 21.75, 9);
  s.set_wait(WaitBasis::host_nccl, 4.5, 10);
  to_floats(s, wire);
  const RankSummary w = from_floats(wire, 3'000'123);
  CHECK(w.untagged_ms == Approx(3.25));
  CHECK(w.between_ms == Approx(17.5));
  CHECK(w.wait_ms == Approx(21.75));  // the best kind: backward_end before host_nccl
  CHECK(w.wait_basis == WaitBasis::backward_end);
  CHECK(w.wait_steps == 9);
  CHECK(w.basis_wait_ms[int(WaitBasis::host_nccl)] == Approx(4.5));
  CHECK(w.basis_steps[int(WaitBasis::host_nccl)] == 10);
  CHECK(w.basis_steps[int(WaitBasis::trace)] == 0);
  CHECK(w.steps == 10);
  wire[summary_wait_index(WaitBasis::backward_end)] = std::nanf("");  // not a wait: not measured
  CHECK(from_floats(wire, 3'000'123).wait_basis == WaitBasis::host_nccl);
}

TEST_CASE("cross-rank: under DDP the culprit is the rank the others wait for, whichever it is, with the part "
          "of its step", "[cross_rank]") {
  for (int slow : {0, 1}) {
    for (int part : {int(phase_tag::input), int(kSummaryCommPhase), int(kSummaryPhases), int(phase_tag::forward)}) {
      for (WaitBasis basis : {WaitBasis::trace, WaitBasis::backward_end}) {
        Ddp d;
        d.slow = slow, d.part = part, d.extra_ms = 20, d.basis = basis;
        const auto s = ddp(d);
        INFO("slow rank " << slow << " part " << part);
        // Step times agree (the fast rank waits inside its step): the old rule could not tell.
        CHECK(std::abs(s[0].iteration_ms() - s[1].iteration_ms()) < 1.5);
        const auto v = aggregate_ranks(s, 30);
        CHECK(v.waits_measured);
        CHECK(v.wait_basis == wait_basis_name(basis));
        CHECK(v.slowest_rank == slow);
        CHECK(v.culprit.rank == slow);
        CHECK(v.culprit.wait_ms == Approx(2.5));
        CHECK(v.culprit_phase == culprit_part_name(part));
        CHECK(v.culprit_gap_ms == Approx(20).margin(1.5));
        CHECK(v.wait_share > 0.1);
        REQUIRE(v.balanced().has_value());
        CHECK_FALSE(*v.balanced());
        CHECK(v.gap_ms == Approx(10).margin(1));  // two ranks: the median is their mean
      }
    }
  }
}

TEST_CASE("cross-rank: a loop that reads the loss on rank 0 only makes rank 0 the culprit, between steps", "[cross_rank]") {
  // Rank 0's read: 15 ms of its own (the read, the print) after each step, where rank 1 goes on.
  Ddp d;
  d.slow = 0, d.part = kSummaryPhases, d.extra_ms = 15, d.readers = {0};
  const auto v = aggregate_ranks(ddp(d), 30);
  CHECK(v.slowest_rank == 0);
  CHECK(v.culprit_phase == "between_steps");
  CHECK(v.median_rank.wait_ms > 15);
  CHECK_FALSE(*v.balanced());
}

TEST_CASE("cross-rank: every rank reads the loss: the victim's read waits for the culprit, and is not its "
          "own work", "[cross_rank]") {
  for (int slow : {0, 1}) {
    Ddp d;
    d.slow = slow, d.part = kSummaryPhases, d.extra_ms = 20, d.readers = {0, 1};  // an untagged fetch under watch()
    const auto s = ddp(d);
    // The victim's time between steps holds its wait: it is as long as the culprit's fetch.
    CHECK(s[static_cast<std::size_t>(1 - slow)].between_ms > 20);
    const auto v = aggregate_ranks(s, 30);
    CHECK(v.slowest_rank == slow);
    CHECK(v.culprit_phase == "between_steps");
    CHECK(v.culprit_gap_ms == Approx(20).margin(1.5));
  }
}

TEST_CASE("cross-rank: balanced means the waits are small, at any world size", "[cross_rank]") {
  for (int world : {2, 8, 1024}) {
    Ddp d;
    d.world = world, d.seed = static_cast<unsigned>(world);
    const auto v = aggregate_ranks(ddp(d), 30);
    INFO("world " << world << " wait_share " << v.wait_share);
    REQUIRE(v.balanced().has_value());
    CHECK(*v.balanced());
    CHECK(v.wait_share < kBalancedWaitShare);  // the ranks' own jitter (up to ~4 ms at 1024 ranks) is what they wait
    // One rank 20 ms slower in its input: everyone else waits ~13 % of the step, never balanced.
    d.slow = world - 1, d.part = phase_tag::input, d.extra_ms = 20;
    const auto slow = aggregate_ranks(ddp(d), 30);
    CHECK(slow.slowest_rank == world - 1);
    CHECK(slow.culprit_phase == "input");
    CHECK(slow.wait_share > 0.1);
    CHECK_FALSE(*slow.balanced());
    CHECK(slow.median_rank.wait_ms > 20);
    CHECK(slow.lowest_scores.front().rank == world - 1);
  }
}

TEST_CASE("cross-rank: ranks are compared on a kind of wait every rank measured, never across kinds", "[cross_rank]") {
  // A C++ loop that syncs in its nccl phase: the host time there (5.4 ms) holds the queue the sync waited
  // for, a traced step's NCCL kernel 0.5 ms. Rank 1 had a traced step in its window, rank 0 not.
  Ddp d;
  d.basis = WaitBasis::host_nccl, d.transfer_ms = 5.4;
  auto s = ddp(d);
  s[1].set_wait(WaitBasis::trace, 0.46, 1);
  CHECK(s[1].wait_basis == WaitBasis::trace);  // its own line shows its best: the GPU's, ahead of the host's
  s[0].set_wait(WaitBasis::host_nccl, 0, 0);       // rank 0's nccl phase unmeasured, a trace on rank 1 only
  CHECK(aggregate_ranks(s, 30).wait_basis == "none");
  s[0].set_wait(WaitBasis::host_nccl, 5.4, 10);
  const auto v = aggregate_ranks(s, 30);
  CHECK(v.wait_basis == "host_nccl");  // the view compares what both have
  CHECK(*v.balanced());
  CHECK(v.wait_share < 0.02);
  // Both traced in the window: the GPU's evidence, common to both, ahead of the host's time (which holds
  // the rank's wait for its own GPU as well).
  s[0].set_wait(WaitBasis::trace, 0.47, 1);
  CHECK(aggregate_ranks(s, 30).wait_basis == "trace");
  // Markers on both: ahead of a trace.
  s[0].set_wait(WaitBasis::markers, 5.0, 10);
  s[1].set_wait(WaitBasis::markers, 5.1, 10);
  CHECK(aggregate_ranks(s, 30).wait_basis == "markers");
  // A kind that reads more than the rank's iteration (a trace's late burst) is not taken.
  auto t = ddp(d);
  for (auto& x : t) {
    for (int b = 1; b <= 4; ++b) x.set_wait(static_cast<WaitBasis>(b), 0, 0);
    x.set_wait(WaitBasis::trace, 10 * x.iteration_ms(), 3);
  }
  CHECK(t[0].wait_basis == WaitBasis::none);
  const auto none = aggregate_ranks(t, 30);
  CHECK(none.wait_basis == "none");
  CHECK_FALSE(none.balanced().has_value());
  CHECK(none.wait_share <= 1.0);
}

TEST_CASE("cross-rank: a rank without a measured wait: host fallback, balanced not judged", "[cross_rank]") {
  Ddp d;
  d.slow = 1, d.part = phase_tag::input, d.extra_ms = 20;
  auto s = ddp(d);
  s[0].set_wait(WaitBasis::trace, 0, 0);  // rank 0 measured nothing
  const auto v = aggregate_ranks(s, 30);
  CHECK_FALSE(v.waits_measured);
  CHECK(v.wait_basis == "none");
  CHECK_FALSE(v.balanced().has_value());
  CHECK(v.slowest_rank == 1);  // its input, on the host
  CHECK(v.culprit_phase == "input");
  // A non-finite wait is a missing rank, not a number.
  s = ddp(d);
  s[1].basis_wait_ms[int(WaitBasis::trace)] = std::nan("");
  const auto m = aggregate_ranks(s, 30);
  CHECK(m.missing_count == 1);
  CHECK_FALSE(m.balanced().has_value());
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
    CHECK(v["wait_basis"] == "host_nccl");  // the steps' nccl phase
    CHECK(v["culprit"]["rank"] == 2);
    CHECK(double(v["culprit"]["wait_ms"]) < double(v["median_rank"]["wait_ms"]) - 19);
    CHECK(double(v["wait_share"]) > 0.5);
  }
  CHECK(views == 3);
  for (const auto& l : lines) CHECK(l["run_id"] == "feedfacecafebeef");  // rank 0's, taken at set_exchange
  CHECK(steptrace_test::read_events(log).back()["run_id"] == "feedfacecafebeef");
}

TEST_CASE("cross-rank: on the default (compact) lines, rank 0 names the rank the others wait for and every "
          "line its own wait", "[cross_rank]") {
  // The session test above forces full lines (host_config); users run compact ones: the compact line must
  // carry the verdict (who, which part, balanced, on what) and the rank's own wait.
  // CTest forces full lines through the environment (it wins over the Config): lifted for this run.
  struct Unset {
    std::string saved;
    bool had = false;
    Unset() {
      if (const char* v = std::getenv("STEPTRACE_LINE_DETAIL")) saved = v, had = true;
      unsetenv("STEPTRACE_LINE_DETAIL");
    }
    ~Unset() {
      if (had) setenv("STEPTRACE_LINE_DETAIL", saved.c_str(), 1);
    }
  } unset;
  const auto log = steptrace_test::fresh_log("cross_rank_session_compact");
  steptrace::Config cfg = four_ranks_config(log);
  cfg.line_detail = steptrace::Config{}.line_detail;  // the default
  REQUIRE(cfg.line_detail == steptrace::LineDetail::compact);
  REQUIRE(steptrace::start(cfg));
  REQUIRE(steptrace::details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 2));
  steptrace_test::run_input_nccl_steps(7);
  steptrace::stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 7);
  int views = 0, own = 0;
  for (const auto& l : lines) {
    CHECK(l["schema"] == "steptrace.step/2");  // the compact line, as users get it
    if (l.contains("rank_wait") && l["rank_wait"].is_object()) {
      ++own;
      CHECK(l["rank_wait"]["wait_basis"] == "host_nccl");
      CHECK(double(l["rank_wait"]["wait_ms"]) > 0.5);  // its 1 ms nccl phase
    }
    if (!l.contains("cross_rank") || !l["cross_rank"].is_object()) continue;
    ++views;
    const auto& v = l["cross_rank"];
    INFO(v.dump());
    CHECK(v["slowest_rank"] == 2);
    CHECK(v["culprit_phase"] == "input");
    CHECK(v["balanced"] == false);
    CHECK(v["wait_basis"] == "host_nccl");
    CHECK(double(v["wait_share"]) > 0.5);
    CHECK(double(v["median_rank"]["wait_ms"]) - double(v["culprit"]["wait_ms"]) == Approx(20).margin(0.5));
  }
  CHECK(views == 3);
  CHECK(own == 3);
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
  const RankSummary s0 = from_floats((*sent)[0].data(), 0);
  CHECK(s0.steps == 1);
  CHECK(s0.step_ms == Approx(5));  // its scope's 5 ms, not the 40 ms to the next step
  CHECK(s0.phase_ms[tag::input] == Approx(2));
  CHECK(s0.untagged_ms == Approx(3));
  CHECK(s0.wait_basis == WaitBasis::none);  // no nccl phase, nothing measured
  // The window of steps 1 and 2, means per step. Step 1: 5 ms, 2 in input. Step 2: its own 4 ms, the
  // input tagged before it (3), the optimizer's last ms (1); its untagged 1 ms (4 less input and nccl);
  // between steps the 40 ms since step 1's scope ended less the 4 ms tagged there.
  const RankSummary s2 = from_floats((*sent)[1].data(), 2);  // no evidence but the nccl phase's host time
  CHECK(s2.steps == 2);
  CHECK(s2.step_ms == Approx((5 + 8) / 2.0));
  CHECK(s2.phase_ms[tag::input] == Approx((2 + 5) / 2.0));
  CHECK(s2.phase_ms[tag::nccl] == Approx(0.5));
  CHECK(s2.phase_ms[tag::optimizer] == Approx(0.5));
  CHECK(s2.phase_ms[tag::forward] == 0);
  CHECK(s2.phase_ms[tag::backward] == 0);
  CHECK(s2.untagged_ms == Approx((3 + 1) / 2.0));
  CHECK(s2.between_ms == Approx(36 / 2.0));
  CHECK(s2.wait_basis == WaitBasis::host_nccl);  // step 2's nccl phase: 1 ms
  CHECK(s2.wait_ms == Approx(1));
  CHECK(s2.wait_steps == 1);
  // The window's kinds, best first: backward_end events, markers, a trace, the nccl phase's host time
  // (which holds the rank's wait for its own GPU too).
  link.add_wait(3.5, WaitBasis::markers);  // these steps' iteration: 5 ms
  link.add_wait(1.5, WaitBasis::backward_end);
  link.add_wait(2.5, WaitBasis::backward_end);
  steptrace::StepRecord s3 = odd, s4 = odd;
  s3.index = 3, s4.index = 4;
  link.post(s3);
  link.post(s4);
  REQUIRE(sent->size() == 3);
  const RankSummary s4s = from_floats((*sent)[2].data(), 4);
  CHECK(s4s.wait_basis == WaitBasis::backward_end);
  CHECK(s4s.wait_ms == Approx(2));
  CHECK(s4s.wait_steps == 2);
  link.add_wait(-1, WaitBasis::trace);  // impossible: not counted
  link.add_wait(std::nan(""), WaitBasis::trace);
  link.add_wait(3, WaitBasis::trace);
  link.add_wait(4.5, WaitBasis::markers);
  s3.index = 5, s4.index = 6;
  link.post(s3);
  link.post(s4);
  // No backward_end measure reached this window: the median of the rank's latest (up to 5) stands for
  // it, the best kind still; the fresh kinds travel beside it.
  const RankSummary s6 = from_floats((*sent)[3].data(), 6);
  CHECK(s6.wait_basis == WaitBasis::backward_end);
  CHECK(s6.wait_ms == Approx(2));
  CHECK(s6.wait_steps == 2);
  CHECK(s6.basis_wait_ms[int(WaitBasis::markers)] == Approx(4.5));
  CHECK(s6.basis_steps[int(WaitBasis::markers)] == 1);
  CHECK(s6.basis_wait_ms[int(WaitBasis::trace)] == Approx(3));
  CHECK(s6.basis_steps[int(WaitBasis::trace)] == 1);
  link.add_wait(4, WaitBasis::trace);
  link.add_wait(3, WaitBasis::backward_end);
  s3.index = 7, s4.index = 8;
  link.post(s3);
  link.post(s4);
  const RankSummary s8 = from_floats((*sent)[4].data(), 8);
  CHECK(s8.wait_basis == WaitBasis::backward_end);  // the window's own measure, not the carried ones
  CHECK(s8.wait_ms == Approx(3));
  CHECK(s8.wait_steps == 1);
  CHECK(s8.basis_steps[int(WaitBasis::trace)] == 1);  // every kind travels (the view picks a common one)
  CHECK(s8.basis_wait_ms[int(WaitBasis::trace)] == Approx(4));
  CHECK(s8.basis_wait_ms[int(WaitBasis::markers)] == Approx(4));  // carried: the median of 3.5 and 4.5
  link.add_wait(40, WaitBasis::trace);  // more than the 5 ms iteration: travels, not taken
  s3.index = 9, s4.index = 10;
  link.post(s3);
  link.post(s4);
  const RankSummary late = from_floats((*sent)[5].data(), 10);
  CHECK(late.basis_steps[int(WaitBasis::trace)] == 1);
  CHECK_FALSE(late.plausible(WaitBasis::trace));
  CHECK(late.wait_basis == WaitBasis::backward_end);  // the carried one: the median of 1.5, 2.5 and 3
  CHECK(late.wait_ms == Approx(2.5));
  CHECK(late.wait_steps == 3);
  // A carried measure stands for a window while the step it measured is at most 64 before the window's
  // last: a markers measure of step 20, read when step 10 had closed (the background thread's lag).
  link.add_wait(2, WaitBasis::markers, 20);
  steptrace::StepRecord n = odd;
  const auto post_odd = [&](int from, int to) {
    for (int i = from; i <= to; ++i) {
      n.index = static_cast<uint64_t>(i);
      link.post(n);
    }
  };
  post_odd(11, 84);
  const RankSummary s84 = from_floats(sent->back().data(), 84);
  CHECK(s84.wait_basis == WaitBasis::markers);  // step 20: 64 before 84
  CHECK(s84.wait_ms == Approx(2));
  CHECK(s84.wait_steps == 1);  // 3.5 and 4.5 measured steps 4 and 6: too old to join it
  CHECK(s84.basis_steps[int(WaitBasis::backward_end)] == 0);  // step 8's: 76 before
  post_odd(85, 86);
  const RankSummary s86 = from_floats(sent->back().data(), 86);
  CHECK(s86.basis_steps[int(WaitBasis::markers)] == 0);  // 66 before: gone
  CHECK(s86.wait_basis == WaitBasis::none);
  // Fresh traces, then carried beside steps with an nccl phase: ahead of the host's time, both travel.
  link.add_wait(0.6, WaitBasis::trace, 87);
  link.add_wait(0.5, WaitBasis::trace, 88);
  post_odd(87, 88);
  CHECK(from_floats(sent->back().data(), 88).wait_ms == Approx(0.55));
  steptrace::StepRecord n1 = r, n2 = r;
  n1.index = 89, n2.index = 90;
  link.post(n1);
  link.post(n2);
  const RankSummary s90 = from_floats(sent->back().data(), 90);
  CHECK(s90.wait_basis == WaitBasis::trace);
  CHECK(s90.wait_ms == Approx(0.55));  // the latest two traces
  CHECK(s90.basis_steps[int(WaitBasis::host_nccl)] == 2);
  CHECK(s90.basis_wait_ms[int(WaitBasis::host_nccl)] == Approx(1));
  // A measure above a window's iteration is never carried: the 40 ms trace (these steps take 5) is left
  // out of the later windows' mean, the two before it stand.
  link.add_wait(40, WaitBasis::trace, 91);
  post_odd(91, 92);
  CHECK_FALSE(from_floats(sent->back().data(), 92).plausible(WaitBasis::trace));  // fresh: travels, not taken
  post_odd(93, 94);
  const RankSummary s94 = from_floats(sent->back().data(), 94);
  CHECK(s94.wait_basis == WaitBasis::trace);
  CHECK(s94.wait_ms == Approx(0.55));
  CHECK(s94.wait_steps == 2);
  // One step's outlier does not stand for the rank while its measure is carried: the median of the
  // latest is (a step after its peer's traced one waited 3.2 ms, the steps around it 0.5-0.6; the mean
  // of the latest two read 1.85 ms for 60 steps of a balanced two-GPU run).
  link.add_wait(0.6, WaitBasis::markers, 95);
  link.add_wait(3.2, WaitBasis::markers, 96);
  link.add_wait(0.5, WaitBasis::markers, 97);
  post_odd(95, 96);  // fresh: the window's own three
  CHECK(from_floats(sent->back().data(), 96).basis_wait_ms[int(WaitBasis::markers)] == Approx((0.6 + 3.2 + 0.5) / 3));
  for (int last = 98; last <= 120; last += 2) {
    post_odd(last - 1, last);
    const RankSummary carried = from_floats(sent->back().data(), last);
    INFO("window ending at step " << last);
    CHECK(carried.basis_steps[int(WaitBasis::markers)] == 3);
    CHECK(carried.basis_wait_ms[int(WaitBasis::markers)] == Approx(0.6));
  }
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

TEST_CASE("cross-rank: with log_every above the exchange's cadence, a line takes the newest view and the "
          "newest own summary, never a backlog", "[cross_rank]") {
  const auto log = steptrace_test::fresh_log("cross_rank_log_every_newest");
  steptrace::Config cfg = four_ranks_config(log);
  cfg.log_every = 5;
  REQUIRE(steptrace::start(cfg));
  REQUIRE(steptrace::details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 1));
  steptrace_test::run_input_nccl_steps(20);
  steptrace::stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 4);  // steps 4, 9, 14, 19
  for (const auto& l : lines) {
    INFO("line of step " << l["global_step"]);
    // Views every step: the line's own, not one 4 behind (the last step, closed by stop(), posts none:
    // its line takes the step before's).
    const int own = int(l["global_step"]) - (l["global_step"] == 19 ? 1 : 0);
    REQUIRE(l["cross_rank"].is_object());
    CHECK(l["cross_rank"]["step"] == own);
    REQUIRE(l["rank_wait"].is_object());
    CHECK(l["rank_wait"]["step"] == own);
  }
}
