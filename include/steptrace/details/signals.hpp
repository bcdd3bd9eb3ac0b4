// steptrace/details/signals.hpp - signals and the process's end.
//
// Writes: a write to a pipe whose reader left raises SIGPIPE, and one past the file size limit
// (ulimit -f) SIGXFSZ, in the writing thread; both end the process by default. steptrace's threads
// block them, so such a write fails with EPIPE or EFBIG instead (counted and warned like any failed
// write) and training goes on.
//
// Endings (flush_on_exit): SIGTERM (what Slurm and Kubernetes send before a kill) and exit without
// stop() write the pending lines and an end record within end_wait_ms (1 s). Both are served by a
// watcher thread: the SIGTERM handler and the exit hook only do async-signal-safe work
// (signal-safety(7): write, read, poll, clock_gettime, getpid, sigaction, raise): they wake the
// watcher through a pipe and wait for its answer with poll. Then the handler hands the signal on
// to the handler that was installed before (its function, or the default action by raising the
// signal again, or nothing if it was ignored): chained, never replaced.
//
// A SIGTERM that lands on a thread inside steptrace's own step bookkeeping (the recorder's or the
// queue's lock held, or malloc called from there) waits until the thread leaves it (DeferEndings):
// the ending needs those locks, and a thread stopped inside them would hold them for the whole wait.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// The longest an ending (SIGTERM, exit) waits for the pending lines to be written, by default
/// (`end_wait_ms`, STEPTRACE_END_WAIT_MS).
inline constexpr int kEndWaitMs = 1000;

/// Called first thing in each thread steptrace starts (the mask is per thread, signal(7)). SIGTERM
/// too: the process's handler must run on a thread that is not the one writing the lines.
inline void block_write_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  sigaddset(&set, SIGXFSZ);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

/// The threads inside steptrace's step bookkeeping, as the SIGTERM handler finds them: a table of
/// pthread_self() values, constant-initialized, read with atomic loads only. Not thread-local storage:
/// a module loaded with dlopen (the Python extension, after torch) may find no static TLS left, and
/// reading dynamic TLS in a handler may allocate. More threads inside at once than slots: the others'
/// SIGTERMs are not held.
struct EndDeferralSlot {
  std::atomic<unsigned long> thread{0};  // pthread_self() of the thread inside; 0: free
  std::atomic<int> held{0};              // a SIGTERM came meanwhile: raised again on the way out
};
inline constexpr int kEndDeferralSlots = 8;
inline EndDeferralSlot* end_deferral_slots() noexcept {
  static EndDeferralSlot slots[kEndDeferralSlots];
  return slots;
}
// pthread_self() reads the thread pointer (glibc: an integer, no call into the C library's state); it
// is not on signal-safety(7)'s list, but nothing it does can block or allocate.
inline unsigned long end_deferral_self() noexcept { return static_cast<unsigned long>(::pthread_self()); }

/// Around the training thread's calls that take a lock an ending needs (the recorder's, the queue's):
/// a SIGTERM landing inside is held (its siginfo kept) and raised again when the outermost one closes,
/// so the ending never waits for a lock its own thread holds. An uncontended compare-exchange on the
/// way in and two atomic writes on the way out; a few per step (a phase scope only when its thread's
/// ring is full). The signal waits as long as the call inside: microseconds, unless a warning it writes
/// waits on the program's own log sink.
class DeferEndings {
 public:
  DeferEndings() noexcept {
    State& t = state();
    if (t.depth++ > 0) return;
    const unsigned long self = end_deferral_self();
    EndDeferralSlot* slots = end_deferral_slots();
    for (int i = 0; i < kEndDeferralSlots; ++i) {
      unsigned long free = 0;
      if (slots[i].thread.compare_exchange_strong(free, self, std::memory_order_seq_cst)) {
        t.slot = &slots[i];
        return;
      }
    }
  }
  ~DeferEndings() {
    State& t = state();
    if (--t.depth > 0 || !t.slot) return;
    EndDeferralSlot* slot = std::exchange(t.slot, nullptr);
    slot->thread.store(0, std::memory_order_seq_cst);  // from here a SIGTERM is handled where it lands
    if (slot->held.exchange(0, std::memory_order_seq_cst))
      ::raise(SIGTERM);  // the handler runs now, before raise returns (the signal is not blocked here)
  }
  DeferEndings(const DeferEndings&) = delete;
  DeferEndings& operator=(const DeferEndings&) = delete;

 private:
  struct State {
    int depth = 0;
    EndDeferralSlot* slot = nullptr;
  };
  static State& state() noexcept {  // read on the thread itself, never in the handler
    static thread_local State s;
    return s;
  }
};

