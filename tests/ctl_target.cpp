// A host-only program for the steptrace-ctl end-to-end check (tests/checks/remote_capture_check.py): one
// rank of a job (STEPTRACE_RANK, STEPTRACE_WORLD_SIZE), stepping until STOP_FILE appears (120 s at
// most). Steps: input 1 ms, forward 2 ms (25 ms on SLOW_RANK), backward 2 ms, nccl 1 ms. The planted 23 ms
// stands out of what a loaded machine adds to a sleep (a few ms: 3 ms was lost in it 5 times in 42 loaded runs).
//   ctl_target LOG STOP_FILE SLOW_RANK
#include <steptrace/steptrace.hpp>

#include "host_config.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

namespace {
void busy_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ctl_target LOG STOP_FILE SLOW_RANK\n");
    return 2;
  }
  const char* rank_env = std::getenv("STEPTRACE_RANK");
  const int rank = rank_env ? std::atoi(rank_env) : 0;
  const bool slow = rank == std::atoi(argv[3]);
  auto cfg = steptrace_test::host_config(argv[1]);
  cfg.max_lag_steps = steptrace::Config{}.max_lag_steps;  // lines lag as a program's that sets nothing
  cfg.trace_trigger = 0;  // captures only when asked
  if (!steptrace::start(cfg)) return 1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (::access(argv[2], F_OK) != 0 && std::chrono::steady_clock::now() < until) {
    TRACE_STEP();
    { TRACE_PHASE(input); busy_ms(1); }
    { TRACE_PHASE(forward); busy_ms(slow ? 25 : 2); }
    { TRACE_PHASE(backward); busy_ms(2); }
    TRACE_PHASE(nccl);
    busy_ms(1);
  }
  steptrace::stop();
  return 0;
}
