// steptrace/macros.hpp - the instrumentation macros.
//
//   TRACE_STEP();                    // or TRACE_STEP(tokens) / TRACE_STEP(tokens, samples)
//   TRACE_PHASE(forward);            // built-in: input h2d forward backward optimizer nccl
//   TRACE_PHASE_NAMED("attention");  // custom name, registered once per call site
//
// Long forms STEPTRACE_STEP / STEPTRACE_PHASE / STEPTRACE_PHASE_NAMED always exist; define
// STEPTRACE_NO_SHORT_MACROS to keep the short ones out of your program. With STEPTRACE_DISABLE
// every macro expands to a statement that does nothing and evaluates nothing (a misspelt built-in
// phase still fails to compile).
#pragma once
#include "version.hpp"
#include <atomic>
#include "api.hpp"

#define STEPTRACE_CONCAT_INNER_(a, b) a##b
#define STEPTRACE_CONCAT_(a, b) STEPTRACE_CONCAT_INNER_(a, b)
#define STEPTRACE_UNIQUE_(prefix) STEPTRACE_CONCAT_(prefix, __COUNTER__)

STEPTRACE_BEGIN_NAMESPACE namespace details {
template <class... T>
constexpr int unevaluated(T&&...) noexcept {
  return 0;
}
} STEPTRACE_END_NAMESPACE  // steptrace::details

#ifndef STEPTRACE_DISABLE
#define STEPTRACE_STEP(...) ::steptrace::StepScope STEPTRACE_UNIQUE_(steptrace_step_){__VA_ARGS__}
#define STEPTRACE_PHASE(name) ::steptrace::PhaseScope STEPTRACE_UNIQUE_(steptrace_phase_){::steptrace::phase_tag::name}
// The site's id is cached in an atomic, not a guarded static: a fork's child never waits on a guard
// that a parent thread held (registering a name again finds the same id).
#define STEPTRACE_PHASE_NAMED(literal)                                                          \
  ::steptrace::PhaseScope STEPTRACE_UNIQUE_(steptrace_phase_)([]() noexcept {                   \
    static ::std::atomic<::steptrace::PhaseId> steptrace_site_id{::steptrace::kNoPhase};        \
    ::steptrace::PhaseId steptrace_id = steptrace_site_id.load(::std::memory_order_relaxed);    \
    if (steptrace_id == ::steptrace::kNoPhase) {                                                \
      steptrace_id = ::steptrace::register_phase(literal);                                      \
      steptrace_site_id.store(steptrace_id, ::std::memory_order_relaxed);                       \
    }                                                                                           \
    return steptrace_id;                                                                        \
  }())
#else
#define STEPTRACE_STEP(...) static_cast<void>(sizeof(::steptrace::details::unevaluated(__VA_ARGS__)))
#define STEPTRACE_PHASE(name) static_cast<void>(::steptrace::phase_tag::name)
#define STEPTRACE_PHASE_NAMED(literal) static_cast<void>(sizeof(literal))
#endif

#ifndef STEPTRACE_NO_SHORT_MACROS
#define TRACE_STEP(...) STEPTRACE_STEP(__VA_ARGS__)
#define TRACE_PHASE(name) STEPTRACE_PHASE(name)
#define TRACE_PHASE_NAMED(literal) STEPTRACE_PHASE_NAMED(literal)
#endif
