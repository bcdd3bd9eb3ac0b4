// steptrace/core/records.hpp - steptrace's own plain records. No vendor types appear here: the
// backends convert what they read into these, and everything downstream is tested without a GPU.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phase.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// One closed phase scope on the host.
struct PhaseSpan {
  PhaseId phase = kNoPhase;
  uint16_t depth = 0;           // 0 = outermost scope on its thread
  bool on_step_thread = true;   // opened on the thread that runs TRACE_STEP
  bool nested_in_same = false;  // inside a scope of the same phase (not counted twice)
  int32_t tid = 0;              // the thread that opened it (gettid); 0 = unknown
  int64_t begin_ns = 0;         // monotonic_ns()
  int64_t end_ns = 0;
};

/// What a program's allocator reports (libtorch's caching allocator is the first user). Every field
/// is optional: report what you know, the line says null for the rest.
struct AllocatorStats {
  std::optional<int64_t> allocated_bytes;
  std::optional<int64_t> reserved_bytes;
  std::optional<int64_t> peak_allocated_bytes;  // peak over the step if the hook resets it, else since start
  std::optional<int64_t> peak_reserved_bytes;
  std::optional<int64_t> alloc_retries;
  std::optional<int64_t> ooms;
};

/// A device-memory reading taken by the background thread (cudaMemGetInfo).
struct MemorySample {
  int64_t time_ns = 0;  // monotonic_ns()
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};

/// Everything the host side knows about one step when it is handed to the background thread.
struct StepRecord {
  uint64_t index = 0;             // global_step, 0-based
  int64_t begin_ns = 0;           // TRACE_STEP constructed
  int64_t scope_end_ns = 0;       // TRACE_STEP destroyed (0 if still open at stop())
  int64_t end_ns = 0;             // next step's begin, or scope end for the last step
  int64_t work_end_ns = 0;        // its training work done while its scope stays open (Python's watch() and
                                  // callbacks: optimizer.step() returned; 0: not marked)
  int64_t prev_scope_end_ns = 0;  // the previous step's scope end (0: first step, or that scope was still open)
  bool end_is_next_step = true;   // false for the last step (stop() closed it)
  bool traced = true;             // GPU attribution was on for this step (false: sampled out, trace_every)
  uint32_t trace_every = 1;       // the trace interval in force when the step began
  uint64_t trace_anchor = 0;      // the step from which that interval counts (may be later: next_schedule)
  int64_t begin_unix_ns = 0;
  std::optional<double> tokens;   // tokens processed by this rank in this step
  std::optional<double> samples;
  std::vector<PhaseSpan> spans;
  std::vector<std::pair<std::string, double>> scalars;  // steptrace::record(name, value), in order
  std::optional<AllocatorStats> allocator;
  uint32_t ignored_step_scopes = 0;    // TRACE_STEP opened while this step was open (ignored)
  uint32_t spans_outside_step = 0;     // phase scopes that ended while no step was open
  uint32_t spans_dropped = 0;          // over the per-step span bound
  uint32_t scalars_dropped = 0;
  int64_t markers_ns_at_close = -1;  // the stream markers' recording time so far, taken as the next step began
                                     // (its own markers and those before it since the previous step's; -1: not taken)
  double binding_extra_ns = -1;  // a binding's measured bookkeeping beyond its calls' model, in force as the
                                 // next step began (details::set_binding_step_extra_ns; -1: not taken, as for
                                 // the step stop() closes)
  bool framework_steps = false;  // a binding's framework callbacks opened it (details::set_next_step_framework)
  std::vector<PhaseSpan> between_spans;  // phase scopes that ended after the previous step's scope ended

  /// The step's own end: its scope's end when the scope ended before the next step began (what runs
  /// between two steps is the next line's `between_steps`), else the next step's begin.
  int64_t own_end_ns() const { return scope_end_ns > begin_ns && scope_end_ns < end_ns ? scope_end_ns : end_ns; }
  /// The end of the step's own work: where its training work was marked done, when that came before its
  /// own end, else its own end. The cross-rank view compares ranks up to it.
  int64_t work_end_or_own_ns() const {
    const int64_t own = own_end_ns();
    return work_end_ns > begin_ns && work_end_ns < own ? work_end_ns : own;
  }
  /// The time between the previous step's scope end and this step's begin (0 when none).
  int64_t between_ns() const { return prev_scope_end_ns > 0 && begin_ns > prev_scope_end_ns ? begin_ns - prev_scope_end_ns : 0; }
};

STEPTRACE_END_NAMESPACE  // steptrace
