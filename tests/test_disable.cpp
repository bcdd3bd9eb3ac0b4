// Built with STEPTRACE_DISABLE: the instrumented program compiles unchanged and nothing happens.
#include <steptrace/steptrace.hpp>

#include <fstream>

#include "support.hpp"

TEST_CASE("STEPTRACE_DISABLE: every macro and function is a no-op", "[disable]") {
  const auto log = steptrace_test::fresh_log("disabled");
  steptrace::Config cfg;
  cfg.log_path = log;
  CHECK_FALSE(steptrace::start(cfg));
  int evaluated = 0;
  auto tokens = [&] { return ++evaluated; };
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP(tokens());
    STEPTRACE_STEP();
    TRACE_PHASE(forward);
    STEPTRACE_PHASE(backward);
    TRACE_PHASE_NAMED("custom");
    steptrace::record("loss", 1.0);
    steptrace::set_step_tokens(5);
  }
  CHECK(evaluated == 0);  // arguments are not evaluated
  CHECK_FALSE(steptrace::is_running());
  CHECK_FALSE(steptrace::stop().started);
  CHECK_FALSE(std::ifstream(log).good());
  CHECK(steptrace::register_phase("x") == steptrace::kNoPhase);
  CHECK(steptrace::register_phase_checked("x").id == steptrace::kNoPhase);  // phase.hpp's functions too
  CHECK(steptrace::phase_name(steptrace::phase_tag::forward) == "unknown");
  CHECK(steptrace::phase_count() == 0);
  CHECK(steptrace::phase_names_rejected() == 0);
}
