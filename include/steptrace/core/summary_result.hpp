// steptrace/core/summary_result.hpp - what stop() returns: a plain value (summary.hpp builds it).
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

struct Summary {
  bool started = false;       // false when stop() found no running session
  uint64_t steps = 0;         // steps closed
  uint64_t lines_written = 0;
  uint64_t lines_failed = 0;  // write errors
  uint64_t steps_dropped = 0; // never reached the writer (queue full)
  std::string log_path;       // "" when no file was written
  double step_time_ms_mean = 0, step_time_ms_median = 0, step_time_ms_p90 = 0;
  uint64_t median_steps = 0;  // the steps the median and p90 are over: the last SummaryBuilder::kRecentSteps
  std::optional<double> tokens_per_second_mean;
  std::optional<double> estimated_mfu_mean;
  struct Phase {
    std::string name;
    double host_ms_mean = 0;   // per step, over all steps
    double share = 0;          // of total step time
  };
  std::vector<Phase> phases;
  double untracked_share = 0;
  std::string diagnosis;             // dominant label over the run, e.g. "INPUT-BOUND"
  double diagnosis_fraction = 0;     // of steps carrying it
  std::string table;           // the text stop() prints
};

STEPTRACE_END_NAMESPACE  // steptrace
