// tests/fake_run.hpp - a Session on a fake GPU backend (tests/fake_backend.hpp) and the configurations
// the runtime's tests start it with: test_runtime.cpp and test_runtime_markers.cpp.
#pragma once
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "fake_backend.hpp"

namespace steptrace_test {

using steptrace::Config;
using steptrace::details::Session;

struct FakeRun {
  FakeBackend* gpu;
  std::unique_ptr<Session> session;
  explicit FakeRun(std::unique_ptr<FakeBackend> backend) : gpu(backend.get()) {
    session = std::make_unique<Session>(std::move(backend));
  }
  bool start(const Config& cfg) { return session->start(cfg, {}); }  // no STEPTRACE_* variables
};

inline Config base_config(const std::string& log) {
  Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.memory_sample_ms = 1;
  cfg.trace_every = 1;  // every step traced unless a test says otherwise (the default lets overhead_budget decide)
  cfg.line_detail = steptrace::LineDetail::full;  // the fields the tests read (the compact line: test_line_tiers)
  return cfg;
}

/// start() on the defaults but the log (and no summary): CTest forces full lines through the environment
/// (STEPTRACE_LINE_DETAIL), which this lifts for the start, so that the run writes what users get.
inline bool start_on_defaults(FakeRun& run, const std::string& log, std::optional<double> overhead_budget = std::nullopt) {
  Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  if (overhead_budget) cfg.overhead_budget = *overhead_budget;
  const char* forced = std::getenv("STEPTRACE_LINE_DETAIL");
  const std::string kept = forced ? forced : "";
  if (forced) unsetenv("STEPTRACE_LINE_DETAIL");
  const bool started = run.start(cfg);
  if (forced) setenv("STEPTRACE_LINE_DETAIL", kept.c_str(), 1);
  return started;
}

/// `steps` steps, each a `forward` phase launching `kernels` kernels of 100 us.
inline void run_steps(FakeBackend& gpu, int steps, int kernels) {
  for (int i = 0; i < steps; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    for (int k = 0; k < kernels; ++k) gpu.launch(100'000);
  }
}

}  // namespace steptrace_test
