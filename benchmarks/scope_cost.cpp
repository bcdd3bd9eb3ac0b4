// scope_cost - host cost of steptrace's scopes, per open+close, on the calling thread.
//   scope_cost [iterations]
//   scope_cost --steps K   (only 20 + K steps of 1000 phase scopes, then one line naming the clock
//                           the scopes read: for counting instructions under callgrind, scope_ab.sh)
// Modes, measured in one run: no session (scopes see steptrace is off), a running session without
// GPU (gpu=off), and STEPTRACE_DISABLE is the compiled-out baseline (an empty loop, see below).
// STEPTRACE_CLOCK=steady makes scopes read steady_clock instead of the CPU tick counter; the line
// says which clock the scopes read ("scope_clock"). Built twice: header-only (scope_cost) and against
// the compiled library (scope_cost_compiled, "mode":"compiled"), where the scopes are calls into the
// library and the runtime's internals (NVTX alone, the scope clock chosen) are not visible: null.
// The scopes timed inside their steps are also measured batch by batch (one step of 1000 scopes a
// batch), beside a batch of two bare tick reads (a scope's floor), with the thread's user-space
// cycles and instructions from perf_event_open(2) where the machine exposes them ("batches"): a
// machine whose clock rate or neighbours move between runs still shows what one scope executes.
#include <steptrace/core/clock.hpp>  // the clocks alone, to compare with
#include <steptrace/steptrace.hpp>
#ifndef STEPTRACE_COMPILED_LIB
#include <steptrace/backend/nvtx.hpp>          // an NVTX push+pop alone (not visible in compiled mode)
#include <steptrace/details/host_clock.hpp>  // which clock the scopes read (likewise)
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#if defined(__linux__)
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {
template <class F>
double ns_per_call(long n, F&& body) {
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) body(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}
volatile long sink = 0;

// About 100 ns of work the compiler cannot drop or reorder across iterations: a dependent chain of
// multiply-adds (an LCG step each, Knuth's MMIX constants), the state kept in `sink`.
inline void chain_work() {
  uint64_t x = static_cast<uint64_t>(sink);
  for (int i = 0; i < 64; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
#if defined(__GNUC__)
    asm volatile("" : "+r"(x));  // opaque to the optimizer: Clang would fold the 64 steps into one
#endif
  }
  sink = static_cast<long>(x);
}

// The calling thread's user-space cycles and instructions, one perf_event_open(2) group read at once.
// Unavailable (no virtual PMU, perf_event_paranoid, seccomp, not Linux): ok() is false, why() says so.
class ThreadCounters {
 public:
  ThreadCounters() {
#if defined(__linux__)
    leader_ = open_one(PERF_COUNT_HW_CPU_CYCLES, -1);
    if (leader_ >= 0) member_ = open_one(PERF_COUNT_HW_INSTRUCTIONS, leader_);
    if (leader_ < 0 || member_ < 0) {
      const int error = open_errno_;
      why_ = std::string("perf_event_open: ") + std::strerror(error);
      return;
    }
    ioctl(leader_, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP);
    ioctl(leader_, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
#else
    why_ = "not Linux";
#endif
  }
  ~ThreadCounters() {
#if defined(__linux__)
    if (member_ >= 0) close(member_);
    if (leader_ >= 0) close(leader_);
#endif
  }
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  struct Reading {
    uint64_t enabled = 0, running = 0, cycles = 0, instructions = 0;
  };
  // Cumulative counts and the times the group was enabled and counting (a batch whose two differ was
  // multiplexed with other events: its counts would be estimates).
  bool read(Reading& r) const {
#if defined(__linux__)
    uint64_t v[5] = {};  // nr, time_enabled, time_running, cycles, instructions
    if (!ok() || ::read(leader_, v, sizeof v) != static_cast<ssize_t>(sizeof v) || v[0] != 2) return false;
    r = {v[1], v[2], v[3], v[4]};
    return true;
#else
    (void)r;
    return false;
#endif
  }

 private:
#if defined(__linux__)
  int open_one(uint64_t config, int group) {
    perf_event_attr a;
    std::memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = config;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.disabled = group < 0;  // the leader starts disabled and enables the group
    a.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    const int fd = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, group, 0));
    if (fd < 0) open_errno_ = errno;
    return fd;
  }
  int leader_ = -1, member_ = -1, open_errno_ = 0;
#endif
  std::string why_;
};

// Per-batch readings of one measurement, each divided by the batch's operation count.
struct Batches {
  std::vector<double> ns, cycles, instructions, ghz;  // the last three only for batches counted whole
  long without_counters = 0;  // batches whose counters could not be read, or were multiplexed

  template <class F>
  void run(const ThreadCounters& pmu, long ops, F&& body) {
    ThreadCounters::Reading r0, r1;
    const bool have0 = pmu.read(r0);
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    const bool have1 = have0 && pmu.read(r1);
    const double batch_ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    ns.push_back(batch_ns / double(ops));
    if (have1 && r1.enabled - r0.enabled == r1.running - r0.running && batch_ns > 0) {
      cycles.push_back(double(r1.cycles - r0.cycles) / double(ops));
      instructions.push_back(double(r1.instructions - r0.instructions) / double(ops));
      ghz.push_back(double(r1.cycles - r0.cycles) / batch_ns);  // the clock rate the batch ran at
    } else {
      ++without_counters;
    }
  }

