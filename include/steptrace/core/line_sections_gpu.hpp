// steptrace/core/line_sections_gpu.hpp - the writers of a step line's GPU and device sections, in the
// line's order: GPU summary, counters, cross-rank view, device state, gpu, memory, MFU (docs/schema.md).
// Every value goes through LineOut, every null with its reason.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "line_out.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// GPU utilization and NCCL time from CUPTI attribution.
inline void write_gpu_summary(LineOut& out, const StepLineInput& in) {
  const HostStepMetrics& host = in.host;
  if (in.gpu && host.step_time_ns > 0) {
    out.field("gpu_utilization", static_cast<double>(in.gpu->busy_ns) /
                                     static_cast<double>(gpu_window_ns(*in.gpu, host.step_time_ns)));  // null where a check left it out
    out.field("nccl_time_ms", ns_to_ms(in.gpu->nccl_ns));
  } else {
    const std::string why = in.gpu ? "the step has no time" : in.gpu.why();
    out.null("gpu_utilization", why).null("nccl_time_ms", why);
  }
}

// The hardware counters' values by the names lines give them: over the step they are top-level fields
// (write_counters), over a phase members of its `counters` (write_phase_counters); one table for both.
struct CounterValueField {
  const char* name;
  std::optional<double> CounterSummary::*value;
};
inline constexpr CounterValueField kCounterSm{"sm_activity", &CounterSummary::sm_active};
inline constexpr CounterValueField kCounterTensor{"tensor_core_or_pipe_utilization", &CounterSummary::tensor_active};
inline constexpr CounterValueField kCounterDram{"memory_bandwidth_utilization", &CounterSummary::dram};
inline constexpr CounterValueField kCounterOccupancy{"occupancy", &CounterSummary::occupancy};

/// Why a counter value over a span ("step", "phase") is null though counters ran.
inline std::string counter_null_reason(const CounterSummary& c, bool values_excluded, const char* span) {
  return !c.samples ? reason_text(Reason::no_pm_sample, span)
         : values_excluded
             ? std::string("no value in [0, 1] over this ") + span +
                   ": PM sample values outside it are left out (counters.excluded_values), "
                   "or the metric is not available from PM sampling on this GPU"
             : reason_text(Reason::counter_not_sampled);
}
/// The samples behind the values: how many, their time inside the span, coverage, edge-only.
inline void write_counter_samples(LineOut& out, const CounterSummary& c) {
  out.field("samples", c.samples).field("sample_ms", ns_to_ms(c.sample_ns)).field("coverage", c.coverage);
  out.field("edge_only", c.edge_only);
}

/// Hardware counters (PM sampling) over the step: null when counters are off or unavailable, when the
/// chip offers no such metric, or when no sample covered the step.
inline void write_counters(LineOut& out, const StepLineInput& in) {
  const CounterSummary* c = in.counters ? &*in.counters : nullptr;
  const std::string why = c ? counter_null_reason(*c, in.counter_values_excluded, "step") : in.counters_null_reason;
  for (const CounterValueField& f : {kCounterSm, kCounterDram, kCounterTensor})
    out.field(f.name, c ? c->*f.value : std::nullopt, why);
  if (!c) {
    out.null("counters", in.counters_null_reason);
    return;
  }
  out.begin_object("counters").field("source", "cupti_pm_sampling").field("interval_us", in.counters_interval_us);
  write_counter_samples(out, *c);
  out.field(kCounterOccupancy.name, c->*kCounterOccupancy.value, why);
  out.field("excluded_values", in.counter_values_excluded);
  out.end_object();
}

/// A phase's `counters`: the values over its GPU busy intervals, the samples behind them, and the
/// share of those samples' GPU time that was other phases'.
inline void write_phase_counters(LineOut& out, const CounterSummary& c, bool values_excluded) {
  const std::string why = counter_null_reason(c, values_excluded, "phase");
  out.begin_object("counters");
  for (const CounterValueField& f : {kCounterSm, kCounterTensor, kCounterDram, kCounterOccupancy})
    out.field(f.name, c.*f.value, why);
  write_counter_samples(out, c);
  const int64_t all = c.sample_ns + c.shared_ns;
  out.field("shared", all > 0 ? std::optional<double>(static_cast<double>(c.shared_ns) / static_cast<double>(all)) : std::nullopt,
            "no sample used");
  out.end_object();
}

