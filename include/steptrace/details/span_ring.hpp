// steptrace/details/span_ring.hpp - where a thread's closed phase scopes wait until the step recorder
// gathers them: one single-producer ring per thread slot (thread_slots.hpp). The scope's exit writes
// one entry and publishes it with a release store: no lock, no allocation, no call into the session.
// The recorder (details/step_recorder.hpp) gathers every ring under its own lock when a step begins or
// ends, and the background thread does so at each wake (every memory_sample_ms), so a ring holds what
// one thread closed between two gatherings. A scope that finds its ring full goes through the
// recorder's lock instead (details/api_impl.hpp), after the rings are gathered: none is lost.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cstdint>
#include <mutex>

#include "../core/phase.hpp"
#include "../core/records.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class SpanRing {
 public:
  static constexpr uint32_t kCapacity = 4096;  // entries (32 bytes each): as many as max_spans_per_step's default

  struct Entry {     // trivial: a new ring's entries are not written until used
    uint64_t begin, end;  // the scope's clock readings (ticks or monotonic_ns, per `flags`)
    int32_t tid;
    PhaseId phase;
    uint16_t depth;
    uint8_t flags;
  };
  static constexpr uint8_t kTicks = 1, kOnStepThread = 2, kNestedInSame = 4;

  /// The slot's owner (one thread at a time; a slot passes to another thread only through its
  /// owner word's release and acquire, thread_slots.hpp). False: the ring is full, nothing written.
  bool push(const Entry& e) {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_seen_ >= kCapacity) {
      tail_seen_ = tail_.load(std::memory_order_acquire);
      if (h - tail_seen_ >= kCapacity) return false;
    }
    entries_[h & (kCapacity - 1)] = e;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

  /// The gatherer, holding span_ring_drain_mutex() (one at a time, whichever session): `fn(entry)`
  /// for each entry published so far, oldest first.
  template <class F>
  void drain(F&& fn) {
    const uint64_t h = head_.load(std::memory_order_acquire);
    uint64_t t = tail_.load(std::memory_order_relaxed);
    for (; t != h; ++t) fn(entries_[t & (kCapacity - 1)]);
    tail_.store(h, std::memory_order_release);
  }

  /// Whether anything waits (a relaxed look; the gatherer skips empty rings without a write).
  bool empty() const { return head_.load(std::memory_order_relaxed) == tail_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the owner
  uint64_t tail_seen_ = 0;                     // the owner's last look at tail_
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the gatherer
  Entry entries_[kCapacity];  // default-initialised (left as they are): pages are touched as the ring is used
};

/// The span an entry stands for; its times stay unset (the entry's are clock readings, ticks when
/// `flags` has kTicks: the recorder converts them).
inline PhaseSpan span_of(const SpanRing::Entry& e) {
  PhaseSpan span;
  span.phase = e.phase;
  span.depth = e.depth;
  span.tid = e.tid;
  span.on_step_thread = (e.flags & SpanRing::kOnStepThread) != 0;
  span.nested_in_same = (e.flags & SpanRing::kNestedInSame) != 0;
  return span;
}

/// The rings are the process's, the recorders each session's: a session winding down and the next one
/// starting must not drain one ring at once. Taken inside a recorder's lock, never the other way round.
inline std::mutex& span_ring_drain_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed (docs/architecture.md, "statics")
  return *m;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
