// steptrace/details/marker_ring.hpp - the stream markers' runtime side: the step's thread marks the
// step's begin and end and its top-level phases' begins and ends (one CUDA event each, on the marker
// stream, backend/cuda_markers.hpp); the background thread reads them back, step by step, without a
// wait. One producer, one consumer, a fixed number of slots: a mark that finds no free slot is not
// recorded (the step's markers are then left out, counted).
//
// A phase's begin shares the marker before it when little can have run between them: a phase that
// begins within kShareWithinNs (host time) of the previous phase's end or of the step's begin takes that
// marker's event instead of recording one (a CUDA event record costs the training thread ~2-8 us; four
// micro-batches of input, forward and backward mark 28 boundaries, 17 records after sharing). What the
// program launched in that gap (up to 20 us of host time: a few launches) counts in the next phase's
// span. A phase's end and the step's end always record: they close the work before them.
//
// Thinned by overhead_budget: where marking every step would cost more than half of the budget (a
// host-bound loop, short framework steps), the background thread asks for 1 step in N
// (core/overhead_parts.hpp, markers_every); traced steps are always marked, and a step left unmarked
// says why in its line.
//
// Off until armed. A stream the program named is marked from the start (an event on the program's own
// stream adds no dependency). The legacy default stream is marked once a traced step's line shows the
// step's GPU work there (the background thread arms it; at the start of a run that line can come some
// tens of steps later, when CUPTI hands over its first records): an event on the legacy stream waits
// for every blocking stream, so marking it in a program that runs its work on other streams would add
// dependencies its streams do not have.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../backend/gpu_backend.hpp"
#include "../core/clock.hpp"
#include "../core/marked_steps.hpp"
#include "../core/markers.hpp"
#include "launch_context.hpp"
#include "log.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class MarkerRing {
 public:
  // Events made once per run when the markers are first armed (~1.5 us each on H100, on the step's
  // thread): 2 048 hold ~70 steps of 28 markers, the background thread's lag before a named stream's
  // first traced line at the start of a run.
  static constexpr uint32_t kSlots = 2048;
  /// A boundary this close after the previous one (host time) shares its marker (see the top).
  static constexpr int64_t kShareWithinNs = 20'000;

  // ---- lifecycle (start/stop) ----
  /// `events` null: none this run, `why_none` says why.
  void attach(backend::MarkerEvents* events, const std::string& why_none) {
    armed_.store(false, std::memory_order_relaxed);
    in_mark_.store(false, std::memory_order_relaxed);  // a fork's child may inherit it set
    events_.store(events, std::memory_order_release);
    stream_id_.store(-1, std::memory_order_relaxed);
    id_attempts_ = 0;
    learned_.store(false, std::memory_order_relaxed);
    forgotten_.store(false, std::memory_order_relaxed);
    candidate_ = 0;
    contradicted_ = 0;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    opened_.store(false, std::memory_order_relaxed);
    open_failed_.store(false, std::memory_order_relaxed);
    skipped_in_step_ = 0;
    skip_step_ = UINT64_MAX;
    open_step_ = UINT64_MAX;
    recalibrate_.store(false, std::memory_order_relaxed);
    recorded_ns_.store(0, std::memory_order_relaxed);
    open_ns_.store(0, std::memory_order_relaxed);
    open_marks_.store(0, std::memory_order_relaxed);
    recorded_.store(0, std::memory_order_relaxed);
    shared_.store(0, std::memory_order_relaxed);
    wanted_every_.store(1, std::memory_order_relaxed);
    every_ = 1;
    generation_ = wanted_generation_.load(std::memory_order_relaxed);  // nothing asked since
    thin_step_.store(UINT64_MAX, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(why_mutex_);
      thinning_.clear();
      wanted_why_.clear();
    }
    failed_.store(0, std::memory_order_relaxed);
    steps_left_out_ = 0;
    first_marked_.store(-1, std::memory_order_relaxed);
    why_off_ = events ? reason_text(Reason::markers_no_stream_yet) : why_none;
    armed_.store(events && named_.load(std::memory_order_relaxed), std::memory_order_release);
  }
  /// stop(): off, the last mark finished, the events released.
  void detach() {
    armed_.store(false, std::memory_order_seq_cst);
    while (in_mark_.load(std::memory_order_seq_cst)) std::this_thread::yield();  // one event record at most
    if (backend::MarkerEvents* e = events_.exchange(nullptr)) e->close();
    opened_.store(false, std::memory_order_release);
    // The program may destroy its stream once steptrace stopped: a next run is told again, or learns it.
    named_.store(false, std::memory_order_relaxed);
    learned_.store(false, std::memory_order_relaxed);
    forgotten_.store(false, std::memory_order_relaxed);
    candidate_ = 0;
    contradicted_ = 0;
    stream_.store(0, std::memory_order_relaxed);
  }
  /// Before the markers are set up: the program's stream (0: the legacy default stream). false: too late.
  bool name_stream(std::uintptr_t stream) {
    if (opened_.load(std::memory_order_acquire)) return false;
    stream_.store(stream, std::memory_order_relaxed);
    named_.store(true, std::memory_order_release);
    if (events_.load(std::memory_order_acquire)) armed_.store(true, std::memory_order_release);  // running: from the next step
    return true;
  }
  bool stream_named() const { return named_.load(std::memory_order_relaxed); }
  /// The stream was named by the program or learned from its launches: the records do not gate it.
  bool stream_chosen() const { return named_.load(std::memory_order_relaxed) || learned_.load(std::memory_order_relaxed); }
  /// The program destroyed the marker stream: nothing is recorded on its handle until a traced step
  /// shows the next stream (learn_stream); the records do not arm it again.
  bool stream_forgotten() const { return forgotten_.load(std::memory_order_acquire); }

  /// Step's thread, between steps, after a traced step: where its kernel launches went
  /// (GpuBackend::take_launch_streams). A stream that took 9 in 10 of them is the program's: the
  /// markers are recorded there from the next step on (no call asked of the program), and follow it
  /// when a later traced step shows another. A stream the program named is kept; the legacy and
  /// per-thread default streams are left to the records (the worker's gate_markers). `twice`: a new
  /// stream is taken only when two traced steps in a row show it (CUPTI detached between traced
  /// steps does not see a stream destroyed; a stream kept across traced steps is the program's own).
  void learn_stream(const LaunchStreams& l, bool twice) {
    backend::MarkerEvents* events = events_.load(std::memory_order_acquire);
    if (!events || named_.load(std::memory_order_relaxed) || l.launches == 0) return;
    // Handles 1 and 2 are CU_STREAM_LEGACY and CU_STREAM_PER_THREAD (cuda.h): not a stream of the program's.
    const bool learned = learned_.load(std::memory_order_relaxed);
    if (l.stream <= 2 || static_cast<uint64_t>(l.on_stream) * 10 < static_cast<uint64_t>(l.launches) * 9) {
      candidate_ = 0;
      // No stream of its own holds the step's work: the records decide (legacy), or nothing. A learnt
      // stream is left once two traced steps in a row say so (its markers would see an idle stream).
      if (learned && ++contradicted_ >= 2) unlearn(reason_text(l.stream <= 2 ? Reason::markers_moved_default : Reason::markers_spread));
      return;
    }
    contradicted_ = 0;
    if (learned && l.stream == stream()) return;
    if (twice && candidate_ != l.stream) {
      candidate_ = l.stream;
      return;
    }
    candidate_ = 0;
    stream_.store(l.stream, std::memory_order_relaxed);
    if (opened_.load(std::memory_order_acquire)) events->set_stream(l.stream);  // no mark runs: this is the step's thread
    stream_id_.store(-1, std::memory_order_relaxed);  // its id in the records, at the next traced step
    id_attempts_ = 0;
    forgotten_.store(false, std::memory_order_release);
    learned_.store(true, std::memory_order_release);
    arm(true, {});
  }
  /// Step's thread, between steps: the learnt stream left; the markers go back to the legacy default
  /// stream, armed only when the records show the work there (the worker's gate_markers).
  void unlearn(const std::string& why) {
    backend::MarkerEvents* events = events_.load(std::memory_order_acquire);
    arm(false, why);
    learned_.store(false, std::memory_order_release);
    contradicted_ = 0;
    stream_.store(0, std::memory_order_relaxed);
    if (events && opened_.load(std::memory_order_acquire)) events->set_stream(0);
    stream_id_.store(-1, std::memory_order_relaxed);
    id_attempts_ = 0;
  }
  /// Any thread, as the program destroys a stream (CUPTI attached: the collector's hook): the
  /// markers leave it first, the mark in progress (one event record at most) finished.
  /// True when it was the markers' stream (forgotten now).
  bool forget_stream(std::uintptr_t s) {
    if (!learned_.load(std::memory_order_acquire) && !named_.load(std::memory_order_acquire)) return false;
    if (s != stream()) return false;
    {
      std::lock_guard<std::mutex> lock(why_mutex_);  // arm() checks forgotten_ under it: none arms after
      forgotten_.store(true, std::memory_order_seq_cst);
      armed_.store(false, std::memory_order_seq_cst);
      why_off_ = reason_text(Reason::markers_stream_destroyed);
    }
    // Not under the lock: a mark in progress may take it (its events failing to open).
    while (in_mark_.load(std::memory_order_seq_cst)) std::this_thread::yield();
    learned_.store(false, std::memory_order_release);
    stream_id_.store(-1, std::memory_order_relaxed);
    // A named stream stays named (never learned over): the program names the next one, or none.
    return true;
  }
  std::uintptr_t stream() const { return stream_.load(std::memory_order_relaxed); }

  /// Step's thread, at a traced step's begin (records on): the marker stream's id in the GPU records.
  void learn_stream_id() {
    backend::MarkerEvents* events = events_.load(std::memory_order_acquire);
    if (!events || stream_forgotten() || stream_id_.load(std::memory_order_relaxed) >= 0 || id_attempts_ >= 3) return;
    ++id_attempts_;
    if (const auto id = events->stream_record_id(stream())) stream_id_.store(*id, std::memory_order_release);
  }
  /// The marker stream's id in the GPU records; -1 while unknown.
  int64_t stream_id() const { return stream_id_.load(std::memory_order_acquire); }
  bool has_events() const { return events_.load(std::memory_order_acquire) != nullptr; }
  /// Background thread: a step's markers read before their host times (a calibration event that queued
  /// behind the program's work: CUDA_DEVICE_MAX_CONNECTIONS=1): the next mark calibrates again.
  void ask_recalibration() { recalibrate_.store(true, std::memory_order_relaxed); }

  // ---- background thread ----
  void arm(bool on, const std::string& why_off) {
    std::lock_guard<std::mutex> lock(why_mutex_);
    if (on && forgotten_.load(std::memory_order_acquire)) return;  // a destroyed stream's handle: never again
    if (!on) why_off_ = why_off;
    if (!open_failed_.load(std::memory_order_relaxed)) armed_.store(on, std::memory_order_release);
  }
  bool armed() const { return armed_.load(std::memory_order_acquire); }
  std::string why_off() const {
    std::lock_guard<std::mutex> lock(why_mutex_);
    return why_off_;
  }
  /// Time the step's thread spent marking since start, the one-off (open_ns) left out.
  int64_t recorded_ns() const { return recorded_ns_.load(std::memory_order_relaxed); }
  /// The one-off, once, when first armed: making the events, and the marks of the step they were made
  /// in (the driver's first-use costs: the first records on a stream, an event's first record), which
  /// would read as a cost of every step for the 512 steps the overhead estimate averages over. 0: not made.
  int64_t open_ns() const { return open_ns_.load(std::memory_order_relaxed); }
  /// Marks (and tries) whose time is in open_ns.
  uint64_t open_marks() const { return open_marks_.load(std::memory_order_relaxed); }
  uint64_t recorded() const { return recorded_.load(std::memory_order_relaxed); }
  /// Marks that took the event of the boundary before them (kShareWithinNs): no CUDA call.
  uint64_t shared() const { return shared_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  /// The first step a marker was recorded in since start (-1: none yet).
  int64_t first_marked_step() const { return first_marked_.load(std::memory_order_acquire); }
  uint64_t steps_left_out() const { return steps_left_out_; }

  enum class Collect { none, pending, ready, left_out };
  /// The markers of `step`, once the GPU has reached them all (older steps' markers are dropped). none:
  /// the step has none; pending: not all reached yet (nothing consumed, ask again); left_out: some were
  /// not recorded or could not be read (`why`).
  Collect collect(uint64_t step, std::vector<MarkerPoint>& out, std::string* why) {
    out.clear();
    uint64_t t = tail_.load(std::memory_order_relaxed);
    const uint64_t h = head_.load(std::memory_order_acquire);
    while (t < h && entries_[t % kSlots].step < step) ++t;  // steps whose lines were never made
    tail_.store(t, std::memory_order_release);
    uint64_t end = t;
    while (end < h && entries_[end % kSlots].step == step) ++end;
    if (end == t) return Collect::none;
    // One stream runs its events in order: the last one reached means all were.
    int64_t gpu = 0;
    const Entry& last = entries_[(end - 1) % kSlots];
    backend::MarkerEvents* events = events_.load(std::memory_order_acquire);
    if (!events) return Collect::none;
    auto state = events->read(last.slot, &gpu);
    if (state == backend::MarkerEvents::Read::pending) return Collect::pending;
    bool ended = last.kind == MarkerKind::step_end, failed = state == backend::MarkerEvents::Read::failed;
    const uint16_t skipped = ended ? last.skipped : 0;
    for (uint64_t i = t; i < end && !failed; ++i) {
      const Entry& e = entries_[i % kSlots];
      if (events->read(e.slot, &gpu) != backend::MarkerEvents::Read::done) failed = true;
      else out.push_back(MarkerPoint{e.kind, e.phase, e.host_ns, gpu});
    }
    tail_.store(end, std::memory_order_release);
    if (!ended || skipped || failed) {
      ++steps_left_out_;
      out.clear();
      if (why)
        *why = failed    ? std::string(reason_text(Reason::markers_unreadable))
               : !ended  ? std::string(reason_text(Reason::markers_end_not_marked))
                         : reason_text(Reason::markers_skipped, std::to_string(skipped) +
                                                                    " of them (no free slot, a CUDA graph capture, or another CUDA context current)");
      return Collect::left_out;
    }
    return Collect::ready;
  }

  // ---- thinning (overhead_budget) ----
  /// Background thread: from the next step on, 1 step in `every` is marked (traced steps always);
  /// `why`: what the lines of the steps left unmarked say.
  void want_every(int every, const std::string& why) {
    std::lock_guard<std::mutex> lock(why_mutex_);  // the interval and its reason change together
    wanted_why_ = why;
    wanted_every_.store(std::max(1, every), std::memory_order_relaxed);
    wanted_generation_.fetch_add(1, std::memory_order_release);  // a new reason at the same pace is taken too
  }
  int wanted_every() const { return wanted_every_.load(std::memory_order_relaxed); }
  /// Step's thread, as a step begins: whether it is marked (a new interval asked for starts here).
  bool marks_step(uint64_t step, bool traced) {
    if (wanted_generation_.load(std::memory_order_acquire) != generation_) {  // the lock only when it changed
      std::lock_guard<std::mutex> lock(why_mutex_);
      const int want = wanted_every_.load(std::memory_order_relaxed);  // with its reason, as written together
      if (thinning_.size() == kThinningKept) thinning_.erase(thinning_.begin());
      thinning_.push_back({step, want, wanted_why_});
      every_ = want;
      generation_ = wanted_generation_.load(std::memory_order_relaxed);
    }
    const bool on = traced || marked_at(step, every_);
    thin_step_.store(on ? UINT64_MAX : step, std::memory_order_relaxed);
    return on;
  }
  /// Background thread: why an untraced step has no markers, if thinning left it out.
  std::optional<std::string> thinned(uint64_t step) const {
    std::lock_guard<std::mutex> lock(why_mutex_);
    for (auto it = thinning_.rbegin(); it != thinning_.rend(); ++it) {
      if (it->from > step) continue;
      if (marked_at(step, it->every)) return std::nullopt;
      return it->why;
    }
    return std::nullopt;
  }

  // ---- the step's thread ----
  void mark(uint64_t step, MarkerKind kind, PhaseId phase) noexcept {
    if (!armed_.load(std::memory_order_acquire)) return;
    if (step == thin_step_.load(std::memory_order_relaxed)) return;  // thinned out (marks_step)
    in_mark_.store(true, std::memory_order_seq_cst);
    if (armed_.load(std::memory_order_seq_cst)) mark_armed(step, kind, phase);
    in_mark_.store(false, std::memory_order_release);
  }

 private:
  struct Entry {
    uint64_t step = 0;
    int64_t host_ns = 0;
    PhaseId phase = kNoPhase;
    MarkerKind kind = MarkerKind::step_begin;
    uint16_t skipped = 0;  // step_end: marks of the step that were not recorded
    uint32_t slot = 0;     // the event it reads: its own, or the one of the boundary it shares
  };

  /// The entry before head `h`, if this mark (a phase's begin) may take its event: the same step, not
  /// yet read, a phase's end or the step's begin at most kShareWithinNs before `now`.
  const Entry* shareable(uint64_t h, uint64_t step, MarkerKind kind, int64_t now) const {
    if (kind != MarkerKind::phase_begin) return nullptr;
    if (h == 0 || h - 1 < tail_.load(std::memory_order_acquire)) return nullptr;
    const Entry& prev = entries_[(h - 1) % kSlots];
    const bool after = prev.kind == MarkerKind::phase_end || prev.kind == MarkerKind::step_begin;
    if (prev.step != step || !after || now - prev.host_ns > kShareWithinNs) return nullptr;
    return &prev;
  }

  STEPTRACE_COLD void mark_armed(uint64_t step, MarkerKind kind, PhaseId phase) noexcept {
    try {
      int64_t t0 = monotonic_ns();
      backend::MarkerEvents* events = events_.load(std::memory_order_acquire);
      if (!events || open_failed_.load(std::memory_order_relaxed)) return;
      if (step != skip_step_) skipped_in_step_ = 0, skip_step_ = step;  // a count is the step's own
      if (!opened_.load(std::memory_order_relaxed)) {
        bool transient = false;
        const std::string err = events->open(kSlots, stream(), &transient);
        if (!err.empty() && transient) {  // no CUDA context yet (PyTorch makes it at its first CUDA call)
          if (skipped_in_step_ < UINT16_MAX) ++skipped_in_step_;
          return;
        }
        if (!err.empty()) {
          open_failed_.store(true, std::memory_order_relaxed);
          armed_.store(false, std::memory_order_relaxed);
          {
            std::lock_guard<std::mutex> lock(why_mutex_);
            why_off_ = reason_text(Reason::markers_setup_failed, err);
          }
          warn_once("markers.open", "stream markers off: " + err + " (lines keep their other evidence)");
          return;
        }
        opened_.store(true, std::memory_order_release);
        open_step_ = step;  // making the events and this step's marks: a one-off (open_ns), said at stop()
      }
      const uint64_t h = head_.load(std::memory_order_relaxed);
      std::string why;
      int64_t host_ns = 0;
      // One slot kept free: a record at head h overwrites the event that entry h - kSlots + 1 may share.
      if (h - tail_.load(std::memory_order_acquire) >= kSlots - 1) {
        if (skipped_in_step_ < UINT16_MAX) ++skipped_in_step_;
      } else if (const Entry* prev = shareable(h, step, kind, host_ns = events->now_ns())) {
        Entry& e = entries_[h % kSlots];
        e.step = step, e.host_ns = host_ns, e.phase = phase, e.kind = kind, e.slot = prev->slot, e.skipped = 0;
        head_.store(h + 1, std::memory_order_release);
        shared_.fetch_add(1, std::memory_order_relaxed);
      } else if (!events->record(static_cast<uint32_t>(h % kSlots), recalibrate_.exchange(false, std::memory_order_relaxed),
                                 &host_ns, &why)) {
        if (skipped_in_step_ < UINT16_MAX) ++skipped_in_step_;
        failed_.fetch_add(1, std::memory_order_relaxed);
        warn_once("markers.record." + why.substr(0, 24), "stream markers: a marker was not recorded: " + why +
                                                             " (said once; the steps concerned have no markers)");
      } else {
        Entry& e = entries_[h % kSlots];
        e.step = step, e.host_ns = host_ns, e.phase = phase, e.kind = kind, e.slot = static_cast<uint32_t>(h % kSlots);
        e.skipped = kind == MarkerKind::step_end ? skipped_in_step_ : 0;
        if (first_marked_.load(std::memory_order_relaxed) < 0) first_marked_.store(static_cast<int64_t>(step), std::memory_order_release);
        head_.store(h + 1, std::memory_order_release);
        recorded_.fetch_add(1, std::memory_order_relaxed);
      }
      if (step == open_step_) {
        open_ns_.fetch_add(monotonic_ns() - t0, std::memory_order_relaxed);
        open_marks_.fetch_add(1, std::memory_order_relaxed);
      } else {
        recorded_ns_.fetch_add(monotonic_ns() - t0, std::memory_order_relaxed);
      }
    } catch (...) {
    }
  }

  std::atomic<backend::MarkerEvents*> events_{nullptr};
  std::atomic<std::uintptr_t> stream_{0};
  std::atomic<bool> named_{false};
  std::atomic<bool> learned_{false};  // stream_ learned from a traced step's launches (learn_stream)
  std::atomic<bool> forgotten_{false};  // the program destroyed stream_ (forget_stream)
  int contradicted_ = 0;  // step's thread: traced steps in a row that showed no stream of the program's
  std::uintptr_t candidate_ = 0;      // step's thread: a stream seen once, waiting for a second traced step
  std::atomic<int64_t> stream_id_{-1};
  int id_attempts_ = 0;  // step's thread
  std::atomic<bool> armed_{false};
  std::atomic<bool> in_mark_{false};
  std::atomic<bool> opened_{false};
  std::atomic<bool> open_failed_{false};
  uint16_t skipped_in_step_ = 0;  // step's thread: marks of step skip_step_ not recorded
  uint64_t skip_step_ = UINT64_MAX;
  std::atomic<bool> recalibrate_{false};
  Entry entries_[kSlots];
  std::atomic<uint64_t> head_{0}, tail_{0};
  std::atomic<int64_t> recorded_ns_{0}, open_ns_{0};
  std::atomic<uint64_t> open_marks_{0};
  uint64_t open_step_ = UINT64_MAX;  // step's thread: the step the events were made in
  std::atomic<uint64_t> recorded_{0}, shared_{0}, failed_{0};
  struct Thinning {
    uint64_t from = 0;  // the first step it applied to
    int every = 1;
    std::string why;
  };
  static constexpr std::size_t kThinningKept = 16;  // older changes are for lines long written
  std::atomic<int> wanted_every_{1};
  std::atomic<uint64_t> wanted_generation_{0};        // want_every()'s calls so far
  int every_ = 1;                                     // step's thread
  uint64_t generation_ = 0;                           // step's thread: the last want_every() taken
  std::atomic<uint64_t> thin_step_{UINT64_MAX};       // the step begun unmarked (step's thread writes)
  std::vector<Thinning> thinning_;                    // under why_mutex_
  std::string wanted_why_;                            // under why_mutex_
  std::atomic<int64_t> first_marked_{-1};
  uint64_t steps_left_out_ = 0;  // background thread
  mutable std::mutex why_mutex_;
  std::string why_off_;
};

/// The process's markers (a scope reaches them without the session).
inline MarkerRing& marker_ring() {
  static MarkerRing* ring = new MarkerRing();  // never destroyed: a scope may end after static destruction began
  return *ring;
}

/// The step thread's phase depth when the step began: its phases at this depth are marked.
inline std::atomic<uint16_t>& marker_depth() {
  static std::atomic<uint16_t> depth{0};
  return depth;
}

/// A top-level phase scope of the step's thread, inside a step: marked when the markers are armed.
inline void mark_phase(PhaseId phase, MarkerKind kind) noexcept {
  MarkerRing& ring = marker_ring();
  if (!ring.armed()) return;
  const int64_t key = current_step().load(std::memory_order_relaxed);
  if (key >= 0) ring.mark(static_cast<uint64_t>(key), kind, phase);
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