/// The cross-rank view (rank 0's lines), or why none.
inline void write_cross_rank(LineOut& out, const StepLineInput& in) {
  if (!in.cross_rank) {
    out.null("cross_rank", in.cross_rank.why());
    return;
  }
  const CrossRankView& v = *in.cross_rank;
  out.begin_object("cross_rank").field("step", v.step).field("every", static_cast<int64_t>(in.cross_rank_every));
  out.field("world_size", static_cast<int64_t>(v.world_size)).field("reporting", static_cast<int64_t>(v.reporting));
  out.field("missing_count", v.missing_count).begin_array("missing_ranks");
  for (int r : v.missing_ranks) out.element(static_cast<int64_t>(r));
  out.end_array();
  if (v.reporting) {
    out.begin_object("step_time_ms").field("median", v.step_ms_median).field("min", v.step_ms_min).field("max", v.step_ms_max).end_object();
    out.begin_object("work_ms").field("median", v.work_ms_median).field("min", v.work_ms_min).field("max", v.work_ms_max).end_object();
    out.begin_object("wait_ms").field("median", v.wait_ms_median).field("min", v.wait_ms_min).field("max", v.wait_ms_max).end_object();
    out.field("wait_basis", v.wait_basis);
    out.field("slowest_rank", static_cast<int64_t>(v.slowest_rank)).field("step_skew", v.step_skew);
    const char* why = nullptr;
    const std::optional<bool> balanced = v.balanced(&why);
    out.field("wait_share", v.waits_measured ? std::optional<double>(v.wait_share) : std::nullopt,
              reason_text(Reason::no_rank_waited));
    out.field("balanced", balanced, why ? why : "");
    out.field("gap_ms", v.gap_ms).field("skew", v.skew);
    auto rank_work = [&](const char* key, const RankWork& w) {
      out.begin_object(key).field("rank", static_cast<int64_t>(w.rank)).field("work_ms", w.work_ms).field("wait_ms", w.wait_ms);
      out.field("step_time_ms", w.step_ms).field("wait_basis", std::string(wait_basis_name(w.basis))).end_object();
    };
    rank_work("culprit", v.culprit);
    rank_work("median_rank", v.median_rank);
    out.field("culprit_phase", v.culprit_phase.empty() ? std::nullopt : std::optional<std::string>(v.culprit_phase),
              reason_text(Reason::no_part_exceeds));
    out.field("culprit_gap_ms", v.culprit_gap_ms);
    out.begin_array("lowest_scores");
    for (const auto& sc : v.lowest_scores)
      out.begin_element().field("rank", static_cast<int64_t>(sc.rank)).field("score", sc.score).field("work_ms", sc.work_ms)
          .field("wait_ms", sc.wait_ms).end_object();
    out.end_array();
  }
  out.end_object();
}

/// Every rank's line: its own summary as it was exchanged (core/cross_rank.hpp).
inline void write_rank_wait(LineOut& out, const StepLineInput& in) {
  if (!in.rank_wait) {
    out.null("rank_wait", in.rank_wait.why());
    return;
  }
  const RankSummary& s = *in.rank_wait;
  const bool measured = s.wait_basis != WaitBasis::none;
  out.begin_object("rank_wait").field("step", s.step).field("steps", static_cast<int64_t>(s.steps));
  out.field("step_time_ms", s.iteration_ms());
  out.field("wait_ms", measured ? std::optional<double>(s.wait_ms) : std::nullopt,
            reason_text(Reason::no_wait_measured));
  out.field("work_ms", measured ? std::optional<double>(details::work_of(s, s.wait_basis)) : std::nullopt,
            "own work needs the collective wait");
  out.field("wait_basis", std::string(wait_basis_name(s.wait_basis))).field("wait_steps", static_cast<int64_t>(s.wait_steps));
  out.field("untagged_ms", s.untagged_ms).field("between_ms", s.between_ms);
  out.end_object();
}

