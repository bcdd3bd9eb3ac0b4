// steptrace/config.hpp - what a program can set, from code or from the environment.
//
//   steptrace::Config cfg;
//   cfg.log_path = "steps-{rank}.jsonl";
//   cfg.tokens_per_step = batch * seq_len;
//   steptrace::start(cfg);                      // STEPTRACE_* variables override these fields
//
// Validation never throws: a bad value yields one message naming the setting, and the setting keeps
// its default (or is disabled, for an unusable log path).
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/metrics.hpp"

namespace steptrace {

struct Config {
  bool enabled = true;                   // STEPTRACE_ENABLED=0 turns the whole library into no-ops at start()
  std::string log_path = "steptrace.jsonl";  // STEPTRACE_LOG; "" = no file; "{rank}" is replaced by the rank
  int log_every = 1;                     // STEPTRACE_LOG_EVERY: write every N-th step, with a window summary
  double tokens_per_step = 0;            // STEPTRACE_TOKENS_PER_STEP: tokens this rank processes per step (0 = unknown)
  double samples_per_step = 0;           // STEPTRACE_SAMPLES_PER_STEP
  double flops_per_token = 0;            // STEPTRACE_FLOPS_PER_TOKEN: training FLOPs per token (0 = no MFU)
  double peak_flops = 0;                 // STEPTRACE_PEAK_FLOPS: dense FLOP/s of one GPU (0 = from the table)
  std::string dtype = "bf16";            // STEPTRACE_DTYPE: bf16 | fp16 | tf32 | fp8 | fp32 (peak column)
  std::string gpu = "auto";              // STEPTRACE_GPU: auto | off (off: never touch CUDA)
  int device = -1;                       // STEPTRACE_DEVICE: CUDA device; -1 = the current device at start()
  std::string cupti = "auto";            // STEPTRACE_CUPTI: auto | off (off: host timings and memory only)
  std::string counters = "auto";         // STEPTRACE_COUNTERS: auto | off. Hardware counters by CUPTI PM sampling
                                         // (needs cupti=auto); off: sm_activity etc. stay null
  std::string clock = "auto";            // STEPTRACE_CLOCK: auto | steady. Phase scopes read the CPU's invariant
                                         // time-stamp counter where usable (auto), else steady_clock
  double counters_interval_us = 1000;    // STEPTRACE_COUNTERS_INTERVAL_US: PM sampling period (GPU time)
  int cross_rank_every = 10;             // STEPTRACE_CROSS_RANK_EVERY: with a communicator (steptrace/nccl.hpp),
                                         // gather every rank's step summary every N steps
  int trace_every = 1;                   // STEPTRACE_TRACE_EVERY: CUPTI attributes every N-th step (steps N*k);
                                         // between them CUPTI is switched off and lines carry host timings
  std::string untraced_cupti = "keep";   // STEPTRACE_UNTRACED_CUPTI: keep | detach. What CUPTI does between traced
                                         // steps (trace_every > 1). keep: stays attached with records and
                                         // callbacks off (~0.7 us per launch remains). detach: cuptiFinalize
                                         // after each traced step's line, attach again before the next traced
                                         // step (~8 ms and one device synchronization per traced step; untraced
                                         // steps at full speed). For launch-bound programs; no hardware counters
  int max_lag_steps = 2;                 // STEPTRACE_MAX_LAG_STEPS: a line waits for its GPU records at most
  double max_lag_ms = 1000;              // STEPTRACE_MAX_LAG_MS:    this many newer steps or this long
  bool summary = true;                   // STEPTRACE_SUMMARY: print the summary table at stop()
  double memory_sample_ms = 10;          // STEPTRACE_MEMORY_SAMPLE_MS: device-memory sampling period
  int rank = -1, local_rank = -1, world_size = -1;  // STEPTRACE_RANK etc.; -1 = RANK/LOCAL_RANK/WORLD_SIZE env
  std::size_t max_pending_steps = 256;   // STEPTRACE_MAX_PENDING_STEPS: steps queued for the writer before dropping
  std::size_t max_spans_per_step = 4096; // STEPTRACE_MAX_SPANS_PER_STEP: phase scopes kept per step
};

/// One problem with the configuration: the setting's name and what was wrong.
struct ConfigError {
  std::string setting;
  std::string message;
};

namespace details {

inline bool parse_bool(const std::string& v, bool& out) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return out = true, true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return out = false, true;
  return false;
}

inline bool parse_double(const std::string& v, double& out) {
  if (v.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || end != v.c_str() + v.size()) return false;
  out = d;
  return true;
}

inline bool parse_int(const std::string& v, long long& out) {
  if (v.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end != v.c_str() + v.size()) return false;
  out = i;
  return true;
}

}  // namespace details

