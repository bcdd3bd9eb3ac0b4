// steptrace/core/diagnosis.hpp - one word for what holds a step back, with the numbers behind it.
// Pure functions of a step's measured shares; thresholds in DiagnosisThresholds (docs/gpu.md, "Diagnosis").
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attribution.hpp"
#include "phase.hpp"
#include "step_metrics.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

enum class Bottleneck { input_bound, h2d_bound, comm_bound, host_launch_bound, low_sm_efficiency, compute_bound, unknown };

inline const char* bottleneck_name(Bottleneck b) {
  switch (b) {
    case Bottleneck::input_bound: return "INPUT-BOUND";
    case Bottleneck::h2d_bound: return "H2D-BOUND";
    case Bottleneck::comm_bound: return "COMM-BOUND";
    case Bottleneck::host_launch_bound: return "HOST/LAUNCH-BOUND";
    case Bottleneck::low_sm_efficiency: return "LOW-SM-EFFICIENCY";
    case Bottleneck::compute_bound: return "COMPUTE-BOUND";
    case Bottleneck::unknown: return "UNKNOWN";
  }
  return "UNKNOWN";
}

/// Shares of one step's wall time, as measured (GPU ones absent without attribution).
struct StepShares {
  double input = 0;                      // dataloader_wait_ms / step_time_ms
  double h2d = 0;                        // max(h2d phase host time, h2d phase GPU busy) / step time
  std::optional<double> comm_exposed;    // NCCL time not hidden by compute / step time
  std::optional<double> gpu_utilization; // GPU busy union / step time
  std::optional<double> sm_efficiency;   // time-weighted estimate over busy time
};

/// A step's shares from its host metrics and (when attributed) its GPU metrics.
inline StepShares compute_step_shares(const HostStepMetrics& host, const std::optional<StepGpu>& gpu) {
  StepShares s;
  if (host.step_time_ns <= 0) return s;
  const double step = static_cast<double>(host.step_time_ns);
  auto host_ns = [&](PhaseId id) -> int64_t {
    auto it = host.phases.find(id);
    return it == host.phases.end() ? 0 : it->second.total_ns;
  };
  s.input = static_cast<double>(host_ns(phase_tag::input)) / step;
  int64_t h2d = host_ns(phase_tag::h2d);
  if (gpu) {
    auto it = gpu->phases.find(phase_tag::h2d);
    if (it != gpu->phases.end()) h2d = std::max(h2d, it->second.busy_ns);
    s.comm_exposed = static_cast<double>(gpu->nccl_exposed_ns) / step;
    // Busy over the step's GPU window (core/attribution.hpp); above 1: left out (core/line_invariants.hpp).
    s.gpu_utilization = static_cast<double>(gpu->busy_ns) / static_cast<double>(gpu_window_ns(*gpu, host.step_time_ns));
    if (gpu->kernels) s.sm_efficiency = gpu->sm_efficiency;
  }
  s.h2d = static_cast<double>(h2d) / step;
  return s;
}

/// Thresholds. Data-wait: TraceML warns at a 10 % data-wait share and calls 20 % critical; we warn at
/// the first and label at the second. The others are ours, chosen so that a label names a cost worth
/// acting on: 15 % of the step in copies or exposed communication, a GPU idle for 30 % of the step,
/// or busy kernels that fill fewer than half the SMs on average.
struct DiagnosisThresholds {
  double input_warn = 0.10, input_bound = 0.20;
  double h2d_bound = 0.15;
  double comm_bound = 0.15;
  double gpu_busy = 0.70;        // below: the GPU waits for the host
  double sm_efficiency = 0.50;   // below, with a busy GPU: under-filled (or, seen by counters, memory-bound) kernels
};

/// What a label was decided from (docs/schema.md, `diagnosis.basis`).
enum class DiagnosisBasis { traced, markers, carried, carried_scaled, host_only, none };

inline const char* diagnosis_basis_name(DiagnosisBasis b) {
  switch (b) {
    case DiagnosisBasis::traced: return "traced";
    case DiagnosisBasis::markers: return "markers";
    case DiagnosisBasis::carried: return "carried";
    case DiagnosisBasis::carried_scaled: return "carried_scaled";
    case DiagnosisBasis::host_only: return "host_only";
    case DiagnosisBasis::none: return "none";
  }
  return "none";
}

