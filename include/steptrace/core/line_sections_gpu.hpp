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
    out.field(STEPTRACE_ROW("/gpu_utilization"), static_cast<double>(in.gpu->busy_ns) /
                                     static_cast<double>(gpu_window_ns(*in.gpu, host.step_time_ns)));  // null where a check left it out
    out.field(STEPTRACE_ROW("/nccl_time_ms"), ns_to_ms(in.gpu->nccl_ns));
  } else {
    const std::string why = in.gpu ? std::string(reason_text(Reason::step_no_time)) : in.gpu.why();
    out.null(STEPTRACE_ROW("/gpu_utilization"), why).null(STEPTRACE_ROW("/nccl_time_ms"), why);
  }
}

/// Why a counter value over a span ("step", "phase") is null though counters ran.
inline std::string counter_null_reason(const CounterSummary& c, bool values_excluded, const char* span) {
  return !c.samples ? reason_text(Reason::no_pm_sample, span)
         : values_excluded
             ? reason_text(Reason::counter_values_excluded) + std::string(span) +
                   ": PM sample values outside it are left out (counters.excluded_values), "
                   "or the metric is not available from PM sampling on this GPU"
             : reason_text(Reason::counter_not_sampled);
}
/// The samples behind the values: how many, their time inside the span, coverage, edge-only, under the
/// rows of the object written (the step's `counters`, a phase's: STEPTRACE_COUNTER_SAMPLE_ROWS).
template <class Samples, class SampleMs, class Coverage, class EdgeOnly>
inline void write_counter_samples(LineOut& out, const CounterSummary& c, Samples samples, SampleMs sample_ms, Coverage coverage,
                                  EdgeOnly edge_only) {
  out.field(samples, c.samples).field(sample_ms, ns_to_ms(c.sample_ns)).field(coverage, c.coverage);
  out.field(edge_only, c.edge_only);
}
/// The four sample rows' handles under `object` (a path literal).
#define STEPTRACE_COUNTER_SAMPLE_ROWS(object)                                                                 \
  STEPTRACE_ROW(object "/samples"), STEPTRACE_ROW(object "/sample_ms"), STEPTRACE_ROW(object "/coverage"), \
      STEPTRACE_ROW(object "/edge_only")

/// Hardware counters (PM sampling) over the step: null when counters are off or unavailable, when the
/// chip offers no such metric, or when no sample covered the step.
inline void write_counters(LineOut& out, const StepLineInput& in) {
  const CounterSummary* c = in.counters ? &*in.counters : nullptr;
  const std::string why = c ? counter_null_reason(*c, in.counter_values_excluded, "step") : in.counters.why();
  // The counters' values over the step are top-level fields; over a phase, members of its `counters`.
  out.field(STEPTRACE_ROW("/sm_activity"), c ? c->sm_active : std::nullopt, why)
      .field(STEPTRACE_ROW("/memory_bandwidth_utilization"), c ? c->dram : std::nullopt, why)
      .field(STEPTRACE_ROW("/tensor_core_or_pipe_utilization"), c ? c->tensor_active : std::nullopt, why);
  if (!c) {
    out.null(STEPTRACE_ROW("/counters"), in.counters.why());
    return;
  }
  out.begin_object(STEPTRACE_ROW("/counters"))
      .field(STEPTRACE_ROW("/counters/source"), "cupti_pm_sampling")
      .field(STEPTRACE_ROW("/counters/interval_us"), in.counters_interval_us);
  write_counter_samples(out, *c, STEPTRACE_COUNTER_SAMPLE_ROWS("/counters"));
  out.field(STEPTRACE_ROW("/counters/occupancy"), c->occupancy, why);
  out.field(STEPTRACE_ROW("/counters/excluded_values"), in.counter_values_excluded);
  out.end_object();
}

