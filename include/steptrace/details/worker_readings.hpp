// steptrace/details/worker_readings.hpp - the background thread's readings beside the steps: device
// memory, NVML device state, PM-sampling decodes, and the counters' duty cycle around traced steps
// (Worker's members; included at the end of worker.hpp).
#pragma once
#include "worker.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline void Worker::take_memory_sample(bool& enabled) {
  const int64_t now = monotonic_ns();
  if (!memory_pace_.due(now)) return;
  std::string err;
  const double cpu0 = thread_cpu_ms();
  auto s = s_.gpu->sample_memory(now, &err);
  const double cost = thread_cpu_ms() - cpu0;
  ledger_.spent(OverheadLedger::Work::memory, cost);
  memory_pace_.taken(now, cost);
  if (!s) {
    lines_.context().memory_null_reason = err;
    warn_once("memory", "device memory sampling stopped: " + err);
    enabled = false;
    return;
  }
  lines_.add_memory_sample(*s);
}

inline void Worker::open_device_state() {
  LineContext& ctx = lines_.context();
  ctx.device_state_on = false;
  if (!ctx.run.device) {
    ctx.device_state_null_reason = "no GPU measured: " + ctx.run.device_null_reason;
    return;
  }
  const std::string err = s_.gpu->open_device_state(ctx.run.device->index);
  if (!err.empty()) {
    ctx.device_state_null_reason = "NVML unavailable: " + err;
    warn_once("nvml", ctx.device_state_null_reason + "; power, clocks and temperature are null");
    return;
  }
  ctx.device_state_on = true;
  ctx.device_state_null_reason.clear();
  lines_.add_device_state(s_.gpu->read_device_state(monotonic_ns()));  // a first reading before any step ends
}

inline void Worker::take_device_state() {
  if (!lines_.context().device_state_on) return;
  const int64_t now = monotonic_ns();
  if (!device_state_pace_.due(now)) return;
  const double cpu0 = thread_cpu_ms();
  lines_.add_device_state(s_.gpu->read_device_state(now));
  const double cost = thread_cpu_ms() - cpu0;
  ledger_.spent(OverheadLedger::Work::device_state, cost);
  device_state_pace_.taken(now, cost);
}

inline void Worker::collect_counter_samples() {
  LineContext& ctx = lines_.context();
  lines_.set_gpu_clock_offset(s_.gpu->gpu_clock_offset_ns());
  std::vector<CounterSample> fresh;
  const double cpu0 = thread_cpu_ms();
  const std::string err = s_.gpu->poll_counters(fresh);
  ledger_.spent(OverheadLedger::Work::counters, thread_cpu_ms() - cpu0);
  watchdog_.saw_samples(fresh);
  lines_.add_counter_samples(fresh);
  if (err.empty()) return;
  // Usually the hardware buffer filled while this thread was held up for seconds (the decode then
  // says CUPTI_ERROR_OUT_OF_MEMORY). Start sampling again, a few times per run; the steps of the
  // gap show it in counters.coverage and counters.samples.
  if (counter_restarts_ < kMaxCounterRestarts) {
    ++counter_restarts_;
    const std::string again = s_.gpu->start_counters(ctx.run.device->index, counters_interval_ns(ctx.cfg),
                                                     counters_buffer_bytes(ctx.cfg));
    warn_once("counters.restart", "hardware counters: " + err + "; PM sampling started again (" +
                                      (again.empty() ? std::string("ok") : again) +
                                      "), steps of the gap have fewer samples");
    if (again.empty()) {
      counters_paused_ = polled_since_pause_ = false;  // sampling runs again from a fresh start
      lines_.set_counters_paused(std::nullopt);
      return;
    }
  }
  ctx.counters_on = false;  // the worker owns it from here on; stop() sees it off
  s_.gpu->stop_counters();
  ctx.counters_null_reason = "hardware counters stopped: " + err;
  warn_once("counters.poll", ctx.counters_null_reason);
}

inline bool Worker::counters_poll_due() const {
  if (!lines_.context().counters_on) return false;
  return !counters_paused_ || !polled_since_pause_;
}

inline void Worker::steer_counters(bool resume_only) {
  LineContext& ctx = lines_.context();
  const StepRecorder::OpenView open = s_.recorder->open_view();
  bool want = open.traced || open.next_traced;
  // A traced step's samples must cover its end, and its kernels that run on after the host moved on:
  // phase counters are read over their GPU time. How long they run on is learned from the complete
  // traced steps (core/gpu_tail.hpp); until one is seen, sampling runs until the step's records are in.
  const std::optional<int64_t> tail = gpu_tail_.allowance_ns();
  for (const StepRecord& r : waiting_)
    if (r.traced && (tail ? !lines_.counters_cover(r.end_ns + *tail)
                          : !lines_.counters_cover(r.end_ns) || !attributor_.is_complete(static_cast<int64_t>(r.index))))
      want = true;
  if (want == !counters_paused_ || (resume_only && !want)) return;
  const std::string err = want ? s_.gpu->resume_counters() : s_.gpu->pause_counters();
  if (err.empty()) {
    counters_paused_ = !want;
    polled_since_pause_ = false;
    lines_.set_counters_paused(counters_paused_ ? std::optional<int64_t>(monotonic_ns()) : std::nullopt);
    return;
  }
  ctx.counters_on = false;  // the worker owns it from here on; stop() sees it off
  s_.gpu->stop_counters();
  ctx.counters_null_reason = std::string("hardware counters stopped: ") + (want ? "resuming" : "pausing") +
                             " PM sampling between traced steps failed: " + err;
  warn_once("counters.duty", ctx.counters_null_reason);
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
