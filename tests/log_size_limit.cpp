// log_size_limit LOG - a log that stops taking lines part way (a file size limit, as a full disk
// would) and then takes them again: the file must hold whole lines only, and say how many were lost.
#include <steptrace/steptrace.hpp>

#include "host_config.hpp"

#include <chrono>
#include <filesystem>
#include <thread>

#include <sys/resource.h>

namespace {
void steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // SIGXFSZ keeps its default action (end the process): steptrace's writes must not raise it where it
  // would end the program (issue #17).
  steptrace::start(steptrace_test::host_config(argv[1]));
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  const rlim_t unlimited = limit.rlim_cur;
  limit.rlim_cur = 10000;  // room for a few lines, the next one cut part way
  setrlimit(RLIMIT_FSIZE, &limit);
  steps(20);
  // Wait until the background thread has met the limit: its lines come a few ms after each step, all
  // 20 steps' lines (far past 10 000 bytes) in a pass or two once it runs. Its first line is the sign it
  // runs (a loaded machine may hold it back for long: up to 10 s), then 300 ms for the rest.
  const auto written = [&] {
    std::error_code ec;
    const auto size = std::filesystem::file_size(argv[1], ec);
    return !ec && size > 0;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline && !written()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  limit.rlim_cur = unlimited;
  setrlimit(RLIMIT_FSIZE, &limit);
  steps(20);
  const auto s = steptrace::stop();
  return s.lines_failed > 0 ? 0 : 3;  // the test needs the limit to have been met
}
