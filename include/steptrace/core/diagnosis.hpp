// steptrace/core/diagnosis.hpp - one word for what holds a step back, with the numbers behind it.
// Pure functions of a step's measured shares; thresholds in DiagnosisThresholds (README "Diagnosis").
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attribution.hpp"
#include "phase.hpp"
#include "step_metrics.hpp"

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
    s.gpu_utilization = std::min(1.0, static_cast<double>(gpu->busy_ns) / step);
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

struct Diagnosis {
  Bottleneck label = Bottleneck::unknown;
  std::string reason;                 // one sentence with the deciding number
  std::vector<std::string> warnings;  // shares past a warning level that did not decide the label
};

/// The primary label: the host-visible waits first (the largest of input, exposed communication and
/// copies past its threshold), then what the GPU did with the rest of the step.
inline Diagnosis diagnose(const StepShares& s, const DiagnosisThresholds& t = {}) {
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
    d.reason = "no GPU attribution for this step; host-side waits are below their thresholds";
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