/// Applies STEPTRACE_* variables (name, value pairs, e.g. from `environ`) to `cfg`. Unknown
/// STEPTRACE_ names and unparsable values are returned as errors; the field keeps its value.
inline std::vector<ConfigError> apply_environment(Config& cfg,
                                                  const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<ConfigError> errors;
  for (const auto& [name, value] : env) {
    if (name.rfind("STEPTRACE_", 0) != 0) continue;
    const std::string key = name.substr(10);
    bool ok = true;
    double d = 0;
    long long i = 0;
    if (key == "ENABLED") ok = details::parse_bool(value, cfg.enabled);
    else if (key == "SUMMARY") ok = details::parse_bool(value, cfg.summary);
    else if (key == "LOG") cfg.log_path = value;
    else if (key == "DTYPE") cfg.dtype = value;
    else if (key == "GPU") cfg.gpu = value;
    else if (key == "CUPTI") cfg.cupti = value;
    else if (key == "COUNTERS") cfg.counters = value;
    else if (key == "UNTRACED_CUPTI") cfg.untraced_cupti = value;
    else if (key == "CLOCK") cfg.clock = value;
    else if (key == "COUNTERS_INTERVAL_US") ok = details::parse_double(value, d) && (cfg.counters_interval_us = d, true);
    else if (key == "MAX_LAG_STEPS") ok = details::parse_int(value, i) && (cfg.max_lag_steps = static_cast<int>(i), true);
    else if (key == "MAX_LAG_MS") ok = details::parse_double(value, d) && (cfg.max_lag_ms = d, true);
    else if (key == "CROSS_RANK_EVERY") ok = details::parse_int(value, i) && (cfg.cross_rank_every = static_cast<int>(i), true);
    else if (key == "TRACE_EVERY") ok = details::parse_int(value, i) && (cfg.trace_every = static_cast<int>(i), true);
    else if (key == "LOG_EVERY") ok = details::parse_int(value, i) && (cfg.log_every = static_cast<int>(i), true);
    else if (key == "DEVICE") ok = details::parse_int(value, i) && (cfg.device = static_cast<int>(i), true);
    else if (key == "RANK") ok = details::parse_int(value, i) && (cfg.rank = static_cast<int>(i), true);
    else if (key == "LOCAL_RANK") ok = details::parse_int(value, i) && (cfg.local_rank = static_cast<int>(i), true);
    else if (key == "WORLD_SIZE") ok = details::parse_int(value, i) && (cfg.world_size = static_cast<int>(i), true);
    else if (key == "TOKENS_PER_STEP") ok = details::parse_double(value, d) && (cfg.tokens_per_step = d, true);
    else if (key == "SAMPLES_PER_STEP") ok = details::parse_double(value, d) && (cfg.samples_per_step = d, true);
    else if (key == "FLOPS_PER_TOKEN") ok = details::parse_double(value, d) && (cfg.flops_per_token = d, true);
    else if (key == "PEAK_FLOPS") ok = details::parse_double(value, d) && (cfg.peak_flops = d, true);
    else if (key == "MEMORY_SAMPLE_MS") ok = details::parse_double(value, d) && (cfg.memory_sample_ms = d, true);
    else if (key == "MAX_PENDING_STEPS")
      ok = details::parse_int(value, i) && i > 0 && (cfg.max_pending_steps = static_cast<std::size_t>(i), true);
    else if (key == "MAX_SPANS_PER_STEP")
      ok = details::parse_int(value, i) && i > 0 && (cfg.max_spans_per_step = static_cast<std::size_t>(i), true);
    else {
      errors.push_back({name, "unknown steptrace setting (ignored); see README 'Configuration'"});
      continue;
    }
    if (!ok) errors.push_back({name, "cannot parse value '" + value + "'; keeping " + name.substr(10) + "'s previous value"});
  }
  return errors;
}

