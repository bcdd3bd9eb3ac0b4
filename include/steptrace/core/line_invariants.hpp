// steptrace/core/line_invariants.hpp - what no line may say, checked on every line before it is
// written. Each check needs no ground truth:
//   - a phase's scopes on the step's thread run one after another inside the step: their time fits
//     the step's time;
//   - the step's GPU busy time (the union of the intervals of the work it launched) fits its window
//     (core/attribution.hpp, gpu_window_ns), and each phase's busy time fits the step's (a phase's
//     intervals are a subset of the step's);
//   - the kernels of the step, and of each phase, run on their streams one after another (two at a
//     time at most, with programmatic dependent launch): their summed time fits twice the window
//     times the streams they ran on (a graph replayed with records off between a traced launch and its
//     read-out once published 680 ms of optimizer kernels in a 13.7 ms step);
//   - every utilization, efficiency, share and counter is a fraction of something: [0, 1].
// A value that fails is never published and never clamped: it is written null with the reason, and
// counted (gpu.invariant_exclusions). Records that start before their launch are left out earlier,
// record by record (core/plausibility.hpp). Pure: the line's input in, the same input with the failed
// values removed and `excluded` filled.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "line_input.hpp"
#include "reasons.hpp"
#include "line_out.hpp"  // details::path_segment: the paths LineOut files reasons under
#include "plausibility.hpp"  // kStreamConcurrencyLimit

STEPTRACE_BEGIN_NAMESPACE

namespace details {
/// Clocks: phase scopes and step boundaries are read from one host clock, but a scope's two readings
/// and the step's may come from the time-stamp counter and steady_clock (core/clock.hpp): 20 us.
inline constexpr int64_t kInvariantHostSlackNs = 20'000;

inline std::string invariant_ms(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", static_cast<double>(ns) / 1e6);
  return b;
}
inline std::string invariant_value(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}
inline bool is_fraction(double v) { return v >= 0.0 && v <= 1.0; }

/// The top-level field that carries a built-in phase's host time, if any.
inline const char* builtin_phase_field(PhaseId id) {
  if (id == phase_tag::input) return "dataloader_wait_ms";
  if (id == phase_tag::h2d) return "h2d_time_ms";
  if (id == phase_tag::forward) return "forward_time_ms";
  if (id == phase_tag::backward) return "backward_time_ms";
  if (id == phase_tag::optimizer) return "optimizer_time_ms";
  return nullptr;
}

/// `v` (a fraction) removed and its field excluded when outside [0, 1].
inline void check_fraction(std::optional<double>& v, const std::string& field, StepLineInput& in) {
  if (!v || is_fraction(*v)) return;
  in.excluded[field] = reason_text(Reason::fraction_outside, field + " = " + invariant_value(*v));
  v.reset();
}
}  // namespace details

