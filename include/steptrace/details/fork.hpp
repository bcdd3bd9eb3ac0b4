// steptrace/details/fork.hpp - the rule for fork(): the child has a dead steptrace.
// A child of a multi-threaded process has one thread (the one that forked) and a copy of everything
// else: the background thread, the endpoint's thread and the SIGTERM watcher are not there, and a lock
// one of them held at the fork stays held for good (pthread_atfork(3), fork(2)). So the child's
// steptrace is switched off at the fork: no thread, no lock of the parent's session is ever taken,
// every call is a no-op, until the child calls start() anew, which builds a new session (the old one
// is left as it is, never destroyed). The two process-wide locks any thread may take (warn-once's
// and the phase table's) are held across the fork, so the child finds them free.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <mutex>
#include <string>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../core/launch_context.hpp"
#include "../core/phase_table.hpp"
#include "host_clock.hpp"
#include "log.hpp"
#include "signals.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// What the child does beyond the launch context: the session's part (session.hpp).
using ChildHook = void (*)();
inline std::atomic<ChildHook>& fork_child_hook() {
  static std::atomic<ChildHook> hook{nullptr};
  return hook;
}

inline void fork_prepare() {
  warn_once_mutex().lock();
  phase_table().mutex.lock();
}
inline void fork_parent() {
  phase_table().mutex.unlock();
  warn_once_mutex().unlock();
}
/// In the child, on its one thread, before fork() returns: only stores and unlocks.
inline void fork_child() {
  phase_table().mutex.unlock();
  warn_once_mutex().unlock();
  running_flag().store(false, std::memory_order_release);
  end_signals().armed.store(false, std::memory_order_release);
  scopes_read_ticks().store(false, std::memory_order_relaxed);
  current_step().store(-1, std::memory_order_relaxed);
  step_thread().store(nullptr, std::memory_order_relaxed);
  step_thread_phase().store(kNoPhase, std::memory_order_relaxed);
  step_thread_slot().store(nullptr, std::memory_order_relaxed);
  thread_state().slot = nullptr;  // the parent's slot names the parent's pid: a new start() claims its own
  thread_id_cache() = static_cast<int32_t>(::syscall(SYS_gettid));
  logger_forked().store(true, std::memory_order_release);
  if (ChildHook hook = fork_child_hook().load(std::memory_order_acquire)) hook();
}

/// Once per process, at the first start(). Returns "" or why not.
inline std::string install_fork_handlers(ChildHook session_part) {
  fork_child_hook().store(session_part, std::memory_order_release);
  static const int result = ::pthread_atfork(fork_prepare, fork_parent, fork_child);
  return result == 0 ? std::string() : "pthread_atfork failed";
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
