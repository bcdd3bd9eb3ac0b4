// Lifecycle and threads: start twice, stop without start, restart, steps from several threads,
// phases on a data-loader thread.
#include <memory>
#include <optional>

#include <steptrace/steptrace.hpp>
#include <steptrace/details/host_clock.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/details/span_ring.hpp>
#include <steptrace/details/step_queue.hpp>

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "host_config.hpp"
#include "support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

namespace {
steptrace::Config quiet(const std::string& log) {
  auto cfg = steptrace_test::host_config(log);
  return cfg;
}
}  // namespace

TEST_CASE("stop() without start() is a no-op that says so", "[lifecycle]") {
  const auto s = steptrace::stop();
  CHECK_FALSE(s.started);
  CHECK(s.steps == 0);
}

TEST_CASE("start() twice: the second call is ignored, the first session goes on", "[lifecycle]") {
  const auto log = fresh_log("start_twice");
  REQUIRE(steptrace::start(quiet(log)));
  CHECK_FALSE(steptrace::start(quiet("other.jsonl")));
  CHECK(steptrace::is_running());
  { TRACE_STEP(); }
  const auto s = steptrace::stop();
  CHECK(s.steps == 1);
  CHECK(read_lines(log).size() == 1);
  CHECK_FALSE(steptrace::is_running());
  CHECK_FALSE(steptrace::stop().started);  // second stop
}

TEST_CASE("after stop(), scopes are no-ops; a restart counts steps from 0", "[lifecycle]") {
  { TRACE_STEP(); TRACE_PHASE(forward); }  // nothing running
  const auto log = fresh_log("restart");
  REQUIRE(steptrace::start(quiet(log)));
  { TRACE_STEP(); }
  steptrace::stop();
  REQUIRE(steptrace::start(quiet(log)));
  { TRACE_STEP(); }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["global_step"] == 0);
  CHECK(lines[1]["global_step"] == 0);
}

TEST_CASE("a scope alive across stop() ends cleanly", "[lifecycle]") {
  const auto log = fresh_log("across_stop");
  REQUIRE(steptrace::start(quiet(log)));
  {
    TRACE_STEP();
    TRACE_PHASE(forward);
    steptrace::stop();  // the step is closed at stop(); the scopes' destructors find nothing running
  }
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["step_time_basis"] == "scope_end");
}

TEST_CASE("a scope alive across stop() and a new start() with another clock is not recorded", "[lifecycle][tsc]") {
  // It began in a session whose scopes read the tick counter (where usable) and ends in one that
  // reads steady_clock: its readings cannot be converted, so it counts as outside the steps.
  const auto log = fresh_log("across_restart");
  steptrace::Config cfg = quiet(log);
  cfg.clock = steptrace::ClockSource::automatic;
  REQUIRE(steptrace::start(cfg));
  if (!steptrace::details::scopes_read_ticks().load()) {  // start() found the tick counter unusable here
    steptrace::stop();
    steptrace_test::skip_test("tick clock not usable here: nothing to check");
  }
  std::optional<steptrace::PhaseScope> scope;
  scope.emplace(steptrace::phase_tag::backward);
  steptrace::stop();
  cfg.clock = steptrace::ClockSource::steady;
  REQUIRE(steptrace::start(cfg));
  {
    TRACE_STEP();
    scope.reset();  // the old scope ends inside the new session's step
    spin_for_us(200);
  }
  { TRACE_STEP(); }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  const double step_ms = lines[0]["step_time_ms"].get<double>();
  CHECK(step_ms < 1000);
  // Either way the old scope adds no backward time beyond the step (a tick reading taken as
  // nanoseconds would be seconds or more).
  const auto& backward = lines[0]["backward_time_ms"];
  CHECK((backward.is_null() || backward.get<double>() <= step_ms));
}

TEST_CASE("nested TRACE_STEP and TRACE_STEP on a second thread are ignored and counted", "[threads]") {
  const auto log = fresh_log("step_threads");
  REQUIRE(steptrace::start(quiet(log)));
  {
    TRACE_STEP();
    { TRACE_STEP(); }  // nested: ignored
    std::thread other([] { TRACE_STEP(); });  // concurrent: ignored
    other.join();
    spin_for_us(500);
  }
  // Sequential steps from different threads are fine: steps are process-wide.
  std::thread([] { TRACE_STEP(); spin_for_us(500); }).join();
  { TRACE_STEP(); }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["ignored_step_scopes"] == 2);
  CHECK(lines[1]["ignored_step_scopes"] == 0);
  CHECK(lines[1]["global_step"] == 1);
}

