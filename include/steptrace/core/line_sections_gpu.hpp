// steptrace/core/line_sections_gpu.hpp - the writers of a step line's GPU and device sections, in the
// line's order: GPU summary, counters, cross-rank view, device state, gpu, memory, MFU (docs/schema.md).
// Every null goes through LineOut with its reason.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "line_out.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// GPU utilization and NCCL time from CUPTI attribution.
inline void write_gpu_summary(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const HostStepMetrics& host = in.host;
  // GPU: attribution (CUPTI activity records joined to launches) and hardware counters.
  if (in.gpu && host.step_time_ns > 0) {
    w.field("gpu_utilization", in.excluded.count("gpu_utilization")
                                   ? std::nullopt
                                   : std::optional<double>(static_cast<double>(in.gpu->busy_ns) /
                                                           static_cast<double>(gpu_window_ns(*in.gpu, host.step_time_ns))));
    w.field("nccl_time_ms", ns_to_ms(in.gpu->nccl_ns));
  } else {
    for (const char* name : {"gpu_utilization", "nccl_time_ms"}) {
      w.key(name).null();
      out.nulls.emplace_back(name, in.gpu_null_reason);
    }
  }
}

/// Hardware counters (PM sampling) over the step: null when counters are off or unavailable, when the
/// chip offers no such metric, or when no sample covered the step.
inline void write_counters(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  // Hardware counters (PM sampling): a field is null when counters are off/unavailable, or when the
  // chip offers no such metric, or no sample has covered the step yet.
  const std::optional<double> none;
  const CounterSummary* c = in.counters ? &*in.counters : nullptr;
  const std::pair<const char*, const std::optional<double>*> fields[] = {
      {"sm_activity", c ? &c->sm_active : &none},
      {"memory_bandwidth_utilization", c ? &c->dram : &none},
      {"tensor_core_or_pipe_utilization", c ? &c->tensor_active : &none}};
  for (const auto& [name, v] : fields) {
    w.field(name, *v);
    if (!*v)
      out.nulls.emplace_back(
          name, !c ? in.counters_null_reason
                   : !c->samples ? "no PM sample covered this step"
                   : in.counter_values_excluded
                       ? "no value in [0, 1] over this step: PM sample values outside it are left out (counters.excluded_values), "
                         "or the metric is not available from PM sampling on this GPU"
                       : "this metric is not available from PM sampling on this GPU");
  }
  w.key("counters");
  if (c) {
    w.begin_object().field("source", "cupti_pm_sampling").field("interval_us", in.counters_interval_us);
    w.field("samples", c->samples).field("sample_ms", ns_to_ms(c->sample_ns)).field("coverage", c->coverage);
    w.field("edge_only", c->edge_only);
    w.field("occupancy", c->occupancy);
    w.field("excluded_values", in.counter_values_excluded);
    w.end_object();
  } else {
    w.null();
    out.nulls.emplace_back("counters", in.counters_null_reason);
  }
}

