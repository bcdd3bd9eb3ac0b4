// The loop of the children that test a log's write failures (log_size_limit, record_write_fails).
#pragma once
#include <steptrace/steptrace.hpp>

namespace steptrace_test {
/// `n` steps of a fixed amount of host work in a `forward` phase each (no clock: what the children's
/// tests check does not depend on how long a step takes).
inline void forward_steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    volatile double x = 0;
    for (int k = 0; k < 200000; ++k) x = x + 1e-9 * k;
  }
}
}  // namespace steptrace_test
