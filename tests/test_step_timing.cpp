// Step timing semantics: step time runs to the next step's start; untracked time is reported.
#include <steptrace/steptrace.hpp>

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
  CHECK(m.step_time_ns == 10'000'000);
  CHECK(m.scope_time_ns == 8'000'000);
  CHECK(m.phases.at(phase_tag::forward).total_ns == 3'000'000);
  CHECK(m.phases.at(phase_tag::forward).count == 2);
  CHECK(m.phases.at(phase_tag::input).total_ns == 12'000'000);
  CHECK(m.phases.at(phase_tag::input).other_thread_count == 1);
  // covered on the step thread: [1,3] + [3,6] + [6.5,8.5] = 7 ms of 10
  CHECK(m.untracked_ns == 3'000'000);
  CHECK(*m.tokens_per_second == Approx(1000 / 0.010));
  CHECK(*m.samples_per_second == Approx(4 / 0.010));
}

TEST_CASE("union_length merges overlaps and ignores empty intervals", "[timing]") {
  CHECK(union_length({}) == 0);
  CHECK(union_length({{0, 10}, {5, 15}, {20, 30}, {30, 31}, {8, 8}, {40, 35}}) == 26);
  CHECK(union_length({{5, 15}, {0, 100}}) == 100);
}

TEST_CASE("live steps: step time is start-to-next-start, last step ends at its scope", "[timing]") {
  const auto log = fresh_log("step_timing");
  Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.gpu = "off";
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) {
    {
      TRACE_STEP();
      TRACE_PHASE(forward);
      spin_for_us(4000);
    }
    spin_for_us(3000);  // between steps: part of the step, untracked
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
    if (i < 2) {
      CHECK(l["step_time_basis"] == "next_step_start");
      CHECK(step >= 7.0);
      CHECK(double(l["untracked_time_ms"]) >= 3.0);
    } else {
      CHECK(l["step_time_basis"] == "scope_end");
      CHECK(step >= 4.0);
      CHECK(step == double(l["step_scope_ms"]));  // the last step ends at its scope
    }
    CHECK(double(l["step_scope_ms"]) >= 4.0);
    CHECK(double(l["forward_time_ms"]) >= 4.0);
    // step time = outermost phases + untracked (to rounding of the printed values)
    CHECK(double(l["forward_time_ms"]) + double(l["untracked_time_ms"]) == Approx(step).epsilon(0.01));
  }
}

TEST_CASE("tokens from TRACE_STEP arguments override the config", "[timing]") {
  const auto log = fresh_log("step_tokens");
  Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.gpu = "off";
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
