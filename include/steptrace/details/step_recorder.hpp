// steptrace/details/step_recorder.hpp - the training-thread side of a run: the open step, its phase
// spans and scalars, under one uncontended mutex (taken at a step's begin and end, not per scope: the
// scopes wait in their threads' rings, details/span_ring.hpp, until gathered here, at the latest when
// the step's scope ends), and the clock phase scopes read. The recorder never formats or writes: a closed step is handed back to the caller, which
// queues it for the background thread.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "../config.hpp"
#include "../core/clock.hpp"
#include "launch_context.hpp"
#include "../core/records.hpp"
#include "host_clock.hpp"
#include "line_policy.hpp"
#include "log.hpp"
#include "thread_slots.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline constexpr std::size_t kMaxScalarsPerStep = 256;
inline constexpr int64_t kMaxTickDriftNs = 20000;  // tick clock vs steady_clock between two anchors

class StepRecorder {
 public:
  /// What begin() did: the step it closed (to be queued), the new step's index (nullopt when a step
  /// scope was already open: counted, ignored), and whether the new step is traced.
  struct Begun {
    std::optional<StepRecord> closed;
    std::optional<uint64_t> index;
    bool traced = false;
    bool tracing_failed = false;  // switching tracing failed earlier: leave the backend alone
  };

  /// start(): forget the previous run.
  void reset(const Config& cfg) {
    std::lock_guard<std::mutex> lock(mutex_);
    cfg_ = cfg;
    open_ = OpenStep{};
    end_at_work_end_ = false;
    gather_locked();  // scopes a previous run left in the rings: not this run's (no step open: not counted)
    next_index_.store(0, std::memory_order_release);
    spans_outside_step_ = 0;
    tracing_failed_ = false;
    for (auto& w : forced_) w.store(0, std::memory_order_relaxed);
    schedule_ = TraceSchedule{initial_trace_every(cfg), 0, cfg.trace_every == 0};
    next_traced_.store(false, std::memory_order_relaxed);
    wanted_every_.store(schedule_.every, std::memory_order_relaxed);
    budget_started_ = budget_decides(cfg);
    decided_.store(false, std::memory_order_relaxed);
    open_every_.store(schedule_.every, std::memory_order_relaxed);
    publish_begun(BegunStep{});
  }

