// Compiled (not run) by CTest: the built-in phase names are checked at compile time, and a scope
// cannot be made with `new` (the heap variant must not compile; placement into owned storage must).
#include <steptrace/steptrace.hpp>

#include <new>
void instrumented() {
#ifdef STEPTRACE_TEST_VARIANT_typo
  TRACE_PHASE(forwrd);
#elif defined(STEPTRACE_TEST_VARIANT_heap)
  delete new steptrace::PhaseScope(steptrace::phase_tag::forward);
#else
  TRACE_PHASE(forward);
  alignas(steptrace::PhaseScope) unsigned char storage[sizeof(steptrace::PhaseScope)];
  auto* placed = ::new (static_cast<void*>(storage)) steptrace::PhaseScope(steptrace::phase_tag::backward);
  placed->~PhaseScope();
#endif
}