/// A phase's `counters`: the values over its GPU busy intervals, the samples behind them, and the
/// share of those samples' GPU time that was other phases'.
inline void write_phase_counters(LineOut& out, const CounterSummary& c, bool values_excluded) {
  const std::string why = counter_null_reason(c, values_excluded, "phase");
  out.begin_object(STEPTRACE_ROW("/phases/*/gpu/counters"));
  out.field(STEPTRACE_ROW("/phases/*/gpu/counters/sm_activity"), c.sm_active, why)
      .field(STEPTRACE_ROW("/phases/*/gpu/counters/tensor_core_or_pipe_utilization"), c.tensor_active, why)
      .field(STEPTRACE_ROW("/phases/*/gpu/counters/memory_bandwidth_utilization"), c.dram, why)
      .field(STEPTRACE_ROW("/phases/*/gpu/counters/occupancy"), c.occupancy, why);
  write_counter_samples(out, c, STEPTRACE_COUNTER_SAMPLE_ROWS("/phases/*/gpu/counters"));
  const int64_t all = c.sample_ns + c.shared_ns;
  out.field(STEPTRACE_ROW("/phases/*/gpu/counters/shared"), all > 0 ? std::optional<double>(static_cast<double>(c.shared_ns) / static_cast<double>(all)) : std::nullopt,
            reason_text(Reason::no_sample_used));
  out.end_object();
}
#undef STEPTRACE_COUNTER_SAMPLE_ROWS  // this header's own

