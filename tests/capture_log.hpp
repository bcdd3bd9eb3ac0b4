// What steptrace logs, captured: an ostream logger registered as "steptrace" before anything logs
// (steptrace keeps the first logger of that name it finds). Include it in one test program's file.
#pragma once
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace steptrace_test {
inline std::ostringstream& captured_log() {
  static std::ostringstream out;
  static bool installed = [] {
    spdlog::register_logger(std::make_shared<spdlog::logger>("steptrace", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
    return true;
  }();
  (void)installed;
  return out;
}
// Before any test case runs, whatever the order.
inline const bool capture_log_installed = (captured_log(), true);
}  // namespace steptrace_test
