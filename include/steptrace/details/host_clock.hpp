// steptrace/details/host_clock.hpp - which clock phase scopes read. Two clock reads are most of a
// scope's cost; in a VM steady_clock takes 25-30 ns, the CPU's time-stamp counter a few. Scopes read
// the counter where it is invariant (constant rate, running in every power state) and cheaper here;
// the session converts readings to steady_clock time (TickClock) with anchors its background thread
// takes, and goes back to steady_clock if the counter drifts from it.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>

#include <time.h>

#include "../core/clock.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// The calling thread's CPU time in ms: what the background thread spends on a piece of work, without
/// the time it waits (a lock, the disk, the GPU).
inline double thread_cpu_ms() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// Whether new phase scopes read ticks (true) or monotonic_ns() (false).
inline std::atomic<bool>& scopes_read_ticks() {
  static std::atomic<bool> flag{false};
  return flag;
}

/// What a scope reads at its begin and end: ticks, or monotonic_ns() as an unsigned reading.
inline uint64_t scope_clock_reading(bool ticks) noexcept {
  return ticks ? read_ticks() : static_cast<uint64_t>(monotonic_ns());
}

/// Reads both clocks at about the same moment: `ticks` is the middle of two tick readings around a
/// steady_clock reading. False if the readings were more than `max_gap_ns` apart (interrupted).
inline bool take_clock_anchor(uint64_t& ticks, int64_t& ns, double ns_per_tick, int64_t max_gap_ns = 2000) noexcept {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t t0 = read_ticks();
    const int64_t n = monotonic_ns();
    const uint64_t t1 = read_ticks();
    if (t1 >= t0 && static_cast<double>(t1 - t0) * ns_per_tick <= static_cast<double>(max_gap_ns)) {
      ticks = t0 + (t1 - t0) / 2;
      ns = n;
      return true;
    }
  }
  return false;
}

/// "" when scopes may read ticks on this machine, else why not.
inline std::string ticks_unusable_reason() {
#if !STEPTRACE_HAVE_TSC
  return "no time-stamp counter on this CPU architecture";
#else
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool constant = false, nonstop = false;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    constant = line.find(" constant_tsc") != std::string::npos;
    nonstop = line.find(" nonstop_tsc") != std::string::npos;
    break;
  }
  if (!constant || !nonstop) return "the CPU's time-stamp counter is not invariant (constant_tsc, nonstop_tsc)";
  // A hypervisor may trap the instruction: use it only if it is cheaper than steady_clock here.
  constexpr int kReads = 256;
  volatile uint64_t sink_ticks = 0;
  volatile int64_t sink_ns = 0;
  int64_t best_ticks = INT64_MAX, best_steady = INT64_MAX;
  for (int round = 0; round < 5; ++round) {
    int64_t a = monotonic_ns();
    for (int i = 0; i < kReads; ++i) sink_ticks = read_ticks();
    int64_t b = monotonic_ns();
    best_ticks = std::min(best_ticks, b - a);
    a = monotonic_ns();
    for (int i = 0; i < kReads; ++i) sink_ns = monotonic_ns();
    b = monotonic_ns();
    best_steady = std::min(best_steady, b - a);
  }
  (void)sink_ticks;
  (void)sink_ns;
  if (best_ticks >= best_steady)
    return "reading the time-stamp counter is not cheaper than steady_clock here (" +
           std::to_string(best_ticks / kReads) + " vs " + std::to_string(best_steady / kReads) + " ns)";
  return {};
#endif
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