TEST_CASE("phases on a data-loader thread are counted in the step, not in untracked time", "[threads]") {
  const auto log = fresh_log("loader_thread");
  REQUIRE(steptrace::start(quiet(log)));
  std::atomic<bool> go{false}, done{false};
  std::thread loader([&] {
    while (!go) std::this_thread::yield();
    {
      TRACE_PHASE_NAMED("prefetch");
      spin_for_us(3000);
    }
    done = true;  // after the scope ended: the step closes only once the loader's phase is in it
  });
  {
    TRACE_STEP();
    go = true;
    { TRACE_PHASE(forward); spin_for_us(1000); }
    while (!done) std::this_thread::yield();
    spin_for_us(200);
  }
  loader.join();
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  const auto& l = lines[0];
  CHECK(l["phases"]["prefetch"]["other_thread_count"] == 1);
  CHECK(double(l["phases"]["prefetch"]["host_ms"]) >= 3.0);
  // untracked = step - forward only; the loader's phase does not cover step-thread time. (Asserted
  // exactly, not against wall-clock bounds: on a 2-core machine under load the scopes stretch.)
  const double untracked = l["untracked_time_ms"], step = l["step_time_ms"];
  CHECK(untracked == Approx(step - double(l["phases"]["forward"]["host_ms"])).margin(0.01));
  CHECK(untracked > double(l["phases"]["prefetch"]["host_ms"]) - double(l["phases"]["forward"]["host_ms"]) - 0.01);
}

TEST_CASE("many threads hammering phases and records: every line valid, counts add up", "[threads]") {
  const auto log = fresh_log("hammer");
  REQUIRE(steptrace::start(quiet(log)));
  std::atomic<bool> stop_workers{false};
  std::atomic<long> phases_done{0};
  std::atomic<int> workers_seen{0};  // workers that closed a scope while the steps ran
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      bool seen = false;
      while (!stop_workers) {
        {
          TRACE_PHASE(h2d);
          steptrace::record("worker", 1);
        }
        ++phases_done;
        if (!seen) seen = true, ++workers_seen;
      }
    });
  // At least 200 steps, and on until every worker has closed a scope (an event, not a duration: on a
  // loaded 2-core machine four workers once got no CPU during a 10 ms loop).
  int steps = 0;
  for (; steps < 200 || (workers_seen.load() < 4 && steps < 10'000'000); ++steps) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    spin_for_us(50);
  }
  stop_workers = true;
  for (auto& w : workers) w.join();
  const auto s = steptrace::stop();
  const auto lines = read_lines(log);
  CHECK(workers_seen.load() == 4);
  CHECK(lines.size() == static_cast<std::size_t>(steps));
  CHECK(s.steps == static_cast<uint64_t>(steps));
  // Every scope is accounted for exactly once: kept, dropped over the per-step bound, or outside a step.
  long counted = 0;
  for (const auto& l : lines) {
    for (const char* p : {"h2d", "forward"})
      if (l["phases"].contains(p)) counted += long(l["phases"][p]["count"]);
    counted += long(l["dropped"]["phase_scopes"]) + long(l["phase_scopes_outside_step"]);
    if (l["between_steps"].is_object())  // scopes that ended between two steps
      for (const auto& [name, p] : l["between_steps"]["phases"].items()) counted += long(p["count"]);
  }
  CHECK(phases_done.load() > 0);
  CHECK(counted == phases_done.load() + steps);
}

TEST_CASE("a thread's span ring: entries in order across wraps, a full ring refuses", "[threads][ring]") {
  using steptrace::details::SpanRing;
  auto ring = std::make_unique<SpanRing>();
  uint64_t next_in = 0, next_out = 0;
  const auto push = [&](uint64_t n) {
    for (uint64_t i = 0; i < n; ++i, ++next_in) CHECK(ring->push({next_in, next_in + 1, 7, 3, 0, SpanRing::kTicks}));
  };
  const auto drain = [&] {
    ring->drain([&](const SpanRing::Entry& e) {
      CHECK(e.begin == next_out);  // oldest first, nothing skipped or repeated
      CHECK(e.phase == 3);
      next_out = e.begin + 1;
    });
  };
  CHECK(ring->empty());
  for (int round = 0; round < 10; ++round) {  // ten times round the ring, in uneven bites
    push(SpanRing::kCapacity - 5);
    drain();
    push(7);
    drain();
  }
  CHECK(next_out == next_in);
  CHECK(ring->empty());
  push(SpanRing::kCapacity);  // exactly full
  CHECK_FALSE(ring->empty());
  CHECK_FALSE(ring->push({0, 0, 7, 3, 0, 0}));  // over: refused, the caller takes the locked path
  drain();
  CHECK(next_out == next_in);  // the refused entry was not written over an unread one
  CHECK(ring->empty());
  CHECK(ring->push({next_in, next_in + 1, 7, 3, 0, 0}));  // room again
}

