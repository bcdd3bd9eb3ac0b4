// A shared object of the program in test_compiled.cpp: it includes steptrace.hpp in compiled mode
// and opens a phase of its own inside the program's steps.
#include <steptrace/steptrace.hpp>

#include <chrono>

extern "C" __attribute__((visibility("default"))) double steptrace_test_plugin_work(int microseconds) {
  TRACE_PHASE_NAMED("plugin");
  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::microseconds(microseconds);
  while (std::chrono::steady_clock::now() < end) {
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}
