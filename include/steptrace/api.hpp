// steptrace/api.hpp - the functions and RAII scopes behind the macros. Declarations only: the
// definitions are in details/api_impl.hpp, compiled once per program (steptrace.hpp, version.hpp).
#pragma once
#include "version.hpp"
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "config.hpp"
#include "core/phase.hpp"
#include "core/records.hpp"
#include "core/summary_result.hpp"
#include "exchange.hpp"

STEPTRACE_BEGIN_NAMESPACE

#ifndef STEPTRACE_DISABLE

/// Starts measuring. Reads STEPTRACE_* variables (they override `cfg`), probes the GPU, opens the
/// log and starts the background thread. Returns false if steptrace stays off (disabled, already
/// running, or no thread could be started); the program runs on either way.
STEPTRACE_API bool start(const Config& cfg = {}) noexcept;

/// Closes the last step, writes the remaining lines, prints the summary (unless summary=false) and
/// releases the thread and the file. Without a running session it returns a Summary with started=false.
STEPTRACE_API Summary stop() noexcept;

STEPTRACE_API bool is_running() noexcept;

/// Attaches a scalar (loss, grad_norm, overflow_count, lr, anything) to the current step. Names are
/// kept to printable ASCII; the last value recorded under a name in a step wins.
STEPTRACE_API void record(std::string_view name, double value) noexcept;

/// Writes the next `n` steps to begin as a trace (the flight recorder, trace_keep_steps): phase scopes
/// on their threads, GPU records on their streams. Returns false when it cannot (not running, the
/// recorder off, n < 1). The line of each such step names the file.
STEPTRACE_API bool capture_steps(int n = 1) noexcept;

/// Sets the current step's token (and sample) count when it is only known inside the step.
STEPTRACE_API void set_step_tokens(double tokens, std::optional<double> samples = std::nullopt) noexcept;

/// Registers a function that reports the program's allocator numbers. It is called once per step,
/// when the TRACE_STEP scope ends, on that thread: keep it cheap. A hook that throws is removed.
STEPTRACE_API void set_allocator_stats_hook(std::function<AllocatorStats()> hook) noexcept;

/// Names the CUDA stream (a cudaStream_t) the program runs its step's work on, for the stream markers
/// (stream_markers): without it they go on the legacy default stream, and only while traced steps show
/// the work there. Call it before the run's first step (before or after start()); the stream must
/// outlive steptrace::stop(), which forgets it (a next run is told again).
STEPTRACE_API void set_marker_stream(void* stream) noexcept;

/// Registers a custom phase name (see is_valid_phase_name) and returns its id; a bad name is
/// rewritten and reported once through the "steptrace" logger.
STEPTRACE_API PhaseId register_phase(std::string_view name) noexcept;

namespace details {
struct ThreadState;
/// Hands a cross-rank exchange to the running session (steptrace/nccl.hpp builds the NCCL one in
/// the program's own translation unit). `setup_error` non-empty: the exchange could not be set up;
/// one warning says why and the view stays off.
STEPTRACE_API bool use_cross_rank_exchange(std::unique_ptr<CrossRankExchange> exchange,
                                                            const std::string& setup_error, int every_k_steps) noexcept;
/// The rank and world size the running session's lines say; false when none runs (the Python package
/// compares them with torch.distributed's and the framework's).
STEPTRACE_API bool session_rank(int& rank, int& world_size) noexcept;
/// The open step's training work is done, its scope stays open until the next step begins (Python's
/// watch() and framework callbacks, after optimizer.step()): the cross-rank view compares ranks up to
/// this moment, the line's step time runs on to the next step's start.
STEPTRACE_API void mark_step_work_done() noexcept;
/// The next end of the open step's scope ends it where its training work was marked done, not now
/// (Python's stop() closing a step kept open for the next one).
STEPTRACE_API void end_next_step_at_work_end() noexcept;
/// One step's collective wait measured by the program's side (Python's backward_end events,
/// steptrace/_waits.py), in ms, for the cross-rank window (details/cross_rank_link.hpp).
STEPTRACE_API void add_collective_wait(double ms) noexcept;
/// Steps begun so far in the running session (-1: none runs); the open step's global_step + 1.
STEPTRACE_API int64_t steps_begun() noexcept;
/// A binding's own warning (the Python package's) through the "steptrace" logger, said once per key.
STEPTRACE_API bool binding_warn_once(const std::string& key, const std::string& message) noexcept;
/// What one steptrace call on the training thread costs a binding, in ns, for the overhead's host_api
/// part (Python's scopes cost more than C++'s: OverheadLedger::kPythonScopeNs); set before start().
STEPTRACE_API void set_binding_call_ns(double ns) noexcept;
/// What a binding's bookkeeping costs the training thread per step beyond its calls as modelled, in ns,
/// as the binding measured it (the framework callbacks time theirs on some steps:
/// python/steptrace/_callback_steps.py), at most 1 ms; the overhead's host_api part charges it on each
/// step that closes while it is set. 0 (each start()'s) charges the model alone.
STEPTRACE_API void set_binding_step_extra_ns(double ns) noexcept;
STEPTRACE_API double binding_step_extra_ns() noexcept;
/// The next step this thread opens is a framework's, opened by a binding's callbacks (the Python
/// package's Lightning and HF Trainer ones): what they cost the framework's own code around their calls
/// is in no measurement, so that step's line has `overhead.estimated_fraction_high` null, said why
/// (Reason::framework_steps_unbounded). Set just before the step opens; the step's opening takes it
/// back (true), and a binding sets it false after a step that did not open.
STEPTRACE_API void set_next_step_framework(bool on) noexcept;
STEPTRACE_API bool next_step_framework() noexcept;
/// The stream markers' event records' time on the training thread so far, in ns (what the overhead's
/// host_api part charges them from): a binding timing its own calls takes it out of theirs.
STEPTRACE_API int64_t marker_record_ns() noexcept;
/// Step boundaries so far that switched tracing or attached CUPTI ahead (what the lines charge as
/// tracing): a binding timing its own calls leaves out a step whose calls met one.
STEPTRACE_API uint64_t tracing_boundaries_so_far() noexcept;
}  // namespace details