TEST_CASE("a ring entry becomes the span it stands for: every field and flag, times left to the recorder",
          "[threads][ring]") {
  using steptrace::details::SpanRing;
  const auto plain = steptrace::details::span_of({100, 200, 42, 3, 0, 0});
  CHECK(plain.phase == 3);
  CHECK(plain.depth == 0);
  CHECK(plain.tid == 42);
  CHECK_FALSE(plain.on_step_thread);
  CHECK_FALSE(plain.nested_in_same);
  CHECK(plain.begin_ns == 0);  // clock readings, converted by the recorder (ticks or not)
  CHECK(plain.end_ns == 0);
  const auto all = steptrace::details::span_of(
      {100, 200, 7, 5, 2, static_cast<uint8_t>(SpanRing::kTicks | SpanRing::kOnStepThread | SpanRing::kNestedInSame)});
  CHECK(all.phase == 5);
  CHECK(all.depth == 2);
  CHECK(all.tid == 7);
  CHECK(all.on_step_thread);
  CHECK(all.nested_in_same);
  CHECK(steptrace::details::span_of({0, 0, 0, 1, 0, SpanRing::kOnStepThread}).on_step_thread);
  CHECK_FALSE(steptrace::details::span_of({0, 0, 0, 1, 0, SpanRing::kOnStepThread}).nested_in_same);
  CHECK(steptrace::details::span_of({0, 0, 0, 1, 0, SpanRing::kNestedInSame}).nested_in_same);
  CHECK_FALSE(steptrace::details::span_of({0, 0, 0, 1, 0, SpanRing::kNestedInSame}).on_step_thread);
}