/// The cross-rank view (rank 0's lines), or why none.
inline void write_cross_rank(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  w.key("cross_rank");
  if (in.cross_rank) {
    const CrossRankView& v = *in.cross_rank;
    w.begin_object().field("step", v.step).field("every", static_cast<int64_t>(in.cross_rank_every));
    w.field("world_size", static_cast<int64_t>(v.world_size)).field("reporting", static_cast<int64_t>(v.reporting));
    w.field("missing_count", v.missing_count).key("missing_ranks").begin_array();
    for (int r : v.missing_ranks) w.value(static_cast<int64_t>(r));
    w.end_array();
    if (v.reporting) {
      w.key("step_time_ms").begin_object().field("median", v.step_ms_median).field("min", v.step_ms_min).field("max", v.step_ms_max).end_object();
      w.key("work_ms").begin_object().field("median", v.work_ms_median).field("min", v.work_ms_min).field("max", v.work_ms_max).end_object();
      w.field("slowest_rank", static_cast<int64_t>(v.slowest_rank)).field("step_skew", v.step_skew);
      // Balanced only when every rank reported: a missing rank may be the one the others wait for.
      const bool judged = v.missing_count == 0 && v.reporting >= 2 && v.step_ms_median > 0;
      w.field("balanced", judged ? std::optional<bool>(v.step_skew < kBalancedStepSkew) : std::nullopt);
      if (!judged)
        out.nulls.emplace_back("cross_rank.balanced", v.reporting < 2 ? "fewer than two ranks reported"
                                                         : v.missing_count ? "a rank's summary is missing (it may be the slow one)"
                                                                           : "no positive median step time");
      w.field("gap_ms", v.gap_ms).field("skew", v.skew);
      w.field("culprit_phase", v.culprit_phase ? std::optional<std::string>(phase_name(*v.culprit_phase)) : std::nullopt);
      w.field("culprit_gap_ms", v.culprit_gap_ms);
      w.key("lowest_scores").begin_array();
      for (const auto& sc : v.lowest_scores)
        w.begin_object().field("rank", static_cast<int64_t>(sc.rank)).field("score", sc.score).field("work_ms", sc.work_ms).end_object();
      w.end_array();
    }
    w.end_object();
  } else {
    w.null();
    out.nulls.emplace_back("cross_rank", in.cross_rank_null_reason.empty() ? "no cross-rank exchange" : in.cross_rank_null_reason);
  }
}

/// NVML readings within the step.
inline void write_device_state(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  w.key("device_state");
  if (in.device_state) {
    const DeviceStateSummary& d = *in.device_state;
    w.begin_object().field("samples", d.samples);
    w.field("power_w_mean", d.power_w_mean).field("power_w_max", d.power_w_max);
    w.field("sm_clock_mhz_mean", d.sm_clock_mhz_mean).field("sm_clock_mhz_min", d.sm_clock_mhz_min);
    w.field("temperature_c_max", d.temperature_c_max);
    w.key("clock_event_reasons");
    if (d.clock_event_reasons) {
      w.begin_array();
      for (const auto& r : clock_event_reason_names(*d.clock_event_reasons)) w.value(r);
      w.end_array();
    } else {
      w.null();
    }
    w.end_object();
  } else {
    w.null();
    out.nulls.emplace_back("device_state", in.device_state_null_reason);
  }
}

/// Whether the step was traced, and its GPU attribution.
inline void write_gpu(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const HostStepMetrics& host = in.host;
  w.field("traced", in.gpu.has_value());
  w.key("gpu");
  if (in.gpu) {
    const StepGpu& g = *in.gpu;
    w.begin_object();
    w.field("complete", g.complete).field("missing_launches", g.missing_launches);
    w.field("busy_ms", ns_to_ms(g.busy_ns));
    w.field("window_ms", ns_to_ms(gpu_window_ns(g, host.step_time_ns)));
    w.field("idle_ms", in.excluded.count("gpu.idle_ms") ? std::nullopt
                                                        : std::optional<double>(ns_to_ms(gpu_window_ns(g, host.step_time_ns) - g.busy_ns)));
    w.field("kernel_ms", ns_to_ms(g.kernel_ns)).field("kernels", g.kernels);
    // No kernel, no efficiency: null, never 0 (the step's null_reasons say why).
    w.field("sm_efficiency", g.kernels && !in.excluded.count("gpu.sm_efficiency") ? std::optional<double>(g.sm_efficiency) : std::nullopt);
    if (!g.kernels) out.nulls.emplace_back("gpu.sm_efficiency", "no kernel ran in this step");
    w.field("invariant_exclusions", in.excluded.size());
    w.field("nccl_exposed_ms", ns_to_ms(g.nccl_exposed_ns));
    w.field("nccl_overlap", g.nccl_ns > 0 ? std::optional<double>(1.0 - static_cast<double>(g.nccl_exposed_ns) / static_cast<double>(g.nccl_ns)) : std::nullopt);
    w.key("nccl_collectives").begin_object();
    for (const auto& [op, t] : g.nccl_collectives)
      w.key(op).begin_object().field("ms", ns_to_ms(t.first)).field("kernels", t.second).end_object();
    w.end_object();
    w.field("late_records", g.late_records).field("unattributed_records", g.unattributed_records);
    w.field("launched_untraced_records", g.launched_untraced_records);
    w.field("dropped_records", in.gpu_dropped_records);
    w.field("excluded_records", g.excluded_records);
    w.key("excluded").begin_object();
    for (int i = 0; i < kImplausibleKinds; ++i) w.field(implausible_name(static_cast<Implausible>(i + 1)), g.excluded[i]);
    w.end_object();
    w.field("implausible_phases", g.implausible_phases);
    if (g.before_first_step_records)
      w.field("before_first_step_ms", ns_to_ms(g.before_first_step_ns)).field("before_first_step_records", g.before_first_step_records);
    w.end_object();
  } else {
    w.null();
    out.nulls.emplace_back("gpu", in.gpu_null_reason);
  }
}

