// Step timing semantics: step time runs to the next step's start; untracked time is reported.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/host_clock.hpp>
#include <steptrace/details/line_policy.hpp>
#include <steptrace/core/step_metrics.hpp>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

namespace {
PhaseSpan span(PhaseId p, int64_t b, int64_t e, uint16_t depth = 0, bool step_thread = true) {
  PhaseSpan s;
  s.phase = p;
  s.begin_ns = b;
  s.end_ns = e;
  s.depth = depth;
  s.on_step_thread = step_thread;
  return s;
}
}  // namespace

TEST_CASE("compute_host_metrics on a synthetic step", "[timing]") {
  StepRecord r;
  r.begin_ns = 1'000'000;
  r.scope_end_ns = 9'000'000;
  r.end_ns = 11'000'000;  // next step began 2 ms after the scope closed
  r.tokens = 1000;
  r.samples = 4;
  r.spans = {span(phase_tag::input, 1'000'000, 3'000'000), span(phase_tag::forward, 3'000'000, 6'000'000),
             span(phase_tag::forward, 4'000'000, 5'000'000, 1),  // nested: inside the outer forward
             span(phase_tag::backward, 6'500'000, 8'500'000),
             span(phase_tag::input, 0, 10'000'000, 0, false)};  // a loader thread: not in the untracked sum
  r.spans[2].nested_in_same = true;
  const auto m = compute_host_metrics(r);
  CHECK(m.step_time_ns == 8'000'000);  // its own time: to the scope's end (the 2 ms after are between steps)
  CHECK(m.interval_ns == 10'000'000);
  CHECK(m.scope_time_ns == 8'000'000);
  CHECK(m.phases.at(phase_tag::forward).total_ns == 3'000'000);
  CHECK(m.phases.at(phase_tag::forward).count == 2);
  CHECK(m.phases.at(phase_tag::input).total_ns == 12'000'000);
  CHECK(m.phases.at(phase_tag::input).other_thread_count == 1);
  // covered on the step thread: [1,3] + [3,6] + [6.5,8.5] = 7 ms of 8
  CHECK(m.untracked_ns == 1'000'000);
  CHECK(*m.tokens_per_second == Approx(1000 / 0.008));
  CHECK(*m.samples_per_second == Approx(4 / 0.008));
  // A scope still open when the next step began (steptrace.loader(): the step ends where the next
  // wait begins): the step runs to the next step's start.
  r.scope_end_ns = 11'000'000;
  CHECK(compute_host_metrics(r).step_time_ns == 10'000'000);
  r.scope_end_ns = 0;
  CHECK(compute_host_metrics(r).step_time_ns == 10'000'000);
}

