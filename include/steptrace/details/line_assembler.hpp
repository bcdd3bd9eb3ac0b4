// steptrace/details/line_assembler.hpp - one step's line from what the background thread holds: the
// step's host record, its GPU attribution, the memory, counter and device-state readings around it,
// and why a section is unavailable. Pure given its inputs: no vendor call, no I/O, no clock read, so
// the rules are tested on the CPU (tests/test_runtime.cpp). The readings are kept here, bounded, and
// dropped once no waiting step can use them.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "../core/counters.hpp"
#include "../core/cross_rank.hpp"  // details::median_of
#include "../core/device_state.hpp"
#include "../core/metrics.hpp"
#include "../core/records.hpp"
#include "../core/line_invariants.hpp"
#include "../core/step_line.hpp"
#include "../core/step_metrics.hpp"
#include "../core/summary.hpp"
#include "log.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline constexpr std::size_t kMaxMemorySamples = 4096;
inline constexpr std::size_t kMaxCounterSamples = 1u << 16;  // ~65 s of samples at the 1 ms default

/// Fixed at start(): what the run has, and why a part is missing ("" = present).
struct LineContext {
  Config cfg;
  RunInfo run;
  PeakFlops peak;
  std::string gpu_null_reason;       // no attribution at all (no GPU, CUPTI off or unavailable)
  std::string counters_null_reason;  // updated by the worker when counters stop
  bool counters_on = false;
  bool counters_traced_only = false;  // PM sampling paused between traced steps (overhead_budget decides)
  bool device_state_on = false;
  std::string device_state_null_reason = reason_text(Reason::nvml_not_open);
  std::string memory_null_reason;  // updated by the worker when memory sampling stops
};

class LineAssembler {
 public:
  LineAssembler() = default;
  explicit LineAssembler(LineContext ctx) : ctx_(std::move(ctx)) {}

  LineContext& context() { return ctx_; }
  const LineContext& context() const { return ctx_; }
  SummaryBuilder& summary() { return summary_; }

  // ---- readings, background thread ----
  void add_memory_sample(const MemorySample& s) {
    memory_samples_.push_back(s);
    if (memory_samples_.size() > kMaxMemorySamples) memory_samples_.pop_front();
  }
  void add_device_state(const DeviceStateSample& s) {
    device_states_.push_back(s);
    if (device_states_.size() > kMaxMemorySamples) device_states_.pop_front();
  }
  const std::deque<DeviceStateSample>& device_states() const { return device_states_; }
  /// PM samples, in time order. The attribution searches them by time: a sample that breaks the
  /// order (a bad timestamp) or is empty is dropped, with one warning.
  void add_counter_samples(const std::vector<CounterSample>& fresh) {
    // A sample much longer than the sampling interval spans a pause (counters around traced steps):
    // its counts are those of its last interval spread over the whole gap. Dropped, said once.
    const auto longest_ns = static_cast<int64_t>(ctx_.cfg.counters_interval_us * 1000 * 1.5);
    for (CounterSample c : fresh) {
      if (const uint32_t n = exclude_impossible_values(c)) {
        counter_values_excluded_ += n;
        warn_once("counters.range", "hardware counters: a PM sample value outside [0, 1] was left out (counted in "
                                    "counters.excluded_values; said once)");
      }
      if (ctx_.counters_traced_only && longest_ns > 0 && c.end_ns - c.start_ns > longest_ns) {
        warn_once("counters.long", "hardware counters: a PM sample longer than 1.5 x counters_interval_us (one that "
                                   "spans a pause of sampling between traced steps) was dropped (said once)");
        continue;
      }
      if (c.end_ns <= c.start_ns || (!counter_samples_.empty() && (c.start_ns < counter_samples_.back().start_ns ||
                                                                   c.end_ns < counter_samples_.back().end_ns))) {
        warn_once("counters.order", "hardware counters: a PM sample out of time order or empty was dropped");
        continue;
      }
      latest_counter_end_ns_ = std::max(latest_counter_end_ns_, c.end_ns);
      counter_samples_.push_back(c);
      if (counter_samples_.size() > kMaxCounterSamples) counter_samples_.pop_front();
    }
  }
  void set_gpu_clock_offset(int64_t offset_ns) { gpu_clock_offset_ns_ = offset_ns; }
  int64_t gpu_clock_offset_ns() const { return gpu_clock_offset_ns_; }
  /// Whether PM samples up to the step's end (host clock) have been read: or sampling was paused
  /// after the step ended and what it sampled was read since (the worker polls before it steers).
  bool counters_cover(int64_t end_ns) const {
    return !ctx_.counters_on || latest_counter_end_ns_ >= end_ns + gpu_clock_offset_ns_ ||
           (counters_paused_at_ns_ && *counters_paused_at_ns_ >= end_ns);
  }
  /// PM sampling paused at this host time (nullopt: running).
  void set_counters_paused(std::optional<int64_t> at_ns) { counters_paused_at_ns_ = at_ns; }

