// The loop of the children that test a log's write failures (log_size_limit, record_write_fails).
#pragma once
#include <steptrace/steptrace.hpp>

#include <chrono>

namespace steptrace_test {
/// `n` steps of ~2 ms of host work in a `forward` phase each.
inline void forward_steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
}
}  // namespace steptrace_test