namespace details {
/// A setting with two spellings: anything else is reported and replaced by the default.
inline void one_of(std::vector<ConfigError>& errors, const char* setting, std::string& value, const std::string& fallback,
                   const char* a, const char* b) {
  if (value == a || value == b) return;
  errors.push_back({setting, "unknown value '" + value + "' (" + a + ", " + b + "); using " + fallback});
  value = fallback;
}
}  // namespace details

/// Checks ranges and spellings; a bad value is reported and replaced by its default.
inline std::vector<ConfigError> validate(Config& cfg) {
  std::vector<ConfigError> errors;
  const Config defaults;
  auto non_negative = [&](const char* name, double& v) {
    if (!(v >= 0)) {  // also catches NaN
      errors.push_back({name, "must be >= 0, got " + std::to_string(v) + "; treated as not set"});
      v = 0;
    }
  };
  non_negative("tokens_per_step", cfg.tokens_per_step);
  non_negative("samples_per_step", cfg.samples_per_step);
  non_negative("flops_per_token", cfg.flops_per_token);
  non_negative("peak_flops", cfg.peak_flops);
  if (cfg.log_every < 1) {
    errors.push_back({"log_every", "must be >= 1, got " + std::to_string(cfg.log_every) + "; using 1"});
    cfg.log_every = 1;
  }
  if (cfg.cross_rank_every < 1) {
    errors.push_back({"cross_rank_every", "must be >= 1, got " + std::to_string(cfg.cross_rank_every) + "; using 10"});
    cfg.cross_rank_every = defaults.cross_rank_every;
  }
  if (cfg.trace_every < 1) {
    errors.push_back({"trace_every", "must be >= 1, got " + std::to_string(cfg.trace_every) + "; using 1 (every step)"});
    cfg.trace_every = 1;
  }
  if (!parse_dtype(cfg.dtype)) {
    errors.push_back({"dtype", "unknown dtype '" + cfg.dtype + "' (bf16, fp16, tf32, fp8, fp32); using bf16"});
    cfg.dtype = defaults.dtype;
  }
  details::one_of(errors, "gpu", cfg.gpu, defaults.gpu, "auto", "off");
  details::one_of(errors, "cupti", cfg.cupti, defaults.cupti, "auto", "off");
  details::one_of(errors, "clock", cfg.clock, defaults.clock, "auto", "steady");
  details::one_of(errors, "untraced_cupti", cfg.untraced_cupti, defaults.untraced_cupti, "keep", "detach");
  details::one_of(errors, "counters", cfg.counters, defaults.counters, "auto", "off");
  if (!(cfg.counters_interval_us >= 20 && cfg.counters_interval_us <= 1e6)) {
    errors.push_back({"counters_interval_us", "must be within [20, 1000000] microseconds; using " +
                                                  std::to_string(defaults.counters_interval_us)});
    cfg.counters_interval_us = defaults.counters_interval_us;
  }
  if (cfg.max_lag_steps < 0) {
    errors.push_back({"max_lag_steps", "must be >= 0; using " + std::to_string(defaults.max_lag_steps)});
    cfg.max_lag_steps = defaults.max_lag_steps;
  }
  if (!(cfg.max_lag_ms >= 0)) {
    errors.push_back({"max_lag_ms", "must be >= 0; using " + std::to_string(defaults.max_lag_ms)});
    cfg.max_lag_ms = defaults.max_lag_ms;
  }
  if (!(cfg.memory_sample_ms > 0)) {
    errors.push_back({"memory_sample_ms", "must be > 0; using " + std::to_string(defaults.memory_sample_ms)});
    cfg.memory_sample_ms = defaults.memory_sample_ms;
  }
  if (cfg.device < -1) {
    errors.push_back({"device", "must be >= -1; using the current device"});
    cfg.device = -1;
  }
  return errors;
}

/// Replaces every "{rank}" in a log path.
inline std::string expand_log_path(std::string path, int rank) {
  const std::string token = "{rank}";
  for (auto pos = path.find(token); pos != std::string::npos; pos = path.find(token, pos))
    path.replace(pos, token.size(), std::to_string(rank < 0 ? 0 : rank));
  return path;
}

}  // namespace steptrace