/// The cross-rank view (rank 0's lines), or why none.
inline void write_cross_rank(LineOut& out, const StepLineInput& in) {
  if (!in.cross_rank) {
    out.null(STEPTRACE_ROW("/cross_rank"), in.cross_rank.why());
    return;
  }
  const CrossRankView& v = *in.cross_rank;
  out.begin_object(STEPTRACE_ROW("/cross_rank"))
      .field(STEPTRACE_ROW("/cross_rank/step"), v.step)
      .field(STEPTRACE_ROW("/cross_rank/every"), static_cast<int64_t>(in.cross_rank_every));
  out.field(STEPTRACE_ROW("/cross_rank/world_size"), static_cast<int64_t>(v.world_size))
      .field(STEPTRACE_ROW("/cross_rank/reporting"), static_cast<int64_t>(v.reporting));
  out.field(STEPTRACE_ROW("/cross_rank/missing_count"), v.missing_count)
      .begin_array(STEPTRACE_ROW("/cross_rank/missing_ranks"));
  for (int r : v.missing_ranks) out.element(static_cast<int64_t>(r));
  out.end_array();
  if (v.reporting) {
    out.begin_object(STEPTRACE_ROW("/cross_rank/step_time_ms"))
        .field(STEPTRACE_ROW("/cross_rank/step_time_ms/median"), v.step_ms_median)
        .field(STEPTRACE_ROW("/cross_rank/step_time_ms/min"), v.step_ms_min)
        .field(STEPTRACE_ROW("/cross_rank/step_time_ms/max"), v.step_ms_max)
        .end_object();
    out.begin_object(STEPTRACE_ROW("/cross_rank/work_ms"))
        .field(STEPTRACE_ROW("/cross_rank/work_ms/median"), v.work_ms_median)
        .field(STEPTRACE_ROW("/cross_rank/work_ms/min"), v.work_ms_min)
        .field(STEPTRACE_ROW("/cross_rank/work_ms/max"), v.work_ms_max)
        .end_object();
    out.begin_object(STEPTRACE_ROW("/cross_rank/wait_ms"))
        .field(STEPTRACE_ROW("/cross_rank/wait_ms/median"), v.wait_ms_median)
        .field(STEPTRACE_ROW("/cross_rank/wait_ms/min"), v.wait_ms_min)
        .field(STEPTRACE_ROW("/cross_rank/wait_ms/max"), v.wait_ms_max)
        .end_object();
    out.field(STEPTRACE_ROW("/cross_rank/wait_basis"), v.wait_basis);
    out.field(STEPTRACE_ROW("/cross_rank/slowest_rank"), static_cast<int64_t>(v.slowest_rank))
        .field(STEPTRACE_ROW("/cross_rank/step_skew"), v.step_skew);
    const char* why = nullptr;
    const std::optional<bool> balanced = v.balanced(&why);
    out.field(STEPTRACE_ROW("/cross_rank/wait_share"), v.waits_measured ? std::optional<double>(v.wait_share) : std::nullopt,
              reason_text(Reason::no_rank_waited));
    out.field(STEPTRACE_ROW("/cross_rank/balanced"), balanced, why ? why : "");
    out.field(STEPTRACE_ROW("/cross_rank/gap_ms"), v.gap_ms).field(STEPTRACE_ROW("/cross_rank/skew"), v.skew);
// The culprit and the median rank: the same members under each.
    const auto rank_work = [&out](auto object, auto rank, auto work, auto wait, auto step, auto basis, const RankWork& w) {
      out.begin_object(object).field(rank, static_cast<int64_t>(w.rank)).field(work, w.work_ms).field(wait, w.wait_ms);
      out.field(step, w.step_ms).field(basis, std::string(wait_basis_name(w.basis))).end_object();
    };
    rank_work(STEPTRACE_ROW("/cross_rank/culprit"), STEPTRACE_ROW("/cross_rank/culprit/rank"),
              STEPTRACE_ROW("/cross_rank/culprit/work_ms"), STEPTRACE_ROW("/cross_rank/culprit/wait_ms"),
              STEPTRACE_ROW("/cross_rank/culprit/step_time_ms"), STEPTRACE_ROW("/cross_rank/culprit/wait_basis"), v.culprit);
    rank_work(STEPTRACE_ROW("/cross_rank/median_rank"), STEPTRACE_ROW("/cross_rank/median_rank/rank"),
              STEPTRACE_ROW("/cross_rank/median_rank/work_ms"), STEPTRACE_ROW("/cross_rank/median_rank/wait_ms"),
              STEPTRACE_ROW("/cross_rank/median_rank/step_time_ms"), STEPTRACE_ROW("/cross_rank/median_rank/wait_basis"),
              v.median_rank);
    out.field(STEPTRACE_ROW("/cross_rank/culprit_phase"), v.culprit_phase.empty() ? std::nullopt : std::optional<std::string>(v.culprit_phase),
              reason_text(Reason::no_part_exceeds));
    out.field(STEPTRACE_ROW("/cross_rank/culprit_gap_ms"), v.culprit_gap_ms);
    out.begin_array(STEPTRACE_ROW("/cross_rank/lowest_scores"));
    for (const auto& sc : v.lowest_scores)
      out.begin_element()
          .field(STEPTRACE_ROW("/cross_rank/lowest_scores/*/rank"), static_cast<int64_t>(sc.rank))
          .field(STEPTRACE_ROW("/cross_rank/lowest_scores/*/score"), sc.score)
          .field(STEPTRACE_ROW("/cross_rank/lowest_scores/*/work_ms"), sc.work_ms)
          .field(STEPTRACE_ROW("/cross_rank/lowest_scores/*/wait_ms"), sc.wait_ms).end_object();
    out.end_array();
  }
  out.end_object();
}

/// Every rank's line: its own summary as it was exchanged (core/cross_rank.hpp).
inline void write_rank_wait(LineOut& out, const StepLineInput& in) {
  if (!in.rank_wait) {
    out.null(STEPTRACE_ROW("/rank_wait"), in.rank_wait.why());
    return;
  }
  const RankSummary& s = *in.rank_wait;
  const bool measured = s.wait_basis != WaitBasis::none;
  out.begin_object(STEPTRACE_ROW("/rank_wait"))
      .field(STEPTRACE_ROW("/rank_wait/step"), s.step)
      .field(STEPTRACE_ROW("/rank_wait/steps"), static_cast<int64_t>(s.steps));
  out.field(STEPTRACE_ROW("/rank_wait/step_time_ms"), s.iteration_ms());
  out.field(STEPTRACE_ROW("/rank_wait/wait_ms"), measured ? std::optional<double>(s.wait_ms) : std::nullopt,
            reason_text(Reason::no_wait_measured));
  out.field(STEPTRACE_ROW("/rank_wait/work_ms"), measured ? std::optional<double>(details::work_of(s, s.wait_basis)) : std::nullopt,
            reason_text(Reason::work_needs_wait));
  out.field(STEPTRACE_ROW("/rank_wait/wait_basis"), std::string(wait_basis_name(s.wait_basis)))
      .field(STEPTRACE_ROW("/rank_wait/wait_steps"), static_cast<int64_t>(s.wait_steps));
  out.field(STEPTRACE_ROW("/rank_wait/untagged_ms"), s.untagged_ms)
      .field(STEPTRACE_ROW("/rank_wait/between_ms"), s.between_ms);
  out.end_object();
}

