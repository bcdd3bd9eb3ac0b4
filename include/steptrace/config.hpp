// steptrace/config.hpp - what a program can set, from code or from the environment.
//
//   steptrace::Config cfg;
//   cfg.log_path = "steps-{rank}.jsonl";
//   cfg.tokens_per_step = batch * seq_len;
//   cfg.counters = steptrace::Mode::off;        // enums for settings with a few spellings
//   steptrace::start(cfg);                      // STEPTRACE_* variables override these fields
//
// Every field is a row of one table (settings.hpp, which includes this file and not the other way
// round: name, variable, range, default, one line of documentation) that parses the environment, validates, and is checked against docs/configuration.md's table.
// Validation never throws: a bad value yields one message naming the setting, and the setting keeps
// its default (or is disabled, for an unusable log path).
#pragma once
#include "version.hpp"
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// A part of steptrace that runs where it can (automatic) or is switched off.
enum class Mode : uint8_t { automatic, off };
/// What phase scopes read: the CPU's invariant time-stamp counter where usable, or steady_clock.
enum class ClockSource : uint8_t { automatic, steady };
/// What CUPTI does between traced steps (an interval > 1): `automatic` keeps it attached and lets
/// overhead_budget detach it when staying attached alone would exceed the budget.
enum class UntracedCupti : uint8_t { keep, detach, automatic };  // values of 0.1 kept: keep 0, detach 1
/// What a log line holds: `full` (schema steptrace.step/1, every field) or `compact` (steptrace.step/2:
/// the verdicts, with the run's constant facts once in a run record; core/line_tiers.hpp).
enum class LineDetail : uint8_t { full, compact };

/// How one model replica is split over GPUs (Megatron-LM's and torchtitan's degrees). Data
/// parallelism is the rest: world_size / (tensor x pipeline x context). MFU divides a rank's tokens by
/// this product (docs/schema.md, "MFU under model parallelism").
struct ModelParallel {
  int tensor = 1;    // STEPTRACE_TENSOR_PARALLEL
  int pipeline = 1;  // STEPTRACE_PIPELINE_PARALLEL
  int context = 1;   // STEPTRACE_CONTEXT_PARALLEL
  long long size() const { return static_cast<long long>(tensor) * pipeline * context; }
};

