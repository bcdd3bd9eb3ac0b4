// exit_without_stop LOG STEPS - a program that returns from main while steptrace still runs (no
// stop()): the background thread is still writing lines while static destructors run.
#include <steptrace/steptrace.hpp>

#include "host_config.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  auto cfg = steptrace_test::host_config(argv[1]);
  cfg.max_lag_steps = steptrace::Config{}.max_lag_steps;  // as a program that sets nothing
  // The test asks whether exit loses what is pending, not whether the queue's bound holds on a loaded
  // machine (tests/test_limits.cpp covers that): room for every step.
  cfg.max_pending_steps = 65536;
  steptrace::start(cfg);
  for (int i = 0; i < std::atoi(argv[2]); ++i) {
    TRACE_STEP();
    TRACE_PHASE_NAMED("attention-with-a-long-name");  // longer than a short-string buffer: on the heap
    steptrace::record("loss", 1.0 / (i + 1));
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  return 0;  // no steptrace::stop()
}