/// NVML readings within the step.
inline void write_device_state(LineOut& out, const StepLineInput& in) {
  if (!in.device_state) {
    out.null(STEPTRACE_ROW("/device_state"), in.device_state.why());
    return;
  }
  const DeviceStateSummary& d = *in.device_state;
  out.begin_object(STEPTRACE_ROW("/device_state")).field(STEPTRACE_ROW("/device_state/samples"), d.samples);
  const char* not_read = reason_text(Reason::nvml_no_reading);
  out.field(STEPTRACE_ROW("/device_state/power_w_mean"), d.power_w_mean, not_read)
      .field(STEPTRACE_ROW("/device_state/power_w_max"), d.power_w_max, not_read);
  out.field(STEPTRACE_ROW("/device_state/sm_clock_mhz_mean"), d.sm_clock_mhz_mean, not_read)
      .field(STEPTRACE_ROW("/device_state/sm_clock_mhz_min"), d.sm_clock_mhz_min, not_read);
  out.field(STEPTRACE_ROW("/device_state/temperature_c_max"), d.temperature_c_max, not_read);
  if (d.clock_event_reasons) {
    out.begin_array(STEPTRACE_ROW("/device_state/clock_event_reasons"));
    for (const auto& r : clock_event_reason_names(*d.clock_event_reasons)) out.element(r);
    out.end_array();
  } else {
    out.null(STEPTRACE_ROW("/device_state/clock_event_reasons"), reason_text(Reason::nvml_no_clock_reasons));
  }
  out.end_object();
}