/// Peak memory (the allocator hook first, else sampled device memory) and the readings behind it.
inline void write_memory(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  // Memory.
  std::optional<int64_t> peak_allocated;
  std::string peak_source;
  if (step.allocator && step.allocator->peak_allocated_bytes) {
    peak_allocated = step.allocator->peak_allocated_bytes;
    peak_source = "allocator_hook";
  } else if (in.memory.device_used_peak_bytes) {
    peak_allocated = in.memory.device_used_peak_bytes;
    peak_source = "device_used_sampled";
  }
  w.field("peak_memory_allocated", peak_allocated);
  if (peak_allocated) {
    w.field("peak_memory_source", peak_source);
  } else {
    w.key("peak_memory_source").null();
    const std::string why = in.memory.null_reason.empty() ? "no memory sample fell inside this step" : in.memory.null_reason;
    out.nulls.emplace_back("peak_memory_allocated", why);
    out.nulls.emplace_back("peak_memory_source", why);
  }
  w.key("memory").begin_object();
  w.field("device_used_peak_bytes", in.memory.device_used_peak_bytes);
  w.field("device_total_bytes", in.memory.device_total_bytes);
  w.field("samples", in.memory.samples);
  w.key("allocator");
  if (step.allocator) {
    const AllocatorStats& a = *step.allocator;
    w.begin_object()
        .field("allocated_bytes", a.allocated_bytes)
        .field("reserved_bytes", a.reserved_bytes)
        .field("peak_allocated_bytes", a.peak_allocated_bytes)
        .field("peak_reserved_bytes", a.peak_reserved_bytes)
        .field("alloc_retries", a.alloc_retries)
        .field("ooms", a.ooms)
        .end_object();
  } else {
    w.null();
  }
  w.end_object();
}

/// Estimated MFU and its inputs.
inline void write_mfu(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  // MFU.
  w.field("estimated_mfu", in.mfu.value);
  if (!in.mfu.value) out.nulls.emplace_back("estimated_mfu", in.mfu.null_reason);
  w.key("mfu_inputs").begin_object();
  w.field("flops_per_token", in.flops_per_token > 0 ? std::optional<double>(in.flops_per_token) : std::nullopt);
  w.field("peak_flops", in.peak.flops_per_second);
  w.field("peak_source", in.peak.flops_per_second ? in.peak.source : in.peak.null_reason);
  w.field("above_one", in.mfu.above_one);
  const ParallelSizes& par = in.mfu.parallel;
  w.key("model_parallel").begin_object();
  w.field("tensor", par.tensor).field("pipeline", par.pipeline).field("context", par.context);
  w.end_object();
  w.field("model_parallel_size", static_cast<int64_t>(par.model_parallel()));
  w.field("data_parallel_size", in.mfu.data_parallel_size ? std::optional<int64_t>(*in.mfu.data_parallel_size) : std::nullopt);
  if (!in.mfu.data_parallel_size) out.nulls.emplace_back("mfu_inputs.data_parallel_size", in.mfu.parallel_null_reason);
  w.field("tokens_per_second_per_gpu", in.mfu.tokens_per_second_per_gpu);
  if (!in.mfu.tokens_per_second_per_gpu)
    out.nulls.emplace_back("mfu_inputs.tokens_per_second_per_gpu", "tokens per step unknown (set tokens_per_step or TRACE_STEP(tokens))");
  w.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
