// scope_cost - host cost of steptrace's scopes, per open+close, on the calling thread.
//   scope_cost [iterations]
// Modes, measured in one run: no session (scopes see steptrace is off), a running session without
// GPU (gpu=off), and STEPTRACE_DISABLE is the compiled-out baseline (an empty loop, see below).
// STEPTRACE_CLOCK=steady makes scopes read steady_clock instead of the CPU tick counter; the line
// says which clock the scopes read ("scope_clock"). Built twice: header-only (scope_cost) and against
// the compiled library (scope_cost_compiled, "mode":"compiled"), where the scopes are calls into the
// library and the runtime's internals (NVTX alone, the scope clock chosen) are not visible: null.
#include <steptrace/core/clock.hpp>  // the clocks alone, to compare with
#include <steptrace/steptrace.hpp>
#ifndef STEPTRACE_COMPILED_LIB
#include <steptrace/backend/nvtx.hpp>          // an NVTX push+pop alone (not visible in compiled mode)
#include <steptrace/details/host_clock.hpp>  // which clock the scopes read (likewise)
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

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
  // What a scope is made of, each alone: a clock read, an NVTX push+pop, an uncontended mutex.
  const double clock = ns_per_call(n, [](long) { sink = steptrace::monotonic_ns(); });
  const double ticks = ns_per_call(n, [](long) { sink = static_cast<long>(steptrace::read_ticks()); });
#ifndef STEPTRACE_COMPILED_LIB
  const double nvtx = ns_per_call(n, [](long i) {
    steptrace::backend::nvtx::push_phase(steptrace::phase_tag::forward);
    steptrace::backend::nvtx::pop();
    sink = i;
  });
  const char* mode = "header_only";
#else
  const double nvtx = -1;
  const char* mode = "compiled";
#endif
  std::mutex m;
  const double mutex = ns_per_call(n, [&m](long i) {
    std::lock_guard<std::mutex> lock(m);
    sink = i;
  });
  const double phase_off = ns_per_call(n, [](long i) {
    TRACE_PHASE(forward);
    sink = i;
  });
  steptrace::Config cfg;
  cfg.log_path = "";
  cfg.summary = false;
  cfg.gpu = steptrace::Mode::off;
  cfg.max_spans_per_step = 4096;  // the default: a step of 1000 scopes keeps them all
  steptrace::start(cfg);
#ifndef STEPTRACE_COMPILED_LIB
  const char* scope_clock = steptrace::details::scopes_read_ticks().load() ? "\"ticks\"" : "\"steady_clock\"";
#else  // the runtime's choice is not visible from here; STEPTRACE_CLOCK=steady forces it
  const char* env_clock = std::getenv("STEPTRACE_CLOCK");
  const char* scope_clock = env_clock && std::string(env_clock) == "steady" ? "\"steady_clock\"" : "null";
#endif
  double phase_on = 0, phase_in_step = 0, nested_on = 0, step_on = 0;
  // Steps of 1000 phase scopes each: per scope, with the step boundary's share (the boundary gathers
  // the step's scopes from the threads' rings, details/span_ring.hpp).
  phase_on = ns_per_call(n / 1000, [](long i) {
               TRACE_STEP();
               for (int k = 0; k < 1000; ++k) {
                 TRACE_PHASE(forward);
                 sink = i + k;
               }
             }) / 1000;
  {  // The same scopes timed inside their steps only: what the scope itself costs where it runs.
    double inside = 0;
    const long steps = n / 1000;
    for (long i = 0; i < steps; ++i) {
      TRACE_STEP();
      inside += ns_per_call(1000, [i](long k) {
        TRACE_PHASE(forward);
        sink = i + k;
      });
    }
    phase_in_step = inside / double(steps);
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
  char nvtx_ns[32] = "null";
  if (nvtx >= 0) std::snprintf(nvtx_ns, sizeof nvtx_ns, "%.1f", nvtx);
  std::printf("{\"mode\":\"%s\",\"scope_clock\":%s,\"iterations\":%ld,\"empty_loop_ns\":%.1f,\"phase_scope_not_running_ns\":%.1f,"
              "\"phase_scope_ns\":%.1f,\"phase_scope_in_step_ns\":%.1f,\"nested_phase_scope_ns\":%.1f,\"step_scope_ns\":%.1f,"
              "\"clock_read_ns\":%.1f,\"ticks_read_ns\":%.1f,\"nvtx_push_pop_ns\":%s,\"mutex_lock_unlock_ns\":%.1f}\n",
              mode, scope_clock, n, empty, phase_off, phase_on, phase_in_step, nested_on, step_on, clock, ticks, nvtx_ns,
              mutex);
  return 0;
}