/// Whether the step was traced, and its GPU attribution.
inline void write_gpu(LineOut& out, const StepLineInput& in) {
  const HostStepMetrics& host = in.host;
  out.field(STEPTRACE_ROW("/traced"), in.gpu.has_value());
  if (!in.gpu) {
    out.null(STEPTRACE_ROW("/gpu"), in.gpu.why());
    return;
  }
  const StepGpu& g = *in.gpu;
  out.begin_object(STEPTRACE_ROW("/gpu"));
  out.field(STEPTRACE_ROW("/gpu/complete"), g.complete)
      .field(STEPTRACE_ROW("/gpu/missing_launches"), g.missing_launches);
  out.field(STEPTRACE_ROW("/gpu/busy_ms"), ns_to_ms(g.busy_ns));
  out.field(STEPTRACE_ROW("/gpu/window_ms"), ns_to_ms(gpu_window_ns(g, host.step_time_ns)));
  out.field(STEPTRACE_ROW("/gpu/idle_ms"), ns_to_ms(gpu_window_ns(g, host.step_time_ns) - g.busy_ns));  // null where a check left it out
  out.field(STEPTRACE_ROW("/gpu/kernel_ms"), ns_to_ms(g.kernel_ns)).field(STEPTRACE_ROW("/gpu/kernels"), g.kernels);
  // No kernel, no efficiency: null, never 0.
  out.field(STEPTRACE_ROW("/gpu/sm_efficiency"), g.kernels ? std::optional<double>(g.sm_efficiency) : std::nullopt, reason_text(Reason::step_no_kernel));
  out.field(STEPTRACE_ROW("/gpu/invariant_exclusions"), in.excluded.size());
  out.field(STEPTRACE_ROW("/gpu/nccl_exposed_ms"), ns_to_ms(g.nccl_exposed_ns));
  out.field(STEPTRACE_ROW("/gpu/nccl_overlap"), g.nccl_ns > 0 ? std::optional<double>(1.0 - static_cast<double>(g.nccl_exposed_ns) / static_cast<double>(g.nccl_ns)) : std::nullopt,
            reason_text(Reason::step_no_nccl_kernel));
  out.begin_object(STEPTRACE_ROW("/gpu/nccl_collectives"));
  for (const auto& [op, t] : g.nccl_collectives) out.begin_object(op).field(STEPTRACE_ROW("/gpu/nccl_collectives/*/ms"), ns_to_ms(t.first)).field(STEPTRACE_ROW("/gpu/nccl_collectives/*/kernels"), t.second).end_object();
  out.end_object();
  out.field(STEPTRACE_ROW("/gpu/late_records"), g.late_records)
      .field(STEPTRACE_ROW("/gpu/unattributed_records"), g.unattributed_records);
  out.field(STEPTRACE_ROW("/gpu/launched_untraced_records"), g.launched_untraced_records);
  out.field(STEPTRACE_ROW("/gpu/dropped_records"), in.gpu_dropped_records);
  out.field(STEPTRACE_ROW("/gpu/excluded_records"), g.excluded_records);
  out.begin_object(STEPTRACE_ROW("/gpu/excluded"));
  for (int i = 0; i < kImplausibleKinds; ++i) out.field(implausible_name(static_cast<Implausible>(i + 1)), g.excluded[i]);
  out.end_object();
  out.field(STEPTRACE_ROW("/gpu/implausible_phases"), g.implausible_phases);
  if (g.before_first_step_records)
    out.field(STEPTRACE_ROW("/gpu/before_first_step_ms"), ns_to_ms(g.before_first_step_ns))
        .field(STEPTRACE_ROW("/gpu/before_first_step_records"), g.before_first_step_records);
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
  out.field(STEPTRACE_ROW("/peak_memory_allocated"), peak_allocated, no_sample);
  out.optional_text(STEPTRACE_ROW("/peak_memory_source"), peak_source, no_sample);
  out.begin_object(STEPTRACE_ROW("/memory"));
  out.field(STEPTRACE_ROW("/memory/device_used_peak_bytes"), in.memory.device_used_peak_bytes, no_sample);
  out.field(STEPTRACE_ROW("/memory/device_total_bytes"), in.memory.device_total_bytes, no_sample);
  out.field(STEPTRACE_ROW("/memory/samples"), in.memory.samples);
  if (step.allocator) {
    const AllocatorStats& a = *step.allocator;
    const char* not_given = reason_text(Reason::allocator_field_missing);
    out.begin_object(STEPTRACE_ROW("/memory/allocator"))
        .field(STEPTRACE_ROW("/memory/allocator/allocated_bytes"), a.allocated_bytes, not_given)
        .field(STEPTRACE_ROW("/memory/allocator/reserved_bytes"), a.reserved_bytes, not_given)
        .field(STEPTRACE_ROW("/memory/allocator/peak_allocated_bytes"), a.peak_allocated_bytes, not_given)
        .field(STEPTRACE_ROW("/memory/allocator/peak_reserved_bytes"), a.peak_reserved_bytes, not_given)
        .field(STEPTRACE_ROW("/memory/allocator/alloc_retries"), a.alloc_retries, not_given)
        .field(STEPTRACE_ROW("/memory/allocator/ooms"), a.ooms, not_given)
        .end_object();
  } else {
    out.null(STEPTRACE_ROW("/memory/allocator"), reason_text(Reason::no_allocator_hook));
  }
  out.end_object();
}