  // The q-quantile, interpolated between neighbours (the median of an even count is the mean of the
  // middle two); -1 when there is nothing.
  static double quantile(std::vector<double> v, double q) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    const double pos = q * double(v.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  }
  static std::string number(double x) {
    if (x < 0) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", x);
    return b;
  }
  std::string json() const {
    return "{\"batches\":" + std::to_string(ns.size()) + ",\"ns_min\":" + number(quantile(ns, 0)) +
           ",\"ns_p10\":" + number(quantile(ns, 0.1)) + ",\"ns_median\":" + number(quantile(ns, 0.5)) +
           ",\"cycles_min\":" + number(quantile(cycles, 0)) + ",\"cycles_median\":" + number(quantile(cycles, 0.5)) +
           ",\"instructions_median\":" + number(quantile(instructions, 0.5)) + ",\"ghz_median\":" + number(quantile(ghz, 0.5)) +
           ",\"batches_without_counters\":" + std::to_string(without_counters) + "}";
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--steps") {
    if (argc < 3 || std::atol(argv[2]) <= 0) {
      std::fprintf(stderr, "usage: scope_cost --steps K (K > 0)\n");
      return 2;
    }
    steptrace::Config cfg;
    cfg.log_path = "";
    cfg.summary = false;
    cfg.gpu = steptrace::Mode::off;
    if (!steptrace::start(cfg)) {
      std::fprintf(stderr, "scope_cost: steptrace did not start\n");
      return 1;
    }
    for (long s = 0, k = std::atol(argv[2]); s < 20 + k; ++s) {
      TRACE_STEP();
      for (int i = 0; i < 1000; ++i) {
        TRACE_PHASE(forward);
        sink = i;
      }
    }
#ifndef STEPTRACE_COMPILED_LIB
    std::printf("{\"steps\":%ld,\"scope_clock\":\"%s\"}\n", std::atol(argv[2]),
                steptrace::details::scopes_read_ticks().load() ? "ticks" : "steady_clock");
#endif
    steptrace::stop();
    return 0;
  }
  const long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  if (n < 1000) {  // the batches are steps of 1000 scopes
    std::fprintf(stderr, "usage: scope_cost [iterations >= 1000] | --steps K\n");
    return 2;
  }
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
  const ThreadCounters pmu;
  Batches in_step, two_ticks, work_alone, work_in_scope;
  {  // The same scopes timed inside their steps only: what the scope itself costs where it runs;
     // alternating with batches of its floor, two tick reads.
    double inside = 0;
    const long steps = n / 1000;
    for (long i = 0; i < steps; ++i) {
      {
        TRACE_STEP();
        in_step.run(pmu, 1000, [i, &inside] {
          inside += ns_per_call(1000, [i](long k) {
            TRACE_PHASE(forward);
            sink = i + k;
          });
        });
      }
      two_ticks.run(pmu, 1000, [] {
        ns_per_call(1000, [](long) {
          sink = static_cast<long>(steptrace::read_ticks());
          sink = static_cast<long>(steptrace::read_ticks());
        });
      });
      // What a scope adds around ~100 ns of work, where the processor can overlap the scope's own
      // instructions with the work (scopes back to back above cannot): the same work with and
      // without a scope, in batches inside steps, which of the two goes first alternating.
      for (int half = 0; half < 2; ++half) {
        TRACE_STEP();
        if ((half == 0) == (i % 2 == 0)) {
          work_alone.run(pmu, 1000, [] { ns_per_call(1000, [](long) { chain_work(); }); });
        } else {
          work_in_scope.run(pmu, 1000, [] {
            ns_per_call(1000, [](long) {
              TRACE_PHASE(forward);
              chain_work();
            });
          });
        }
      }
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
  const std::string counters_why = pmu.ok() ? "null" : "\"" + pmu.why() + "\"";
  char added[32] = "null";  // null when there were no batches (fewer than 1000 iterations)
  if (!work_in_scope.ns.empty() && !work_alone.ns.empty())
    std::snprintf(added, sizeof added, "%.2f", Batches::quantile(work_in_scope.ns, 0.5) - Batches::quantile(work_alone.ns, 0.5));
  std::printf("{\"mode\":\"%s\",\"scope_clock\":%s,\"iterations\":%ld,\"empty_loop_ns\":%.1f,\"phase_scope_not_running_ns\":%.1f,"
              "\"phase_scope_ns\":%.1f,\"phase_scope_in_step_ns\":%.1f,\"nested_phase_scope_ns\":%.1f,\"step_scope_ns\":%.1f,"
              "\"clock_read_ns\":%.1f,\"ticks_read_ns\":%.1f,\"nvtx_push_pop_ns\":%s,\"mutex_lock_unlock_ns\":%.1f,"
              "\"batches\":{\"phase_scope_in_step\":%s,\"two_tick_reads\":%s,\"work_alone\":%s,\"work_in_scope\":%s,"
              "\"scope_added_to_work_ns\":%s,\"counters_null_reason\":%s}}\n",
              mode, scope_clock, n, empty, phase_off, phase_on, phase_in_step, nested_on, step_on, clock, ticks, nvtx_ns,
              mutex, in_step.json().c_str(), two_ticks.json().c_str(), work_alone.json().c_str(), work_in_scope.json().c_str(),
              added, counters_why.c_str());
  return 0;
}