struct Diagnosis {
  Bottleneck label = Bottleneck::unknown;
  std::string reason;                 // one sentence with the deciding number
  std::vector<std::string> warnings;  // shares past a warning level that did not decide the label
  DiagnosisBasis basis = DiagnosisBasis::none;
  std::optional<uint64_t> carried_from_step;  // basis carried: the traced step whose GPU view was used
};

/// The primary label: the host-visible waits first (the largest of input, exposed communication and
/// copies past its threshold), then what the GPU did with the rest of the step.
inline Diagnosis decide_label(const StepShares& s, const DiagnosisThresholds& t) {
  Diagnosis d;
  auto pct = [](double x) { return std::to_string(static_cast<int>(x * 100 + 0.5)) + " %"; };
  struct Candidate {
    Bottleneck label;
    double share;
    double threshold;
    const char* what;
  };
  std::vector<Candidate> waits = {{Bottleneck::input_bound, s.input, t.input_bound, "data-loader wait"},
                                  {Bottleneck::h2d_bound, s.h2d, t.h2d_bound, "host-to-device copies"}};
  if (s.comm_exposed) waits.push_back({Bottleneck::comm_bound, *s.comm_exposed, t.comm_bound, "exposed NCCL time"});
  const Candidate* worst = nullptr;
  for (const auto& c : waits)
    if (c.share >= c.threshold && (!worst || c.share > worst->share)) worst = &c;
  if (s.input >= t.input_warn && (!worst || worst->label != Bottleneck::input_bound))
    d.warnings.push_back("data-loader wait " + pct(s.input) + " of the step (>= " + pct(t.input_warn) + ")");
  if (worst) {
    d.label = worst->label;
    d.reason = std::string(worst->what) + " " + pct(worst->share) + " of the step (>= " + pct(worst->threshold) + ")";
    return d;
  }
  if (!s.gpu_utilization) {
    d.label = Bottleneck::unknown;
    d.reason = reason_text(Reason::unknown_no_attribution);
    return d;
  }
  if (*s.gpu_utilization < t.gpu_busy) {
    d.label = Bottleneck::host_launch_bound;
    d.reason = "GPU busy " + pct(*s.gpu_utilization) + " of the step (< " + pct(t.gpu_busy) +
               ") while the host is not waiting on data, copies or communication";
    return d;
  }
  if (s.sm_efficiency && *s.sm_efficiency < t.sm_efficiency) {
    d.label = Bottleneck::low_sm_efficiency;
    d.reason = "GPU busy " + pct(*s.gpu_utilization) + " but estimated SM efficiency " + pct(*s.sm_efficiency) +
               " (< " + pct(t.sm_efficiency) + "): kernels leave SMs idle";
    return d;
  }
  d.label = Bottleneck::compute_bound;
  d.reason = "GPU busy " + pct(*s.gpu_utilization) + " with estimated SM efficiency " +
             (s.sm_efficiency ? pct(*s.sm_efficiency) : std::string("unknown"));
  return d;
}

/// A step's diagnosis from its own shares: basis traced with GPU shares, host_only when a host-side
/// wait decides without them, none when nothing does.
inline Diagnosis diagnose(const StepShares& s, const DiagnosisThresholds& t = {}) {
  Diagnosis d = decide_label(s, t);
  d.basis = s.gpu_utilization ? DiagnosisBasis::traced
            : d.label != Bottleneck::unknown ? DiagnosisBasis::host_only : DiagnosisBasis::none;
  return d;
}

/// The GPU side of the last traced step, carried to the untraced steps after it.
struct CarriedGpuView {
  uint64_t step = 0;
  double step_ms = 0;
  StepShares shares;  // its GPU shares (gpu_utilization, sm_efficiency, comm_exposed)
  // The median time of the untraced steps before it (up to 31), or of the first ones after it when
  // none came before; 0: none yet. A traced step runs longer than its neighbours by what tracing costs
  // it (29.9 against 20.2 ms on an eager PyTorch loop, detached between traces), so an untraced step is
  // compared with these, never with it.
  double untraced_median_ms = 0;
};