/// Estimated MFU and its inputs.
inline void write_mfu(LineOut& out, const StepLineInput& in) {
  out.field(STEPTRACE_ROW("/estimated_mfu"), in.mfu.value);
  out.begin_object(STEPTRACE_ROW("/mfu_inputs"));
  out.field(STEPTRACE_ROW("/mfu_inputs/flops_per_token"), in.flops_per_token > 0 ? std::optional<double>(in.flops_per_token) : std::nullopt,
            reason_text(Reason::flops_per_token_unset));
  out.field(STEPTRACE_ROW("/mfu_inputs/peak_flops"), in.peak.flops_per_second, in.peak.null_reason);
  out.field(STEPTRACE_ROW("/mfu_inputs/peak_source"), in.peak.flops_per_second ? in.peak.source : in.peak.null_reason);
  out.field(STEPTRACE_ROW("/mfu_inputs/above_one"), in.mfu.above_one);
  const ParallelSizes& par = in.mfu.parallel;
  out.begin_object(STEPTRACE_ROW("/mfu_inputs/model_parallel"));
  out.field(STEPTRACE_ROW("/mfu_inputs/model_parallel/tensor"), par.tensor)
      .field(STEPTRACE_ROW("/mfu_inputs/model_parallel/pipeline"), par.pipeline)
      .field(STEPTRACE_ROW("/mfu_inputs/model_parallel/context"), par.context);
  out.end_object();
  out.field(STEPTRACE_ROW("/mfu_inputs/model_parallel_size"), static_cast<int64_t>(par.model_parallel()));
  out.field(STEPTRACE_ROW("/mfu_inputs/data_parallel_size"), in.mfu.data_parallel_size);
  out.field(STEPTRACE_ROW("/mfu_inputs/tokens_per_second_per_gpu"), in.mfu.tokens_per_second_per_gpu,
            reason_text(Reason::tokens_unknown));
  out.end_object();
}

/// The step's stream markers (core/markers.hpp): GPU evidence of its own, traced or not.
inline void write_markers(LineOut& out, const StepLineInput& in) {
  if (!in.markers) {
    out.null(STEPTRACE_ROW("/gpu_markers"), in.markers.why());
    return;
  }
  const StepMarkers& m = *in.markers;
  const double step_ms = ns_to_ms(in.host.step_time_ns);
  out.begin_object(STEPTRACE_ROW("/gpu_markers"));
  out.field(STEPTRACE_ROW("/gpu_markers/points"), m.points);
  out.field(STEPTRACE_ROW("/gpu_markers/pending_ms"), ns_to_ms(m.pending_ns));
  out.field(STEPTRACE_ROW("/gpu_markers/pending_share"), step_ms > 0 ? std::optional<double>(ns_to_ms(m.pending_ns) / step_ms) : std::nullopt,
            reason_text(Reason::step_no_time));
  out.field(STEPTRACE_ROW("/gpu_markers/span_ms"), m.span_ns ? std::optional<double>(ns_to_ms(*m.span_ns)) : std::nullopt,
            reason_text(Reason::markers_span_unmarked));
  out.field(STEPTRACE_ROW("/gpu_markers/end_lag_ms"), m.end_lag_ns ? std::optional<double>(ns_to_ms(*m.end_lag_ns)) : std::nullopt,
            reason_text(Reason::markers_end_unmarked));
  out.field(STEPTRACE_ROW("/gpu_markers/max_lag_ms"), ns_to_ms(m.max_lag_ns));
  out.field(STEPTRACE_ROW("/gpu_markers/agrees_with_records"), in.markers_agree,
            !in.gpu        ? reason_text(Reason::markers_not_traced)
            : !m.span_ns   ? reason_text(Reason::markers_span_unmarked, ": nothing whole to compare")
                           : reason_text(Reason::records_incomplete));
  out.begin_object(STEPTRACE_ROW("/gpu_markers/phases"));
  for (const auto& [id, p] : m.phases) {
    out.begin_object(phase_name(id));
    out.field(STEPTRACE_ROW("/gpu_markers/phases/*/span_ms"), ns_to_ms(p.span_ns))
        .field(STEPTRACE_ROW("/gpu_markers/phases/*/end_lag_ms"), ns_to_ms(p.end_lag_ns))
        .field(STEPTRACE_ROW("/gpu_markers/phases/*/scopes"), p.count);
    out.end_object();
  }
  out.end_object();
  out.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
