// signal_child LOG MODE - steps until a signal ends it (tests/test_exit.cpp sends SIGTERM or SIGKILL).
// MODE default: SIGTERM keeps its default action; chain: the program installed its own SIGTERM handler
// before start(), which steptrace must call after writing its lines (the handler exits with 42);
// many: the default action, with fast steps of 20 phases;
// chain_exit: as chain, but the handler calls exit(45) (the exit hook then finds the ending done: one
// end record, issue #58).
// after: the program installs its handler after start() (over steptrace's; steptrace then sees no
// signal, the exit hook writes the lines when the handler calls exit()).
// held: after 5 steps the program sends itself SIGTERM (sigqueue, value 7) from inside steptrace's
// bookkeeping (DeferEndings); its own SA_SIGINFO handler, installed before start(), says what it got
// and exits with 44.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/signals.hpp>  // DeferEndings, for the held mode

#include "host_config.hpp"

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
void chained_exit_handler(int) { std::exit(45); }
void info_handler(int, siginfo_t* info, void*) {
  const bool queued = info && info->si_code == SI_QUEUE && info->si_value.sival_int == 7 && info->si_pid == ::getpid();
  const char yes[] = "program handler: the sender's siginfo\n", no[] = "program handler: another siginfo\n";
  if (queued) (void)!::write(STDOUT_FILENO, yes, sizeof yes - 1);
  else (void)!::write(STDOUT_FILENO, no, sizeof no - 1);
  _exit(44);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[2];
  if (mode == "chain") std::signal(SIGTERM, own_handler);
  if (mode == "chain_exit") std::signal(SIGTERM, chained_exit_handler);
  if (mode == "held") {
    struct sigaction sa {};
    sa.sa_sigaction = info_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
  auto cfg = steptrace_test::host_config(argv[1]);
  // Steps of 300 us: a writer held up ~80 ms on a loaded machine would fill the default 256 and drop
  // steps, which these modes check never happens; "many" is the backlog case and keeps the default.
  if (mode != "many") cfg.max_pending_steps = 65536;
  // held: what it checks is the order (the held signal, then the program's handler with the sender's
  // siginfo), not end_wait_ms's bound: on a loaded 2-core machine the ending once took over the default
  // 1 s (a CI-path run, session 76: "not served", the program went on), so it waits for the watcher's
  // answer up to 30 s here.
  if (mode == "held") cfg.end_wait_ms = 30000;
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
  if (mode == "held") {
    for (int i = 0; i < 5; ++i) {
      TRACE_STEP(512.0);
      TRACE_PHASE(forward);
    }
    TRACE_STEP(512.0);
    {
      steptrace::details::DeferEndings held;  // as the training thread inside the recorder's lock
      sigval value{};
      value.sival_int = 7;
      ::sigqueue(::getpid(), SIGTERM, value);  // this thread takes it: the others block SIGTERM
      const char text[] = "inside steptrace: the signal waits\n";
      (void)!::write(STDOUT_FILENO, text, sizeof text - 1);
    }
    const char text[] = "the program went on\n";  // never: the handler ends it
    (void)!::write(STDOUT_FILENO, text, sizeof text - 1);
    return 3;
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