/// When a traced step's GPU view still describes an untraced one: it is at most max_age_steps older
/// and the step's time differs from the untraced steps' median around that trace by at most
/// max_step_ratio (a step that took much longer or shorter did something else: an evaluation, a
/// checkpoint, a different batch shape).
struct CarryRule {
  uint64_t max_age_steps = 16;
  double max_step_ratio = 1.5;
  // Beyond max_step_ratio (against the untraced steps' median) and up to this, the view is scaled
  // instead (basis carried_scaled): the traced step's GPU busy time and exposed NCCL time (its shares
  // x its own time) are taken as this step's, over this step's time (SM efficiency is the kernels'
  // own). Where that work cannot fit this step (busy time longer than the step), the premise fails:
  // UNKNOWN. The label is kept only when the scaled view gives the same one as the unscaled: a
  // host-launch-bound view stays so in a longer step; a compute-bound view in a much longer step (more
  // GPU work, or the host stalled: nothing tells which without a trace) stays UNKNOWN.
  double max_scaled_ratio = 4.0;
};

/// The carry window for a trace interval: two intervals (one traced step may be lost or late), at
/// least 16 steps.
inline uint64_t carry_max_age(uint32_t trace_every) { return std::max<uint64_t>(16, 2 * uint64_t{trace_every}); }

/// An untraced step's diagnosis: its own host-visible waits first (basis host_only); below their
/// thresholds, its waits with the GPU shares of the last traced step, if that step is recent and
/// alike (basis carried); otherwise UNKNOWN (basis none) with the reason the view could not carry.
inline Diagnosis diagnose_untraced(const StepShares& host, uint64_t step, double step_ms,
                                   const std::optional<CarriedGpuView>& last, const CarryRule& rule,
                                   const DiagnosisThresholds& t = {}) {
  StepShares own = host;  // this step's GPU shares are not known, whatever the caller filled in
  own.gpu_utilization.reset();
  own.sm_efficiency.reset();
  own.comm_exposed.reset();
  Diagnosis d = diagnose(own, t);
  if (d.label != Bottleneck::unknown) return d;
  char buf[200];
  if (!last) {
    d.reason = reason_text(Reason::unknown_nothing_traced);
    return d;
  }
  const uint64_t age = step > last->step ? step - last->step : 0;
  const bool have_reference = last->untraced_median_ms > 0;
  const double reference_ms = have_reference ? last->untraced_median_ms : last->step_ms;
  const double ratio = reference_ms > 0 && step_ms > 0 ? step_ms / reference_ms : 0;
  if (age > rule.max_age_steps) {
    std::snprintf(buf, sizeof buf, "the last traced step (%llu) is %llu steps old (> %llu)",
                  static_cast<unsigned long long>(last->step), static_cast<unsigned long long>(age),
                  static_cast<unsigned long long>(rule.max_age_steps));
    d.reason = std::string("no GPU attribution for this step; host-side waits are below their thresholds and ") + buf;
    return d;
  }
  const bool alike = ratio > 0 && ratio <= rule.max_step_ratio && ratio >= 1 / rule.max_step_ratio;
  if (!alike && have_reference && ratio > 0 && ratio <= rule.max_scaled_ratio && ratio >= 1 / rule.max_scaled_ratio) {
    StepShares as_traced = own, scaled = own;
    as_traced.gpu_utilization = last->shares.gpu_utilization;
    as_traced.sm_efficiency = last->shares.sm_efficiency;
    as_traced.comm_exposed = last->shares.comm_exposed;
    scaled.sm_efficiency = last->shares.sm_efficiency;
    // The traced step's GPU work in ms (its shares are of its own, tracing-lengthened, time).
    const auto over_this_step = [&](const std::optional<double>& share) -> std::optional<double> {
      if (!share) return std::nullopt;
      return *share * last->step_ms / step_ms;
    };
    scaled.gpu_utilization = over_this_step(last->shares.gpu_utilization);
    scaled.comm_exposed = over_this_step(last->shares.comm_exposed);
    const bool fits = !(scaled.gpu_utilization && *scaled.gpu_utilization > 1) && !(scaled.comm_exposed && *scaled.comm_exposed > 1);
    const Diagnosis reference = diagnose(as_traced, t);
    Diagnosis c = diagnose(scaled, t);
    if (fits && c.label == reference.label && c.label != Bottleneck::unknown) {
      std::snprintf(buf, sizeof buf,
                    "carried from traced step %llu, scaled by its GPU work (%s %.3g ms, this step %.3g ms: %.2gx): ",
                    static_cast<unsigned long long>(last->step), have_reference ? "untraced steps' median" : "its time",
                    reference_ms, step_ms, ratio);
      c.reason = buf + c.reason;
      c.basis = DiagnosisBasis::carried_scaled;
      c.carried_from_step = last->step;
      return c;
    }
  }
  if (!alike) {
    if (have_reference)
      std::snprintf(buf, sizeof buf, "this step's time (%.3g ms) is not within %.2gx of the untraced steps' median around traced step %llu (%.3g ms)",
                    step_ms, rule.max_step_ratio, static_cast<unsigned long long>(last->step), reference_ms);
    else
      std::snprintf(buf, sizeof buf, "this step's time (%.3g ms) is not within %.2gx of the last traced step's (%llu: %.3g ms)",
                    step_ms, rule.max_step_ratio, static_cast<unsigned long long>(last->step), reference_ms);
    d.reason = std::string("no GPU attribution for this step; host-side waits are below their thresholds and ") + buf;
    return d;
  }
  StepShares merged = own;
  merged.gpu_utilization = last->shares.gpu_utilization;
  merged.sm_efficiency = last->shares.sm_efficiency;
  merged.comm_exposed = last->shares.comm_exposed;
  Diagnosis c = diagnose(merged, t);
  std::snprintf(buf, sizeof buf, "carried from traced step %llu (%s %.3g ms, this step %.3g ms): ",
                static_cast<unsigned long long>(last->step), have_reference ? "untraced steps' median" : "its time",
                reference_ms, step_ms);
  c.reason = buf + c.reason;
  c.basis = DiagnosisBasis::carried;
  c.carried_from_step = last->step;
  return c;
}

