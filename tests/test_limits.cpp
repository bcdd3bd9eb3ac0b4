// Bounds a hostile or careless program meets (issue #17, item 6): many record() calls, a thread that
// floods phase scopes, more phase names than the table holds, reserved and unprintable names, and a
// full writer queue at stop(). Each must keep the lines right and say what was dropped.
// Its own program: it fills the process's phase table, which no other test may see full.
#include <steptrace/steptrace.hpp>

#include <atomic>
#include <limits>
#include <string>
#include <thread>

#include "capture_log.hpp"
#include "host_config.hpp"
#include "support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;


TEST_CASE("past 256 record() calls in a step the built-in scalars still take their last value", "[limits]") {
  const auto log = fresh_log("limits_scalars");
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  {
    TRACE_STEP();
    steptrace::record("loss", 1.0);  // recorded before the cap ...
    for (int i = 0; i < 1000; ++i) steptrace::record("loss", i);  // ... and its last value wins past it
  }
  {
    TRACE_STEP();
    for (int i = 0; i < 300; ++i) steptrace::record("metric_" + std::to_string(i), i);
    steptrace::record("grad_norm", 2.5);  // first recorded past the cap: a built-in still gets in
    steptrace::record("metric_7", 77);   // a name already recorded takes its new value
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["loss"] == 999.0);
  CHECK(lines[0]["dropped"]["scalars"].get<int>() > 0);
  CHECK(lines[1]["grad_norm"] == 2.5);
  CHECK(lines[1]["scalars"]["metric_7"] == 77.0);
  CHECK_FALSE(lines[1]["scalars"].contains("metric_299"));  // a new name past the cap: dropped, counted
  CHECK(lines[1]["dropped"]["scalars"].get<int>() == (300 - 256) + 1);  // 44 new names, one value replaced
}

TEST_CASE("a thread flooding phase scopes leaves the step thread's phases their share", "[limits]") {
  const auto log = fresh_log("limits_spans");
  auto cfg = steptrace_test::host_config(log);
  cfg.max_spans_per_step = 400;
  REQUIRE(steptrace::start(cfg));
  std::atomic<bool> go{false}, done{false};
  {
    TRACE_STEP();
    std::thread loader([&] {
      while (!go.load()) {
      }
      for (int i = 0; i < 2000; ++i) TRACE_PHASE(input);
      done = true;
    });
    go = true;
    while (!done.load()) {
    }
    loader.join();
    TRACE_PHASE(forward);
    steptrace_test::spin_for_us(100);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["forward_time_ms"].is_number());
  CHECK(lines[0]["dropped"]["phase_scopes"] == 2000 - 300);
}

TEST_CASE("when the step thread's own scopes are dropped, a missing phase says so", "[limits]") {
  const auto log = fresh_log("limits_spans_own");
  auto cfg = steptrace_test::host_config(log);
  cfg.max_spans_per_step = 8;
  REQUIRE(steptrace::start(cfg));
  {
    TRACE_STEP();
    for (int i = 0; i < 20; ++i) TRACE_PHASE(backward);
    TRACE_PHASE(forward);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["forward_time_ms"].is_null());
  const std::string why = lines[0]["null_reasons"]["forward_time_ms"];
  CHECK(why.find("phase scopes were dropped: max_spans_per_step") != std::string::npos);
}

TEST_CASE("scopes between steps over the bound are the drops of the line whose between_steps they are in",
          "[limits]") {
  const auto log = fresh_log("limits_spans_between");
  auto cfg = steptrace_test::host_config(log);
  cfg.max_spans_per_step = 8;
  REQUIRE(steptrace::start(cfg));
  { TRACE_STEP(); }
  for (int i = 0; i < 20; ++i) TRACE_PHASE(input);  // between steps 0 and 1
  { TRACE_STEP(); }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["dropped"]["phase_scopes"] == 0);
  CHECK(lines[1]["dropped"]["phase_scopes"] == 20 - 8);
  CHECK(lines[1]["between_steps"]["phases"]["input"]["count"] == 8);
}

TEST_CASE("reserved, unprintable and surplus phase names: renamed or counted, warned once, escaped", "[limits]") {
  auto& out = steptrace_test::captured_log();
  const auto log = fresh_log("limits_names");
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  {
    TRACE_STEP();
    TRACE_PHASE_NAMED("unphased");
    steptrace_test::spin_for_us(50);
  }
  std::string ugly = "bad\xff\nname";
  ugly += std::string(10000, 'x');
  steptrace::register_phase(ugly);
  for (int i = 0; i < 80; ++i) steptrace::register_phase("surplus_" + std::to_string(i));
  {
    TRACE_STEP();
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["phases"].contains("p_unphased"));
  CHECK_FALSE(lines[0]["phases"].contains("unphased"));  // nothing launched outside a phase
  CHECK(lines[1]["dropped"]["phase_names_total"].get<int>() > 0);
  const std::string text = out.str();
  CHECK(text.find("'unphased' is reserved") != std::string::npos);
  CHECK(text.find('\xff') == std::string::npos);
  CHECK(text.find("bad\\xff\\x0aname") != std::string::npos);
  std::size_t longest = 0, begin = 0;
  for (std::size_t nl = text.find('\n'); nl != std::string::npos; begin = nl + 1, nl = text.find('\n', begin))
    longest = std::max(longest, nl - begin);
  CHECK(longest < 400);
  std::size_t full_warnings = 0;
  for (std::size_t at = text.find("phase table full"); at != std::string::npos; at = text.find("phase table full", at + 1))
    ++full_warnings;
  CHECK(full_warnings == 1);
}

TEST_CASE("stop()'s final line is written even when the writer queue is full", "[limits]") {
  const auto log = fresh_log("limits_queue");
  auto cfg = steptrace_test::host_config(log);
  cfg.max_pending_steps = 1;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 3000; ++i) TRACE_STEP();
  {
    TRACE_STEP();
    steptrace::record("loss", 42);
    const auto s = steptrace::stop();
    REQUIRE(s.steps_dropped > 0);  // the queue was full: the case this test is about
  }
  const auto lines = read_lines(log);
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back()["global_step"] == 3000);
  CHECK(lines.back()["loss"] == 42.0);
}

TEST_CASE("tokens that are not a finite number are refused with a warning, and the null says why", "[limits]") {
  auto& out = steptrace_test::captured_log();
  const auto log = fresh_log("limits_tokens");
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  {
    TRACE_STEP(std::numeric_limits<double>::infinity());
  }
  {
    TRACE_STEP();
    steptrace::set_step_tokens(std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity());
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  for (const auto& line : lines) {
    CHECK(line["tokens"].is_null());
    CHECK(line["tokens_per_second"].is_null());
    steptrace_test::require_null_reasons(line);
  }
  CHECK(out.str().find("tokens must be a finite number >= 0") != std::string::npos);
}
