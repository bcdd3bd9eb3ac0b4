// steptrace/details/readings_poller.hpp - the background thread's readings beside the steps: device
// memory and NVML device state at their pace, PM-sampling decodes, sampling started again after a
// failed decode, and the counters' duty cycle around traced steps. One object the worker calls at
// each wake; what it reads goes into the line assembler, what it costs into the overhead ledger.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "../backend/gpu_backend.hpp"
#include "../core/attribution.hpp"
#include "../core/gpu_tail.hpp"
#include "../core/overhead_parts.hpp"
#include "host_clock.hpp"
#include "line_assembler.hpp"
#include "line_policy.hpp"
#include "log.hpp"
#include "reading_pace.hpp"
#include "stall_watchdog.hpp"
#include "step_recorder.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline constexpr int kMaxCounterRestarts = 3;  // PM sampling started again after a failed decode, per run

class ReadingsPoller {
 public:
  ReadingsPoller(backend::GpuBackend& gpu, LineAssembler& lines, OverheadLedger& ledger, StallWatchdog& watchdog,
                 const StepRecorder& recorder)
      : gpu_(gpu),
        lines_(lines),
        ledger_(ledger),
        watchdog_(watchdog),
        recorder_(recorder),
        memory_pace_(lines.context().cfg.memory_sample_ms, pace_budget(lines.context().cfg)),
        device_state_pace_(lines.context().cfg.memory_sample_ms, pace_budget(lines.context().cfg)) {}

  /// The thread's start: bound to the run's device, a first memory reading and a first NVML reading
  /// before any step ends (or why there are none).
  void start() {
    LineContext& ctx = lines_.context();
    sample_memory_ = ctx.run.device.has_value();
    if (sample_memory_) {
      const std::string err = gpu_.bind_thread(ctx.run.device->index);
      if (!err.empty()) {
        ctx.memory_null_reason = reason_text(Reason::memory_sampling_stopped, err);
        sample_memory_ = false;
      }
    } else {
      ctx.memory_null_reason = ctx.run.device_null_reason.empty() ? std::string(reason_text(Reason::no_gpu)) : ctx.run.device_null_reason;
    }
    if (sample_memory_) take_memory_sample();
    open_device_state();
  }

  /// Top of a wake: a step that begins now may be traced or come before a traced one, so the counters
  /// are resumed before the readings below, which can wait for the training thread's CUDA calls. Never
  /// pauses here: a traced step that just closed is not among the waiting ones yet.
  void resume_counters_if_wanted(const std::deque<StepRecord>& waiting, const Attributor& attributor) {
    if (steered()) steer(waiting, attributor, /*resume_only=*/true);
  }

  /// Device memory and NVML, each when its pace says so.
  void read() {
    if (sample_memory_) take_memory_sample();
    take_device_state();
  }

  /// PM samples decoded when due (every wake while sampling runs: a decode every 50 ms lost samples of
  /// busy phases on H100 and saved no CPU, the cost is per sample; once after a pause), then sampling
  /// paused or resumed for the traced steps whose lines wait (`waiting`, their records in `attributor`).
  void poll_counters(const std::deque<StepRecord>& waiting, const Attributor& attributor) {
    if (counters_poll_due()) {
      collect_counter_samples();
      polled_since_pause_ = counters_paused_;
    }
    if (steered()) steer(waiting, attributor, /*resume_only=*/false);
  }

  /// How long a traced step's GPU work ran on after its host end (a complete traced step's, in ns).
  void saw_gpu_tail(int64_t ns) { gpu_tail_.saw(ns); }
  /// PM sampling is paused between traced steps: the samples held are from the last traced step.
  bool counters_paused() const { return counters_paused_; }

  /// PM sampling ends for the run (detach ends it); `reason` is said in every line from now on.
  void stop_counters(std::string reason) {
    LineContext& ctx = lines_.context();
    if (!ctx.counters_on) return;
    ctx.counters_on = false;  // the worker owns it from here on; stop() sees it off
    gpu_.stop_counters();
    ctx.counters_null_reason = std::move(reason);
  }

  /// stop(): NVML closed, the counters' cost said once.
  void finish() {
    if (lines_.context().device_state_on) gpu_.close_device_state();
    if (const std::string cost = gpu_.counters_cost(); !cost.empty()) {
      try {
        logger()->info("hardware counters: {}", cost);
      } catch (...) {
      }
    }
  }

 private:
  static double pace_budget(const Config& cfg) { return budget_decides(cfg) ? cfg.overhead_budget : 0; }
  bool steered() const { return lines_.context().counters_on && lines_.context().counters_traced_only; }

  void take_memory_sample() {
    const int64_t now = monotonic_ns();
    if (!memory_pace_.due(now)) return;
    std::string err;
    const double cpu0 = thread_cpu_ms();
    auto s = gpu_.sample_memory(now, &err);
    const double cost = thread_cpu_ms() - cpu0;
    ledger_.spent(OverheadLedger::Work::memory, cost);
    memory_pace_.taken(now, cost);
    if (!s) {
      lines_.context().memory_null_reason = reason_text(Reason::memory_sampling_stopped, err);
      warn_once("memory", "device memory sampling stopped: " + err);
      sample_memory_ = false;
      return;
    }
    lines_.add_memory_sample(*s);
  }

