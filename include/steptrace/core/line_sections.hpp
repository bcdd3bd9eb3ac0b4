// steptrace/core/line_sections.hpp - one writer per section of a step's line, in the line's order
// (docs/schema.md follows it); the GPU and device sections are in line_sections_gpu.hpp, the writer
// itself (LineOut) in line_out.hpp. Every null goes through LineOut with its reason.
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

STEPTRACE_BEGIN_NAMESPACE

/// Schema, step, time of day, rank and host, the device (or why none).
inline void write_identity(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  const RunInfo& run = *in.run;
  w.field("schema", kSchemaVersion);
  w.field("global_step", step.index);
  w.field("timestamp", details::iso8601_utc(step.begin_unix_ns));
  w.field("start_unix_ms", static_cast<double>(step.begin_unix_ns) / 1e6);
  w.field("rank", run.rank).field("local_rank", run.local_rank).field("world_size", run.world_size);
  w.field("hostname", run.hostname).field("pid", run.pid);
  w.field("run_id", run.run_id);
  out.optional_text("job_id", run.job_id, run.job_id_source);
  w.key("device");
  if (run.device) {
    w.begin_object()
        .field("index", run.device->index)
        .field("name", run.device->name)
        .field("sm_count", run.device->sm_count)
        .field("compute_capability", std::to_string(run.device->cc_major) + "." + std::to_string(run.device->cc_minor))
        .field("uuid", run.device->uuid)
        .field("pci_bus_id", run.device->pci_bus_id)
        .end_object();
  } else {
    w.null();
    out.nulls.emplace_back("device", run.device_null_reason);
  }
}

/// Step time, throughput and the built-in phases' host time.
inline void write_time(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  const HostStepMetrics& host = in.host;
  // Time and throughput.
  w.field("step_time_ms", ns_to_ms(host.step_time_ns));
  w.field("step_time_basis", step.end_is_next_step && step.own_end_ns() == step.end_ns ? "next_step_start" : "scope_end");
  w.field("step_scope_ms", ns_to_ms(host.scope_time_ns));
  w.field("step_interval_ms", ns_to_ms(host.interval_ns));
  const std::string no_tokens = "tokens per step unknown (set tokens_per_step or TRACE_STEP(tokens))";
  const std::string no_samples = "samples per step unknown (set samples_per_step or TRACE_STEP(tokens, samples))";
  out.optional_field("tokens", step.tokens, no_tokens);
  const auto no_rate = [&](const std::optional<double>& count, const std::string& unknown) {
    if (!count) return unknown;
    char b[96];
    std::snprintf(b, sizeof b, "%.6g per %.6g ms", *count, ns_to_ms(host.step_time_ns));
    return "the count over the step time is not a finite number (" + std::string(b) + ")";
  };
  out.optional_field("tokens_per_second", host.tokens_per_second, no_rate(step.tokens, no_tokens));
  out.optional_field("samples", step.samples, no_samples);
  out.optional_field("samples_per_second", host.samples_per_second, no_rate(step.samples, no_samples));
  out.optional_field("tokens_total", in.tokens_total, in.tokens_total_reason);
  out.optional_field("samples_total", in.samples_total, in.samples_total_reason);
  out.phase_field(in, "dataloader_wait_ms", phase_tag::input);
  out.phase_field(in, "h2d_time_ms", phase_tag::h2d);
  out.phase_field(in, "forward_time_ms", phase_tag::forward);
  out.phase_field(in, "backward_time_ms", phase_tag::backward);
  out.phase_field(in, "optimizer_time_ms", phase_tag::optimizer);
  w.field("untracked_time_ms", ns_to_ms(host.untracked_ns));
}