/// An untraced step's diagnosis from its own stream markers (core/markers.hpp): the marker stream had
/// work pending for `pending_share` of the step at least, a lower bound of the GPU's busy share. At or
/// above gpu_busy the GPU held the step back, whatever a traced step said: the label is decided with
/// that share, the SM efficiency of the last traced step's kernels and its exposed NCCL share when that
/// step is at most `max_age` steps older (shares as carried: a traced step's time is lengthened by
/// tracing, so its NCCL milliseconds are not taken over another step's time). Below it, markers cannot tell (a marker on
/// an idle stream completes at once, whatever ran before it): nullopt, and the carried view decides.
/// Host-visible waits past their thresholds decide first, as on every step.
inline std::optional<Diagnosis> diagnose_by_markers(const StepShares& host, double pending_share, uint64_t step,
                                                    double step_ms, const std::optional<CarriedGpuView>& last,
                                                    uint64_t max_age, const DiagnosisThresholds& t = {}) {
  if (!(pending_share >= t.gpu_busy) || !(step_ms > 0)) return std::nullopt;
  StepShares own = host;
  own.gpu_utilization.reset();
  own.sm_efficiency.reset();
  own.comm_exposed.reset();
  if (diagnose(own, t).label != Bottleneck::unknown) return std::nullopt;  // host_only decides
  own.gpu_utilization = std::min(1.0, pending_share);
  const bool recent = last && step >= last->step && step - last->step <= max_age;
  if (recent) {
    own.sm_efficiency = last->shares.sm_efficiency;
    own.comm_exposed = last->shares.comm_exposed;
  }
  Diagnosis d = decide_label(own, t);
  std::string prefix = "stream markers: the GPU had work pending for at least " +
                       std::to_string(static_cast<int>(pending_share * 100 + 0.5)) + " % of this step";
  if (recent) prefix += ", with the SM efficiency and NCCL time of traced step " + std::to_string(last->step);
  d.reason = prefix + ": " + d.reason;
  d.basis = DiagnosisBasis::markers;
  if (recent) d.carried_from_step = last->step;
  return d;
}

/// The label seen most over a run, and how often.
struct DominantLabel {
  Bottleneck label = Bottleneck::unknown;
  double fraction = 0;
};

inline DominantLabel dominant_label(const std::map<Bottleneck, uint64_t>& counts) {
  DominantLabel d;
  uint64_t total = 0, best = 0;
  for (const auto& [label, n] : counts) {
    total += n;
    if (n > best) best = n, d.label = label;
  }
  d.fraction = total ? static_cast<double>(best) / static_cast<double>(total) : 0;
  return d;
}

STEPTRACE_END_NAMESPACE  // steptrace