  /// NVML for power, clocks, temperature and clock-event reasons.
  void open_device_state() {
    LineContext& ctx = lines_.context();
    ctx.device_state_on = false;
    if (!ctx.run.device) {
      ctx.device_state_null_reason = reason_text(Reason::no_gpu_measured, ctx.run.device_null_reason);
      return;
    }
    const std::string err = gpu_.open_device_state(ctx.run.device->index);
    if (!err.empty()) {
      ctx.device_state_null_reason = reason_text(Reason::nvml_unavailable, err);
      warn_once("nvml", ctx.device_state_null_reason + "; power, clocks and temperature are null");
      return;
    }
    ctx.device_state_on = true;
    ctx.device_state_null_reason.clear();
    lines_.add_device_state(gpu_.read_device_state(monotonic_ns()));
  }

  void take_device_state() {
    if (!lines_.context().device_state_on) return;
    const int64_t now = monotonic_ns();
    if (!device_state_pace_.due(now)) return;
    const double cpu0 = thread_cpu_ms();
    lines_.add_device_state(gpu_.read_device_state(now));
    const double cost = thread_cpu_ms() - cpu0;
    ledger_.spent(OverheadLedger::Work::device_state, cost);
    device_state_pace_.taken(now, cost);
  }

  bool counters_poll_due() const {
    if (!lines_.context().counters_on) return false;
    return !counters_paused_ || !polled_since_pause_;
  }

  /// Decodes the PM sampler's hardware buffer and keeps the samples (bounded). Also refreshes the
  /// offset between the host clock and the GPU clock the samples are stamped with.
  void collect_counter_samples() {
    LineContext& ctx = lines_.context();
    lines_.set_gpu_clock_offset(gpu_.gpu_clock_offset_ns());
    std::vector<CounterSample> fresh;
    const double cpu0 = thread_cpu_ms();
    const std::string err = gpu_.poll_counters(fresh);
    ledger_.spent(OverheadLedger::Work::counters, thread_cpu_ms() - cpu0);
    watchdog_.saw_samples(fresh);
    lines_.add_counter_samples(fresh);
    if (err.empty()) return;
    // Usually the hardware buffer filled while this thread was held up for seconds (the decode then
    // says CUPTI_ERROR_OUT_OF_MEMORY). Start sampling again, a few times per run; the steps of the
    // gap show it in counters.coverage and counters.samples.
    if (counter_restarts_ < kMaxCounterRestarts) {
      ++counter_restarts_;
      const std::string again =
          gpu_.start_counters(ctx.run.device->index, counters_interval_ns(ctx.cfg), counters_buffer_bytes(ctx.cfg));
      warn_once("counters.restart", "hardware counters: " + err + "; PM sampling started again (" +
                                        (again.empty() ? std::string("ok") : again) +
                                        "), steps of the gap have fewer samples");
      if (again.empty()) {
        counters_paused_ = polled_since_pause_ = false;  // sampling runs again from a fresh start
        lines_.set_counters_paused(std::nullopt);
        return;
      }
    }
    stop_counters(reason_text(Reason::counters_stopped, err));
    warn_once("counters.poll", ctx.counters_null_reason);
  }

  /// Counters on traced steps only (overhead_budget decides): sampling runs while the open step or
  /// the next one is traced, and until the samples of every traced step waiting for its line are in;
  /// paused otherwise. A resume that fails ends the counters for the run (said once, in every line).
  void steer(const std::deque<StepRecord>& waiting, const Attributor& attributor, bool resume_only) {
    const StepRecorder::OpenView open = recorder_.open_view();
    bool want = open.traced || open.next_traced;
    // A traced step's samples must cover its end, and its kernels that run on after the host moved on:
    // phase counters are read over their GPU time. How long they run on is learned from the complete
    // traced steps (core/gpu_tail.hpp); until one is seen, sampling runs until the step's records are in.
    const std::optional<int64_t> tail = gpu_tail_.allowance_ns();
    for (const StepRecord& r : waiting)
      if (r.traced && (tail ? !lines_.counters_cover(r.end_ns + *tail)
                            : !lines_.counters_cover(r.end_ns) || !attributor.is_complete(static_cast<int64_t>(r.index))))
        want = true;
    if (want == !counters_paused_ || (resume_only && !want)) return;
    const std::string err = want ? gpu_.resume_counters() : gpu_.pause_counters();
    if (err.empty()) {
      counters_paused_ = !want;
      polled_since_pause_ = false;
      lines_.set_counters_paused(counters_paused_ ? std::optional<int64_t>(monotonic_ns()) : std::nullopt);
      return;
    }
    stop_counters(reason_text(Reason::counters_stopped) + std::string(want ? "resuming" : "pausing") +
                  " PM sampling between traced steps failed: " + err);
    warn_once("counters.duty", lines_.context().counters_null_reason);
  }

  backend::GpuBackend& gpu_;
  LineAssembler& lines_;
  OverheadLedger& ledger_;
  StallWatchdog& watchdog_;
  const StepRecorder& recorder_;
  ReadingPace memory_pace_, device_state_pace_;  // when device memory and NVML are read next
  GpuTail gpu_tail_;                 // traced steps' GPU work after their host end (counters' pause)
  bool sample_memory_ = false;       // device memory is read (a device, the thread bound, no failure)
  int counter_restarts_ = 0;
  bool counters_paused_ = false;     // PM sampling paused between traced steps (steer)
  bool polled_since_pause_ = false;  // what was sampled before the pause has been decoded
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
