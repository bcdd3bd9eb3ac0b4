// exit_without_stop LOG STEPS [restart|exit] - a program that returns from main while steptrace still
// runs (no stop()): the background thread is still writing lines while static destructors run.
// restart: a first session of STEPTRACE steps is started and stopped first (its log LOG.first), then
// the second one (LOG) is left running: the exit hook, registered by the first start(), serves a session
// whose statics may have been made after it. exit: std::exit(0) from inside the loop's last step.
#include <steptrace/steptrace.hpp>

#include "host_config.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return 2;
  const std::string mode = argc == 4 ? argv[3] : "";
  if (mode == "restart") {
    if (!steptrace::start(steptrace_test::host_config(std::string(argv[1]) + ".first"))) return 3;
    for (int i = 0; i < 5; ++i) {
      TRACE_STEP();
      TRACE_PHASE(forward);
    }
    steptrace::stop();
  }
  auto cfg = steptrace_test::host_config(argv[1]);
  cfg.max_lag_steps = steptrace::Config{}.max_lag_steps;  // as a program that sets nothing
  // The test asks whether exit loses what is pending, not whether the queue's bound holds on a loaded
  // machine (tests/test_limits.cpp covers that): room for every step.
  cfg.max_pending_steps = 65536;
  steptrace::start(cfg);
  const int steps = std::atoi(argv[2]);
  for (int i = 0; i < steps; ++i) {
    TRACE_STEP();
    TRACE_PHASE_NAMED("attention-with-a-long-name");  // longer than a short-string buffer: on the heap
    steptrace::record("loss", 1.0 / (i + 1));
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (std::chrono::steady_clock::now() < until) {
    }
    if (mode == "exit" && i == steps - 1) std::exit(0);  // inside the step: the ending closes it
  }
  return 0;  // no steptrace::stop()
}
