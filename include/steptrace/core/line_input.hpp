// steptrace/core/line_input.hpp - everything one step's line is made of (core/step_line.hpp renders it).
#pragma once
#include "overhead.hpp"
#include "overhead_parts.hpp"
#include "../version.hpp"
#include <algorithm>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attribution.hpp"
#include "counters.hpp"
#include "cross_rank.hpp"
#include "device_state.hpp"
#include "diagnosis.hpp"
#include "markers.hpp"
#include "measured.hpp"
#include "json_writer.hpp"
#include "phase.hpp"
#include "reasons.hpp"
#include "run_info.hpp"
#include "step_metrics.hpp"
#include "trace_trigger.hpp"

STEPTRACE_BEGIN_NAMESPACE

inline constexpr const char* kSchemaVersion = "steptrace.step/1";

/// A phase's key in a line: its name; "unphased" for launches outside every phase; "unknown.<id>" for
/// an id no name was registered under (each its own key: a line never holds one key twice).
inline std::string line_phase_key(PhaseId id) {
  if (id == kNoPhase) return "unphased";
  if (id < phase_count()) return phase_name(id);
  return "unknown." + std::to_string(id);
}

/// Device memory seen during the step.
struct MemoryObservation {
  std::optional<int64_t> device_used_peak_bytes;  // max of cudaMemGetInfo samples within the step
  std::optional<int64_t> device_total_bytes;
  uint32_t samples = 0;
  std::string null_reason;
};

/// Aggregate of the steps since the previous line, when log_every > 1.
struct WindowSummary {
  uint32_t steps = 0;
  double step_time_ms_mean = 0, step_time_ms_min = 0, step_time_ms_max = 0;
  std::optional<double> tokens_per_second_mean;
};

/// What steptrace costs (core/overhead.hpp) and how the trace rate in force was decided.
struct OverheadLine {
  OverheadEstimate estimate;
  OverheadParts parts;                  // the estimate part by part (core/overhead_parts.hpp)
  int trace_every = 1;                  // the interval in force for this step
  Measured<int> markers_every{reason_text(Reason::markers_not_armed)};  // they mark 1 step in N (overhead_budget's pace)
  std::string untraced_cupti;           // "keep" | "detach" while this step ran; "" without attribution
  std::string kernel_timestamps;        // how kernel records are timed; "" without attribution
  std::optional<double> budget;         // overhead_budget, when it chose the interval (trace_every 0)
  std::string null_reason;              // why estimated_fraction is null
  std::string no_budget_reason;         // why budget / within_budget are null
};

/// Everything one line is made of.
struct StepLineInput {
  const StepRecord* step = nullptr;
  HostStepMetrics host;
  const RunInfo* run = nullptr;
  MemoryObservation memory;
  MfuResult mfu;
  double flops_per_token = 0;
  PeakFlops peak;
  Measured<StepGpu> gpu{reason_text(Reason::no_gpu_attribution)};  // CUPTI attribution of the step's launches, or why none
  // PM sampling over the step's window, or why none (then sm_activity, memory_bandwidth_utilization,
  // tensor_core_or_pipe_utilization and `counters` are null with that reason).
  Measured<CounterSummary> counters{reason_text(Reason::counters_off)};
  std::map<PhaseId, CounterSummary> phase_counters;   // PM sampling over each phase's GPU busy intervals
  double counters_interval_us = 0;
  uint64_t counter_values_excluded = 0;  // PM sample values outside [0, 1] left out so far (run total)
  Measured<CrossRankView> cross_rank{reason_text(Reason::no_cross_rank_exchange)};  // rank 0: the latest gathered view
  int cross_rank_every = 0;
  Measured<RankSummary> rank_wait{reason_text(Reason::no_cross_rank_exchange)};  // every rank: its own last posted summary
  Measured<DeviceStateSummary> device_state{reason_text(Reason::nvml_not_read)};  // NVML readings within the step
  uint64_t gpu_dropped_records = 0;      // CUPTI records lost since the previous line
  StepShares shares;
  Diagnosis diagnosis;
  std::optional<WindowSummary> window;
  // Tokens and samples of every step since start() (written or not: log_every), for monotonic
  // counters; unknown, and why, while no step had a count (or the sum left the finite numbers).
  Measured<double> tokens_total{reason_text(Reason::no_step_had_count, "tokens (set tokens_per_step or TRACE_STEP(tokens, samples))")};
  Measured<double> samples_total{reason_text(Reason::no_step_had_count, "samples (set samples_per_step or TRACE_STEP(tokens, samples))")};
  OverheadLine overhead;
  StepTrace trace;                      // the flight recorder's capture of this step (details/flight_recorder.hpp)
  uint64_t steps_dropped_total = 0;     // steps whose line was never written (writer queue full)
  uint64_t lines_unwritten_total = 0;   // lines the log could not take (write errors), since start()
  std::vector<std::string> warnings;
  // GPU work launched between the previous step's scope end and this step's begin (records on only
  // when the previous step was traced); the host side is in the step record (between_ns, between_spans).
  Measured<BetweenGpu> between_gpu{reason_text(Reason::no_between_records)};
  Measured<StepMarkers> markers{reason_text(Reason::no_stream_markers)};  // the step's stream markers (core/markers.hpp)
  std::optional<bool> markers_agree;     // traced steps with markers: whether they agree with the records
  // Values that failed a check that needs no ground truth (core/line_invariants.hpp): field path ->
  // why; written null with that reason and counted (gpu.invariant_exclusions).
  std::map<std::string, std::string> excluded;
};

STEPTRACE_END_NAMESPACE  // steptrace
