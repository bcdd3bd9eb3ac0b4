// steptrace/core/line_sections.hpp - one writer per section of a step's line, in the line's order
// (core/line_fields.hpp declares what each writes); the GPU and device sections are in line_sections_gpu.hpp, the writer
// itself (LineOut) in line_out.hpp. Every value goes through LineOut, every null with its reason.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "line_out.hpp"
#include "line_sections_gpu.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Rank, host, process, run and job: the identity the step line and the event records share (the end,
/// stall and resumed records: core/end_line.hpp's write_event_identity), written through record R's rows.
template <Record R>
inline void write_run_identity(LineOut& out, const RunInfo& run) {
  using line_field::Row;
  using line_field::rows::index_of;
  out.field(Row<R, index_of<R>("/rank")>{}, run.rank)
      .field(Row<R, index_of<R>("/local_rank")>{}, run.local_rank)
      .field(Row<R, index_of<R>("/world_size")>{}, run.world_size);
  out.field(Row<R, index_of<R>("/hostname")>{}, run.hostname).field(Row<R, index_of<R>("/pid")>{}, run.pid);
  out.field(Row<R, index_of<R>("/run_id")>{}, run.run_id);
  out.optional_text(Row<R, index_of<R>("/job_id")>{}, run.job_id, run.job_id_source);
}

/// Schema, step, time of day, rank and host, the device (or why none).
inline void write_identity(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  const RunInfo& run = *in.run;
  out.field(STEPTRACE_ROW("/schema"), kSchemaVersion);
  out.field(STEPTRACE_ROW("/global_step"), step.index);
  out.field(STEPTRACE_ROW("/timestamp"), details::iso8601_utc(step.begin_unix_ns));
  out.field(STEPTRACE_ROW("/start_unix_ms"), static_cast<double>(step.begin_unix_ns) / 1e6);
  write_run_identity<Record::step>(out, run);
  if (!run.device) {
    out.null(STEPTRACE_ROW("/device"), run.device_null_reason);
    return;
  }
  out.begin_object(STEPTRACE_ROW("/device"))
      .field(STEPTRACE_ROW("/device/index"), run.device->index)
      .field(STEPTRACE_ROW("/device/name"), run.device->name)
      .field(STEPTRACE_ROW("/device/sm_count"), run.device->sm_count)
      .field(STEPTRACE_ROW("/device/compute_capability"), std::to_string(run.device->cc_major) + "." + std::to_string(run.device->cc_minor))
      .field(STEPTRACE_ROW("/device/uuid"), run.device->uuid)
      .field(STEPTRACE_ROW("/device/pci_bus_id"), run.device->pci_bus_id)
      .end_object();
}

/// Step time, throughput and the built-in phases' host time.
inline void write_time(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  const HostStepMetrics& host = in.host;
  out.field(STEPTRACE_ROW("/step_time_ms"), ns_to_ms(host.step_time_ns));
  out.field(STEPTRACE_ROW("/step_time_basis"), step.end_is_next_step && step.own_end_ns() == step.end_ns ? "next_step_start" : "scope_end");
  out.field(STEPTRACE_ROW("/step_scope_ms"), ns_to_ms(host.scope_time_ns));
  out.field(STEPTRACE_ROW("/step_interval_ms"), ns_to_ms(host.interval_ns));
  const std::string no_tokens = reason_text(Reason::tokens_unknown);
  const std::string no_samples = reason_text(Reason::samples_unknown);
  out.field(STEPTRACE_ROW("/tokens"), step.tokens, no_tokens);
  const auto no_rate = [&](const std::optional<double>& count, const std::string& unknown) {
    if (!count) return unknown;
    char b[96];
    std::snprintf(b, sizeof b, "%.6g per %.6g ms", *count, ns_to_ms(host.step_time_ns));
    return reason_text(Reason::rate_not_finite, std::string(b) + ")");
  };
  out.field(STEPTRACE_ROW("/tokens_per_second"), host.tokens_per_second, no_rate(step.tokens, no_tokens));
  out.field(STEPTRACE_ROW("/samples"), step.samples, no_samples);
  out.field(STEPTRACE_ROW("/samples_per_second"), host.samples_per_second, no_rate(step.samples, no_samples));
  out.field(STEPTRACE_ROW("/tokens_total"), in.tokens_total);
  out.field(STEPTRACE_ROW("/samples_total"), in.samples_total);
  write_phase_field(out, in, STEPTRACE_ROW("/dataloader_wait_ms"), phase_tag::input);
  write_phase_field(out, in, STEPTRACE_ROW("/h2d_time_ms"), phase_tag::h2d);
  write_phase_field(out, in, STEPTRACE_ROW("/forward_time_ms"), phase_tag::forward);
  write_phase_field(out, in, STEPTRACE_ROW("/backward_time_ms"), phase_tag::backward);
  write_phase_field(out, in, STEPTRACE_ROW("/optimizer_time_ms"), phase_tag::optimizer);
  out.field(STEPTRACE_ROW("/untracked_time_ms"), ns_to_ms(host.untracked_ns));
}

