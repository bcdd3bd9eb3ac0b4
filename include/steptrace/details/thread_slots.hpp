// steptrace/details/thread_slots.hpp - which phases are open on each thread right now, readable from
// the background thread (the stall watchdog, core/stall.hpp) without touching the threads themselves.
// A thread takes a slot of a fixed process-wide table at its first phase scope and gives it back when
// it exits. Only its owner writes a slot: a few relaxed stores per scope inside a sequence counter
// (odd while it writes), so a reader sees a consistent stack or retries. Nothing here allocates, locks
// or makes a system call on the scope's path.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "launch_context.hpp"
#include "../core/phase.hpp"
#include "span_ring.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline constexpr int kMaxThreadSlots = 256;

struct ThreadSlot {
  std::atomic<int> owner{0};  // the owning process's pid; 0 = free
  int tid = 0;                // the owning thread's id (gettid), written before `owner` holds the pid
  std::atomic<uint32_t> seq{0};  // odd while the owner writes
  std::atomic<uint16_t> depth{0};
  std::atomic<uint32_t> entry[kMaxPhaseDepth] = {};  // phase id | 1 << 16 when `begin` is a tick reading
  std::atomic<uint64_t> begin[kMaxPhaseDepth] = {};  // the scope's opening clock reading
  std::atomic<SpanRing*> ring{nullptr};  // its closed scopes (span_ring.hpp); made at the first claim, kept

  /// The owner: phase `phase` opened at depth `d` (the scope's clock reading `at`).
  void push(uint16_t d, PhaseId phase, uint64_t at, bool ticks) {
    const uint32_t s = seq.load(std::memory_order_relaxed);
    seq.store(s + 1, std::memory_order_relaxed);
    // Release stores (plain moves on x86), no fence: a reader that sees one of them sees seq odd or
    // moved on (and thread sanitizer follows it, which it does not for fences).
    entry[d].store(phase | (ticks ? 1u << 16 : 0u), std::memory_order_release);
    begin[d].store(at, std::memory_order_release);
    depth.store(static_cast<uint16_t>(d + 1), std::memory_order_release);
    seq.store(s + 2, std::memory_order_release);
  }
  /// The owner: the scope at depth `d` closed.
  void pop(uint16_t d) {
    const uint32_t s = seq.load(std::memory_order_relaxed);
    seq.store(s + 1, std::memory_order_relaxed);
    depth.store(d, std::memory_order_release);
    seq.store(s + 2, std::memory_order_release);
  }
};

/// The table, and a slot for threads that found it full (written, never read).
inline ThreadSlot* thread_slot_table() {
  static ThreadSlot table[kMaxThreadSlots];
  return table;
}
inline ThreadSlot& overflow_thread_slot() {
  static ThreadSlot slot;
  return slot;
}
/// Threads that found the table full: their phases are missing from stall reports (said there).
inline std::atomic<uint64_t>& thread_slots_refused() {
  static std::atomic<uint64_t> n{0};
  return n;
}

/// How many slots of the table were ever claimed (a claim takes the lowest free one): gatherers
/// look at that many.
inline std::atomic<int>& thread_slots_used() {
  static std::atomic<int> n{0};
  return n;
}

/// Gives the slot back when its thread exits (a thread_local's destructor). A scope that runs later in
/// the thread's exit (another thread_local's destructor) takes the overflow slot and no ring: the slot
/// and its ring may already be another thread's.
struct ThreadSlotRelease {
  ThreadSlot* slot = nullptr;
  ~ThreadSlotRelease() {
    if (!slot) return;
    ThreadState& ts = thread_state();  // trivially destructible: still there while the thread exits
    ts.slot = &overflow_thread_slot();
    ts.ring = nullptr;
    slot->depth.store(0, std::memory_order_relaxed);
    slot->owner.store(0, std::memory_order_release);
  }
};
/// The calling thread's release (a fork's child forgets it: the slot it names is the parent's).
inline ThreadSlotRelease& thread_slot_release() {
  static thread_local ThreadSlotRelease release;
  return release;
}