inline void check_line_invariants(StepLineInput& in) {
  using namespace details;
  const int64_t step_ns = in.host.step_time_ns;

  // Host: the step thread's scopes of a phase fit the step.
  if (step_ns > 0)
    for (const auto& [id, p] : in.host.phases) {
      if (p.step_thread_ns <= step_ns + kInvariantHostSlackNs) continue;
      const std::string why = reason_text(Reason::phase_over_step, line_phase_key(id)) + "' on the step's thread took " +
                              invariant_ms(p.step_thread_ns) + " in a " + invariant_ms(step_ns) +
                              " step, which they cannot (a scope opened before the step began?): left out";
      in.excluded["phases." + path_segment(line_phase_key(id)) + ".host_ms"] = why;
      if (const char* f = builtin_phase_field(id)) in.excluded[f] = why;
    }

  if (in.gpu && step_ns > 0) {
    const StepGpu& g = *in.gpu;
    // The step's GPU busy time fits its window: the step's time, or its work's span where longer.
    const int64_t window_ns = gpu_window_ns(g, step_ns);
    if (g.busy_ns > window_ns) {
      const std::string why = reason_text(Reason::busy_over_window, invariant_ms(g.busy_ns)) + " in a window of " +
                              invariant_ms(window_ns) + " (the longer of the step's time and its work's span): a "
                              "utilization above 1 cannot be, so it is left out (see gpu.busy_ms)";
      in.excluded["gpu_utilization"] = why;
      in.excluded["gpu.idle_ms"] = why;
      in.excluded["diagnosis.evidence.gpu_utilization"] = why;
      in.shares.gpu_utilization.reset();
    }
    const auto fits_streams = [&](int64_t kernel_ns, uint32_t streams) {
      return static_cast<double>(kernel_ns) <=
             kStreamConcurrencyLimit * std::max<uint32_t>(1, streams) * static_cast<double>(window_ns) + kInvariantHostSlackNs;
    };
    const auto overcommitted = [&](const std::string& who, int64_t kernel_ns, uint32_t streams) {
      return reason_text(Reason::kernels_over_streams, who) + " kernels add up to " + invariant_ms(kernel_ns) + " on " + std::to_string(std::max<uint32_t>(1, streams)) +
             " stream(s) in a window of " + invariant_ms(window_ns) + ": kernels on one stream run one after another (two " +
             "at a time at most), so more than twice the window per stream cannot be: left out";
    };
    if (g.kernels && !fits_streams(g.kernel_ns, g.streams)) {
      const std::string why = overcommitted("the step's", g.kernel_ns, g.streams);
      in.excluded["gpu.kernel_ms"] = why;
      in.excluded["gpu.sm_efficiency"] = why;
      in.excluded["diagnosis.evidence.sm_efficiency"] = why;
      in.shares.sm_efficiency.reset();
    }
    if (g.kernels && !is_fraction(g.sm_efficiency)) {
      in.excluded["gpu.sm_efficiency"] = reason_text(Reason::sm_efficiency_outside, invariant_value(g.sm_efficiency) + " lies outside [0, 1]: left out");
      in.shares.sm_efficiency.reset();
      in.excluded["diagnosis.evidence.sm_efficiency"] = in.excluded["gpu.sm_efficiency"];
    }
    for (const auto& [id, pg] : g.phases) {
      const std::string at = "phases." + path_segment(line_phase_key(id)) + ".gpu";
      if (pg.busy_ns > g.busy_ns)
        in.excluded[at] = reason_text(Reason::phase_busy_over_step, "phase '" + line_phase_key(id) + "' was busy " +
                                                                        invariant_ms(pg.busy_ns) + " on the GPU, more than its step's " +
                                                                        invariant_ms(g.busy_ns) + " (its work is part of the step's)");
      else if (pg.kernels && !fits_streams(pg.kernel_ns, pg.streams))
        in.excluded[at] = overcommitted("phase '" + line_phase_key(id) + "'", pg.kernel_ns, pg.streams);
      if (pg.kernels && !is_fraction(pg.sm_efficiency))
        in.excluded[at + ".sm_efficiency"] = reason_text(Reason::fraction_outside, at + ".sm_efficiency = " + invariant_value(pg.sm_efficiency));
      if (pg.kernels && pg.occupancy > 0 && !is_fraction(pg.occupancy))
        in.excluded[at + ".occupancy"] = reason_text(Reason::fraction_outside, at + ".occupancy = " + invariant_value(pg.occupancy));
    }
  }

  // Counters and shares: fractions.
  if (in.counters) {
    check_fraction(in.counters->sm_active, "sm_activity", in);
    check_fraction(in.counters->dram, "memory_bandwidth_utilization", in);
    check_fraction(in.counters->tensor_active, "tensor_core_or_pipe_utilization", in);
    check_fraction(in.counters->occupancy, "counters.occupancy", in);
  }
  for (auto& [id, c] : in.phase_counters) {
    const std::string at = "phases." + line_phase_key(id) + ".gpu.counters.";
    check_fraction(c.sm_active, at + "sm_activity", in);
    check_fraction(c.tensor_active, at + "tensor_core_or_pipe_utilization", in);
    check_fraction(c.dram, at + "memory_bandwidth_utilization", in);
    check_fraction(c.occupancy, at + "occupancy", in);
  }
  check_fraction(in.shares.comm_exposed, "diagnosis.evidence.comm_exposed_share", in);
}

STEPTRACE_END_NAMESPACE