TEST_CASE("self time: each instant of a thread in one phase, the innermost open one", "[timing]") {
  // Step thread: forward [0, 100] holding softmax [20, 50] (which holds backward [30, 35]) and a
  // forward nested in forward [60, 70]; then optimizer [100, 120]. A loader thread: input [0, 80]
  // holding h2d [10, 20]. In µs.
  const PhaseId softmax = phase_tag::backward + 40;  // any id
  StepRecord r;
  r.begin_ns = 0;
  r.scope_end_ns = r.end_ns = 130'000;
  PhaseSpan inner_forward = span(phase_tag::forward, 60'000, 70'000, 1);
  inner_forward.nested_in_same = true;
  r.spans = {span(phase_tag::backward, 30'000, 35'000, 2), span(softmax, 20'000, 50'000, 1), inner_forward,
             span(phase_tag::forward, 0, 100'000, 0), span(phase_tag::optimizer, 100'000, 120'000, 0),
             span(phase_tag::h2d, 10'000, 20'000, 1, false), span(phase_tag::input, 0, 80'000, 0, false)};
  r.spans[5].tid = r.spans[6].tid = 2;
  for (int i = 0; i < 5; ++i) r.spans[i].tid = 1;
  const auto m = compute_host_metrics(r);
  CHECK(m.phases.at(phase_tag::forward).total_ns == 100'000);  // inclusive, the nested forward once
  CHECK(m.phases.at(phase_tag::forward).self_ns == 100'000 - 30'000);  // less softmax; the inner forward is its own
  CHECK(m.phases.at(softmax).self_ns == 25'000);
  CHECK(m.phases.at(phase_tag::backward).self_ns == 5'000);
  CHECK(m.phases.at(phase_tag::optimizer).self_ns == 20'000);
  CHECK(m.phases.at(phase_tag::input).self_ns == 70'000);  // another thread nests on its own
  CHECK(m.phases.at(phase_tag::h2d).self_ns == 10'000);
  // The step thread's self times stack to the time its outermost scopes cover: nothing twice.
  int64_t step_thread_self = 0;
  for (PhaseId p : {phase_tag::forward, softmax, phase_tag::backward, phase_tag::optimizer}) step_thread_self += m.phases.at(p).self_ns;
  CHECK(step_thread_self == 120'000);
  CHECK(step_thread_self == m.step_time_ns - m.untracked_ns);
  // A child whose parent closed in another step (not in this record) subtracts from nothing.
  StepRecord orphan;
  orphan.begin_ns = 0;
  orphan.scope_end_ns = orphan.end_ns = 50'000;
  orphan.spans = {span(softmax, 10'000, 20'000, 1)};
  CHECK(compute_host_metrics(orphan).phases.at(softmax).self_ns == 10'000);

  // Scopes that begin on one clock reading: an empty one, then a sibling holding a child. Whatever the
  // order they were recorded in, the child is its parent's.
  StepRecord ties;
  ties.begin_ns = 0;
  ties.scope_end_ns = ties.end_ns = 40'000;
  ties.spans = {span(softmax, 10'000, 15'000, 2), span(phase_tag::backward, 10'000, 20'000, 1),
                span(phase_tag::h2d, 10'000, 10'000, 1), span(phase_tag::forward, 0, 30'000, 0)};
  const auto t = compute_host_metrics(ties);
  CHECK(t.phases.at(phase_tag::forward).self_ns == 20'000);
  CHECK(t.phases.at(phase_tag::backward).self_ns == 5'000);
  CHECK(t.phases.at(softmax).self_ns == 5'000);
  CHECK(t.phases.at(phase_tag::h2d).self_ns == 0);
  // Threads past the open-phase table (tid 0, off the step thread): no nesting across them, each whole.
  StepRecord unknown;
  unknown.begin_ns = 0;
  unknown.scope_end_ns = unknown.end_ns = 40'000;
  unknown.spans = {span(phase_tag::input, 0, 30'000, 0, false), span(phase_tag::h2d, 5'000, 10'000, 1, false)};
  const auto u = compute_host_metrics(unknown);
  CHECK(u.phases.at(phase_tag::input).self_ns == 30'000);
  CHECK(u.phases.at(phase_tag::h2d).self_ns == 5'000);
}

TEST_CASE("union_length merges overlaps and ignores empty intervals", "[timing]") {
  CHECK(union_length({}) == 0);
  CHECK(union_length({{0, 10}, {5, 15}, {20, 30}, {30, 31}, {8, 8}, {40, 35}}) == 26);
  CHECK(union_length({{5, 15}, {0, 100}}) == 100);
}

TEST_CASE("live steps: step time ends at the scope; what runs between steps is the next line's", "[timing]") {
  const auto log = fresh_log("step_timing");
  auto cfg = steptrace_test::host_config(log);
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) {
    {
      TRACE_STEP();
      TRACE_PHASE(forward);
      spin_for_us(4000);
    }
    {
      TRACE_PHASE_NAMED("eval");
      spin_for_us(3000);  // between steps: no step's, the next line's between_steps
    }
  }
  const auto summary = stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(summary.steps == 3);
  CHECK(summary.lines_written == 3);
  for (int i = 0; i < 3; ++i) {
    const auto& l = lines[i];
    CHECK(l["global_step"] == i);
    const double step = l["step_time_ms"];
    CHECK(l["step_time_basis"] == "scope_end");
    CHECK(step >= 4.0);
    CHECK(step == double(l["step_scope_ms"]));
    CHECK_FALSE(l["phases"].contains("eval"));
    if (i < 2) CHECK(double(l["step_interval_ms"]) >= step + 3.0);
    if (i == 0) {
      CHECK(l["between_steps"].is_null());
    } else {
      CHECK(double(l["between_steps"]["host_ms"]) >= 3.0);
      CHECK(double(l["between_steps"]["phases"]["eval"]["host_ms"]) >= 3.0 - 0.005);
      CHECK(l["between_steps"]["gpu"].is_null());  // gpu=off
    }
    CHECK(double(l["step_scope_ms"]) >= 4.0);
    // Phase scopes may read the CPU tick counter, converted to steady_clock time by a fitted slope:
    // a 4 ms span (spun on steady_clock) can come out a few ppm short (3.999989 ms was seen).
    CHECK(double(l["forward_time_ms"]) >= 4.0 - 0.005);
    // step time = outermost phases + untracked (to rounding of the printed values)
    CHECK(double(l["forward_time_ms"]) + double(l["untracked_time_ms"]) == Approx(step).epsilon(0.01));
  }
}

TEST_CASE("tokens from TRACE_STEP arguments override the config", "[timing]") {
  const auto log = fresh_log("step_tokens");
  auto cfg = steptrace_test::host_config(log);
  cfg.tokens_per_step = 100;
  REQUIRE(start(cfg));
  {
    TRACE_STEP();
    spin_for_us(1000);
  }
  {
    const long long batch_tokens = 4096;  // integer arguments are accepted
    TRACE_STEP(batch_tokens, 8);
    spin_for_us(1000);
  }
  {
    TRACE_STEP();
    set_step_tokens(50, 2.0);
    spin_for_us(1000);
  }
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["tokens"] == 100);
  CHECK(lines[0]["samples_per_second"].is_null());
  CHECK(lines[1]["tokens"] == 4096);
  CHECK(lines[1]["samples"] == 8);
  CHECK(double(lines[1]["tokens_per_second"]) ==
        Approx(4096.0 / (double(lines[1]["step_time_ms"]) / 1000.0)).epsilon(1e-3));
  CHECK(lines[2]["tokens"] == 50);
  CHECK(lines[2]["samples"] == 2);
}

TEST_CASE("TickClock: identity until calibrated, then a line through the latest anchor", "[timing][clock]") {
  // Synthetic counter: 3 ticks per ns, offset 1000.
  auto ticks = [](int64_t ns) { return static_cast<uint64_t>(3 * ns + 1000); };
  TickClock c;
  CHECK(c.to_ns(12345) == 12345);
  CHECK(c.anchor(ticks(0), 0) == 0);
  CHECK(c.anchor(ticks(500'000), 500'000) == 0);  // baseline below 1 ms: no slope yet
  CHECK_FALSE(c.calibrated());
  CHECK(c.anchor(ticks(2'000'000), 2'000'000) == 0);
  REQUIRE(c.calibrated());
  CHECK(c.ns_per_tick() == Approx(1.0 / 3.0));
  CHECK(std::llabs(c.to_ns(ticks(2'500'000)) - 2'500'000) <= 1);
  CHECK(std::llabs(c.to_ns(ticks(1'999'000)) - 1'999'000) <= 1);  // read just before the anchor
  // The next anchor predicted right: error 0; a counter that jumped 50 us: reported.
  CHECK(std::llabs(c.anchor(ticks(10'000'000), 10'000'000)) <= 1);
  CHECK(std::llabs(c.anchor(ticks(20'050'000), 20'000'000) - 50'000) <= 1);
}

TEST_CASE("the CPU tick counter, once anchored, reads steady_clock time", "[timing][clock][tsc]") {
  const std::string why = steptrace::details::ticks_unusable_reason();
  if (!why.empty()) steptrace_test::skip_test("tick clock not usable here (" + why + ")");
  TickClock c;
  uint64_t t = 0;
  int64_t n = 0;
  REQUIRE(steptrace::details::take_clock_anchor(t, n, 1.0, 100000));
  c.anchor(t, n);
  spin_for_us(5000);
  REQUIRE(steptrace::details::take_clock_anchor(t, n, 1.0, 100000));
  c.anchor(t, n);
  REQUIRE(c.calibrated());
  spin_for_us(2000);
  // 2 ms after the anchor the fitted line is within a few µs (a 5 ms baseline, ~50 ns of jitter);
  // the smallest of several tries keeps a preemption between the two reads out.
  int64_t best = INT64_MAX;
  for (int i = 0; i < 20; ++i) {
    const int64_t before = monotonic_ns();
    const int64_t converted = c.to_ns(read_ticks());
    const int64_t after = monotonic_ns();
    best = std::min(best, std::max(before - converted, converted - after));
  }
  CHECK(best <= 5000);
}

TEST_CASE("phase times are the same with the tick clock and with steady_clock", "[timing][clock]") {
  for (const char* clock : {"auto", "steady"}) {
    INFO("clock=" << clock);
    const bool steady = std::string(clock) == "steady";
    const auto log = fresh_log(std::string("clock_") + clock);
    auto cfg = steptrace_test::host_config(log);
    cfg.clock = steady ? steptrace::ClockSource::steady : steptrace::ClockSource::automatic;
    REQUIRE(start(cfg));
    // clock=steady never reads ticks; auto reads them where start() found them usable (the log says).
    if (steady) CHECK_FALSE(steptrace::details::scopes_read_ticks().load());
    INFO("scopes read ticks: " << steptrace::details::scopes_read_ticks().load());
    std::vector<double> outer_ms;
    for (int i = 0; i < 6; ++i) {
      TRACE_STEP();
      const int64_t t0 = monotonic_ns();
      {
        TRACE_PHASE(forward);
        spin_for_us(1000);
      }
      outer_ms.push_back(ns_to_ms(monotonic_ns() - t0));
      spin_for_us(300);
    }
    stop();
    const auto lines = read_lines(log);
    REQUIRE(lines.size() == 6);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const double fwd = lines[i]["forward_time_ms"].get<double>();
      CHECK(fwd >= 1.0 - 0.005);  // tick-clock conversion: a few ppm either way
      CHECK(fwd <= outer_ms[i] + 0.005);
      // The phase lies inside its step: untracked time is what the step has besides it (~0.3 ms).
      const double untracked = lines[i]["untracked_time_ms"].get<double>();
      CHECK(untracked >= 0.25);
      CHECK(untracked <= lines[i]["step_time_ms"].get<double>() - 1.0 + 0.01);
    }
  }
}

TEST_CASE("CUPTI is asked for partly filled buffers only after a line waited, or after many launches", "[timing][flush]") {
  using steptrace::details::FlushInputs;
  using steptrace::details::should_flush_records;
  const int64_t ms = 1'000'000;
  auto at = [](int64_t now, std::optional<int64_t> oldest, int64_t last, uint64_t launches = 0) {
    FlushInputs in;  // flush_after_ms: the default 200
    in.now = now;
    in.oldest_end = oldest;
    in.last_flush = last;
    in.launches_since_flush = launches;
    return should_flush_records(in);
  };
  CHECK_FALSE(at(1000 * ms, std::nullopt, 0));          // no line waits, no pressure
  CHECK_FALSE(at(1000 * ms, 900 * ms, 0));              // the oldest line waited 100 ms
  CHECK(at(1000 * ms, 800 * ms, 0));                    // waited 200 ms
  CHECK_FALSE(at(1000 * ms, 500 * ms, 950 * ms));       // asked 50 ms ago
  CHECK(at(1000 * ms, 500 * ms, 800 * ms));
  // Many launches since the last flush: sooner, with or without a waiting line, at most every 20 ms.
  CHECK(at(1000 * ms, 990 * ms, 950 * ms, 20000));
  CHECK(at(1000 * ms, std::nullopt, 950 * ms, 16384));
  CHECK_FALSE(at(1000 * ms, 990 * ms, 990 * ms, 20000));
  CHECK_FALSE(at(1000 * ms, 990 * ms, 950 * ms, 16383));
  // untraced_cupti=detach: a traced step's line is asked for at once (at most every 20 ms), since
  // CUPTI stays attached until it is out.
  FlushInputs detach;
  detach.now = 1000 * ms;
  detach.oldest_end = 995 * ms;
  detach.last_flush = 975 * ms;
  detach.detach_waits = true;
  CHECK(should_flush_records(detach));
  detach.last_flush = 990 * ms;
  CHECK_FALSE(should_flush_records(detach));
  detach.last_flush = 0;
  detach.oldest_end.reset();  // nothing waits yet
  CHECK_FALSE(should_flush_records(detach));

  // Steps of 62 ms with 770 launches each, whose records come only with a flush (the oldest waiting
  // line is the first step that ended after the last flush): one flush per 200-264 ms, not per step.
  // With 10 000 launches per 38 ms step: one per ~2 steps, so CUPTI's buffers never hold more than
  // ~20 000 records.
  struct Case {
    int64_t step_ms;
    uint64_t launches;
    int min_flushes, max_flushes;
  };
  for (const Case c : {Case{62, 770, 23, 31}, Case{38, 10000, 70, 110}}) {
    INFO("step " << c.step_ms << " ms, " << c.launches << " launches");
    int flushes = 0;
    int64_t last = 0;
    uint64_t since = 0;
    for (int64_t t = 0; t < 6200 * ms; t += 2 * ms) {  // the worker looks every 2 ms while lines wait
      if (t > 0 && t % (c.step_ms * ms) == 0) since += c.launches;  // a step's launches, drained
      const int64_t first_end = (last / (c.step_ms * ms) + 1) * c.step_ms * ms;
      const std::optional<int64_t> oldest = first_end <= t ? std::optional<int64_t>(first_end) : std::nullopt;
      if (at(t, oldest, last, since)) ++flushes, last = t, since = 0;
    }
    CHECK(flushes >= c.min_flushes);
    CHECK(flushes <= c.max_flushes);
  }
}
