// Compiled (not run) by CTest: the built-in phase names are checked at compile time.
#include <steptrace/steptrace.hpp>
void instrumented() {
#ifdef STEPTRACE_TEST_VARIANT_typo
  TRACE_PHASE(forwrd);
#else
  TRACE_PHASE(forward);
#endif
}
