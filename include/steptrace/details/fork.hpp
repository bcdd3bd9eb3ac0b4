// steptrace/details/fork.hpp - the rule for fork(): the child has a dead steptrace.
// A child of a multi-threaded process has one thread (the one that forked) and a copy of everything
// else: the background thread, the endpoint's thread and the SIGTERM watcher are not there, and a lock
// one of them held at the fork stays held for good (pthread_atfork(3), fork(2)). So the child's
// steptrace is switched off at the fork: no thread, no lock of the parent's session is ever taken,
// every call is a no-op, until the child calls start() anew, which builds a new session (the old one
// is left as it is, never destroyed). The process-wide locks any thread may take (starting the
// SIGTERM watcher, warn-once's, the phase table's, and spdlog's console lock that every colour console
// sink shares) are held across the fork, so the child finds them free. The SIGTERM watcher's pipes
// and every socket of the scrape endpoint are closed in the child, and its thread slots freed. A child
// of a process whose steptrace had touched CUDA gets no GPU measurement if it starts anew (CUDA cannot
// be used in such a child; the line says why).
#pragma once
#include "../version.hpp"
#include <atomic>
#include <mutex>
#include <string>

#include <pthread.h>
#include <spdlog/details/console_globals.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch_context.hpp"
#include "../core/phase_table.hpp"
#include "host_clock.hpp"
#include "log.hpp"
#include "signals.hpp"
#include "thread_slots.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// What the child does beyond the launch context: the session's part (session.hpp).
using ChildHook = void (*)();
inline std::atomic<ChildHook>& fork_child_hook() {
  static std::atomic<ChildHook> hook{nullptr};
  return hook;
}

/// Set once steptrace has probed a GPU in this process: a fork's child cannot use CUDA then.
inline std::atomic<bool>& cuda_touched() {
  static std::atomic<bool> touched{false};
  return touched;
}
/// In a fork's child of a process whose steptrace had touched CUDA: why a new start() measures no GPU.
inline std::atomic<bool>& forked_after_cuda() {
  static std::atomic<bool> forked{false};
  return forked;
}

// Lock order (no path holds one of these while taking an earlier one): the watcher's install lock,
// warn-once's, the phase table's, spdlog's console lock (warn_once logs after releasing its own), the
// span rings' drain lock (its holder takes none of the others).
inline void fork_prepare() {
  end_install_mutex().lock();
  warn_once_mutex().lock();
  phase_table().mutex.lock();
  spdlog::details::console_mutex::mutex().lock();
  span_ring_drain_mutex().lock();
}
inline void fork_parent() {
  span_ring_drain_mutex().unlock();
  spdlog::details::console_mutex::mutex().unlock();
  phase_table().mutex.unlock();
  warn_once_mutex().unlock();
  end_install_mutex().unlock();
}
/// In the child, on its one thread, before fork() returns: stores, unlocks and close(2) only.
inline void fork_child() {
  span_ring_drain_mutex().unlock();
  spdlog::details::console_mutex::mutex().unlock();
  phase_table().mutex.unlock();
  warn_once_mutex().unlock();
  end_install_mutex().unlock();
  running_flag().store(false, std::memory_order_release);
  EndSignals& e = end_signals();
  e.armed.store(false, std::memory_order_release);
  for (int* fd : {&e.wake[0], &e.wake[1], &e.done[0], &e.done[1]}) {  // the watcher is the parent's
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  forget_held_endings();  // the parent's threads inside its bookkeeping, and a SIGTERM one of them held
  scopes_read_ticks().store(false, std::memory_order_relaxed);
  current_step().store(-1, std::memory_order_relaxed);
  step_thread().store(nullptr, std::memory_order_relaxed);
  step_thread_phase().store(kNoPhase, std::memory_order_relaxed);
  step_thread_slot().store(nullptr, std::memory_order_relaxed);
  ThreadSlot* slots = thread_slot_table();  // every slot names a thread of the parent's
  for (int i = 0; i < kMaxThreadSlots; ++i) slots[i].owner.store(0, std::memory_order_relaxed);
  thread_state().slot = nullptr;  // a new start() claims this thread's own
  thread_state().ring = nullptr;
  thread_slot_release().slot = nullptr;  // the parent's slot: never given back from here
  thread_id_cache() = static_cast<int32_t>(::syscall(SYS_gettid));
  logger_forked().store(true, std::memory_order_release);
  if (cuda_touched().load(std::memory_order_relaxed)) forked_after_cuda().store(true, std::memory_order_relaxed);
  if (ChildHook hook = fork_child_hook().load(std::memory_order_acquire)) hook();
}

/// Once per process, at the first start(). Returns "" or why not.
inline std::string install_fork_handlers(ChildHook session_part) {
  fork_child_hook().store(session_part, std::memory_order_release);
  static const int result = ::pthread_atfork(fork_prepare, fork_parent, fork_child);
  return result == 0 ? std::string() : "pthread_atfork failed";
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