/// NVML readings within the step.
inline void write_device_state(LineOut& out, const StepLineInput& in) {
  if (!in.device_state) {
    out.null("device_state", in.device_state.why());
    return;
  }
  const DeviceStateSummary& d = *in.device_state;
  out.begin_object("device_state").field("samples", d.samples);
  const char* not_read = reason_text(Reason::nvml_no_reading);
  out.field("power_w_mean", d.power_w_mean, not_read).field("power_w_max", d.power_w_max, not_read);
  out.field("sm_clock_mhz_mean", d.sm_clock_mhz_mean, not_read).field("sm_clock_mhz_min", d.sm_clock_mhz_min, not_read);
  out.field("temperature_c_max", d.temperature_c_max, not_read);
  if (d.clock_event_reasons) {
    out.begin_array("clock_event_reasons");
    for (const auto& r : clock_event_reason_names(*d.clock_event_reasons)) out.element(r);
    out.end_array();
  } else {
    out.null("clock_event_reasons", reason_text(Reason::nvml_no_clock_reasons));
  }
  out.end_object();
}

/// Whether the step was traced, and its GPU attribution.
inline void write_gpu(LineOut& out, const StepLineInput& in) {
  const HostStepMetrics& host = in.host;
  out.field("traced", in.gpu.has_value());
  if (!in.gpu) {
    out.null("gpu", in.gpu.why());
    return;
  }
  const StepGpu& g = *in.gpu;
  out.begin_object("gpu");
  out.field("complete", g.complete).field("missing_launches", g.missing_launches);
  out.field("busy_ms", ns_to_ms(g.busy_ns));
  out.field("window_ms", ns_to_ms(gpu_window_ns(g, host.step_time_ns)));
  out.field("idle_ms", ns_to_ms(gpu_window_ns(g, host.step_time_ns) - g.busy_ns));  // null where a check left it out
  out.field("kernel_ms", ns_to_ms(g.kernel_ns)).field("kernels", g.kernels);
  // No kernel, no efficiency: null, never 0.
  out.field("sm_efficiency", g.kernels ? std::optional<double>(g.sm_efficiency) : std::nullopt, reason_text(Reason::step_no_kernel));
  out.field("invariant_exclusions", in.excluded.size());
  out.field("nccl_exposed_ms", ns_to_ms(g.nccl_exposed_ns));
  out.field("nccl_overlap", g.nccl_ns > 0 ? std::optional<double>(1.0 - static_cast<double>(g.nccl_exposed_ns) / static_cast<double>(g.nccl_ns)) : std::nullopt,
            reason_text(Reason::step_no_nccl_kernel));
  out.begin_object("nccl_collectives");
  for (const auto& [op, t] : g.nccl_collectives) out.begin_object(op).field("ms", ns_to_ms(t.first)).field("kernels", t.second).end_object();
  out.end_object();
  out.field("late_records", g.late_records).field("unattributed_records", g.unattributed_records);
  out.field("launched_untraced_records", g.launched_untraced_records);
  out.field("dropped_records", in.gpu_dropped_records);
  out.field("excluded_records", g.excluded_records);
  out.begin_object("excluded");
  for (int i = 0; i < kImplausibleKinds; ++i) out.field(implausible_name(static_cast<Implausible>(i + 1)), g.excluded[i]);
  out.end_object();
  out.field("implausible_phases", g.implausible_phases);
  if (g.before_first_step_records)
    out.field("before_first_step_ms", ns_to_ms(g.before_first_step_ns)).field("before_first_step_records", g.before_first_step_records);
  out.end_object();
}