/// Takes the calling thread's slot, at its first scope (the overflow slot when the table is full).
STEPTRACE_COLD inline ThreadSlot* claim_new_thread_slot(ThreadState& ts) {
  ThreadSlotRelease& release = thread_slot_release();
  ts.ring = nullptr;  // the overflow slot is shared: no ring
  const int pid = static_cast<int>(::getpid());
  ThreadSlot* table = thread_slot_table();
  ThreadSlot* mine = &overflow_thread_slot();
  for (int i = 0; i < kMaxThreadSlots; ++i) {
    int expected = 0;
    if (table[i].owner.load(std::memory_order_relaxed) != 0) continue;
    // Claimed as -1 (no reader takes it), then the tid, then the owner's pid (release: a reader that
    // sees the pid sees the tid).
    if (table[i].owner.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) {
      table[i].tid = details::this_thread_id();
      table[i].depth.store(0, std::memory_order_relaxed);
      SpanRing* ring = table[i].ring.load(std::memory_order_relaxed);
      if (!ring) {  // a slot's ring outlives its threads: the next owner writes on where the last stopped
        ring = new (std::nothrow) SpanRing;
        table[i].ring.store(ring, std::memory_order_release);
      }
      int used = thread_slots_used().load(std::memory_order_relaxed);
      while (used < i + 1 && !thread_slots_used().compare_exchange_weak(used, i + 1, std::memory_order_release)) {
      }
      table[i].owner.store(pid, std::memory_order_release);
      mine = &table[i];
      release.slot = mine;
      ts.ring = ring;  // null when it could not be made: this thread's scopes take the recorder's lock
      break;
    }
  }
  if (mine == &overflow_thread_slot()) thread_slots_refused().fetch_add(1, std::memory_order_relaxed);
  ts.slot = mine;
  return mine;
}

/// The calling thread's slot, taken on first use.
inline ThreadSlot* claim_thread_slot(ThreadState& ts) { return ts.slot ? ts.slot : claim_new_thread_slot(ts); }

/// One thread's open phases as the background thread reads them.
struct OpenThread {
  int tid = 0;
  const ThreadSlot* slot = nullptr;
  struct Open {
    PhaseId phase = kNoPhase;
    uint64_t begin = 0;
    bool ticks = false;
  };
  std::vector<Open> phases;  // outermost first
};

/// Every thread of this process that holds a slot; `with_step_slot` is listed even with nothing open.
/// A slot whose owner writes while it is read is read again (a few times, then left out).
inline std::vector<OpenThread> read_open_threads(const ThreadSlot* with_step_slot) {
  std::vector<OpenThread> out;
  const int pid = static_cast<int>(::getpid());  // a fork's child sees its parent's slots: not its threads
  ThreadSlot* table = thread_slot_table();
  for (int i = 0; i < kMaxThreadSlots; ++i) {
    ThreadSlot& s = table[i];
    if (s.owner.load(std::memory_order_acquire) != pid) continue;
    for (int attempt = 0; attempt < 8; ++attempt) {
      const uint32_t s1 = s.seq.load(std::memory_order_acquire);
      if (s1 & 1u) continue;
      OpenThread t;
      t.tid = s.tid;
      t.slot = &s;
      // Acquire loads keep the second read of seq after them (no fence; see push()).
      const uint16_t d = std::min<uint16_t>(s.depth.load(std::memory_order_acquire), kMaxPhaseDepth);
      for (uint16_t k = 0; k < d; ++k) {
        const uint32_t e = s.entry[k].load(std::memory_order_acquire);
        t.phases.push_back({static_cast<PhaseId>(e & 0xFFFFu), s.begin[k].load(std::memory_order_acquire), (e >> 16) != 0});
      }
      if (s.seq.load(std::memory_order_relaxed) != s1) continue;
      if (!t.phases.empty() || &s == with_step_slot) out.push_back(std::move(t));
      break;
    }
  }
  return out;
}

/// A thread's name as the kernel knows it ("" when it has gone).
inline std::string thread_name(int tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
  std::FILE* f = std::fopen(path, "r");
  if (!f) return {};
  char buf[64] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) name.pop_back();
  return name;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