struct Config {
  bool enabled = true;                       // STEPTRACE_ENABLED
  std::string log_path = "steptrace-{rank}.jsonl";  // STEPTRACE_LOG; "" = no file; "{rank}" is replaced by the rank
  int log_every = 1;                         // STEPTRACE_LOG_EVERY
  LineDetail line_detail = LineDetail::compact;  // STEPTRACE_LINE_DETAIL
  double tokens_per_step = 0;                // STEPTRACE_TOKENS_PER_STEP (0 = unknown)
  double samples_per_step = 0;               // STEPTRACE_SAMPLES_PER_STEP
  double flops_per_token = 0;                // STEPTRACE_FLOPS_PER_TOKEN (0 = no MFU)
  double peak_flops = 0;                     // STEPTRACE_PEAK_FLOPS (0 = from the table)
  Dtype dtype = Dtype::bf16;                 // STEPTRACE_DTYPE
  Mode gpu = Mode::automatic;                // STEPTRACE_GPU (off: never touch CUDA)
  int device = -1;                           // STEPTRACE_DEVICE (-1 = the current device at start())
  Mode cupti = Mode::automatic;              // STEPTRACE_CUPTI
  Mode counters = Mode::automatic;           // STEPTRACE_COUNTERS
  double counters_interval_us = 1000;        // STEPTRACE_COUNTERS_INTERVAL_US
  int counters_buffer_mib = 64;              // STEPTRACE_COUNTERS_BUFFER_MIB
  ClockSource clock = ClockSource::automatic;  // STEPTRACE_CLOCK
  int cross_rank_every = 10;                 // STEPTRACE_CROSS_RANK_EVERY
  int trace_every = 0;                       // STEPTRACE_TRACE_EVERY (0 = overhead_budget decides)
  double overhead_budget = 0.001;            // STEPTRACE_OVERHEAD_BUDGET (fraction of step time; 0 = off)
  UntracedCupti untraced_cupti = UntracedCupti::automatic;  // STEPTRACE_UNTRACED_CUPTI
  bool stream_markers = true;                // STEPTRACE_STREAM_MARKERS: CUDA events at step and phase boundaries
  int max_lag_steps = 2;                     // STEPTRACE_MAX_LAG_STEPS
  double max_lag_ms = 1000;                  // STEPTRACE_MAX_LAG_MS
  double flush_after_ms = 200;               // STEPTRACE_FLUSH_AFTER_MS
  bool summary = true;                       // STEPTRACE_SUMMARY
  double memory_sample_ms = 10;              // STEPTRACE_MEMORY_SAMPLE_MS
  int rank = -1, local_rank = -1, world_size = -1;  // STEPTRACE_RANK etc.; -1 = the launcher's variables
  std::size_t max_pending_steps = 256;       // STEPTRACE_MAX_PENDING_STEPS
  std::size_t max_spans_per_step = 4096;     // STEPTRACE_MAX_SPANS_PER_STEP
  std::string prometheus_textfile;           // STEPTRACE_PROMETHEUS_TEXTFILE; "" = none; "{rank}" replaced
  std::string prometheus_listen;             // STEPTRACE_PROMETHEUS_LISTEN, host:port; "" = none
  double prometheus_every_ms = 5000;         // STEPTRACE_PROMETHEUS_EVERY_MS (textfile rewrites, at most)
  int prometheus_window_lines = 32;          // STEPTRACE_PROMETHEUS_WINDOW_LINES (steptrace_window_* means)
  std::string job_name;                      // STEPTRACE_JOB_NAME; "" = SLURM_JOB_ID, TORCHELASTIC_RUN_ID, program name
  std::string job_id;                        // STEPTRACE_JOB_ID; "" = SLURM_JOB_ID, TORCHELASTIC_RUN_ID, the Kubernetes pod
  double stall_after_s = 60;                 // STEPTRACE_STALL_AFTER_S: no step for this long (and >= 10 median steps) = a stall record; 0 = off
  ModelParallel model_parallel;              // STEPTRACE_{TENSOR,PIPELINE,CONTEXT}_PARALLEL
  int trace_keep_steps = 8;                  // STEPTRACE_TRACE_KEEP_STEPS: the flight recorder's ring (0 = off)
  double trace_trigger = 1.5;                // STEPTRACE_TRACE_TRIGGER: a step above this x the rolling median is captured (0 = never)
  int trace_max_files = 20;                  // STEPTRACE_TRACE_MAX_FILES: traces written per run, at most
  int trace_ring_mib = 64;                   // STEPTRACE_TRACE_RING_MIB: the ring's bound in memory
  std::string trace_dir;                     // STEPTRACE_TRACE_DIR; "" = the log file's directory
  std::string capture_steps;                 // STEPTRACE_CAPTURE_STEPS: "a-b[,c]" steps written as traces
  bool remote_captures = true;               // STEPTRACE_REMOTE_CAPTURES: steptrace-ctl's requests in trace_dir are read
  bool flush_on_exit = true;                 // STEPTRACE_FLUSH_ON_EXIT: SIGTERM / exit without stop() write the pending lines
  int end_wait_ms = 1000;                    // STEPTRACE_END_WAIT_MS: how long such an ending may take
};

/// One problem with the configuration: the setting's name and what was wrong.
struct ConfigError {
  std::string setting;
  std::string message;
};

/// Replaces every "{rank}" in a log path.
inline std::string expand_log_path(std::string path, int rank) {
  const std::string token = "{rank}";
  for (auto pos = path.find(token); pos != std::string::npos; pos = path.find(token, pos))
    path.replace(pos, token.size(), std::to_string(rank < 0 ? 0 : rank));
  return path;
}

/// The log a process writes when another process holds `path`: "<stem>.pid<PID><.jsonl>" beside it
/// ("steptrace-0.jsonl" -> "steptrace-0.pid4242.jsonl"; a path without an extension gets the suffix);
/// attempt n > 0 adds "-n" (another namespace's process with the same PID holds the first).
inline std::string per_process_log_path(const std::string& path, long pid, int attempt = 0) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  const std::string suffix = ".pid" + std::to_string(pid) + (attempt > 0 ? "-" + std::to_string(attempt) : "");
  return has_ext ? path.substr(0, dot) + suffix + path.substr(dot) : path + suffix;
}

STEPTRACE_END_NAMESPACE  // steptrace