/// Why a recorded scalar is null although it was recorded: its last value is not a finite number (a
/// diverged run must not read as "not recorded"); "" when it is finite.
inline std::string nonfinite_reason(const StepRecord& step, const std::string& name, double v) {
  if (std::isfinite(v)) return {};
  int bad = 0, all = 0;
  for (const auto& [n, x] : step.scalars)
    if (n == name) ++all, bad += !std::isfinite(x);
  return reason_text(Reason::scalar_not_finite) + std::string(std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf") + " (" +
         std::to_string(bad) + " of the step's " + std::to_string(all) + " values were not finite: the run may have diverged)";
}

/// loss, grad_norm, overflow_count, and every other recorded scalar (its last value).
inline void write_scalars(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  const auto known = [&](auto row) {  // a scalar with a top-level field of its own
    const std::string name(row.name());
    const auto v = scalar(step, name);
    const std::string why = v ? nonfinite_reason(step, name, *v) : reason_text(Reason::not_recorded, "\"" + name + "\", v))");
    out.field(row, why.empty() ? v : std::nullopt, why);
  };
  known(STEPTRACE_ROW("/loss"));
  known(STEPTRACE_ROW("/grad_norm"));
  known(STEPTRACE_ROW("/overflow_count"));
  out.begin_object(STEPTRACE_ROW("/scalars"));
  std::vector<std::pair<std::string, double>> last_values;  // each name once, with its last value
  for (const auto& entry : step.scalars) {
    const std::string& name = entry.first;
    if (name == "loss" || name == "grad_norm" || name == "overflow_count") continue;
    auto it = std::find_if(last_values.begin(), last_values.end(), [&](const auto& p) { return p.first == name; });
    if (it != last_values.end()) it->second = entry.second;
    else last_values.push_back(entry);
  }
  for (const auto& [name, v] : last_values)
    out.field(name, std::isfinite(v) ? std::optional<double>(v) : std::nullopt, nonfinite_reason(step, name, v));
  out.end_object();
}

/// GPU work outside every step (between two steps, after the last): the `gpu` member of the open object,
/// `gpu_row` its row's handle (`/between_steps/gpu`, the end record's `/after_last_step/gpu`). Its
/// members are the step line's `between_steps.gpu` rows in both (the end record's tree links there:
/// core/tier_leaves.hpp, RowTree::end()).
template <class GpuRow>
inline void write_between_gpu(LineOut& out, GpuRow gpu_row, const Measured<BetweenGpu>& gpu) {
  if (!gpu) {
    out.null(gpu_row, gpu.why());
    return;
  }
  const BetweenGpu& g = *gpu;
  out.begin_object(gpu_row);
  out.field(STEPTRACE_ROW("/between_steps/gpu/busy_ms"), ns_to_ms(g.busy_ns))
      .field(STEPTRACE_ROW("/between_steps/gpu/kernel_ms"), ns_to_ms(g.kernel_ns))
      .field(STEPTRACE_ROW("/between_steps/gpu/kernels"), g.kernels);
  out.field(STEPTRACE_ROW("/between_steps/gpu/copies"), g.copies).field(STEPTRACE_ROW("/between_steps/gpu/copy_bytes"), g.copy_bytes);
  out.field(STEPTRACE_ROW("/between_steps/gpu/complete"), g.complete)
      .field(STEPTRACE_ROW("/between_steps/gpu/missing_launches"), g.missing_launches)
      .field(STEPTRACE_ROW("/between_steps/gpu/excluded_records"), g.excluded_records);
  out.begin_array(STEPTRACE_ROW("/between_steps/gpu/top_kernels"));
  for (const auto& t : g.top_kernels)
    out.begin_element()
        .field(STEPTRACE_ROW("/between_steps/gpu/top_kernels/*/name"), t.name)
        .field(STEPTRACE_ROW("/between_steps/gpu/top_kernels/*/ms"), ns_to_ms(t.total_ns))
        .field(STEPTRACE_ROW("/between_steps/gpu/top_kernels/*/calls"), t.calls)
        .end_object();
  out.end_array();
  out.end_object();
}

/// What ran between the previous step's scope end and this step's begin: its time, the phase scopes
/// that ended in it, and the GPU work launched in it (apart from every step's sums).
inline void write_between_steps(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  if (step.index == 0) {
    out.null(STEPTRACE_ROW("/between_steps"), reason_text(Reason::first_step_between));
    return;
  }
  out.begin_object(STEPTRACE_ROW("/between_steps"));
  out.field(STEPTRACE_ROW("/between_steps/host_ms"), ns_to_ms(step.between_ns()));
  out.begin_object(STEPTRACE_ROW("/between_steps/phases"));
  std::map<std::string, std::pair<int64_t, uint32_t>> phases;  // name -> (time, scopes)
  for (const PhaseSpan& s : step.between_spans) {
    auto& p = phases[line_phase_key(s.phase)];
    if (!s.nested_in_same) p.first += s.end_ns - s.begin_ns;
    ++p.second;
  }
  for (const auto& [name, p] : phases) out.begin_object(name).field(STEPTRACE_ROW("/between_steps/phases/*/host_ms"), ns_to_ms(p.first)).field(STEPTRACE_ROW("/between_steps/phases/*/count"), p.second).end_object();
  out.end_object();
  write_between_gpu(out, STEPTRACE_ROW("/between_steps/gpu"), in.between_gpu);
  out.end_object();
}

/// A phase's copies (or memsets) of one kind: its object and members through their rows.
template <class Object, class Bytes, class Ms, class Count, class Rate>
inline void write_copy_kind(LineOut& out, const CopyTotals& c, Object object, Bytes bytes, Ms ms, Count count, Rate rate) {
  out.begin_object(object);
  out.field(bytes, c.bytes).field(ms, ns_to_ms(c.total_ns)).field(count, c.count);
  out.field(rate, c.total_ns > 0 ? std::optional<double>(static_cast<double>(c.bytes) / static_cast<double>(c.total_ns)) : std::nullopt,
            reason_text(Reason::copies_untimed));
  out.end_object();
}

/// A phase's GPU work: kernels, copies, its top kernels and its counters.
inline void write_phase_gpu(LineOut& out, const StepLineInput& in, PhaseId id, const PhaseGpu& pg) {
  const char* no_kernel = reason_text(Reason::phase_no_kernel);
  out.begin_object(STEPTRACE_ROW("/phases/*/gpu"));
  out.field(STEPTRACE_ROW("/phases/*/gpu/kernel_ms"), ns_to_ms(pg.kernel_ns))
      .field(STEPTRACE_ROW("/phases/*/gpu/busy_ms"), ns_to_ms(pg.busy_ns))
      .field(STEPTRACE_ROW("/phases/*/gpu/kernels"), pg.kernels);
  out.field(STEPTRACE_ROW("/phases/*/gpu/sm_efficiency"), pg.kernels ? std::optional<double>(pg.sm_efficiency) : std::nullopt, no_kernel);
  out.field(STEPTRACE_ROW("/phases/*/gpu/occupancy"), pg.kernels && pg.occupancy > 0 ? std::optional<double>(pg.occupancy) : std::nullopt,
            pg.kernels ? reason_text(Reason::phase_occupancy_unknown)
                       : no_kernel);
  for (int k = 0; k < kCopyKindCount; ++k) {
    const CopyTotals& c = pg.copies[k];
    if (!c.count) continue;
    // Each kind's object and members through its rows (the kind's name is its row's last segment).
#define STEPTRACE_COPY_KIND(kind)                                                                                       \
  case CopyKind::kind:                                                                                                  \
    write_copy_kind(out, c, STEPTRACE_ROW("/phases/*/gpu/" #kind), STEPTRACE_ROW("/phases/*/gpu/" #kind "/bytes"),      \
                    STEPTRACE_ROW("/phases/*/gpu/" #kind "/ms"), STEPTRACE_ROW("/phases/*/gpu/" #kind "/count"),        \
                    STEPTRACE_ROW("/phases/*/gpu/" #kind "/gb_per_second"));                                            \
    break;
    switch (static_cast<CopyKind>(k)) {
      STEPTRACE_COPY_KIND(h2d)
      STEPTRACE_COPY_KIND(d2h)
      STEPTRACE_COPY_KIND(d2d)
      STEPTRACE_COPY_KIND(h2h)
      STEPTRACE_COPY_KIND(p2p)
      STEPTRACE_COPY_KIND(other)
      STEPTRACE_COPY_KIND(memset)
    }
#undef STEPTRACE_COPY_KIND
  }
  out.begin_array(STEPTRACE_ROW("/phases/*/gpu/top_kernels"));
  for (const auto& t : pg.top_kernels)
    out.begin_element()
        .field(STEPTRACE_ROW("/phases/*/gpu/top_kernels/*/name"), t.name)
        .field(STEPTRACE_ROW("/phases/*/gpu/top_kernels/*/ms"), ns_to_ms(t.total_ns))
        .field(STEPTRACE_ROW("/phases/*/gpu/top_kernels/*/calls"), t.calls)
        .field(STEPTRACE_ROW("/phases/*/gpu/top_kernels/*/sm_efficiency"), t.sm_efficiency)
        .end_object();
  out.end_array();
  auto pc = in.phase_counters.find(id);
  if (pc != in.phase_counters.end()) write_phase_counters(out, pc->second, in.counter_values_excluded);
  out.end_object();
}

/// Per phase: host time, and the GPU work the phase launched.
inline void write_phases(LineOut& out, const StepLineInput& in) {
  const HostStepMetrics& host = in.host;
  std::vector<PhaseId> ids;
  for (const auto& kv : host.phases) ids.push_back(kv.first);
  if (in.gpu)
    for (const auto& kv : in.gpu->phases)
      if (!host.phases.count(kv.first)) ids.push_back(kv.first);
  out.begin_object(STEPTRACE_ROW("/phases"));
  for (PhaseId id : ids) {
    out.begin_object(line_phase_key(id));
    auto hp = host.phases.find(id);
    if (hp != host.phases.end()) {
      out.field(STEPTRACE_ROW("/phases/*/host_ms"), ns_to_ms(hp->second.total_ns));  // null where a check left it out
      const std::string* left = out.left_out_reason("host_ms");
      out.field(STEPTRACE_ROW("/phases/*/self_ms"), left ? std::nullopt : std::optional<double>(ns_to_ms(hp->second.self_ns)),
                left ? reason_text(Reason::host_ms_left_out, *left) : std::string());
      out.field(STEPTRACE_ROW("/phases/*/count"), hp->second.count);
      if (hp->second.other_thread_count) out.field(STEPTRACE_ROW("/phases/*/other_thread_count"), hp->second.other_thread_count);
    }
    if (in.gpu) {
      auto it = in.gpu->phases.find(id);
      if (it != in.gpu->phases.end()) write_phase_gpu(out, in, id, it->second);  // null where a check left it out
    }
    out.end_object();
  }
  out.end_object();
}

/// The bottleneck label, its reason and evidence.
inline void write_diagnosis(LineOut& out, const StepLineInput& in) {
  const std::string no_gpu = in.host.step_time_ns <= 0 ? std::string(reason_text(Reason::step_no_time))
                             : in.gpu ? reason_text(Reason::step_no_kernel)
                                      : reason_text(Reason::step_no_attribution, in.gpu.why() + ")");
  out.begin_object(STEPTRACE_ROW("/diagnosis"));
  out.field(STEPTRACE_ROW("/diagnosis/label"), bottleneck_name(in.diagnosis.label))
      .field(STEPTRACE_ROW("/diagnosis/reason"), in.diagnosis.reason);
  out.begin_object(STEPTRACE_ROW("/diagnosis/evidence"));
  out.field(STEPTRACE_ROW("/diagnosis/evidence/input_share"), in.shares.input)
      .field(STEPTRACE_ROW("/diagnosis/evidence/h2d_share"), in.shares.h2d);
  out.field(STEPTRACE_ROW("/diagnosis/evidence/comm_exposed_share"), in.shares.comm_exposed, no_gpu);
  out.field(STEPTRACE_ROW("/diagnosis/evidence/gpu_utilization"), in.shares.gpu_utilization, no_gpu);
  out.field(STEPTRACE_ROW("/diagnosis/evidence/sm_efficiency"), in.shares.sm_efficiency, no_gpu);
  out.end_object();
  out.begin_array(STEPTRACE_ROW("/diagnosis/warnings"));
  for (const auto& warning : in.diagnosis.warnings) out.element(warning);
  out.end_array();
  out.field(STEPTRACE_ROW("/diagnosis/basis"), diagnosis_basis_name(in.diagnosis.basis));
  out.field(STEPTRACE_ROW("/diagnosis/carried_from_step"), in.diagnosis.carried_from_step,
            in.diagnosis.basis == DiagnosisBasis::traced ? reason_text(Reason::evidence_own_attribution)
                                                         : reason_text(Reason::evidence_not_carried));
  out.end_object();
}

/// The window summary of the steps since the previous line (log_every > 1).
inline void write_window(LineOut& out, const StepLineInput& in) {
  if (!in.window) return;
  const WindowSummary& s = *in.window;
  out.begin_object(STEPTRACE_ROW("/window"));
  out.field(STEPTRACE_ROW("/window/steps"), s.steps)
      .field(STEPTRACE_ROW("/window/step_time_ms_mean"), s.step_time_ms_mean)
      .field(STEPTRACE_ROW("/window/step_time_ms_min"), s.step_time_ms_min)
      .field(STEPTRACE_ROW("/window/step_time_ms_max"), s.step_time_ms_max)
      .field(STEPTRACE_ROW("/window/tokens_per_second_mean"), s.tokens_per_second_mean, reason_text(Reason::window_no_tokens));
  out.end_object();
}

/// What was dropped or ignored, and warnings.
inline void write_bookkeeping(LineOut& out, const StepLineInput& in) {
  const StepRecord& step = *in.step;
  out.begin_object(STEPTRACE_ROW("/dropped"));
  out.field(STEPTRACE_ROW("/dropped/steps_total"), in.steps_dropped_total)
      .field(STEPTRACE_ROW("/dropped/lines_unwritten_total"), in.lines_unwritten_total)
      .field(STEPTRACE_ROW("/dropped/phase_scopes"), step.spans_dropped)
      .field(STEPTRACE_ROW("/dropped/scalars"), step.scalars_dropped)
      .field(STEPTRACE_ROW("/dropped/phase_names_total"), static_cast<uint64_t>(phase_names_rejected()));
  out.end_object();
  out.field(STEPTRACE_ROW("/ignored_step_scopes"), step.ignored_step_scopes);
  out.field(STEPTRACE_ROW("/phase_scopes_outside_step"), step.spans_outside_step);
  out.begin_array(STEPTRACE_ROW("/warnings"));
  for (const auto& s : in.warnings) out.element(s);
  if (in.mfu.above_one) out.element("estimated_mfu > 1: flops_per_token or peak_flops is wrong");
  out.end_array();
}

STEPTRACE_END_NAMESPACE  // steptrace
