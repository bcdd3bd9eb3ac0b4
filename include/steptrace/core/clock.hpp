// steptrace/core/clock.hpp - the host clocks steptrace uses. Pure C++17.
#pragma once
#include "../version.hpp"
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)  // GCC and Clang (x86intrin.h); other targets read steady_clock
#include <x86intrin.h>
#define STEPTRACE_HAVE_TSC 1
#else
#define STEPTRACE_HAVE_TSC 0
#endif

STEPTRACE_BEGIN_NAMESPACE

/// Monotonic host time in nanoseconds (steady_clock). All host spans use it.
inline int64_t monotonic_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Wall-clock time in nanoseconds since the Unix epoch, for timestamps in lines.
inline int64_t unix_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline double ns_to_ms(int64_t ns) noexcept { return static_cast<double>(ns) / 1e6; }

/// The CPU's time-stamp counter on x86-64 (a few ns to read, where steady_clock takes 25-30 ns in a
/// VM); monotonic_ns() elsewhere. Phase scopes read it when it is usable (details/host_clock.hpp);
/// TickClock turns readings into monotonic_ns() time.
inline uint64_t read_ticks() noexcept {
#if STEPTRACE_HAVE_TSC
  return __rdtsc();
#else
  return static_cast<uint64_t>(monotonic_ns());
#endif
}

/// Maps tick readings to monotonic_ns(): a straight line through the latest anchor (a reading of
/// both clocks at one moment), with the slope fitted between the first anchor and the latest one at
/// least kMinBaselineNs after it. The owner takes the anchors (the background thread, every few ms)
/// and serializes access. Identity (ticks are nanoseconds) until two anchors are in.
class TickClock {
 public:
  static constexpr int64_t kMinBaselineNs = 1'000'000;  // 1 ms between anchors before a slope is trusted

  /// Adds an anchor and returns how far the previous fit predicted `ns` off (0 before a fit); a large
  /// value means the ticks do not follow steady_clock (caller's decision what "large" is).
  int64_t anchor(uint64_t ticks, int64_t ns) noexcept {
    if (!has_first_) {
      first_ticks_ = last_ticks_ = ticks;
      first_ns_ = last_ns_ = ns;
      has_first_ = true;
      return 0;
    }
    const int64_t predicted = calibrated_ ? to_ns(ticks) : ns;
    const int64_t baseline = ns - first_ns_;
    if (baseline >= kMinBaselineNs && ticks > first_ticks_) {
      ns_per_tick_ = static_cast<double>(baseline) / static_cast<double>(ticks - first_ticks_);
      calibrated_ = true;
    }
    last_ticks_ = ticks;
    last_ns_ = ns;
    return predicted - ns;
  }

  bool calibrated() const noexcept { return calibrated_; }
  double ns_per_tick() const noexcept { return ns_per_tick_; }

  int64_t to_ns(uint64_t ticks) const noexcept {
    if (!calibrated_) return static_cast<int64_t>(ticks);
    // Signed distance from the latest anchor: readings taken just before it convert too.
    const double d = ticks >= last_ticks_ ? static_cast<double>(ticks - last_ticks_)
                                          : -static_cast<double>(last_ticks_ - ticks);
    return last_ns_ + static_cast<int64_t>(d * ns_per_tick_);
  }

 private:
  bool has_first_ = false, calibrated_ = false;
  uint64_t first_ticks_ = 0, last_ticks_ = 0;
  int64_t first_ns_ = 0, last_ns_ = 0;
  double ns_per_tick_ = 1.0;
};

STEPTRACE_END_NAMESPACE  // steptrace