/// Why a recorded scalar is null although it was recorded: its last value is not a finite number (a
/// diverged run must not read as "not recorded"); "" when it is finite.
inline std::string nonfinite_reason(const StepRecord& step, const std::string& name, double v) {
  if (std::isfinite(v)) return {};
  int bad = 0, all = 0;
  for (const auto& [n, x] : step.scalars)
    if (n == name) ++all, bad += !std::isfinite(x);
  return std::string("the last value recorded was ") + (std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf") + " (" +
         std::to_string(bad) + " of the step's " + std::to_string(all) + " values were not finite: the run may have diverged)";
}

/// loss, grad_norm, overflow_count, and every other recorded scalar (its last value).
inline void write_scalars(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  // Training scalars.
  for (const char* name : {"loss", "grad_norm", "overflow_count"}) {
    const auto v = scalar(step, name);
    const std::string why = v ? nonfinite_reason(step, name, *v) : "not recorded (steptrace::record(\"" + std::string(name) + "\", v))";
    out.optional_field(name, why.empty() ? v : std::nullopt, why);
  }
  w.key("scalars").begin_object();
  std::vector<std::pair<std::string, double>> last_values;  // each name once, with its last value
  for (const auto& entry : step.scalars) {
    const std::string& name = entry.first;
    if (name == "loss" || name == "grad_norm" || name == "overflow_count") continue;
    auto it = std::find_if(last_values.begin(), last_values.end(), [&](const auto& p) { return p.first == name; });
    if (it != last_values.end()) it->second = entry.second;
    else last_values.push_back(entry);
  }
  for (const auto& [name, v] : last_values) {
    w.field(name, v);  // a non-finite value is written null: say why
    if (!std::isfinite(v)) out.nulls.emplace_back("scalars." + name, nonfinite_reason(step, name, v));
  }
  w.end_object();
}

/// GPU work outside every step (between two steps, after the last): `at` is its field's path.
inline void write_between_gpu(LineOut& out, const std::string& at, const std::optional<BetweenGpu>& gpu, const std::string& reason) {
  details::JsonWriter& w = out.w;
  w.key("gpu");
  if (!gpu) {
    w.null();
    out.nulls.emplace_back(at, reason);
    return;
  }
  const BetweenGpu& g = *gpu;
  w.begin_object();
  w.field("busy_ms", ns_to_ms(g.busy_ns)).field("kernel_ms", ns_to_ms(g.kernel_ns)).field("kernels", g.kernels);
  w.field("copies", g.copies).field("copy_bytes", g.copy_bytes);
  w.field("complete", g.complete).field("missing_launches", g.missing_launches).field("excluded_records", g.excluded_records);
  w.key("top_kernels").begin_array();
  for (const auto& t : g.top_kernels) w.begin_object().field("name", t.name).field("ms", ns_to_ms(t.total_ns)).field("calls", t.calls).end_object();
  w.end_array();
  w.end_object();
}

/// What ran between the previous step's scope end and this step's begin: its time, the phase scopes
/// that ended in it, and the GPU work launched in it (apart from every step's sums).
inline void write_between_steps(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  w.key("between_steps");
  if (step.index == 0) {
    w.null();
    out.nulls.emplace_back("between_steps", "the first step: GPU work launched before it is gpu.before_first_step_ms");
    return;
  }
  w.begin_object();
  w.field("host_ms", ns_to_ms(step.between_ns()));
  w.key("phases").begin_object();
  std::map<std::string, std::pair<int64_t, uint32_t>> phases;  // name -> (time, scopes)
  for (const PhaseSpan& s : step.between_spans) {
    auto& p = phases[line_phase_key(s.phase)];
    if (!s.nested_in_same) p.first += s.end_ns - s.begin_ns;
    ++p.second;
  }
  for (const auto& [name, p] : phases) w.key(name).begin_object().field("host_ms", ns_to_ms(p.first)).field("count", p.second).end_object();
  w.end_object();
  write_between_gpu(out, "between_steps.gpu", in.between_gpu, in.between_gpu_null_reason);
  w.end_object();
}

/// Per phase: host time, and the GPU work the phase launched.
inline void write_phases(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const HostStepMetrics& host = in.host;
  // Per-phase detail: host time, and the GPU work the phase launched.
  std::vector<PhaseId> ids;
  for (const auto& kv : host.phases) ids.push_back(kv.first);
  if (in.gpu)
    for (const auto& kv : in.gpu->phases)
      if (!host.phases.count(kv.first)) ids.push_back(kv.first);
  w.key("phases").begin_object();
  for (PhaseId id : ids) {
    w.key(line_phase_key(id)).begin_object();
    auto hp = host.phases.find(id);
    const std::string at = "phases." + line_phase_key(id);
    if (hp != host.phases.end()) {
      const bool excluded = in.excluded.count(at + ".host_ms") != 0;
      w.field("host_ms", excluded ? std::nullopt : std::optional<double>(ns_to_ms(hp->second.total_ns)));
      w.field("self_ms", excluded ? std::nullopt : std::optional<double>(ns_to_ms(hp->second.self_ns)));
      if (excluded) out.nulls.emplace_back(at + ".self_ms", "host_ms was left out: " + in.excluded.at(at + ".host_ms"));
      w.field("count", hp->second.count);
      if (hp->second.other_thread_count) w.field("other_thread_count", hp->second.other_thread_count);
    }
    const PhaseGpu* pg = nullptr;
    if (in.gpu) {
      auto it = in.gpu->phases.find(id);
      if (it != in.gpu->phases.end()) pg = &it->second;
    }
    if (pg && in.excluded.count(at + ".gpu")) {
      w.key("gpu").null();
    } else if (pg) {
      w.key("gpu").begin_object();
      w.field("kernel_ms", ns_to_ms(pg->kernel_ns)).field("busy_ms", ns_to_ms(pg->busy_ns)).field("kernels", pg->kernels);
      w.field("sm_efficiency", pg->kernels && !in.excluded.count(at + ".gpu.sm_efficiency") ? std::optional<double>(pg->sm_efficiency) : std::nullopt);
      w.field("occupancy", pg->kernels && pg->occupancy > 0 && !in.excluded.count(at + ".gpu.occupancy") ? std::optional<double>(pg->occupancy) : std::nullopt);
      for (int k = 0; k < kCopyKindCount; ++k) {
        const CopyTotals& c = pg->copies[k];
        if (!c.count) continue;
        w.key(copy_kind_name(static_cast<CopyKind>(k))).begin_object();
        w.field("bytes", c.bytes).field("ms", ns_to_ms(c.total_ns)).field("count", c.count);
        w.field("gb_per_second", c.total_ns > 0 ? std::optional<double>(static_cast<double>(c.bytes) / static_cast<double>(c.total_ns)) : std::nullopt);
        w.end_object();
      }
      w.key("top_kernels").begin_array();
      for (const auto& t : pg->top_kernels) {
        w.begin_object().field("name", t.name).field("ms", ns_to_ms(t.total_ns)).field("calls", t.calls);
        w.field("sm_efficiency", t.sm_efficiency).end_object();
      }
      w.end_array();
      auto pc = in.phase_counters.find(id);
      if (pc != in.phase_counters.end()) {
        const CounterSummary& c = pc->second;
        w.key("counters").begin_object();
        w.field("sm_activity", c.sm_active).field("tensor_core_or_pipe_utilization", c.tensor_active);
        w.field("memory_bandwidth_utilization", c.dram).field("occupancy", c.occupancy);
        w.field("samples", c.samples).field("sample_ms", ns_to_ms(c.sample_ns)).field("coverage", c.coverage);
        w.field("edge_only", c.edge_only);
        const int64_t all = c.sample_ns + c.shared_ns;
        w.field("shared", all > 0 ? std::optional<double>(static_cast<double>(c.shared_ns) / static_cast<double>(all))
                                  : std::nullopt);
        if (all <= 0) out.nulls.emplace_back("phases." + line_phase_key(id) + ".gpu.counters.shared", "no sample used");
        w.end_object();
      }
      w.end_object();
    }
    w.end_object();
  }
  w.end_object();
}

/// The bottleneck label, its reason and evidence.
inline void write_diagnosis(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  w.key("diagnosis").begin_object();
  w.field("label", bottleneck_name(in.diagnosis.label)).field("reason", in.diagnosis.reason);
  w.key("evidence").begin_object();
  w.field("input_share", in.shares.input).field("h2d_share", in.shares.h2d);
  w.field("comm_exposed_share", in.shares.comm_exposed).field("gpu_utilization", in.shares.gpu_utilization);
  w.field("sm_efficiency", in.shares.sm_efficiency);
  w.end_object();
  w.key("warnings").begin_array();
  for (const auto& warning : in.diagnosis.warnings) w.value(warning);
  w.end_array();
  w.field("basis", diagnosis_basis_name(in.diagnosis.basis));
  w.key("carried_from_step");
  if (in.diagnosis.carried_from_step) w.value(*in.diagnosis.carried_from_step);
  else {
    w.null();
    out.nulls.emplace_back("diagnosis.carried_from_step", in.diagnosis.basis == DiagnosisBasis::traced
                                                              ? "this step's own GPU attribution decided"
                                                              : "no traced step's GPU view was carried: see diagnosis.reason");
  }
  w.end_object();
}

/// The window summary of the steps since the previous line (log_every > 1).
inline void write_window(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  if (in.window) {
    const WindowSummary& s = *in.window;
    w.key("window").begin_object();
    w.field("steps", s.steps)
        .field("step_time_ms_mean", s.step_time_ms_mean)
        .field("step_time_ms_min", s.step_time_ms_min)
        .field("step_time_ms_max", s.step_time_ms_max)
        .field("tokens_per_second_mean", s.tokens_per_second_mean);
    w.end_object();
  }
}

/// What was dropped or ignored, and warnings.
inline void write_bookkeeping(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepRecord& step = *in.step;
  w.key("dropped").begin_object();
  w.field("steps_total", in.steps_dropped_total)
      .field("lines_unwritten_total", in.lines_unwritten_total)
      .field("phase_scopes", step.spans_dropped)
      .field("scalars", step.scalars_dropped)
      .field("phase_names_total", static_cast<uint64_t>(phase_names_rejected()));
  w.end_object();
  w.field("ignored_step_scopes", step.ignored_step_scopes);
  w.field("phase_scopes_outside_step", step.spans_outside_step);

  w.key("warnings").begin_array();
  for (const auto& s : in.warnings) w.value(s);
  if (in.mfu.above_one) w.value("estimated_mfu > 1: flops_per_token or peak_flops is wrong");
  w.end_array();
}

STEPTRACE_END_NAMESPACE  // steptrace
