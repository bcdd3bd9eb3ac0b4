// A program's translation unit as tests/check_compiled_headers.cmake preprocesses it, in each mode.
#include <steptrace/steptrace.hpp>

int main() {
  steptrace::Config cfg;
  steptrace::start(cfg);
  {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
  return steptrace::stop().started ? 0 : 1;
}
