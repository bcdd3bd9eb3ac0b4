// scope_cost - host cost of steptrace's scopes, per open+close, on the calling thread.
//   scope_cost [iterations]
// Modes, measured in one run: no session (scopes see steptrace is off), a running session without
// GPU (gpu=off), and STEPTRACE_DISABLE is the compiled-out baseline (an empty loop, see below).
#include <steptrace/steptrace.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {
template <class F>
double ns_per_call(long n, F&& body) {
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) body(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}
volatile long sink = 0;
}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  const double empty = ns_per_call(n, [](long i) { sink = i; });
  const double phase_off = ns_per_call(n, [](long i) {
    TRACE_PHASE(forward);
    sink = i;
  });
  steptrace::Config cfg;
  cfg.log_path = "";
  cfg.summary = false;
  cfg.gpu = "off";
  cfg.max_spans_per_step = 1 << 30;  // keep every span: measure the append, not the drop path
  steptrace::start(cfg);
  double phase_on = 0, nested_on = 0, step_on = 0;
  {
    TRACE_STEP();
    phase_on = ns_per_call(n, [](long i) {
      TRACE_PHASE(forward);
      sink = i;
    });
  }
  {
    TRACE_STEP();
    nested_on = ns_per_call(n / 2, [](long i) {
      TRACE_PHASE(forward);
      TRACE_PHASE_NAMED("inner");
      sink = i;
    }) / 2;
  }
  step_on = ns_per_call(20000, [](long i) {
    TRACE_STEP();
    sink = i;
  });
  steptrace::stop();
  std::printf("{\"iterations\":%ld,\"empty_loop_ns\":%.1f,\"phase_scope_not_running_ns\":%.1f,"
              "\"phase_scope_ns\":%.1f,\"nested_phase_scope_ns\":%.1f,\"step_scope_ns\":%.1f}\n",
              n, empty, phase_off, phase_on, nested_on, step_on);
  return 0;
}