/// Peak memory (the allocator hook first, else sampled device memory) and the readings behind it.
inline void write_memory(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  std::optional<int64_t> peak_allocated;
  std::string peak_source;
  if (step.allocator && step.allocator->peak_allocated_bytes) {
    peak_allocated = step.allocator->peak_allocated_bytes;
    peak_source = "allocator_hook";
  } else if (in.memory.device_used_peak_bytes) {
    peak_allocated = in.memory.device_used_peak_bytes;
    peak_source = "device_used_sampled";
  }
  const std::string no_sample = in.memory.null_reason.empty() ? reason_text(Reason::no_memory_sample) : in.memory.null_reason;
  out.field("peak_memory_allocated", peak_allocated, no_sample);
  out.optional_text("peak_memory_source", peak_source, no_sample);
  out.begin_object("memory");
  out.field("device_used_peak_bytes", in.memory.device_used_peak_bytes, no_sample);
  out.field("device_total_bytes", in.memory.device_total_bytes, no_sample);
  out.field("samples", in.memory.samples);
  if (step.allocator) {
    const AllocatorStats& a = *step.allocator;
    const char* not_given = reason_text(Reason::allocator_field_missing);
    out.begin_object("allocator")
        .field("allocated_bytes", a.allocated_bytes, not_given)
        .field("reserved_bytes", a.reserved_bytes, not_given)
        .field("peak_allocated_bytes", a.peak_allocated_bytes, not_given)
        .field("peak_reserved_bytes", a.peak_reserved_bytes, not_given)
        .field("alloc_retries", a.alloc_retries, not_given)
        .field("ooms", a.ooms, not_given)
        .end_object();
  } else {
    out.null("allocator", reason_text(Reason::no_allocator_hook));
  }
  out.end_object();
}

/// Estimated MFU and its inputs.
inline void write_mfu(LineOut& out, const StepLineInput& in) {
  out.field("estimated_mfu", in.mfu.value);
  out.begin_object("mfu_inputs");
  out.field("flops_per_token", in.flops_per_token > 0 ? std::optional<double>(in.flops_per_token) : std::nullopt,
            reason_text(Reason::flops_per_token_unset));
  out.field("peak_flops", in.peak.flops_per_second, in.peak.null_reason);
  out.field("peak_source", in.peak.flops_per_second ? in.peak.source : in.peak.null_reason);
  out.field("above_one", in.mfu.above_one);
  const ParallelSizes& par = in.mfu.parallel;
  out.begin_object("model_parallel");
  out.field("tensor", par.tensor).field("pipeline", par.pipeline).field("context", par.context);
  out.end_object();
  out.field("model_parallel_size", static_cast<int64_t>(par.model_parallel()));
  out.field("data_parallel_size", in.mfu.data_parallel_size ? std::optional<int64_t>(*in.mfu.data_parallel_size) : std::nullopt,
            in.mfu.parallel_null_reason);
  out.field("tokens_per_second_per_gpu", in.mfu.tokens_per_second_per_gpu,
            reason_text(Reason::tokens_unknown));
  out.end_object();
}

/// The step's stream markers (core/markers.hpp): GPU evidence of its own, traced or not.
inline void write_markers(LineOut& out, const StepLineInput& in) {
  if (!in.markers) {
    out.null("gpu_markers", in.markers.why());
    return;
  }
  const StepMarkers& m = *in.markers;
  const double step_ms = ns_to_ms(in.host.step_time_ns);
  out.begin_object("gpu_markers");
  out.field("points", m.points);
  out.field("pending_ms", ns_to_ms(m.pending_ns));
  out.field("pending_share", step_ms > 0 ? std::optional<double>(ns_to_ms(m.pending_ns) / step_ms) : std::nullopt,
            "the step has no time");
  out.field("span_ms", m.span_ns ? std::optional<double>(ns_to_ms(*m.span_ns)) : std::nullopt,
            reason_text(Reason::markers_span_unmarked));
  out.field("end_lag_ms", m.end_lag_ns ? std::optional<double>(ns_to_ms(*m.end_lag_ns)) : std::nullopt,
            reason_text(Reason::markers_end_unmarked));
  out.field("max_lag_ms", ns_to_ms(m.max_lag_ns));
  out.field("agrees_with_records", in.markers_agree,
            !in.gpu        ? reason_text(Reason::markers_not_traced)
            : !m.span_ns   ? reason_text(Reason::markers_span_unmarked, ": nothing whole to compare")
                           : reason_text(Reason::records_incomplete));
  out.begin_object("phases");
  for (const auto& [id, p] : m.phases) {
    out.begin_object(phase_name(id));
    out.field("span_ms", ns_to_ms(p.span_ns)).field("end_lag_ms", ns_to_ms(p.end_lag_ns)).field("scopes", p.count);
    out.end_object();
  }
  out.end_object();
  out.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
