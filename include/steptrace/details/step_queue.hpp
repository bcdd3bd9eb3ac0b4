// steptrace/details/step_queue.hpp - closed steps on their way from the training thread to the
// background thread: bounded (max_pending_steps), a step over the bound is dropped and counted.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>
#include <mutex>

#include "../core/records.hpp"
#include "log.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class StepQueue {
 public:
  /// `wake_at`: steps waiting that wake the background thread; 0: a quarter of the bound (1 wakes it
  /// at every step: benchmarks/queue_wake.cpp compares the two).
  void reset(std::size_t bound, std::size_t wake_at = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    bound_ = bound;
    wake_at_ = wake_at > 0 ? wake_at : std::max<std::size_t>(1, bound / 4);
    queue_.clear();
    stopping_ = false;
    dropped_ = dropped_traced_ = 0;
    received_ = 0;
    wakes_ = 0;
  }

  /// Training thread. False: dropped (counted). `last`: stop()'s final step, which the bound does not
  /// refuse (one over it at most: stop() ends the pushes). The background thread is woken only for the
  /// last step or once a quarter of the bound waits: otherwise it takes the steps at its next look (at
  /// most kLookEveryMs apart, worker_decl.hpp). Waking the sleeping thread at every step cost the
  /// training thread a futex call and the wake-up, 31.5-31.9 us median a step on the 2-core dev VM
  /// against 0.21-0.23 us without, 1.9-2.3 against 0.20-0.32 us on an H200 host (benchmarks/queue_wake;
  /// results/2026-11-30-h200x2-session68/queue_wake_vm.txt, -session69/queue_wake_h200.txt).
  bool push(StepRecord&& record, bool last = false) {
    bool wake = last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++received_;
      if (flush_asked_ != flush_taken_ && record.index < flush_begun_) ++flush_late_;  // not cut after all
      if (queue_.size() >= bound_ && !last) {
        ++dropped_;
        if (record.traced) ++dropped_traced_;
        warn_once("queue.full", "writer queue full (max_pending_steps); step lines are being dropped and counted");
        return false;
      }
      queue_.push_back(std::move(record));
      wake = wake || queue_.size() >= wake_at_;
      if (wake) ++wakes_;
    }
    if (wake) cv_.notify_one();
    return true;
  }

  /// Background thread: waits up to `period` for steps (or stop), then takes all of them.
  /// Returns whether stop() has been asked.
  bool take(std::deque<StepRecord>& out, std::chrono::microseconds period) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++reading_;
    cv_.wait_for(lock, period, [&] { return !queue_.empty() || stopping_ || flush_asked_ != flush_taken_; });
    --reading_;
    out.swap(queue_);
    return stopping_;
  }
  /// How often push() woke the background thread (tests, benchmarks/queue_wake).
  uint64_t wakes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return wakes_;
  }
  /// Whether a take() is under way: seen from another thread with the queue empty, that take() is
  /// asleep until woken or its period ends (the tests push only then).
  bool reader_inside() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reading_ > 0;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

  // ---- an ending without stop() (SIGTERM, exit): write what is pending now ----

  /// Any thread: asks the background thread to write every pending line and an end record now.
  /// `steps_begun`: the steps begun up to the ending (StepRecorder::try_close_open); those of them
  /// that have not reached this queue when the background thread takes the request (a step the
  /// training thread closed but had not pushed when a signal stopped it, an open step the ending
  /// could not close) are the end record's `steps_cut_at_end`. `asked_at`: when the ending was asked
  /// (its wait counts from there). Returns the request's number, for wait_flushed().
  uint64_t request_flush(std::string reason, uint64_t steps_begun,
                         std::chrono::steady_clock::time_point asked_at = std::chrono::steady_clock::now()) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      flush_begun_ = steps_begun;
      flush_cut_ = steps_begun > received_ ? steps_begun - received_ : 0;
      flush_late_ = 0;
      flush_reason_ = std::move(reason);
      flush_asked_at_ = asked_at;
      id = ++flush_asked_;
    }
    cv_.notify_all();
    return id;
  }
  /// Background thread: the reason of a request not yet served ("" = none), marking it taken.
  /// A flush asked for: its id and reason, and in `more` every step queued before it was asked
  /// (the asking thread queued the open step first: its line must precede the end record).
  /// `cut`: request_flush()'s count of steps that never reached the queue.
  std::string take_flush(uint64_t& id, std::deque<StepRecord>& more, std::chrono::steady_clock::time_point* asked_at = nullptr,
                         uint64_t* cut = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (flush_asked_ == flush_taken_) return {};
    flush_taken_ = id = flush_asked_;
    if (cut) *cut = flush_cut_ - std::min(flush_cut_, flush_late_);
    if (asked_at) *asked_at = flush_asked_at_;
    for (auto& r : queue_) more.push_back(std::move(r));
    queue_.clear();
    return flush_reason_;
  }
  /// Whether an ending asked for a flush the background thread has not taken yet.
  bool flush_pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    return flush_asked_ != flush_taken_;
  }
  void flush_done(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      flush_done_ = std::max(flush_done_, id);
    }
    done_cv_.notify_all();
  }
  /// Waits until request `id` was served or `deadline`; returns whether it was.
  bool wait_flushed(uint64_t id, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_cv_.wait_until(lock, deadline, [&] { return flush_done_ >= id; });
  }

  bool empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.empty();
  }
  uint64_t dropped() {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }
  /// Traced steps among the dropped: their lines will never be taken (detach counts them as done).
  uint64_t dropped_traced() {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_traced_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  std::deque<StepRecord> queue_;
  std::size_t wake_at_ = 1;  // steps waiting that wake the background thread (a quarter of the bound)
  int reading_ = 0;          // take() calls under way
  uint64_t wakes_ = 0;       // push() calls that woke it
  std::string flush_reason_;
  std::chrono::steady_clock::time_point flush_asked_at_{};
  uint64_t flush_asked_ = 0, flush_taken_ = 0, flush_done_ = 0;
  std::size_t bound_ = 256;
  bool stopping_ = false;
  uint64_t dropped_ = 0, dropped_traced_ = 0;
  uint64_t received_ = 0;   // pushes since reset(), queued or dropped
  uint64_t flush_begun_ = 0, flush_cut_ = 0;  // request_flush()
  uint64_t flush_late_ = 0;  // steps begun before the ending, queued after it asked (their lines come)
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
