// The consumer's second translation unit: it includes steptrace.hpp too and sees declarations only
// (header-only mode compiles the runtime once, in the file steptrace::steptrace adds).
#include <steptrace/steptrace.hpp>

void run_steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
}
