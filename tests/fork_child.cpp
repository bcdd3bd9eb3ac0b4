// fork_child DIR TRIALS MODE - fork() while steptrace runs (details/fork.hpp's rule). Each trial
// starts steptrace (every second one with the scrape endpoint), keeps a second thread in phase
// scopes, warn-once, the phase table and the logger (its output to /dev/null), and forks
// from inside an open step and phase at a random step. The child finds steptrace off, steps (no-ops),
// calls stop(); MODE restart: then starts anew with DIR/child_<trial>.jsonl and writes 5 lines.
// The parent waits for the child (a child still there after 20 s is a hang: killed and counted)
// and goes on stepping to its own stop(). Prints one line per failure; exits 0 only if none.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/log.hpp>

#include "host_config.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
void spin(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// The child's side. Returns its exit status: 0 when steptrace behaved as the rule says.
int child(const std::string& dir, int trial, bool restart) {
  if (steptrace::is_running()) return 10;
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP(64.0);
    TRACE_PHASE(backward);
    TRACE_PHASE_NAMED("helper");  // the helper thread's site-less name, registered here too
    steptrace::record("child", i);
    spin(50);
  }
  // The phase table's lock and warn-once's (a bad name warns through the logger: spdlog's console lock).
  if (steptrace::register_phase("child_phase") == steptrace::kNoPhase) return 14;
  (void)steptrace::register_phase("bad name in child " + std::to_string(trial));
  const steptrace::Summary dead = steptrace::stop();
  if (dead.lines_written != 0) return 11;
  if (!restart) return 0;
  if (!steptrace::start(steptrace_test::host_config(dir + "/child_" + std::to_string(trial) + ".jsonl"))) return 12;
  (void)steptrace::register_phase("another bad name " + std::to_string(trial));
  for (int i = 0; i < 5; ++i) {
    TRACE_STEP(64.0);
    TRACE_PHASE(optimizer);
    TRACE_PHASE_NAMED("child_phase");
    steptrace::record("child", i);
    spin(50);
  }
  const steptrace::Summary s = steptrace::stop();
  return s.lines_written == 5 ? 0 : 13;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fork_child DIR TRIALS stop|restart\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int trials = std::atoi(argv[2]);
  const bool restart = std::string(argv[3]) == "restart";
  std::mt19937 random(20261125);
  // The helper thread logs all the time (to take spdlog's console lock at the fork): not to the test's output.
  if (FILE* quiet = std::freopen("/dev/null", "w", stderr)) (void)quiet;
  int failures = 0;
  for (int trial = 0; trial < trials; ++trial) {
    steptrace::Config cfg = steptrace_test::host_config(dir + "/parent.jsonl");
    if (trial % 2) cfg.prometheus_listen = "127.0.0.1:0";  // the child must not keep its socket
    if (!steptrace::start(cfg)) {
      std::printf("trial %d: start() failed\n", trial);
      return 1;
    }
    std::atomic<bool> done{false};
    std::thread helper([&done] {
      for (long n = 0; !done.load(); ++n) {
        TRACE_PHASE_NAMED("helper");
        (void)steptrace::register_phase("helper");  // the phase table's lock
        (void)steptrace::capture_steps(0);          // warn-once's lock (one warning, then quiet)
        if (n % 8 == 0) steptrace::details::logger()->info("helper {}", n);  // spdlog's console lock
        spin(20);
      }
    });
    const int fork_at = static_cast<int>(random() % 12);
    pid_t pid = -1;
    for (int i = 0; i < 16; ++i) {
      TRACE_STEP(128.0);
      TRACE_PHASE(forward);
      spin(static_cast<int>(random() % 200));
      if (i == fork_at) {
        pid = ::fork();
        if (pid == 0) std::exit(child(dir, trial, restart));  // exit(): the exit hook and static destructors run
      }
    }
    done = true;
    helper.join();
    const steptrace::Summary s = steptrace::stop();
    if (s.lines_written != 16) std::printf("trial %d: parent wrote %llu lines, not 16\n", trial, static_cast<unsigned long long>(s.lines_written));
    failures += s.lines_written != 16;
    if (pid < 0) {
      std::printf("trial %d: fork failed\n", trial);
      ++failures;
      continue;
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    pid_t got = 0;
    while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (got == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      std::printf("trial %d: the child hung (killed after 20 s)\n", trial);
      ++failures;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("trial %d: the child ended with %s %d\n", trial, WIFEXITED(status) ? "status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      ++failures;
    }
  }
  std::printf("%d trials, %d failures\n", trials, failures);
  return failures == 0 ? 0 : 1;
}