  /// The line input of one step; advances the window. `written`: whether this step's line is
  /// written (log_every); `extra` carries what the worker counted since the last line.
  struct Extra {
    uint64_t gpu_dropped_records = 0;
    uint64_t steps_dropped_total = 0;
    uint64_t lines_unwritten_total = 0;
    Measured<StepMarkers> markers{reason_text(Reason::no_stream_markers)};  // the step's stream markers, read back (details/marker_ring.hpp)
  };
  StepLineInput assemble(const StepRecord& r, std::optional<StepGpu> gpu, const std::string& untraced, const Extra& x) {
    StepLineInput in;
    in.step = &r;
    in.run = &ctx_.run;
    in.host = compute_host_metrics(r);
    in.memory = observe_memory(r);
    in.flops_per_token = ctx_.cfg.flops_per_token;
    in.peak = ctx_.peak;
    ParallelSizes parallel;
    parallel.tensor = ctx_.cfg.model_parallel.tensor;
    parallel.pipeline = ctx_.cfg.model_parallel.pipeline;
    parallel.context = ctx_.cfg.model_parallel.context;
    parallel.world_size = ctx_.run.world_size;
    in.mfu = compute_mfu(ctx_.cfg.flops_per_token, in.host.tokens_per_second, ctx_.peak, parallel);
    in.gpu.set(std::move(gpu), untraced.empty() ? ctx_.gpu_null_reason : untraced);
    if (ctx_.counters_traced_only && !in.gpu && ctx_.counters_null_reason.empty()) {
      in.counters.unknown(reason_text(Reason::counters_traced_only));
      drop_counter_samples_before(r.end_ns + gpu_clock_offset_ns_);
    } else if (ctx_.counters_on || !counter_samples_.empty()) {
      attribute_counters(r, in);
    } else {
      in.counters.unknown(ctx_.counters_null_reason);
    }
    if (ctx_.device_state_on)
      in.device_state.set(summarize_device_state(device_states_, r.begin_ns, r.own_end_ns()),
                          reason_text(Reason::nvml_no_reading_yet));
    else
      in.device_state.unknown(ctx_.device_state_null_reason);
    // device_states_: keep the latest reading before this step (fallback for a short next step).
    while (device_states_.size() > 1 && device_states_[1].time_ns <= r.begin_ns) device_states_.pop_front();
    in.gpu_dropped_records = x.gpu_dropped_records;
    in.steps_dropped_total = x.steps_dropped_total;
    in.lines_unwritten_total = x.lines_unwritten_total;
    in.markers = x.markers;
    if (in.mfu.above_one)
      warn_once("mfu.above_one",
                "estimated_mfu > 1 (" + std::to_string(*in.mfu.value) + "): flops_per_token or peak_flops is wrong");
    in.shares = compute_step_shares(in.host, in.gpu);
    check_line_invariants(in);  // before the diagnosis reads the shares
    for (const auto& [field, why] : in.excluded)
      warn_once("invariant." + field.substr(0, field.find('.', field.find('.') + 1)),
                "step " + std::to_string(r.index) + ": " + why + " (null with this reason in null_reasons; said once)");
    const double step_ms = ns_to_ms(in.host.step_time_ns);
    if (in.gpu) {
      in.diagnosis = diagnose(in.shares);
      // The untraced steps around this trace are the carry's reference (never this step's own,
      // tracing-inflated time): those before it, or the first ones after it.
      last_gpu_view_ = CarriedGpuView{r.index, step_ms, in.shares, untraced_median()};
      // Markers are believed on untraced steps while the last traced step's agreed with its records:
      // marked whole (its begin and end), and its pending time within its GPU records' busy time.
      if (in.gpu->complete) markers_trusted_ = false;
      if (in.markers && in.markers->span_ns && in.gpu->complete) {
        in.markers_agree = markers_agree(in.markers->pending_own_ns, in.gpu->busy_ns, in.host.step_time_ns);
        markers_trusted_ = *in.markers_agree;
        if (!markers_trusted_)
          warn_once("markers.disagree", "step " + std::to_string(r.index) + ": the stream markers saw the GPU pending for " +
                                            std::to_string(ns_to_ms(in.markers->pending_own_ns)) + " ms, longer than the " +
                                            std::to_string(ns_to_ms(in.gpu->busy_ns)) +
                                            " ms the step's GPU records are busy: markers are not used for diagnoses "
                                            "until a traced step's agree (said once)");
      }
    } else {
      if (step_ms > 0) untraced_ms_.push_back(step_ms);
      while (untraced_ms_.size() > kCarryReferenceSteps) untraced_ms_.pop_front();
      if (last_gpu_view_ && !(last_gpu_view_->untraced_median_ms > 0)) last_gpu_view_->untraced_median_ms = untraced_median();
      in.diagnosis = diagnose_untraced(in.shares, r.index, step_ms, last_gpu_view_,
                                       CarryRule{carry_max_age(r.trace_every), CarryRule{}.max_step_ratio});
      if (in.markers && markers_trusted_ && step_ms > 0)
        if (auto own = diagnose_by_markers(in.shares, ns_to_ms(in.markers->pending_ns) / step_ms, r.index, step_ms,
                                           last_gpu_view_, carry_max_age(r.trace_every)))
          in.diagnosis = std::move(*own);
    }
    summary_.add(in.host, in.mfu.value, in.diagnosis.label);
    add_totals(r, in);
    add_to_window(ns_to_ms(in.host.step_time_ns), in.host.tokens_per_second);
    return in;
  }

