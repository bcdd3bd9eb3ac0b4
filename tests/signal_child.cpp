// signal_child LOG MODE - steps until a signal ends it (tests/test_exit.cpp sends SIGTERM or SIGKILL).
// MODE default: SIGTERM keeps its default action; chain: the program installed its own SIGTERM handler
// before start(), which steptrace must call after writing its lines (the handler exits with 42);
// many: the default action, with fast steps of 20 phases;
// after: the program installs its handler after start() (over steptrace's; steptrace then sees no
// signal, the exit hook writes the lines when the handler calls exit()).
#include <steptrace/steptrace.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

namespace {
void own_handler(int) {
  const char text[] = "program handler ran\n";
  (void)!::write(STDOUT_FILENO, text, sizeof text - 1);
  _exit(42);
}
void exiting_handler(int) { std::exit(43); }  // not async-signal-safe; a program's choice, as many make it
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[2];
  if (mode == "chain") std::signal(SIGTERM, own_handler);
  steptrace::Config cfg;
  cfg.log_path = argv[1];
  cfg.gpu = steptrace::Mode::off;
  cfg.summary = false;
  cfg.max_lag_steps = 0;
  // Steps of 300 us: a writer held up ~80 ms on a loaded machine would fill the default 256 and drop
  // steps, which these modes check never happens; "many" is the backlog case and keeps the default.
  if (mode != "many") cfg.max_pending_steps = 65536;
  steptrace::start(cfg);
  if (mode == "after") std::signal(SIGTERM, exiting_handler);
  if (mode == "many") {  // fast steps of 20 phases each: the heaviest backlog a SIGTERM can meet
    steptrace::PhaseId phases[20];
    for (int p = 0; p < 20; ++p) phases[p] = steptrace::register_phase("phase" + std::to_string(p));
    for (long i = 0;; ++i) {
      TRACE_STEP(512.0);
      for (const auto phase : phases) {
        steptrace::PhaseScope scope(phase);
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      steptrace::record("loss", 1.0 / (i + 1));
    }
  }
  for (long i = 0;; ++i) {
    TRACE_STEP(512.0);
    {
      TRACE_PHASE(forward);
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    steptrace::record("loss", 1.0 / (i + 1));
  }
}