/// RAII: one training step. Constructing it starts step N (and closes step N-1, whose step time runs
/// to this moment); destroying it marks the end of the step's scope.
class STEPTRACE_API StepScope {
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
  ~StepScope();
  // On the stack only, as NVTX3's scoped ranges (nvtx3.hpp's scoped_range_in deletes them too): a scope
  // made with `new` could end on another thread, or never. (Placement into storage the program owns,
  // `::new (p) StepScope`, stays possible: the Python binding's per-thread scope stack.)
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 private:
  StepScope(std::optional<double> tokens, std::optional<double> samples) noexcept;
  bool active_ = false;
};

/// RAII: one phase. Also an NVTX range named after the phase in the "steptrace" domain.
class STEPTRACE_API PhaseScope {
 public:
  explicit PhaseScope(PhaseId phase) noexcept;
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
  PhaseScope(PhaseScope&&) = delete;
  PhaseScope& operator=(PhaseScope&&) = delete;
  ~PhaseScope();
  static void* operator new(std::size_t) = delete;  // on the stack only, as StepScope
  static void* operator new[](std::size_t) = delete;

 private:
  details::ThreadState* ts_ = nullptr;  // the opening thread's state; null: not recorded
  uint64_t begin_ = 0;                  // the opening clock reading (ticks or monotonic_ns(), per flags_)
  PhaseId phase_ = kNoPhase;
  uint16_t depth_ = 0;                  // 0 = outermost scope on its thread
  uint8_t flags_ = 0;                   // details::SpanRing's kTicks and kNestedInSame
};

// A program in which no file defines STEPTRACE_IMPLEMENTATION fails to link with undefined references
// to the runtime; this variable's initializer adds one whose name says what is missing (the runtime's
// translation unit defines it: details/api_impl.hpp). In the versioned namespace, as the rest of the API:
// two runtimes of different versions or ABIs linked into one program keep one each.
STEPTRACE_API extern const char steptrace_is_not_compiled_define_STEPTRACE_IMPLEMENTATION_in_one_file;
namespace details {
[[maybe_unused]] __attribute__((used)) static const char* const kImplementationLinked =
    &steptrace_is_not_compiled_define_STEPTRACE_IMPLEMENTATION_in_one_file;
}  // namespace details

#else  // STEPTRACE_DISABLE: the same API, doing nothing, in a namespace of its own (version.hpp).

inline namespace disabled {
inline bool start(const Config& = {}) noexcept { return false; }
inline Summary stop() noexcept { return Summary{}; }
inline bool is_running() noexcept { return false; }
inline void record(std::string_view, double) noexcept {}
inline void set_step_tokens(double, std::optional<double> = std::nullopt) noexcept {}
inline bool capture_steps(int = 1) noexcept { return false; }
inline void set_allocator_stats_hook(std::function<AllocatorStats()>) noexcept {}
inline void set_marker_stream(void*) noexcept {}
inline PhaseId register_phase(std::string_view) noexcept { return kNoPhase; }
}  // namespace disabled

#endif

STEPTRACE_END_NAMESPACE  // steptrace