  /// With log_every = N, a line is written for steps N-1, 2N-1, ... and for the last step.
  bool written(const StepRecord& r) const {
    return !r.end_is_next_step || (r.index + 1) % static_cast<uint64_t>(ctx_.cfg.log_every) == 0;
  }

  /// A written line: the window of the steps since the previous one (log_every > 1), then a new window.
  void close_window(StepLineInput& in) {
    if (ctx_.cfg.log_every > 1) {
      WindowSummary w;
      w.steps = window_.steps;
      w.step_time_ms_mean = window_.sum_ms / window_.steps;
      w.step_time_ms_min = window_.min_ms;
      w.step_time_ms_max = window_.max_ms;
      // Tokens over time (the steps that had a rate), not a mean of rates: a short step with few
      // tokens does not weigh as much as a long one.
      if (window_.tokens_ms > 0) w.tokens_per_second_mean = window_.tokens / (window_.tokens_ms / 1000.0);
      in.window = w;
    }
    window_ = Window{};
  }

 private:
  struct Total {
    double sum = 0;
    bool seen = false;
  };
  Total tokens_total_, samples_total_;
  struct Window {
    uint32_t steps = 0;
    double sum_ms = 0, min_ms = 0, max_ms = 0, tokens = 0, tokens_ms = 0;
  };

  /// Every step's tokens and samples since start() into the line's `tokens_total` / `samples_total`.
  void add_totals(const StepRecord& r, StepLineInput& in) {
    const auto add = [](const std::optional<double>& count, Total& t, Measured<double>& out, const char* what) {
      if (count) t.sum += *count, t.seen = true;
      if (!t.seen)
        out.unknown(reason_text(Reason::no_step_had_count, std::string(what) + " (set " + what + "_per_step or TRACE_STEP(tokens, samples))"));
      else if (!std::isfinite(t.sum))
        out.unknown(reason_text(Reason::count_sum_not_finite, std::string(what) + " is not a finite number"));
      else
        out = t.sum;
    };
    add(r.tokens, tokens_total_, in.tokens_total, "tokens");
    add(r.samples, samples_total_, in.samples_total, "samples");
  }

