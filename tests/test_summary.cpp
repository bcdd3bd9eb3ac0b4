// The summary stop() returns and prints.
#include <steptrace/steptrace.hpp>
#include <steptrace/core/step_metrics.hpp>
#include <steptrace/core/summary.hpp>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

TEST_CASE("SummaryBuilder: mean, median, p90, phase shares", "[summary]") {
  SummaryBuilder b;
  for (int i = 1; i <= 10; ++i) {
    HostStepMetrics m;
    m.step_time_ns = i * 1'000'000;  // 1..10 ms
    m.untracked_ns = 100'000;
    m.phases[phase_tag::forward].total_ns = i * 500'000;
    m.tokens_per_second = 1000.0 * i;
    b.add(m, i % 2 ? std::optional<double>(0.5) : std::nullopt);
  }
  const Summary s = b.build();
  CHECK(s.steps == 10);
  CHECK(s.step_time_ms_mean == Approx(5.5));
  CHECK(s.step_time_ms_median == Approx(5.5));  // as statistics.median and the report take it
  CHECK(s.median_steps == 10);
  CHECK(render_summary_table(s).find("last") == std::string::npos);  // all steps: nothing to label
  CHECK(s.step_time_ms_p90 == Approx(10.0));
  // tokens over time: step i has i ms at 1000 i tokens/s, i*i tokens; 385 tokens in 55 ms (a mean of
  // the rates would say 5500)
  CHECK(*s.tokens_per_second_mean == Approx(385.0 / 0.055));
  CHECK(*s.estimated_mfu_mean == Approx(0.5));
  REQUIRE(s.phases.size() == 1);
  CHECK(s.phases[0].name == "forward");
  CHECK(s.phases[0].share == Approx(0.5));
  CHECK(s.phases[0].host_ms_mean == Approx(2.75));
  CHECK(s.untracked_share == Approx(1.0 / 55.0));
  const std::string table = render_summary_table(s);
  CHECK(table.find("10 steps") != std::string::npos);
  CHECK(table.find("forward") != std::string::npos);
  CHECK(table.find("50.0 %") != std::string::npos);
}

TEST_CASE("past the recent window, the table says which steps its median and p90 are over", "[summary]") {
  SummaryBuilder b;
  HostStepMetrics m;
  const std::size_t n = SummaryBuilder::kRecentSteps + 5;
  for (std::size_t i = 0; i < n; ++i) {
    m.step_time_ns = i < 5 ? 100'000'000 : 1'000'000;  // five slow steps first, then 1 ms ones
    b.add(m, std::nullopt);
  }
  const Summary s = b.build();
  CHECK(s.median_steps == SummaryBuilder::kRecentSteps);
  CHECK(s.step_time_ms_median == Approx(1.0));
  CHECK(s.step_time_ms_mean > 1.0);  // the whole run's
  CHECK(render_summary_table(s).find("(mean of all " + std::to_string(n) + " steps; median and p90 of the last 10000)") !=
        std::string::npos);
}

TEST_CASE("stop() returns the run's summary with the table", "[summary]") {
  const auto log = steptrace_test::fresh_log("summary_run");
  auto cfg = steptrace_test::host_config(log);
  cfg.summary = true;  // the default: stop() prints the summary table
  REQUIRE(start(cfg));
  for (int i = 0; i < 4; ++i) {
    TRACE_STEP();
    TRACE_PHASE(backward);
    steptrace_test::spin_for_us(1000);
  }
  const Summary s = stop();
  CHECK(s.steps == 4);
  CHECK(s.lines_written == 4);
  CHECK(s.log_path == log);
  CHECK(s.step_time_ms_median >= 1.0);
  CHECK(s.table.find("backward") != std::string::npos);
  CHECK(s.table.find(log) != std::string::npos);
}
