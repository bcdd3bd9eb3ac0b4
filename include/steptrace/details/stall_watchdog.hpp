// steptrace/details/stall_watchdog.hpp - the background thread's side of the stall watchdog
// (core/stall.hpp has the rule and the records): it reads what is open without touching the training
// thread - the open step through the recorder's atomics, each thread's open phases through the
// open-phase table (thread_slots.hpp), the GPU through the records already collected.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>
#include <string>

#include "../core/attribution.hpp"
#include "../core/clock.hpp"
#include "../core/counters.hpp"
#include "../core/gpu_records.hpp"
#include "launch_context.hpp"
#include "../core/stall.hpp"
#include "demangle.hpp"
#include "step_recorder.hpp"
#include "thread_slots.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class StallWatchdog {
 public:
  explicit StallWatchdog(double after_s) : watch_(after_s) {}

  bool enabled() const { return watch_.enabled(); }

  /// How long the background thread may sleep between looks: a tenth of the threshold, 10 ms - 1 s.
  int64_t look_every_us() const {
    return static_cast<int64_t>(std::clamp(watch_.after_s() / 10, 0.01, 1.0) * 1e6);
  }

  void step_closed(const StepRecord& r) { watch_.step_closed(ns_to_ms(r.end_ns - r.begin_ns)); }

  /// The latest GPU activity among records just collected (CUPTI clock).
  void saw(const GpuDrain& d) {
    for (const auto& k : d.kernels)
      if (k.end_ns > last_end_ns_) {
        last_end_ns_ = k.end_ns;
        last_name_ = k.name ? k.name : "";
      }
    for (const auto& c : d.copies)
      if (c.end_ns > last_end_ns_) {
        last_end_ns_ = c.end_ns;
        last_name_ = std::string(c.kind == CopyKind::memset ? "memset" : "memcpy ") +
                     (c.kind == CopyKind::memset ? "" : copy_kind_name(c.kind));
      }
  }

  /// PM samples just decoded (CUPTI clock): the last few seconds are kept.
  void saw_samples(const std::vector<CounterSample>& fresh) {
    for (const auto& c : fresh) {
      samples_.push_back(c);
      if (samples_.size() > kMaxSamples) samples_.pop_front();
    }
    while (!samples_.empty() && samples_.back().end_ns - samples_.front().end_ns > kSampleSpanNs) samples_.pop_front();
  }

  /// One look at `now_ns`; the open step's begin comes from the recorder (the key is read first: it
  /// is released after the begin, so a step seen here has its begin published).
  StallWatch::Due look(int64_t now_ns, const StepRecorder& recorder) {
    const int64_t step = last_step_of_key(current_step().load(std::memory_order_acquire));
    const std::optional<StepRecorder::BegunStep> b = recorder.begun_step();
    // Another step may have begun since the key was read: its begin is not this step's (taken as now).
    return watch_.look(now_ns, step, b && b->index == step ? std::optional<int64_t>(b->begin_ns) : std::nullopt);
  }

  /// What the GPU side can say, filled in by the worker.
  struct Gpu {
    std::string off_reason;          // "" = attribution runs
    const Attributor* attributor = nullptr;
    int64_t clock_offset_ns = 0;     // CUPTI clock - monotonic_ns()
    std::string untraced_reason;     // why the open step is not traced ("" = it is)
    std::string counters_off_reason; // why there are no PM samples ("" = sampling runs)
  };

  std::string stall_line(int64_t now_ns, int64_t unix_now_ns, StepRecorder& recorder, const Gpu& gpu,
                         const RunInfo& run, Demangler& demangle) {
    StallReport r;
    r.unix_ns = unix_now_ns;
    r.open_step = watch_.step();
    r.stalled_s = watch_.stalled_s(now_ns);
    r.threshold_s = watch_.reported_threshold_s();
    r.median_step_ms = watch_.median_step_ms();
    r.report = watch_.reports();
    r.next_report_s = watch_.next_report_s();
    const StepRecorder::OpenView open = recorder.open_view();
    r.step_scope_open = open.begin_ns != 0 && open.scope_end_ns == 0;
    if (open.scope_end_ns != 0) r.step_scope_closed_s = static_cast<double>(now_ns - open.scope_end_ns) / 1e9;

    const TickClock clock = recorder.tick_clock();
    const ThreadSlot* step_slot = step_thread_slot().load(std::memory_order_relaxed);
    // The step thread's phases deeper than its depth at the step's begin opened inside the step: never
    // longer open than it is stalled. A tick reading converted through the anchored slope may land a
    // microsecond or so before the step's steady_clock begin; such a phase says stalled_s.
    const std::optional<StepRecorder::BegunStep> begun = recorder.begun_step();
    // Only where stalled_s runs from that begin: timed from a later look it is shorter than the step.
    const int inside_from =
        begun && begun->index == r.open_step && watch_.timed_from_begin() ? begun->depth : kMaxPhaseDepth + 1;
    for (const OpenThread& t : read_open_threads(step_slot)) {
      StallReport::Thread out;
      out.tid = t.tid;
      out.name = thread_name(t.tid);
      out.step_thread = t.slot == step_slot;
      for (std::size_t k = 0; k < t.phases.size(); ++k) {
        const auto& p = t.phases[k];
        StallReport::Phase ph;
        ph.name = phase_name(p.phase);
        if (!p.ticks) ph.open_s = static_cast<double>(now_ns - static_cast<int64_t>(p.begin)) / 1e9;
        else if (clock.calibrated()) ph.open_s = static_cast<double>(now_ns - clock.to_ns(p.begin)) / 1e9;
        if (ph.open_s && out.step_thread && static_cast<int>(k) >= inside_from) ph.open_s = std::min(*ph.open_s, r.stalled_s);
        out.phases.push_back(std::move(ph));
      }
      r.threads.push_back(std::move(out));
    }
    r.threads_untracked = thread_slots_refused().load(std::memory_order_relaxed);

    if (!gpu.off_reason.empty()) {
      r.last_gpu_activity_s.unknown(gpu.off_reason);
      r.open_step_launches.unknown(gpu.off_reason);
      r.open_step_outstanding.unknown(gpu.off_reason);
    } else {
      if (last_end_ns_ > 0) {
        r.last_gpu_activity_s = static_cast<double>(now_ns + gpu.clock_offset_ns - last_end_ns_) / 1e9;
        r.last_gpu_activity_name = demangle(last_name_);
      } else {
        r.last_gpu_activity_s.unknown(reason_text(Reason::stall_no_record_yet));
      }
      if (!gpu.untraced_reason.empty()) {
        r.open_step_launches.unknown(gpu.untraced_reason);
        r.open_step_outstanding.unknown(gpu.untraced_reason);
      } else {
        r.open_step_launches = gpu.attributor->launches_of(r.open_step);
        uint32_t missing = 0;
        for (const auto& [phase, n] : gpu.attributor->missing_by_phase(r.open_step)) {
          r.outstanding_by_phase.emplace_back(phase == kNoPhase ? "unphased" : phase_name(phase), n);
          missing += n;
        }
        r.open_step_outstanding = missing;
      }
    }
    fill_sm_active(r, now_ns, gpu);
    return make_stall_line(r, run);
  }

  /// After look() said resumed; "" when the run is ending (no step open any more).
  std::string resumed_line(int64_t unix_now_ns, const RunInfo& run) const {
    const int64_t now_step = watch_.step();
    if (now_step < 0) return {};
    return make_resumed_line(unix_now_ns, watch_.ended_step(), watch_.ended_stalled_s(), watch_.ended_reports(),
                             now_step, run);
  }

  const StallWatch& watch() const { return watch_; }

 private:
  static constexpr std::size_t kMaxSamples = 20000;
  static constexpr int64_t kSampleSpanNs = 3'000'000'000;  // kept
  static constexpr int64_t kRecentNs = 1'000'000'000;      // averaged

  void fill_sm_active(StallReport& r, int64_t now_ns, const Gpu& gpu) const {
    const auto neither = [&r](const std::string& why) {
      r.sm_active_recent.unknown(why);
      r.sm_active_sample_age_s.unknown(why);
    };
    if (!gpu.off_reason.empty()) return neither(gpu.off_reason);
    if (!gpu.counters_off_reason.empty()) return neither(gpu.counters_off_reason);
    if (samples_.empty()) return neither(reason_text(Reason::stall_no_pm_sample));
    const int64_t newest = samples_.back().end_ns;
    r.sm_active_sample_age_s = static_cast<double>(now_ns + gpu.clock_offset_ns - newest) / 1e9;
    double sum = 0, weight = 0;
    for (const auto& c : samples_)
      if (c.end_ns >= newest - kRecentNs && std::isfinite(c.sm_active) && c.end_ns > c.start_ns) {
        sum += c.sm_active * static_cast<double>(c.end_ns - c.start_ns);
        weight += static_cast<double>(c.end_ns - c.start_ns);
      }
    if (weight > 0) r.sm_active_recent = sum / weight;
    else r.sm_active_recent.unknown(reason_text(Reason::stall_no_sm_activity));
  }

  StallWatch watch_;
  int64_t last_end_ns_ = 0;
  std::string last_name_;
  std::deque<CounterSample> samples_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