/// What an ending does (Session::end_now): bounded by end_wait_ms from `asked_ns` (CLOCK_MONOTONIC,
/// when the handler or the exit hook asked), called on the watcher thread or at exit; returns whether
/// its end record was written in time.
using EndFunction = bool (*)(const char* reason, int64_t asked_ns);

struct EndSignals {
  int wake[2] = {-1, -1};  // handler -> watcher
  int done[2] = {-1, -1};  // watcher -> handler
  pid_t pid = 0;           // the process the watcher runs in (a fork's child has none)
  struct sigaction previous {};
  std::atomic<bool> armed{false};  // a run is on: endings write its lines
  std::atomic<int> wait_ms{kEndWaitMs};  // that run's end_wait_ms (a lock-free load in the handler)
  std::atomic<unsigned> asks{0};         // numbers each ask, so that an answer is matched to its ask
  std::atomic<int64_t> asked_ns{0};      // when the latest ending was asked (CLOCK_MONOTONIC)
  // The first held SIGTERM's siginfo, handed on when its thread raises it again: claimed, written,
  // then published (a handler on another thread reads it only once published, and only its holder's).
  siginfo_t held_info{};
  std::atomic<bool> held_info_claimed{false};
  std::atomic<bool> has_held_info{false};
  std::atomic<unsigned long> held_info_thread{0};
  EndFunction on_end = nullptr;
  bool installed = false;  // once per process (under install_mutex)
};

// Never destroyed: the handler and the exit hook may run while static destructors do.
inline EndSignals& end_signals() {
  static EndSignals* s = new EndSignals;
  return *s;
}

/// fork()'s child (details/fork.hpp): the slots name the parent's threads (a thread the child starts may
/// get one of their pthread_self() values), and a SIGTERM one of them held is not the child's.
inline void forget_held_endings() noexcept {
  EndDeferralSlot* slots = end_deferral_slots();
  for (int i = 0; i < kEndDeferralSlots; ++i) {
    slots[i].thread.store(0, std::memory_order_relaxed);
    slots[i].held.store(0, std::memory_order_relaxed);
  }
  EndSignals& s = end_signals();
  s.has_held_info.store(false, std::memory_order_relaxed);
  s.held_info_claimed.store(false, std::memory_order_relaxed);
}

/// A byte on the watcher's wake pipe: the ask's number (1..127) above bit 0, which is set for exit;
/// the watcher's answer: the same number above bit 0, which is set when the ending was served.
inline constexpr unsigned char kWakeExit = 1;
inline int64_t monotonic_now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

/// The ending's words when its wait ran out: write(2) only (the thread may be inside malloc).
inline void say_not_served(const char* text, std::size_t n) { (void)!::write(STDERR_FILENO, text, n); }

