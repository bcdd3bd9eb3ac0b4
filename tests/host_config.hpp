// A session's configuration for host-only tests: the given log, no GPU, no summary, a line written
// as soon as its step closes, the full line (line_detail=full: the fields the tests read; the compact
// line is tests/test_line_tiers.cpp's). HOST_CONFIG_LINES=default in the environment keeps the
// default line detail (compact) instead: CTest runs the exit, signal and fork children both ways
// (`exit` and `exit_default_lines`), since a setting the tests force is not what users run.
#pragma once
#include <steptrace/steptrace.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

namespace steptrace_test {
inline steptrace::Config host_config(const std::string& log) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.gpu = steptrace::Mode::off;
  cfg.summary = false;
  cfg.max_lag_steps = 0;
  const char* lines = std::getenv("HOST_CONFIG_LINES");
  if (!lines || std::strcmp(lines, "default") != 0) cfg.line_detail = steptrace::LineDetail::full;
  return cfg;
}
}  // namespace steptrace_test
