// steptrace/details/api_impl.hpp - the definitions of api.hpp's functions and scopes, compiled once per
// program: in the translation unit that defines STEPTRACE_IMPLEMENTATION (header-only,
// src/implementation.cpp under CMake) or into the library (compiled mode, src/steptrace.cpp). The one
// place where the public API meets the runtime (the process's Session, NVTX, the logger).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include "../api.hpp"
#include "../backend/nvtx.hpp"
#include "phase_api_impl.hpp"
#include "instance.hpp"
#include "log.hpp"
#include "reading_pace.hpp"
#include "thread_slots.hpp"

STEPTRACE_BEGIN_NAMESPACE

STEPTRACE_API extern const char steptrace_is_not_compiled_define_STEPTRACE_IMPLEMENTATION_in_one_file = 1;

bool start(const Config& cfg) noexcept {
  try {
    return details::Session::instance().start(cfg);
  } catch (const std::exception& e) {
    details::warn_once("start.exception", std::string("start() failed: ") + e.what() + "; steptrace stays off");
  } catch (...) {
  }
  return false;
}

Summary stop() noexcept {
  try {
    return details::Session::current().stop();
  } catch (...) {
    return Summary{};
  }
}

bool is_running() noexcept { return details::running_flag().load(std::memory_order_acquire); }

void record(std::string_view name, double value) noexcept {
  if (!is_running()) return;
  try {
    details::DeferEndings held;  // the name's copy may call malloc (details/signals.hpp)
    std::string clean(name.substr(0, 64));
    for (char& c : clean)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '_';
    details::Session::current().record_scalar(std::move(clean), value);
  } catch (...) {
  }
}

bool capture_steps(int n) noexcept {
  if (!is_running()) return false;
  try {
    return details::Session::current().capture_steps(n);
  } catch (...) {
    return false;
  }
}

void set_marker_stream(void* stream) noexcept {
  try {
    if (!details::marker_ring().name_stream(reinterpret_cast<std::uintptr_t>(stream)))
      details::warn_once("markers.stream", "set_marker_stream() after the stream markers were set up: ignored (call it "
                                           "before the first step)");
  } catch (...) {
  }
}

void set_step_tokens(double tokens, std::optional<double> samples) noexcept {
  if (!is_running()) return;
  try {
    const bool tokens_ok = std::isfinite(tokens) && tokens >= 0;
    if (!std::isfinite(tokens))
      details::warn_once("step.set_tokens", "set_step_tokens(tokens): tokens must be a finite number >= 0; ignored");
    if (samples && !(std::isfinite(*samples) && *samples >= 0)) {
      details::warn_once("step.set_samples", "set_step_tokens(tokens, samples): samples must be a finite number >= 0; ignored");
      samples.reset();
    }
    details::Session::current().set_step_counts(tokens_ok ? std::optional<double>(tokens) : std::nullopt, samples);
  } catch (...) {
  }
}

void set_allocator_stats_hook(std::function<AllocatorStats()> hook) noexcept {
  try {
    details::Session::current().set_allocator_hook(std::move(hook));
  } catch (...) {
  }
}

PhaseId register_phase(std::string_view name) noexcept {
  try {
    auto r = register_phase_checked(name);
    // One warning per name, or one in all once the table is full (a program making names up must not flood the log).
    if (!r.error.empty())
      details::warn_once(r.table_full ? std::string("phase.table_full") : "phase." + std::string(name), "phase name: " + r.error);
    return r.id;
  } catch (...) {
    return kNoPhase;
  }
}

namespace details {
bool session_rank(int& rank, int& world_size) noexcept {
  if (!is_running()) return false;
  const auto rw = Session::current().rank_and_world();
  rank = rw.first;
  world_size = rw.second;
  return true;
}

void mark_step_work_done() noexcept {
  if (!is_running()) return;
  try {
    Session::current().mark_step_work_done();
  } catch (...) {
  }
}

void add_collective_wait(double ms) noexcept {
  if (!is_running()) return;
  try {
    Session::current().add_collective_wait(ms);
  } catch (...) {
  }
}

int64_t steps_begun() noexcept {
  if (!is_running()) return -1;
  try {
    return Session::current().steps_begun();
  } catch (...) {
    return -1;
  }
}

bool binding_warn_once(const std::string& key, const std::string& message) noexcept {
  try {
    return warn_once(key, message);
  } catch (...) {
    return false;
  }
}

void set_binding_call_ns(double ns) noexcept {
  if (ns > 0) host_call_ns().store(ns, std::memory_order_relaxed);
}
void set_binding_step_extra_ns(double ns) noexcept {
  // A step's bookkeeping beyond the model: never negative, never above 1 ms (the binding's median says
  // more only when most of its timed steps were preempted: not a cost of its calls).
  if (std::isfinite(ns)) binding_step_extra_ns_now().store(std::clamp(ns, 0.0, 1e6), std::memory_order_relaxed);
}
double binding_step_extra_ns() noexcept { return binding_step_extra_ns_now().load(std::memory_order_relaxed); }
void set_next_step_framework(bool on) noexcept { next_step_framework_here() = on; }
bool next_step_framework() noexcept { return next_step_framework_here(); }
int64_t marker_record_ns() noexcept { return marker_ring().recorded_ns(); }
uint64_t tracing_boundaries_so_far() noexcept { return tracing_boundaries().load(std::memory_order_relaxed); }

void end_next_step_at_work_end() noexcept {
  if (!is_running()) return;
  try {
    Session::current().end_next_step_at_work_end();
  } catch (...) {
  }
}

bool use_cross_rank_exchange(std::unique_ptr<CrossRankExchange> exchange, const std::string& setup_error,
                                              int every_k_steps) noexcept {
  try {
    if (!setup_error.empty() || !exchange) {
      warn_once("cross_rank.init", "cross-rank view off: " + (setup_error.empty() ? std::string("no exchange") : setup_error));
      return false;
    }
    return Session::current().set_exchange(std::move(exchange), every_k_steps);
  } catch (const std::exception& e) {
    warn_once("cross_rank.init", std::string("cross-rank view off: ") + e.what());
  } catch (...) {
  }
  return false;
}
}  // namespace details

