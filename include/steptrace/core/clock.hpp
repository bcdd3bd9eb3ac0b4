// steptrace/core/clock.hpp - the host clocks steptrace uses. Pure C++17.
#pragma once
#include <chrono>
#include <cstdint>

namespace steptrace {

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

}  // namespace steptrace
