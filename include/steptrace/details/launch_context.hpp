// steptrace/details/launch_context.hpp - the launch context every thread carries: which phases are open
// on it, and which step is open in the process. The runtime owns it: scopes write it, and the backend
// reads it only through the LaunchContextSource the session hands it (backend/gpu_backend.hpp).
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cstdint>

#include <sys/syscall.h>
#include <unistd.h>

#include "../core/phase.hpp"
#include "../core/step_keys.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline constexpr uint16_t kMaxPhaseDepth = 32;

struct ThreadSlot;  // details/thread_slots.hpp: the stack as other threads may read it
class SpanRing;     // details/span_ring.hpp: the thread's closed scopes, waiting to be gathered

/// Per-thread phase stack.
struct ThreadState {
  uint16_t depth = 0;
  PhaseId stack[kMaxPhaseDepth] = {};  // all members initialised: constant-initialised TLS, no guard per access
  ThreadSlot* slot = nullptr;          // taken at the thread's first scope
  SpanRing* ring = nullptr;            // that slot's ring (null: the slot is shared or has none)
  PhaseId innermost() const { return depth ? stack[depth - 1] : kNoPhase; }
};
inline ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

/// The calling thread's id (gettid), read once per thread: phase spans and launches carry it so that a
/// trace (core/trace_events.hpp) shows them on their threads.
inline int32_t& thread_id_cache() {  // read again in a fork's child (details/fork.hpp)
  thread_local int32_t id = static_cast<int32_t>(::syscall(SYS_gettid));
  return id;
}
inline int32_t this_thread_id() { return thread_id_cache(); }

/// Whether a session is running; read by every scope before anything else.
inline std::atomic<bool>& running_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

/// Where GPU work launched now belongs, as a launch key: the open step's index (>= 0); -1 before the
/// first step; between_steps_key(N) once step N's scope has ended and until the next step begins (work
/// between steps: evaluation, checkpoints; the next line's `between_steps`, after the last step the end
/// record's `after_last_step`). One atomic, so a launch never pairs a step with the wrong side of it.
inline std::atomic<int64_t>& current_step() {
  static std::atomic<int64_t> step{-1};
  return step;
}


/// The thread that runs the current step, and the innermost phase open on it. A launch from a thread
/// with no phase of its own (libtorch runs backward kernels on its autograd threads) is attributed to
/// this phase: the step thread is then waiting inside it.
inline std::atomic<const ThreadState*>& step_thread() {
  static std::atomic<const ThreadState*> state{nullptr};
  return state;
}
inline std::atomic<PhaseId>& step_thread_phase() {
  static std::atomic<PhaseId> phase{kNoPhase};
  return phase;
}
/// The step thread's slot in the open-phase table (thread_slots.hpp), for the stall watchdog.
inline std::atomic<const ThreadSlot*>& step_thread_slot() {
  static std::atomic<const ThreadSlot*> slot{nullptr};
  return slot;
}

/// The phase a launch made on this thread now belongs to.
inline PhaseId launch_phase() {
  const ThreadState& ts = thread_state();
  return ts.depth ? ts.innermost() : step_thread_phase().load(std::memory_order_relaxed);
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
