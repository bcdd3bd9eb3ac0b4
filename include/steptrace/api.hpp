// steptrace/api.hpp - the functions and RAII scopes behind the macros.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "config.hpp"
#include "core/phase.hpp"
#include "core/records.hpp"
#include "core/summary.hpp"

#ifndef STEPTRACE_DISABLE
#include "backend/nvtx.hpp"
#include "details/instance.hpp"
#endif

namespace steptrace {

#ifndef STEPTRACE_DISABLE

/// Starts measuring. Reads STEPTRACE_* variables (they override `cfg`), probes the GPU, opens the
/// log and starts the background thread. Returns false if steptrace stays off (disabled, already
/// running, or no thread could be started); the program runs on either way.
inline bool start(const Config& cfg = {}) noexcept {
  try {
    return details::Session::instance().start(cfg);
  } catch (const std::exception& e) {
    details::warn_once("start.exception", std::string("start() failed: ") + e.what() + "; steptrace stays off");
  } catch (...) {
  }
  return false;
}

/// Closes the last step, writes the remaining lines, prints the summary (unless summary=false) and
/// releases the thread and the file. Without a running session it returns a Summary with started=false.
inline Summary stop() noexcept {
  try {
    return details::Session::current().stop();
  } catch (...) {
    return Summary{};
  }
}

inline bool is_running() noexcept { return details::running_flag().load(std::memory_order_acquire); }

/// Attaches a scalar (loss, grad_norm, overflow_count, lr, anything) to the current step. Names are
/// kept to printable ASCII; the last value recorded under a name in a step wins.
inline void record(std::string_view name, double value) noexcept {
  if (!is_running()) return;
  try {
    std::string clean(name.substr(0, 64));
    for (char& c : clean)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '_';
    details::Session::current().record_scalar(std::move(clean), value);
  } catch (...) {
  }
}

/// Sets the current step's token (and sample) count when it is only known inside the step.
inline void set_step_tokens(double tokens, std::optional<double> samples = std::nullopt) noexcept {
  if (!is_running()) return;
  try {
    details::Session::current().set_step_counts(tokens >= 0 ? std::optional<double>(tokens) : std::nullopt, samples);
  } catch (...) {
  }
}

/// Registers a function that reports the program's allocator numbers. It is called once per step,
/// when the TRACE_STEP scope ends, on that thread: keep it cheap. A hook that throws is removed.
inline void set_allocator_stats_hook(std::function<AllocatorStats()> hook) noexcept {
  try {
    details::Session::current().set_allocator_hook(std::move(hook));
  } catch (...) {
  }
}

/// Registers a custom phase name (see is_valid_phase_name) and returns its id; a bad name is
/// rewritten and reported once through the "steptrace" logger.
inline PhaseId register_phase(std::string_view name) noexcept {
  try {
    auto r = register_phase_checked(name);
    if (!r.error.empty()) details::warn_once("phase." + std::string(name), "phase name: " + r.error);
    return r.id;
  } catch (...) {
    return kNoPhase;
  }
}

/// RAII: one training step. Constructing it starts step N (and closes step N-1, whose step time runs
/// to this moment); destroying it marks the end of the step's scope.
class StepScope {
 public:
  StepScope() noexcept : StepScope(std::nullopt, std::nullopt) {}
  template <class Tokens, class = std::enable_if_t<std::is_arithmetic_v<Tokens>>>
  explicit StepScope(Tokens tokens) noexcept : StepScope(std::optional<double>(static_cast<double>(tokens)), std::nullopt) {}
  template <class Tokens, class Samples,
            class = std::enable_if_t<std::is_arithmetic_v<Tokens> && std::is_arithmetic_v<Samples>>>
  StepScope(Tokens tokens, Samples samples) noexcept
      : StepScope(std::optional<double>(static_cast<double>(tokens)), std::optional<double>(static_cast<double>(samples))) {}
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;
  StepScope(StepScope&&) = delete;
  StepScope& operator=(StepScope&&) = delete;
  ~StepScope() {
    if (!active_) return;
    backend::nvtx::pop();
    try {
      details::Session::current().end_step();
    } catch (...) {
    }
  }

 private:
  StepScope(std::optional<double> tokens, std::optional<double> samples) noexcept {
    if (!is_running()) return;
    try {
      if (tokens && !(*tokens >= 0)) {
        details::warn_once("step.tokens", "TRACE_STEP(tokens): tokens must be >= 0; ignored");
        tokens.reset();
      }
      if (samples && !(*samples >= 0)) samples.reset();
      const auto index = details::Session::current().begin_step(tokens, samples);
      active_ = index.has_value();
      if (active_) backend::nvtx::push_step(*index);
    } catch (...) {
      active_ = false;
    }
  }
  bool active_ = false;
};

/// RAII: one phase. Also an NVTX range named after the phase in the "steptrace" domain.
class PhaseScope {
 public:
  explicit PhaseScope(PhaseId phase) noexcept {
    if (!is_running() || phase == kNoPhase) return;
    auto& ts = details::thread_state();
    if (ts.depth >= details::kMaxPhaseDepth) return;  // absurdly deep nesting: not recorded
    ts_ = &ts;  // a scope ends on the thread that opened it: one thread-local lookup, not two
    span_.phase = phase;
    span_.depth = ts.depth;
    for (uint16_t i = 0; i < ts.depth; ++i)
      if (ts.stack[i] == phase) span_.nested_in_same = true;
    ts.stack[ts.depth++] = phase;
    if (&ts == details::step_thread().load(std::memory_order_relaxed))
      details::step_thread_phase().store(phase, std::memory_order_relaxed);
    active_ = true;
    backend::nvtx::push_phase(phase);
    ticks_ = details::scopes_read_ticks().load(std::memory_order_relaxed);
    begin_ = details::scope_clock_reading(ticks_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
  PhaseScope(PhaseScope&&) = delete;
  PhaseScope& operator=(PhaseScope&&) = delete;
  ~PhaseScope() {
    if (!active_) return;
    const uint64_t end = details::scope_clock_reading(ticks_);
    backend::nvtx::pop();
    auto& ts = *ts_;
    --ts.depth;
    span_.on_step_thread = &ts == details::step_thread().load(std::memory_order_relaxed);
    if (span_.on_step_thread) details::step_thread_phase().store(ts.innermost(), std::memory_order_relaxed);
    try {
      details::Session::current().add_span(span_, ticks_, begin_, end);
    } catch (...) {
    }
  }

 private:
  PhaseSpan span_;   // times filled in by the session from begin_/end
  details::ThreadState* ts_ = nullptr;
  uint64_t begin_ = 0;
  bool ticks_ = false;  // begin_ (and the end) are read_ticks() readings, else monotonic_ns()
  bool active_ = false;
};

#else  // STEPTRACE_DISABLE: the same API, doing nothing.

inline bool start(const Config& = {}) noexcept { return false; }
inline Summary stop() noexcept { return Summary{}; }
inline bool is_running() noexcept { return false; }
inline void record(std::string_view, double) noexcept {}
inline void set_step_tokens(double, std::optional<double> = std::nullopt) noexcept {}
inline void set_allocator_stats_hook(std::function<AllocatorStats()>) noexcept {}
inline PhaseId register_phase(std::string_view) noexcept { return kNoPhase; }

#endif

}  // namespace steptrace