StepScope::StepScope(std::optional<double> tokens, std::optional<double> samples) noexcept {
  if (!is_running()) return;
  try {
    if (tokens && !(std::isfinite(*tokens) && *tokens >= 0)) {
      details::warn_once("step.tokens", "TRACE_STEP(tokens): tokens must be a finite number >= 0; ignored (the line's "
                                        "tokens are then tokens_per_step's, or null with a reason)");
      tokens.reset();
    }
    if (samples && !(std::isfinite(*samples) && *samples >= 0)) {
      details::warn_once("step.samples", "TRACE_STEP(tokens, samples): samples must be a finite number >= 0; ignored");
      samples.reset();
    }
    const auto index = details::Session::current().begin_step(tokens, samples);
    active_ = index.has_value();
    if (active_) backend::nvtx::push_step(*index);
  } catch (...) {
    active_ = false;
  }
}

StepScope::~StepScope() {
  if (!active_) return;
  backend::nvtx::pop();
  if (!is_running()) return;  // stopped meanwhile, or a fork's child (details/fork.hpp): nothing to close
  try {
    details::Session::current().end_step();
  } catch (...) {
  }
}

namespace details {
/// A closed scope whose thread's ring is full (or that has none): the recorder's lock, after it
/// gathered the rings.
STEPTRACE_COLD inline void add_span_locked(const SpanRing::Entry& e) noexcept {
  try {
    Session::current().add_span(span_of(e), (e.flags & SpanRing::kTicks) != 0, e.begin, e.end);
  } catch (...) {
  }
}
}  // namespace details

// The scopes' hot path reads running_flag() itself (is_running() is an exported call in compiled mode)
// and keeps what the closing needs in five fields; anything rare is out of line (STEPTRACE_COLD).
PhaseScope::PhaseScope(PhaseId phase) noexcept {
  if (!details::running_flag().load(std::memory_order_acquire) || phase == kNoPhase) return;
  auto& ts = details::thread_state();
  if (ts.depth >= details::kMaxPhaseDepth) return;  // absurdly deep nesting: not recorded
  uint8_t flags = 0;
  for (uint16_t i = 0; i < ts.depth; ++i)
    if (ts.stack[i] == phase) flags = details::SpanRing::kNestedInSame;
  phase_ = phase;
  depth_ = ts.depth;
  ts.stack[ts.depth++] = phase;
  if (&ts == details::step_thread().load(std::memory_order_relaxed)) {
    details::step_thread_phase().store(phase, std::memory_order_relaxed);
    if (depth_ == details::marker_depth().load(std::memory_order_relaxed)) details::mark_phase(phase, MarkerKind::phase_begin);
  }
  backend::nvtx::push_phase(phase);
  const bool ticks = details::scopes_read_ticks().load(std::memory_order_relaxed);
  if (ticks) flags |= details::SpanRing::kTicks;
  flags_ = flags;
  begin_ = details::scope_clock_reading(ticks);
  details::claim_thread_slot(ts)->push(depth_, phase, begin_, ticks);  // for the stall watchdog
  ts_ = &ts;  // a scope ends on the thread that opened it: one thread-local lookup, not two
}

PhaseScope::~PhaseScope() {
  if (!ts_) return;
  const uint64_t end = details::scope_clock_reading((flags_ & details::SpanRing::kTicks) != 0);
  backend::nvtx::pop();
  auto& ts = *ts_;
  --ts.depth;
  if (ts.slot) ts.slot->pop(ts.depth);
  const bool on_step_thread = &ts == details::step_thread().load(std::memory_order_relaxed);
  if (on_step_thread) {
    details::step_thread_phase().store(ts.innermost(), std::memory_order_relaxed);
    if (depth_ == details::marker_depth().load(std::memory_order_relaxed)) details::mark_phase(phase_, MarkerKind::phase_end);
  }
  // Stopped meanwhile, or a fork's child (details/fork.hpp): nothing to record.
  if (!details::running_flag().load(std::memory_order_acquire)) return;
  const int32_t tid = ts.slot ? ts.slot->tid : 0;
  const auto flags = static_cast<uint8_t>(flags_ | (on_step_thread ? details::SpanRing::kOnStepThread : 0));
  // The entry is built in the call (a named one went through the stack, and the ring's 16-byte copy
  // of it could not forward from its narrower stores: a few ns).
  if (ts.ring && ts.ring->push({begin_, end, tid, phase_, depth_, flags})) return;  // the usual path
  details::add_span_locked({begin_, end, tid, phase_, depth_, flags});
}

STEPTRACE_END_NAMESPACE  // steptrace