  /// `framework_steps`: a binding's framework callbacks open it (StepRecord::framework_steps).
  Begun begin(std::optional<double> tokens, std::optional<double> samples, bool framework_steps = false) {
    Begun out;
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_.exists && open_.scope_open) {
      ++open_.record.ignored_step_scopes;
      const bool same_thread = step_thread().load(std::memory_order_relaxed) == &thread_state();
      warn_once("step.nested", same_thread ? "TRACE_STEP opened inside an open TRACE_STEP; the inner one is ignored"
                                           : "TRACE_STEP opened on a second thread while a step is open; ignored "
                                             "(steps are process-wide and sequential)");
      return out;
    }
    const int64_t now = monotonic_ns();  // before gathering, as in end()
    gather_locked();  // the closing step's scopes, and those ended since its scope ended
    int64_t prev_scope_end = 0;
    std::vector<PhaseSpan> gap_spans;
    uint32_t gap_dropped = 0;
    if (open_.exists) {
      open_.record.end_ns = now;
      open_.record.end_is_next_step = true;
      open_.record.spans_outside_step += static_cast<uint32_t>(std::exchange(spans_outside_step_, 0));
      if (!open_.scope_open) prev_scope_end = open_.record.scope_end_ns;
      gap_spans = std::move(open_.gap_spans);
      gap_dropped = open_.gap_dropped;
      out.closed = std::move(open_.record);
    }
    open_ = OpenStep{};
    open_.exists = true;
    open_.scope_open = true;
    StepRecord& r = open_.record;
    r.prev_scope_end_ns = prev_scope_end;
    r.between_spans = std::move(gap_spans);
    r.spans_dropped = gap_dropped;  // its between_steps' scopes over the bound are its line's drops
    r.index = next_index_.load(std::memory_order_relaxed);
    next_index_.store(r.index + 1, std::memory_order_release);  // written under the lock; read without it
    // Before the step's key, which releases it: a reader that sees the key sees this step's begin.
    publish_begun(BegunStep{static_cast<int64_t>(r.index), now, thread_state().depth});
    current_step().store(static_cast<int64_t>(r.index), std::memory_order_release);
    step_thread().store(&thread_state(), std::memory_order_relaxed);
    step_thread_phase().store(thread_state().innermost(), std::memory_order_relaxed);
    step_thread_slot().store(claim_thread_slot(thread_state()), std::memory_order_relaxed);
    r.begin_ns = now;
    r.begin_unix_ns = unix_ns();
    r.framework_steps = framework_steps;
    r.spans.reserve(16);
    // What was announced of this step (next_traced_: the step before computed it, set_trace_every may
    // have set it since, and the session attached CUPTI ahead of it on that word): an announced step is
    // traced, and a longer interval starting here is anchored at it.
    const bool announced = next_traced_.load(std::memory_order_relaxed);
    int wanted = wanted_every_.load(std::memory_order_relaxed);
    // No decision yet: the budget's own start (every step for the warm-up, then the probe's interval),
    // unless one lands meanwhile (the worker's store wins the exchange).
    if (budget_started_ && !decided_.load(std::memory_order_relaxed) && r.index == kProbeAfterSteps &&
        wanted_every_.compare_exchange_strong(wanted, budget_start_every(r.index), std::memory_order_relaxed))
      wanted = budget_start_every(r.index);
    if (wanted != schedule_.every) schedule_ = next_schedule(schedule_, wanted, r.index, /*at_once=*/announced);
    r.traced = !tracing_failed_ && (schedule_.traced(r.index) || forced(r.index) || announced);
    r.trace_every = static_cast<uint32_t>(schedule_.every);
    open_every_.store(schedule_.every, std::memory_order_relaxed);
    r.trace_anchor = schedule_.anchor;
    if (tokens) r.tokens = tokens;
    else if (cfg_.tokens_per_step > 0) r.tokens = cfg_.tokens_per_step;
    if (samples) r.samples = samples;
    else if (cfg_.samples_per_step > 0) r.samples = cfg_.samples_per_step;
    publish_open(r.begin_ns, 0, r.traced);
    next_traced_.store(!tracing_failed_ && (schedule_.traced(r.index + 1) || forced(r.index + 1)), std::memory_order_relaxed);
    out.index = r.index;
    out.traced = r.traced;
    out.tracing_failed = tracing_failed_;
    return out;
  }

  /// Tracing could not be switched on: this step and every later one go untraced.
  void tracing_failed(uint64_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    tracing_failed_ = true;
    if (open_.exists && open_.record.index == index) open_.record.traced = false;
    open_traced_.store(false, std::memory_order_relaxed);
    next_traced_.store(false, std::memory_order_relaxed);
  }

  /// The open step's training work is done; its scope stays open (the step ends where the next begins).
  void mark_work_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_.exists && open_.scope_open) open_.record.work_end_ns = monotonic_ns();
  }
  /// The next end() of the open scope ends it where its training work was marked done (Python's stop()
  /// closing a step kept open for the next one: the shutdown after the last optimizer step is no step's).
  void end_next_at_work_end() {
    std::lock_guard<std::mutex> lock(mutex_);
    end_at_work_end_ = true;
  }

  void end(std::optional<AllocatorStats> stats) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Asked for this end only: consumed even where there is no open scope to end (never a later step's).
    const bool at_work_end = std::exchange(end_at_work_end_, false);
    if (!open_.exists || !open_.scope_open) return;
    const int64_t now = monotonic_ns();  // before gathering: the step's time does not hold steptrace's work
    // Scopes closed before this point belong to the step whatever their readings say (the tick clock's
    // conversion may put the end of the last one a little after the scope's steady_clock end).
    gather_locked();
    open_.scope_open = false;
    const int64_t work_end = open_.record.work_end_ns;
    open_.record.scope_end_ns = at_work_end && work_end > open_.record.begin_ns ? work_end : now;
    // GPU work launched from now until the next step begins is work between steps.
    current_step().store(between_steps_key(static_cast<int64_t>(open_.record.index)), std::memory_order_relaxed);
    publish_open(open_.record.begin_ns, open_.record.scope_end_ns, open_.record.traced);
    if (stats) open_.record.allocator = stats;
  }

  void set_counts(std::optional<double> tokens, std::optional<double> samples) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.exists) return;
    if (tokens) open_.record.tokens = tokens;
    if (samples) open_.record.samples = samples;
  }

  /// A closed phase scope from a thread without a ring of its own (the thread-slot table was full), or
  /// whose ring was full.
  /// `ticks`: begin and end are read_ticks() readings, converted here; otherwise monotonic_ns().
  void add_span(PhaseSpan span, bool ticks, uint64_t begin, uint64_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    gather_locked();  // the scopes waiting in rings ended before this one: placed first
    if (to_ns(span, ticks, begin, end)) place_span(span);
  }

  /// Background thread, each wake: the scopes the threads' rings hold go into the open step now, so
  /// that a ring holds only what its thread closes between two wakes. Never waits for the lock (the
  /// training thread holds it at a step's begin and end; a signal may have stopped it there).
  void gather_spans() {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (lock.owns_lock()) gather_locked();
  }

  void record_scalar(std::string name, double value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.exists) {
      warn_once("record.nostep", "steptrace::record(\"" + name + "\") before the first TRACE_STEP; dropped");
      return;
    }
    auto& scalars = open_.record.scalars;
    if (scalars.size() >= kMaxScalarsPerStep) {
      // Full: a name already recorded still takes its last value (the line shows the last one), and
      // the built-in scalars always get in; only new names are dropped (counted).
      for (auto it = scalars.rbegin(); it != scalars.rend(); ++it)
        if (it->first == name) {
          it->second = value;
          ++open_.record.scalars_dropped;  // an earlier value of the name is no longer kept
          return;
        }
      if (name != "loss" && name != "grad_norm" && name != "overflow_count") {
        ++open_.record.scalars_dropped;
        return;
      }
    }
    scalars.emplace_back(std::move(name), value);
  }

  /// Steps begun since reset(): any thread, without the lock (an ending counts the ones the writer
  /// never got).
  uint64_t steps_begun() const { return next_index_.load(std::memory_order_acquire); }

  /// The end of the open step when stop() or an ending closes it: its scope's end; with the scope still
  /// open, where its training work was marked done (Python's watch() and callbacks keep a step open for
  /// the next one: what the program does after its last optimizer step is no step's), else now.
  int64_t open_end_locked() const {
    if (!open_.scope_open) return open_.record.scope_end_ns;
    const int64_t work_end = open_.record.work_end_ns;
    return work_end > open_.record.begin_ns ? work_end : monotonic_ns();
  }

  /// stop(): the open step, closed now (its line is the last).
  std::optional<StepRecord> close_last() {
    std::lock_guard<std::mutex> lock(mutex_);
    gather_locked();
    if (!open_.exists) return std::nullopt;
    open_.record.end_ns = open_end_locked();
    open_.record.end_is_next_step = false;
    open_.record.spans_outside_step +=
        static_cast<uint32_t>(open_.gap_spans.size() + open_.gap_dropped + std::exchange(spans_outside_step_, 0));
    std::optional<StepRecord> last = std::move(open_.record);
    open_ = OpenStep{};
    publish_open(0, 0, false);
    return last;
  }

  /// An ending without stop() (SIGTERM, exit): the open step, closed now, if the recorder's lock can
  /// be had by `deadline` (the thread a signal interrupted may hold it: then the open step is lost).
  /// `begun`: the steps begun up to this ending (read under the lock when it was had: a step the
  /// program begins after it is not this ending's).
  std::optional<StepRecord> try_close_open(std::chrono::steady_clock::time_point deadline, uint64_t* begun) {
    while (!mutex_.try_lock()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        *begun = steps_begun();
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(mutex_, std::adopt_lock);
    *begun = next_index_.load(std::memory_order_relaxed);
    gather_locked();
    if (!open_.exists) return std::nullopt;
    open_.record.end_ns = open_end_locked();
    open_.record.end_is_next_step = false;
    open_.record.spans_outside_step +=
        static_cast<uint32_t>(open_.gap_spans.size() + open_.gap_dropped + std::exchange(spans_outside_step_, 0));
    std::optional<StepRecord> last = std::move(open_.record);
    open_ = OpenStep{};  // the program may go on: its scope's end finds no open step
    publish_open(0, 0, false);
    return last;
  }

  // ---- the clock phase scopes read ----

  /// start(): the first anchor of the tick clock, or why scopes read steady_clock ("" = ticks usable).
  std::string begin_clock_calibration(ClockSource source) {
    scopes_read_ticks().store(false, std::memory_order_relaxed);
    std::string reason = source == ClockSource::steady ? "clock=steady" : ticks_unusable_reason();
    uint64_t t = 0;
    int64_t n = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    tick_clock_ = TickClock{};
    if (reason.empty()) {
      if (take_clock_anchor(t, n, 1.0, 20000)) tick_clock_.anchor(t, n);
      else reason = "the time-stamp counter could not be read next to steady_clock";
    }
    return reason;
  }

  /// start(), after the device probe: a second anchor at least TickClock::kMinBaselineNs after the
  /// first gives the slope; only then do scopes read ticks.
  void finish_clock_calibration(std::string reason) {
    if (reason.empty()) {
      uint64_t t = 0;
      int64_t n = 0;
      bool calibrated = false;
      for (int i = 0; i < 50 && !calibrated; ++i) {  // at most ~10 ms
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (!take_clock_anchor(t, n, 1.0, 20000)) continue;
        std::lock_guard<std::mutex> lock(mutex_);
        tick_clock_.anchor(t, n);
        calibrated = tick_clock_.calibrated();
      }
      if (!calibrated) reason = "the time-stamp counter could not be calibrated against steady_clock";
    }
    if (reason.empty()) {
      scopes_read_ticks().store(true, std::memory_order_relaxed);
      logger()->info("phase scopes read the CPU time-stamp counter ({:.4f} ns per tick)", tick_clock_.ns_per_tick());
    } else {
      logger()->info("phase scopes read steady_clock: {}", reason);
    }
  }

  /// Background thread: a fresh anchor keeps tick conversions within ~1 us; a counter that no
  /// longer follows steady_clock sends new scopes back to steady_clock.
  void refresh_clock_anchor() {
    if (!scopes_read_ticks().load(std::memory_order_relaxed)) return;
    uint64_t t = 0;
    int64_t n = 0;
    // Read outside the lock the scopes take; only this thread changes the slope it reads here.
    if (!take_clock_anchor(t, n, tick_clock_.ns_per_tick())) return;
    // Never waits for the scopes' lock: a SIGTERM handler may have stopped the training thread inside
    // it, and this thread must then still write the ending's lines. A busy lock: the next round anchors.
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    const int64_t error = tick_clock_.anchor(t, n);
    if (error > kMaxTickDriftNs || error < -kMaxTickDriftNs) {
      scopes_read_ticks().store(false, std::memory_order_relaxed);
      warn_once("clock.drift", "the CPU time-stamp counter drifted " + std::to_string(error / 1000) +
                                   " us from steady_clock; phase scopes read steady_clock from now on");
    }
  }

  /// The open step as another thread may read it without the lock (the stall watchdog): when it
  /// began (0: none open), when its scope ended (0: still open), whether it is traced, and whether
  /// the step after it will be (as the schedule stands; a new interval may change it).
  struct OpenView {
    int64_t begin_ns = 0, scope_end_ns = 0;
    bool traced = false;
    bool next_traced = false;
  };
  OpenView open_view() const {
    return {open_begin_ns_.load(std::memory_order_relaxed), open_scope_end_ns_.load(std::memory_order_relaxed),
            open_traced_.load(std::memory_order_relaxed), next_traced_.load(std::memory_order_relaxed)};
  }
  /// The step begun last, as another thread may read it without the lock (the stall watchdog times a
  /// stall from `begin_ns`): `index` -1 before the first. `depth`: how many phases were open on the
  /// step's thread when it began; that thread's phases deeper than that opened inside the step.
  struct BegunStep {
    int64_t index = -1;
    int64_t begin_ns = 0;
    uint16_t depth = 0;
  };
  /// nullopt when begin() was writing it at every try (a reader never waits for the training thread).
  std::optional<BegunStep> begun_step() const {
    for (int attempt = 0; attempt < 8; ++attempt) {
      const uint32_t s1 = begun_seq_.load(std::memory_order_acquire);
      if (s1 & 1u) continue;
      // Acquire loads keep the second read of seq after them (as thread_slots.hpp reads a slot).
      const BegunStep b{begun_index_.load(std::memory_order_acquire), begun_ns_.load(std::memory_order_acquire),
                        begun_depth_.load(std::memory_order_acquire)};
      if (begun_seq_.load(std::memory_order_relaxed) == s1) return b;
    }
    return std::nullopt;
  }

  /// The tick clock's conversion as it stands (the background thread anchors it).
  TickClock tick_clock() {
    std::lock_guard<std::mutex> lock(mutex_);
    return tick_clock_;
  }

  /// Steps first..last (at most 255) are traced whatever the interval (a capture asked for from
  /// outside, details/remote_captures.hpp). The last kForcedWindows windows hold, each one atomic word
  /// (first << 8 | length), so a reader never pairs one window's first with another's length.
  void force_trace(uint64_t first, uint64_t last) {
    const uint64_t length = std::min<uint64_t>(last - first + 1, 255);
    const unsigned slot = forced_next_.fetch_add(1, std::memory_order_relaxed) % kForcedWindows;
    forced_[slot].store(first << 8 | length, std::memory_order_relaxed);
  }

  /// Whether the budget's own start (budget_start_every) applies: the budget decides and GPU
  /// attribution runs (start() says no where it could not start it: no controller would ever decide,
  /// and the lines would say an interval nothing traces by).
  void set_budget_start(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    budget_started_ = on && budget_decides(cfg_);
  }
  /// The interval in force for the step begun last (the stall record's; read without the lock).
  int trace_every_in_force() const { return open_every_.load(std::memory_order_relaxed); }

  /// The worker's choice of trace interval (overhead_budget); it takes effect at the next step begun.
  /// A shorter interval than the one in force, the warm-up's end and `at_once` trace that step: it is
  /// announced now (next_traced_), so that the session attaches CUPTI ahead of it. A longer one leaves
  /// the announcement as it stands: announced, the step is traced and anchors the interval; else the
  /// first trace is the one the interval in force had due (line_policy.hpp's next_schedule). Without
  /// the recorder's lock: the background thread never waits for the training thread here (an ending
  /// may find that lock held by a thread it interrupted: try_close_open). A store that lands while
  /// begin() runs is overwritten by its announcement of the step after; the change then traces that
  /// step unannounced (CUPTI attached at its begin, as before the announcement existed).
  void set_trace_every(int every, bool at_once = false) {
    const int wanted = std::max(1, every), in_force = open_every_.load(std::memory_order_relaxed);
    wanted_every_.store(wanted, std::memory_order_relaxed);
    decided_.store(true, std::memory_order_relaxed);
    if (at_once || (wanted != in_force && (wanted < in_force || in_force <= 1)))
      next_traced_.store(true, std::memory_order_relaxed);
  }

 private:
  struct OpenStep {
    bool exists = false;      // a step has begun and its line is not yet queued
    bool scope_open = false;  // its TRACE_STEP scope has not ended yet
    StepRecord record;
    std::vector<PhaseSpan> gap_spans;  // ended after its scope: the next step's between_spans
    uint32_t gap_dropped = 0;          // ended after its scope, over max_spans_per_step: the next step's drops
  };

  /// Under mutex_: a scope's clock readings as monotonic_ns (false: read on a tick clock this run has
  /// not calibrated, i.e. opened in an earlier session; counted outside any step).
  bool to_ns(PhaseSpan& span, bool ticks, uint64_t begin, uint64_t end) {
    if (ticks && !tick_clock_.calibrated()) {
      ++spans_outside_step_;
      return false;
    }
    span.begin_ns = ticks ? tick_clock_.to_ns(begin) : static_cast<int64_t>(begin);
    span.end_ns = ticks ? tick_clock_.to_ns(end) : static_cast<int64_t>(end);
    return true;
  }

  /// Under mutex_: one closed scope into the open step, the gap after its scope, or outside any step.
  void place_span(const PhaseSpan& span) {
    if (!open_.exists) {
      ++spans_outside_step_;  // reported in the first step's phase_scopes_outside_step
      return;
    }
    StepRecord& r = open_.record;
    if (!open_.scope_open && span.end_ns > r.scope_end_ns) {  // ended between steps: the next line's between_steps
      if (open_.gap_spans.size() < cfg_.max_spans_per_step) open_.gap_spans.push_back(span);
      else ++open_.gap_dropped;
      return;
    }
    // Other threads (a busy loader) may fill three quarters of the budget; the rest is the step
    // thread's, so its phases (forward_time_ms, ...) are not crowded out.
    const std::size_t limit = span.on_step_thread ? cfg_.max_spans_per_step : cfg_.max_spans_per_step - cfg_.max_spans_per_step / 4;
    if (r.spans.size() >= limit) {
      ++r.spans_dropped;
      return;
    }
    r.spans.push_back(span);  // span.on_step_thread: set by the scope
  }

  /// Under mutex_: every thread's ring (span_ring.hpp), in the order the scopes ended (each ring is;
  /// several are merged), into place_span: the step's span limits see them in the order a lock per
  /// scope once did.
  void gather_locked() {
    ThreadSlot* table = thread_slot_table();
    const int used = thread_slots_used().load(std::memory_order_acquire);
    gathered_.clear();
    int rings = 0;
    std::lock_guard<std::mutex> drain_lock(span_ring_drain_mutex());
    for (int i = 0; i < used; ++i) {
      SpanRing* ring = table[i].ring.load(std::memory_order_acquire);
      if (!ring || ring->empty()) continue;
      ++rings;
      ring->drain([this](const SpanRing::Entry& e) {
        PhaseSpan span = span_of(e);
        if (to_ns(span, (e.flags & SpanRing::kTicks) != 0, e.begin, e.end)) gathered_.push_back(span);
      });
    }
    if (rings > 1)
      std::stable_sort(gathered_.begin(), gathered_.end(), [](const PhaseSpan& x, const PhaseSpan& y) { return x.end_ns < y.end_ns; });
    for (const PhaseSpan& span : gathered_) place_span(span);
    if (gathered_.capacity() > 4 * SpanRing::kCapacity) gathered_ = {};  // a burst's buffer is not kept
  }

  /// Under mutex_ (one writer): the three values inside a sequence count, odd while they change.
  void publish_begun(const BegunStep& b) {
    const uint32_t s = begun_seq_.load(std::memory_order_relaxed);
    begun_seq_.store(s + 1, std::memory_order_relaxed);
    begun_index_.store(b.index, std::memory_order_release);
    begun_ns_.store(b.begin_ns, std::memory_order_release);
    begun_depth_.store(b.depth, std::memory_order_release);
    begun_seq_.store(s + 2, std::memory_order_release);
  }

  bool forced(uint64_t index) const {
    for (const auto& w : forced_) {
      const uint64_t v = w.load(std::memory_order_relaxed);  // 0 = none
      if (v && index >= (v >> 8) && index < (v >> 8) + (v & 255)) return true;
    }
    return false;
  }

  void publish_open(int64_t begin_ns, int64_t scope_end_ns, bool traced) {
    open_begin_ns_.store(begin_ns, std::memory_order_relaxed);
    open_scope_end_ns_.store(scope_end_ns, std::memory_order_relaxed);
    open_traced_.store(traced, std::memory_order_relaxed);
  }

  std::mutex mutex_;
  bool end_at_work_end_ = false;  // the next end() ends the scope at its work end (end_next_at_work_end)
  std::atomic<int64_t> open_begin_ns_{0}, open_scope_end_ns_{0};
  std::atomic<bool> open_traced_{false};
  std::atomic<bool> next_traced_{false};
  static constexpr unsigned kForcedWindows = 4;
  std::atomic<uint64_t> forced_[kForcedWindows] = {};  // force_trace(): first << 8 | length, 0 = none
  std::atomic<unsigned> forced_next_{0};
  std::atomic<uint32_t> begun_seq_{0};  // publish_begun(): odd while it writes
  std::atomic<int64_t> begun_index_{-1}, begun_ns_{0};
  std::atomic<uint16_t> begun_depth_{0};
  Config cfg_;
  OpenStep open_;
  std::atomic<uint64_t> next_index_{0};  // steps begun; an ending reads it without the lock
  std::size_t spans_outside_step_ = 0;  // phase scopes that ended with no step open
  bool tracing_failed_ = false;
  TraceSchedule schedule_;                 // which steps are traced (under mutex_)
  std::atomic<int> wanted_every_{1};       // the interval the worker asks for (overhead_budget)
  std::atomic<bool> decided_{false};       // the worker has asked for one (else the budget's start: budget_start_every)
  std::atomic<int> open_every_{1};         // the interval the step begun last ran under
  bool budget_started_ = false;            // overhead_budget decides the interval (under mutex_)
  TickClock tick_clock_;  // anchored by the worker, read by to_ns
  std::vector<PhaseSpan> gathered_;  // gather_locked()'s buffer, kept between calls
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
