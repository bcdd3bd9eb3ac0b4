// log_size_limit LOG - a log that stops taking lines part way (a file size limit, as a full disk
// would) and then takes them again: the file must hold whole lines only, and say how many were lost.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include "child_steps.hpp"
#include "host_config.hpp"

#include <chrono>
#include <thread>

#include <sys/resource.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // SIGXFSZ keeps its default action (end the process): steptrace's writes must not raise it where it
  // would end the program (issue #17).
  const steptrace::Config cfg = steptrace_test::host_config(argv[1]);
  steptrace::start(cfg);
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  const rlim_t unlimited = limit.rlim_cur;
  // Room for a few lines, the next one cut part way: a full line here is ~10.3 KB (two fit), a compact
  // one 1.5-2.8 KB after a run record of ~1.9 KB.
  limit.rlim_cur = cfg.line_detail == steptrace::LineDetail::full ? 25000 : 10000;
  setrlimit(RLIMIT_FSIZE, &limit);
  steptrace_test::forward_steps(20);
  // Wait for the event: the background thread has met the limit (a line refused). The 20 steps' lines
  // are far past 10 000 bytes; a loaded machine may hold the thread back for long (up to 30 s here).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && steptrace::details::Session::current().lines_failed_so_far() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  limit.rlim_cur = unlimited;
  setrlimit(RLIMIT_FSIZE, &limit);
  steptrace_test::forward_steps(20);
  const auto s = steptrace::stop();
  return s.lines_failed > 0 ? 0 : 3;  // the test needs the limit to have been met
}