  void add_to_window(double ms, std::optional<double> tokens_per_second) {
    window_.min_ms = window_.steps ? std::min(window_.min_ms, ms) : ms;
    window_.max_ms = window_.steps ? std::max(window_.max_ms, ms) : ms;
    window_.sum_ms += ms;
    ++window_.steps;
    if (tokens_per_second) {
      window_.tokens += *tokens_per_second * ms / 1000.0;
      window_.tokens_ms += ms;
    }
  }

  /// Hardware counters over the step's window (host times moved to the CUPTI clock) and over each
  /// phase's GPU busy intervals; drops samples that ended before this step.
  void attribute_counters(const StepRecord& r, StepLineInput& in) {
    const int64_t b = r.begin_ns + gpu_clock_offset_ns_, e = r.own_end_ns() + gpu_clock_offset_ns_;  // not what ran between steps
    in.counters = summarize_counters(counter_samples_, Interval{b, e});
    in.counters_interval_us = ctx_.cfg.counters_interval_us;
    in.counter_values_excluded = counter_values_excluded_;
    if (in.gpu)
      for (const auto& [id, pg] : in.gpu->phases)
        if (!pg.busy.empty()) {
          std::vector<Interval> others;  // the other phases' GPU work: it may share this phase's samples
          for (const auto& [other_id, other] : in.gpu->phases)
            if (other_id != id) others.insert(others.end(), other.busy.begin(), other.busy.end());
          in.phase_counters[id] = summarize_phase_counters(counter_samples_, pg.busy, merge_intervals(std::move(others)));
        }
    drop_counter_samples_before(b);
  }
  void drop_counter_samples_before(int64_t gpu_ns) {
    while (!counter_samples_.empty() && counter_samples_.front().end_ns < gpu_ns) counter_samples_.pop_front();
  }

  MemoryObservation observe_memory(const StepRecord& r) {
    MemoryObservation m;
    std::optional<MemorySample> latest_before_end;
    for (const auto& s : memory_samples_) {
      if (s.time_ns <= r.end_ns) latest_before_end = s;
      if (s.time_ns < r.begin_ns || s.time_ns > r.end_ns) continue;
      ++m.samples;
      m.device_used_peak_bytes = std::max(m.device_used_peak_bytes.value_or(0), s.used_bytes);
      m.device_total_bytes = s.total_bytes;
    }
    // Steps shorter than the sampling period: report the latest earlier reading, marked by samples = 0.
    if (!m.samples && latest_before_end) {
      m.device_used_peak_bytes = latest_before_end->used_bytes;
      m.device_total_bytes = latest_before_end->total_bytes;
    }
    // Drop readings older than this step, but keep the latest of them: it is the fallback reading for
    // the next step if that one is shorter than the sampling period.
    while (memory_samples_.size() > 1 && memory_samples_[1].time_ns <= r.begin_ns) memory_samples_.pop_front();
    if (!m.device_used_peak_bytes)
      m.null_reason = ctx_.memory_null_reason.empty() ? std::string(reason_text(Reason::no_memory_sample_yet)) : ctx_.memory_null_reason;
    return m;
  }

  LineContext ctx_;
  SummaryBuilder summary_;
  Window window_;
  std::deque<MemorySample> memory_samples_;
  std::deque<CounterSample> counter_samples_;
  int64_t latest_counter_end_ns_ = 0;
  uint64_t counter_values_excluded_ = 0;  // sample values outside [0, 1] left out (core/counters.hpp), run total
  std::optional<int64_t> counters_paused_at_ns_;  // host clock
  int64_t gpu_clock_offset_ns_ = 0;  // GPU record clock - monotonic_ns()
  std::deque<DeviceStateSample> device_states_;
  static constexpr std::size_t kCarryReferenceSteps = 31;  // the untraced steps the carry's reference is taken from
  std::deque<double> untraced_ms_;                // their times
  double untraced_median() const { return median_of(std::vector<double>(untraced_ms_.begin(), untraced_ms_.end())); }
  std::optional<CarriedGpuView> last_gpu_view_;  // the last traced step's GPU shares (diagnosis.basis carried)
  bool markers_trusted_ = false;  // the last traced step with markers had them agree with its records
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