/// Wakes the watcher for an ending and waits up to the run's end_wait_ms for the answer to this ask
/// (an answer to an earlier one, come late, is passed over). Only read, write, poll and clock_gettime
/// (async-signal-safe). Returns false when no watcher runs in this process (nothing was asked), true
/// otherwise, whether or not the answer came in time.
inline bool hand_to_watcher(EndSignals& s, bool exit, bool* served) {
  *served = false;
  if (s.pid != ::getpid() || s.wake[1] < 0 || s.done[0] < 0) return false;
  const unsigned char id = static_cast<unsigned char>(s.asks.fetch_add(1, std::memory_order_relaxed) % 127 + 1);
  const int64_t t0 = monotonic_now_ns();
  s.asked_ns.store(t0, std::memory_order_release);
  const unsigned char what = static_cast<unsigned char>(id << 1 | (exit ? kWakeExit : 0));
  if (::write(s.wake[1], &what, 1) != 1) return errno == EAGAIN;  // a full pipe: the watcher is stuck
  const int64_t wait_ns = static_cast<int64_t>(s.wait_ms.load(std::memory_order_relaxed)) * 1000000;
  for (;;) {
    const int64_t left_ns = wait_ns - (monotonic_now_ns() - t0);
    if (left_ns <= 0) return true;
    pollfd p{s.done[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>((left_ns + 999999) / 1000000));
    if (r < 0 && errno != EINTR) return true;
    unsigned char b = 0;
    while (r > 0 && ::read(s.done[0], &b, 1) == 1)
      if ((b >> 1) == id) {
        *served = (b & 1) != 0;
        return true;
      }
  }
}

inline void on_sigterm(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  EndSignals& s = end_signals();
  const unsigned long self = end_deferral_self();
  EndDeferralSlot* slots = end_deferral_slots();
  for (int i = 0; i < kEndDeferralSlots; ++i)
    if (slots[i].thread.load(std::memory_order_seq_cst) == self) {  // inside steptrace's bookkeeping
      if (info && !s.held_info_claimed.exchange(true, std::memory_order_acq_rel)) {
        s.held_info = *info;
        s.held_info_thread.store(self, std::memory_order_relaxed);
        s.has_held_info.store(true, std::memory_order_release);
      }
      slots[i].held.store(1, std::memory_order_seq_cst);  // raised again when DeferEndings closes
      errno = saved_errno;
      return;
    }
  siginfo_t sender{};
  if (info && info->si_code == SI_TKILL && info->si_pid == ::getpid() && s.has_held_info.load(std::memory_order_acquire) &&
      s.held_info_thread.load(std::memory_order_relaxed) == self) {
    sender = s.held_info;  // raised again by DeferEndings on the thread that held it: who sent it
    s.has_held_info.store(false, std::memory_order_relaxed);
    s.held_info_claimed.store(false, std::memory_order_release);
    info = &sender;
  }
  bool served = false;
  if (s.armed.load(std::memory_order_acquire) && hand_to_watcher(s, false, &served) && !served) {
    static const char text[] = "steptrace: at SIGTERM: the ending was not served within end_wait_ms; "
                               "the last lines and the end record may be missing\n";
    say_not_served(text, sizeof text - 1);
  }
  const struct sigaction& prev = s.previous;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler == SIG_DFL) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // pending until this handler returns, then the default action ends the process
  } else if (prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

inline void end_watcher(EndSignals* s) {
  block_write_signals();
  for (;;) {
    unsigned char b = 0;
    const ssize_t n = ::read(s->wake[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const bool served =
        s->on_end && s->on_end(b & kWakeExit ? "exit" : "SIGTERM", s->asked_ns.load(std::memory_order_acquire));
    b = static_cast<unsigned char>((b & ~kWakeExit) | (served ? 1 : 0));  // the ask's number, and served
    (void)!::write(s->done[1], &b, 1);
  }
}

/// exit() without stop(). The ending runs on the watcher thread, not here: a program's signal handler
/// may call exit() (not async-signal-safe, but common), and the thread it stopped may be inside malloc
/// or hold a lock the ending needs. Waiting for the watcher is bounded by end_wait_ms; an ending not
/// served in that time is said on stderr. Where no watcher runs (the program ignores SIGTERM), the
/// ending runs here.
inline void at_exit_hook() {
  EndSignals& s = end_signals();
  if (!s.armed.load(std::memory_order_acquire) || !s.on_end) return;
  bool served = false;
  if (hand_to_watcher(s, true, &served)) {
    if (!served) {
      static const char text[] = "steptrace: at exit: the ending was not served within end_wait_ms; "
                                 "the last lines and the end record may be missing\n";
      say_not_served(text, sizeof text - 1);
    }
    return;
  }
  (void)s.on_end("exit", monotonic_now_ns());
}

/// Once per process, at the first start() with flush_on_exit: the exit hook, the watcher thread
/// and the SIGTERM handler (not where the program ignores SIGTERM). Returns "" or why not all.
inline std::mutex& end_install_mutex() {  // also held across fork() (details/fork.hpp)
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
inline std::string install_end_handlers(EndFunction on_end) {
  std::lock_guard<std::mutex> lock(end_install_mutex());
  EndSignals& s = end_signals();
  const auto start_watcher = [&s]() -> std::string {
    int wake[2] = {-1, -1}, done[2] = {-1, -1};
    if (::pipe2(wake, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC | O_NONBLOCK) != 0) {
      for (int fd : {wake[0], wake[1], done[0], done[1]})
        if (fd >= 0) ::close(fd);
      return "cannot create the SIGTERM handler's pipes";
    }
    for (int i = 0; i < 2; ++i) {
      s.wake[i] = wake[i];
      s.done[i] = done[i];
    }
    ::fcntl(s.wake[1], F_SETFL, ::fcntl(s.wake[1], F_GETFL) | O_NONBLOCK);
    try {
      std::thread(end_watcher, &s).detach();  // lives as long as the process, blocked in read()
    } catch (...) {
      return "cannot start the SIGTERM watcher thread";
    }
    s.pid = ::getpid();  // the handler wakes the watcher only in this process
    return {};
  };
  if (s.installed) {
    // A fork's child that starts anew: the handler and the exit hook are inherited, the watcher is
    // not (its pipes were closed in the child: details/fork.hpp).
    if (s.pid != 0 && s.pid != ::getpid()) return start_watcher();
    return {};
  }
  s.installed = true;
  s.on_end = on_end;
  std::atexit(at_exit_hook);
  struct sigaction current {};
  if (::sigaction(SIGTERM, nullptr, &current) != 0) return "cannot read SIGTERM's handler";
  if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) return {};  // the program ignores it
  const std::string err = start_watcher();
  if (!err.empty()) return err;
  struct sigaction mine {};
  mine.sa_sigaction = on_sigterm;
  mine.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&mine.sa_mask);
  s.previous = current;
  if (::sigaction(SIGTERM, &mine, nullptr) != 0) return "cannot install the SIGTERM handler";
  return {};
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