TEST_CASE("a thread closing more scopes than its ring holds before they are gathered: none lost, in order",
          "[threads][ring]") {
  const auto log = fresh_log("ring_overflow");
  auto cfg = quiet(log);
  cfg.max_spans_per_step = 1 << 20;  // the step's bound keeps them all
  // The background thread looks every 20 ms whatever memory_sample_ms says (StepQueue::push wakes it
  // for no step here): the loop below outruns that, so at most one gathering falls inside it, and
  // 3 x the ring's capacity then fills the ring before or after it (a machine slow enough to fit two
  // looks in the loop may fill it less often; what is checked holds either way).
  cfg.memory_sample_ms = 60000;
  REQUIRE(steptrace::start(cfg));
  const int scopes = 3 * static_cast<int>(steptrace::details::SpanRing::kCapacity);
  {
    TRACE_STEP();
    std::thread loader([&] {
      for (int i = 0; i < scopes; ++i) {
        TRACE_PHASE(input);
        TRACE_PHASE(input);  // nested in the same phase
      }
    });
    loader.join();
    TRACE_PHASE(forward);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  const auto& l = lines[0];
  // Past a full ring the locked path kept every scope (it gathers the ring, then adds its own scope:
  // one in each 4 097 takes it), with the thread the ring entry carries: not the step's (exact, so a
  // locked-path scope that lost it fails). The rest of what an entry carries: span_of's case above.
  CHECK(l["phases"]["input"]["count"] == 2 * scopes);
  CHECK(l["phases"]["input"]["other_thread_count"] == 2 * scopes);
  CHECK(l["dropped"]["phase_scopes"] == 0);
  CHECK(l["phases"]["forward"]["count"] == 1);
  CHECK_FALSE(l["phases"]["forward"].contains("other_thread_count"));
  CHECK(l["phase_scopes_outside_step"] == 0);
}

// The training thread wakes the background thread only for stop()'s last step or once a quarter of the
// queue's bound waits (a wake at every step cost it a futex call and the wake-up: step_queue.hpp);
// otherwise the background thread takes the steps at its next look.
TEST_CASE("the writer queue wakes its reader at a quarter of its bound or at the last step, not at each step", "[threads]") {
  namespace d = steptrace::details;
  auto record = [](uint64_t i) {
    steptrace::StepRecord r;
    r.index = i;
    return r;
  };
  SECTION("push by push") {
    d::StepQueue queue;
    queue.reset(8);  // wakes at 2 waiting
    REQUIRE(queue.push(record(0)));
    CHECK(queue.wakes() == 0);
    REQUIRE(queue.push(record(1)));
    CHECK(queue.wakes() == 1);
    REQUIRE(queue.push(record(2)));  // still 2 or more waiting: each push wakes until they are taken
    CHECK(queue.wakes() == 2);
    std::deque<steptrace::StepRecord> batch;
    queue.take(batch, std::chrono::microseconds(0));
    CHECK(batch.size() == 3);
    REQUIRE(queue.push(record(3)));
    CHECK(queue.wakes() == 2);
    REQUIRE(queue.push(record(4), /*last=*/true));
    CHECK(queue.wakes() == 3);
    d::StepQueue each;
    each.reset(8, /*wake_at=*/1);  // the old way, for benchmarks/queue_wake
    REQUIRE(each.push(record(0)));
    CHECK(each.wakes() == 1);
  }
  SECTION("a sleeping reader") {
    // 20 rounds of two steps pushed while the reader sleeps (its period far above any round): each
    // round one take, both steps in it. A reader not woken by the second push fails the round's wait
    // (2 s) and is then stopped, not waited for.
    d::StepQueue queue;
    queue.reset(8);
    constexpr int kRounds = 20;
    std::atomic<int> takes{0}, items{0};
    std::vector<uint64_t> order;
    std::thread reader([&] {
      std::deque<steptrace::StepRecord> batch;
      for (;;) {
        const bool stopping = queue.take(batch, std::chrono::seconds(30));
        ++takes;
        for (auto& r : batch) order.push_back(r.index);
        items += static_cast<int>(batch.size());
        batch.clear();
        if (stopping || items >= 2 * kRounds + 1) return;
      }
    });
    bool woken = true;
    for (int round = 0; round < kRounds && woken; ++round) {
      while (items < 2 * round || !queue.reader_inside()) std::this_thread::yield();  // asleep, the queue empty
      queue.push(record(2 * round));      // one waiting: not woken
      queue.push(record(2 * round + 1));  // two: woken, and finds both
      woken = steptrace_test::wait_for([&] { return items >= 2 * round + 2; }, 2000);
    }
    if (woken) {
      while (!queue.reader_inside()) std::this_thread::yield();
      queue.push(record(2 * kRounds), /*last=*/true);  // stop()'s last step: woken at once, alone
      woken = steptrace_test::wait_for([&] { return items >= 2 * kRounds + 1; }, 2000);
    }
    queue.stop();
    reader.join();
    REQUIRE(woken);
    CHECK(queue.wakes() == kRounds + 1);
    CHECK(takes == kRounds + 1);
    REQUIRE(order.size() == 2 * kRounds + 1);
    for (std::size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i);
  }
}

// Not woken at each step, the background thread still looks every 20 ms (Worker::kLookEveryMs): a
// program whose memory readings are a minute apart has its lines while it runs, not at stop().
TEST_CASE("lines come out while the program runs with memory_sample_ms at a minute", "[threads]") {
  const auto log = fresh_log("look_every");
  auto cfg = quiet(log);
  cfg.memory_sample_ms = 60000;
  cfg.stall_after_s = 0;  // no stall watchdog, whose looks (every second here) would hide a missing cap
  REQUIRE(steptrace::start(cfg));
  { TRACE_STEP(); }
  // Asleep, nothing queued (the first look may have found the steps of a start already there).
  while (!steptrace::details::Session::current().background_asleep()) std::this_thread::yield();
  for (int i = 0; i < 2; ++i) {
    TRACE_STEP();
  }
  // Steps 0 and 1 are queued now (step 2 is closed when the next begins, or at stop()): one push each,
  // neither a quarter of the bound, so neither wakes it: its next look brings them out.
  CHECK(steptrace_test::wait_for([&] { return steptrace_test::read_lines_live(log).size() >= 2; }, 2000));
  steptrace::stop();
  CHECK(steptrace_test::read_lines(log).size() == 3);
}
