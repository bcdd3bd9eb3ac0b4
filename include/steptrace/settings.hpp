// steptrace/settings.hpp - every Config field as one row of a typed table: its name, environment
// variable, accepted range or spellings, default and one line of documentation. The table drives
// apply_environment() and validate(), and tests/test_config.cpp checks docs/configuration.md's table against
// it, so a setting cannot be spelled one way in code and another in the documentation.
#pragma once
#include "version.hpp"
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/printable.hpp"
#include "core/step_ranges.hpp"

STEPTRACE_BEGIN_NAMESPACE

namespace details {

inline bool parse_bool(const std::string& v, bool& out) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return out = true, true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return out = false, true;
  return false;
}

// Leading blanks are refused too (strtod and strtoll would skip them): ' 5' is a typo, not 5. So are
// what strtod alone would take: hexadecimal ('0x10' is 16 to strtod), 'inf', 'nan': decimal only.
inline bool parse_double(const std::string& v, double& out) {
  if (v.empty() || v.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || end != v.c_str() + v.size()) return false;
  out = d;
  return true;
}

inline bool parse_int(const std::string& v, long long& out) {
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end != v.c_str() + v.size()) return false;
  out = i;
  return true;
}

inline std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace details

/// One setting. `parse` reads an environment value into the field ("" or what was wrong; the field
/// is left as it was); `check` tests the field's current value ("" or what is wrong); `text` shows it.
struct Setting {
  std::string name;      // the Config field
  std::string variable;  // the environment variable
  std::string range;     // what is accepted, as docs/configuration.md shows it
  std::string doc;       // one line
  std::function<std::string(Config&, const std::string&)> parse;
  std::function<std::string(const Config&)> check;
  std::function<std::string(const Config&)> text;
  std::function<void(Config&, const Config&)> reset;  // field := the default's
};

namespace details {

template <typename Member>
std::function<void(Config&, const Config&)> resetter(Member Config::*m) {
  return [m](Config& c, const Config& d) { c.*m = d.*m; };
}

inline Setting flag(const char* name, const char* var, bool Config::*m, const char* doc) {
  Setting s{name, var, "`true`, `false` (also 1/0, on/off, yes/no)", doc, {}, {}, {}, resetter(m)};
  s.parse = [m](Config& c, const std::string& v) { return parse_bool(v, c.*m) ? "" : std::string("not a boolean"); };
  s.check = [](const Config&) { return std::string(); };
  s.text = [m](const Config& c) { return std::string(c.*m ? "true" : "false"); };
  return s;
}

/// Text of at most `max_len` bytes (a path: 4096, PATH_MAX on Linux; an id or a name that goes into
/// every line: 256), without control characters.
inline std::string text_problem(const std::string& v, std::size_t max_len) {
  if (v.size() > max_len) return "longer than " + std::to_string(max_len) + " bytes (" + std::to_string(v.size()) + ")";
  for (unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f) return std::string("holds a control character");
  return {};
}
inline Setting text(const char* name, const char* var, std::string Config::*m, const char* range, const char* doc,
                    std::size_t max_len = 4096) {
  Setting s{name, var, range, doc, {}, {}, {}, resetter(m)};
  s.parse = [m, max_len](Config& c, const std::string& v) {
    std::string why = text_problem(v, max_len);
    if (why.empty()) c.*m = v;
    return why;
  };
  s.check = [m, max_len](const Config& c) { return text_problem(c.*m, max_len); };
  s.text = [m](const Config& c) { return c.*m; };
  return s;
}

/// An integer within [lo, hi]; `unset` (when not lo..hi) is accepted too and means "not set".
template <typename T>
Setting integer(const char* name, const char* var, T Config::*m, long long lo, long long hi, const char* doc,
                std::optional<long long> unset = std::nullopt) {
  std::string range = unset ? "`" + std::to_string(*unset) + "` or " : "";
  range += std::to_string(lo) + " – " + std::to_string(hi);
  Setting s{name, var, range, doc, {}, {}, {}, resetter(m)};
  auto ok = [lo, hi, unset](long long v) { return (v >= lo && v <= hi) || (unset && v == *unset); };
  s.parse = [m, ok, range](Config& c, const std::string& v) {
    long long i = 0;
    if (!parse_int(v, i)) return std::string("not an integer");
    if (!ok(i)) return "outside " + range;
    c.*m = static_cast<T>(i);
    return std::string();
  };
  s.check = [m, ok, range](const Config& c) {
    const long long v = static_cast<long long>(c.*m);
    if (c.*m > static_cast<T>(0) && v < 0) return "outside " + range;  // a size_t above long long's range
    return ok(v) ? std::string() : "got " + std::to_string(v) + ", outside " + range;
  };
  s.text = [m](const Config& c) { return std::to_string(c.*m); };
  return s;
}

/// An integer member of a Config member (Config::model_parallel.tensor), within [lo, hi].
template <typename S>
Setting nested_integer(const char* name, const char* var, S Config::*outer, int S::*inner, long long lo, long long hi,
                       const char* doc) {
  const std::string range = std::to_string(lo) + " – " + std::to_string(hi);
  Setting s{name, var, range, doc, {}, {}, {}, {}};
  auto ok = [lo, hi](long long v) { return v >= lo && v <= hi; };
  s.parse = [outer, inner, ok, range](Config& c, const std::string& v) {
    long long i = 0;
    if (!parse_int(v, i)) return std::string("not an integer");
    if (!ok(i)) return "outside " + range;
    (c.*outer).*inner = static_cast<int>(i);
    return std::string();
  };
  s.check = [outer, inner, ok, range](const Config& c) {
    const long long v = (c.*outer).*inner;
    return ok(v) ? std::string() : "got " + std::to_string(v) + ", outside " + range;
  };
  s.text = [outer, inner](const Config& c) { return std::to_string((c.*outer).*inner); };
  s.reset = [outer, inner](Config& c, const Config& d) { (c.*outer).*inner = (d.*outer).*inner; };
  return s;
}

/// A finite number within [lo, hi].
inline Setting real(const char* name, const char* var, double Config::*m, double lo, double hi, const char* doc) {
  const std::string range = number_text(lo) + " – " + number_text(hi);
  Setting s{name, var, range, doc, {}, {}, {}, resetter(m)};
  auto ok = [lo, hi](double v) { return std::isfinite(v) && v >= lo && v <= hi; };
  s.parse = [m, ok, range](Config& c, const std::string& v) {
    double d = 0;
    if (!parse_double(v, d)) return std::string("not a number");
    if (!ok(d)) return "outside " + range;
    c.*m = d;
    return std::string();
  };
  s.check = [m, ok, range](const Config& c) {
    return ok(c.*m) ? std::string() : "got " + number_text(c.*m) + ", outside " + range;
  };
  s.text = [m](const Config& c) { return number_text(c.*m); };
  return s;
}

/// One of a few spellings, held as an enum.
template <typename E>
Setting choice(const char* name, const char* var, E Config::*m, std::vector<std::pair<std::string, E>> names,
               const char* doc) {
  std::string range;
  for (const auto& [spelling, value] : names) range += (range.empty() ? "`" : ", `") + spelling + "`";
  Setting s{name, var, range, doc, {}, {}, {}, resetter(m)};
  s.parse = [m, names, range](Config& c, const std::string& v) {
    for (const auto& [spelling, value] : names)
      if (v == spelling) return c.*m = value, std::string();
    return "not one of " + range;
  };
  s.check = [m, names](const Config& c) {
    for (const auto& [spelling, value] : names)
      if (c.*m == value) return std::string();
    return std::string("not a known value");
  };
  s.text = [m, names](const Config& c) {
    for (const auto& [spelling, value] : names)
      if (c.*m == value) return spelling;
    return std::string("?");
  };
  return s;
}

}  // namespace details

/// Every setting, in docs/configuration.md's order.
inline const std::vector<Setting>& settings() {
  using namespace details;
  // Never destroyed (docs/architecture.md, "statics"): a setting can be read after static destructors ran.
  static const std::vector<Setting>* table = new std::vector<Setting>([] {
    constexpr long long kMaxRanks = 1 << 24;
    std::vector<Setting> t;
    t.push_back(flag("enabled", "STEPTRACE_ENABLED", &Config::enabled, "`0` keeps steptrace off (`start()` returns false)"));
    t.push_back(text("log_path", "STEPTRACE_LOG", &Config::log_path, "a path; `{rank}` is replaced by the rank",
                     "JSON lines file (appended); `\"\"` = none; one writer per file: a file another process holds "
                     "is left to it, and this one writes `<stem>.pid<PID>.jsonl` beside it (a warning says so; not told on "
                     "network file systems, which are not locked)"));
    t.push_back(integer("log_every", "STEPTRACE_LOG_EVERY", &Config::log_every, 1, 1000000,
                        "write every N-th step with a `window` summary of the N steps"));
    t.push_back(choice("line_detail", "STEPTRACE_LINE_DETAIL", &Config::line_detail,
                       {{"full", LineDetail::full}, {"compact", LineDetail::compact}},
                       "what the log's lines hold: `full` (`steptrace.step/1`, every field) or `compact` "
                       "(`steptrace.step/2`: the verdicts, the run's constant facts once in a `run` record; "
                       "docs/schema.md)"));
    t.push_back(real("tokens_per_step", "STEPTRACE_TOKENS_PER_STEP", &Config::tokens_per_step, 0, 1e15,
                     "this rank's tokens per step (0 = unknown)"));
    t.push_back(real("samples_per_step", "STEPTRACE_SAMPLES_PER_STEP", &Config::samples_per_step, 0, 1e15,
                     "this rank's samples per step (0 = unknown)"));
    t.push_back(real("flops_per_token", "STEPTRACE_FLOPS_PER_TOKEN", &Config::flops_per_token, 0, 1e18,
                     "training FLOPs per token (0 = no MFU)"));
    t.push_back(real("peak_flops", "STEPTRACE_PEAK_FLOPS", &Config::peak_flops, 0, 1e18,
                     "dense FLOP/s of one GPU, overrides the table (0 = from the table)"));
    t.push_back(choice("dtype", "STEPTRACE_DTYPE", &Config::dtype,
                       {{"bf16", Dtype::bf16}, {"fp16", Dtype::fp16}, {"tf32", Dtype::tf32}, {"fp8", Dtype::fp8},
                        {"fp32", Dtype::fp32}, {"bfloat16", Dtype::bf16}, {"float16", Dtype::fp16}, {"half", Dtype::fp16},
                        {"e4m3", Dtype::fp8}, {"e5m2", Dtype::fp8}, {"float32", Dtype::fp32}, {"float", Dtype::fp32}},
                       "the peak column MFU is measured against"));
    t.push_back(choice("gpu", "STEPTRACE_GPU", &Config::gpu, {{"auto", Mode::automatic}, {"off", Mode::off}},
                       "`off`: never touch CUDA (CPU-only programs on GPU machines)"));
    t.push_back(integer("device", "STEPTRACE_DEVICE", &Config::device, 0, 1023,
                        "CUDA device measured; -1 = the current device at `start()`", -1));
    t.push_back(choice("cupti", "STEPTRACE_CUPTI", &Config::cupti, {{"auto", Mode::automatic}, {"off", Mode::off}},
                       "`off`: no GPU attribution (host timings and memory only)"));
    t.push_back(choice("counters", "STEPTRACE_COUNTERS", &Config::counters, {{"auto", Mode::automatic}, {"off", Mode::off}},
                       "hardware counters by CUPTI PM sampling; `off` leaves them null. Needs `cupti=auto`"));
    t.push_back(real("counters_interval_us", "STEPTRACE_COUNTERS_INTERVAL_US", &Config::counters_interval_us, 20, 1e6,
                     "PM sampling period in GPU time"));
    t.push_back(integer("counters_buffer_mib", "STEPTRACE_COUNTERS_BUFFER_MIB", &Config::counters_buffer_mib, 8, 1024,
                        "PM sampling's hardware buffer (device memory)"));
    t.push_back(choice("clock", "STEPTRACE_CLOCK", &Config::clock,
                       {{"auto", ClockSource::automatic}, {"steady", ClockSource::steady}},
                       "what phase scopes read: the CPU's time-stamp counter where usable, or `steady_clock`"));
    t.push_back(integer("cross_rank_every", "STEPTRACE_CROSS_RANK_EVERY", &Config::cross_rank_every, 1, 1000000,
                        "with a communicator: gather every rank's step summary every N steps"));
    t.push_back(integer("trace_every", "STEPTRACE_TRACE_EVERY", &Config::trace_every, 0, 1000000,
                        "sampled attribution: CUPTI attributes every N-th step; 0 = `overhead_budget` chooses N"));
    t.push_back(real("overhead_budget", "STEPTRACE_OVERHEAD_BUDGET", &Config::overhead_budget, 0, 0.5,
                     "with `trace_every` 0: the share of step time steptrace may cost; it traces every N-th "
                     "step to stay inside (0: every step), and marks 1 step in N with stream markers where marking "
                     "every step would cost over their share of it (half, or what 80 % of it leaves "
                     "beside CUPTI attached and the calls), and 1 in 2 at least until marked and unmarked "
                     "steps compared in the run show that every step fits"));
    t.push_back(choice("untraced_cupti", "STEPTRACE_UNTRACED_CUPTI", &Config::untraced_cupti,
                       {{"auto", UntracedCupti::automatic}, {"keep", UntracedCupti::keep}, {"detach", UntracedCupti::detach}},
                       "what CUPTI does between traced steps; `auto`: attached, detached by `overhead_budget` when "
                       "staying attached alone costs more than 80 % of the budget"));
    t.push_back(flag("stream_markers", "STEPTRACE_STREAM_MARKERS", &Config::stream_markers,
                     "CUDA events at each step's and top-level phase's boundaries on the program's stream (the stream "
                     "that took 9 in 10 of a traced step's kernel launches on the step's thread, learnt; the legacy "
                     "default stream once a traced step shows the work there; or the one named by "
                     "`set_marker_stream`): GPU evidence of an untraced step's own (`gpu_markers`, `diagnosis.basis` "
                     "`markers`)"));
    t.push_back(integer("max_lag_steps", "STEPTRACE_MAX_LAG_STEPS", &Config::max_lag_steps, 0, 100000,
                        "a line waits for its GPU records until this many newer steps closed"));
    t.push_back(real("max_lag_ms", "STEPTRACE_MAX_LAG_MS", &Config::max_lag_ms, 0, 3.6e6,
                     "... or this long; then it is written with `gpu.complete: false`"));
    t.push_back(real("flush_after_ms", "STEPTRACE_FLUSH_AFTER_MS", &Config::flush_after_ms, 1, 10000,
                     "CUPTI is asked for partly filled record buffers once a line has waited this long"));
    t.push_back(flag("summary", "STEPTRACE_SUMMARY", &Config::summary, "print the summary at `stop()`"));
    t.push_back(real("memory_sample_ms", "STEPTRACE_MEMORY_SAMPLE_MS", &Config::memory_sample_ms, 0.1, 60000,
                     "device-memory and NVML sampling period (background thread); under `overhead_budget` longer when one reading costs more than a tenth of the budget"));
    t.push_back(integer("rank", "STEPTRACE_RANK", &Config::rank, 0, kMaxRanks - 1,
                        "this process's rank; -1 = `RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`", -1));
    t.push_back(integer("local_rank", "STEPTRACE_LOCAL_RANK", &Config::local_rank, 0, kMaxRanks - 1,
                        "rank on this host; -1 = `LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`", -1));
    t.push_back(integer("world_size", "STEPTRACE_WORLD_SIZE", &Config::world_size, 1, kMaxRanks,
                        "ranks in the job; -1 = `WORLD_SIZE`, `OMPI_COMM_WORLD_SIZE`, `SLURM_NTASKS`", -1));
    t.push_back(integer("max_pending_steps", "STEPTRACE_MAX_PENDING_STEPS", &Config::max_pending_steps, 1, 65536,
                        "steps queued for the writer; beyond, lines are dropped and counted"));
    t.push_back(integer("max_spans_per_step", "STEPTRACE_MAX_SPANS_PER_STEP", &Config::max_spans_per_step, 1, 1 << 20,
                        "phase scopes kept per step; beyond, dropped and counted"));
    t.push_back(text("prometheus_textfile", "STEPTRACE_PROMETHEUS_TEXTFILE", &Config::prometheus_textfile,
                     "a path ending in `.prom`; `{rank}` is replaced by the rank",
                     "node_exporter textfile with the metrics (docs/prometheus.md); `\"\"` = none"));
    t.push_back(text("prometheus_listen", "STEPTRACE_PROMETHEUS_LISTEN", &Config::prometheus_listen,
                     "`host:port`, e.g. `127.0.0.1:9464`",
                     "scrape endpoint `/metrics` on port + local rank; `\"\"` = none"));
    t.push_back(real("prometheus_every_ms", "STEPTRACE_PROMETHEUS_EVERY_MS", &Config::prometheus_every_ms, 100, 3.6e6,
                     "the textfile is rewritten at most this often (and at `stop()`)"));
    t.push_back(integer("prometheus_window_lines", "STEPTRACE_PROMETHEUS_WINDOW_LINES", &Config::prometheus_window_lines,
                        1, 1024, "lines the `steptrace_window_*` means are over (traced lines for GPU attribution)"));
    t.push_back(text("job_name", "STEPTRACE_JOB_NAME", &Config::job_name, "text, at most 256 bytes",
                     "the metrics' `steptrace_job` label; `\"\"` = `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else the program's name", 256));
    t.push_back(text("job_id", "STEPTRACE_JOB_ID", &Config::job_id, "text, at most 256 bytes",
                     "every line's `job_id`; `\"\"` = `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else the Kubernetes pod's name", 256));
    t.push_back(real("stall_after_s", "STEPTRACE_STALL_AFTER_S", &Config::stall_after_s, 0, 604800,
                     "no step begun for this long, and for 10 median steps, writes a `stall` record (again at 2x, "
                     "4x ...) and a `resumed` one after; 0 = off"));
    t.push_back(nested_integer("model_parallel.tensor", "STEPTRACE_TENSOR_PARALLEL", &Config::model_parallel,
                               &ModelParallel::tensor, 1, kMaxRanks, "tensor-parallel degree (MFU divides by it)"));
    t.push_back(nested_integer("model_parallel.pipeline", "STEPTRACE_PIPELINE_PARALLEL", &Config::model_parallel,
                               &ModelParallel::pipeline, 1, kMaxRanks, "pipeline-parallel degree (MFU divides by it)"));
    t.push_back(nested_integer("model_parallel.context", "STEPTRACE_CONTEXT_PARALLEL", &Config::model_parallel,
                               &ModelParallel::context, 1, kMaxRanks, "context-parallel degree (MFU divides by it)"));
    t.push_back(integer("trace_keep_steps", "STEPTRACE_TRACE_KEEP_STEPS", &Config::trace_keep_steps, 0, 1024,
                        "the flight recorder keeps the last N steps' phase scopes and GPU records to write as "
                        "traces; 0 = off"));
    t.push_back(real("trace_trigger", "STEPTRACE_TRACE_TRIGGER", &Config::trace_trigger, 0, 1000,
                     "a step slower than this x the median of the last 64 (after 20 steps) is written as a trace "
                     "with its neighbours; 0 = never"));
    t.push_back(integer("trace_max_files", "STEPTRACE_TRACE_MAX_FILES", &Config::trace_max_files, 0, 100000,
                        "traces written per run, at most (more captured steps are counted, not written)"));
    t.push_back(integer("trace_ring_mib", "STEPTRACE_TRACE_RING_MIB", &Config::trace_ring_mib, 1, 65536,
                        "the flight recorder's memory bound; the oldest steps go first"));
    t.push_back(text("trace_dir", "STEPTRACE_TRACE_DIR", &Config::trace_dir, "a directory",
                     "where traces are written; `\"\"` = the log file's directory (the current one without a log)"));
    Setting capture = text("capture_steps", "STEPTRACE_CAPTURE_STEPS", &Config::capture_steps, "`a-b`, `a`, comma-separated",
                           "steps (global_step) written as traces whatever the trigger says; `\"\"` = none");
    capture.parse = [](Config& c, const std::string& v) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      const std::string why = parse_step_ranges(v, ranges);
      if (why.empty()) c.capture_steps = v;
      return why;
    };
    capture.check = [](const Config& c) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      return parse_step_ranges(c.capture_steps, ranges);
    };
    t.push_back(std::move(capture));
    t.push_back(flag("remote_captures", "STEPTRACE_REMOTE_CAPTURES", &Config::remote_captures,
                     "read capture requests (`steptrace-ctl capture`) from files in the trace directory, once a "
                     "second; whoever can write there can ask for traced, captured steps"));
    t.push_back(flag("flush_on_exit", "STEPTRACE_FLUSH_ON_EXIT", &Config::flush_on_exit,
                     "on SIGTERM and at exit without `stop()`: write the pending lines and an end record within `end_wait_ms` (1 s), "
                     "then hand SIGTERM on to the program's own handler"));
    t.push_back(integer("end_wait_ms", "STEPTRACE_END_WAIT_MS", &Config::end_wait_ms, 100, 60000,
                        "with `flush_on_exit`: how long the pending lines and the end record may take before SIGTERM "
                        "goes on (or exit proceeds); lines still waiting then are counted, not written"));
    return t;
  }());
  return *table;
}

/// Applies STEPTRACE_* variables (name, value pairs, e.g. from `environ`) to `cfg`. Unknown
/// STEPTRACE_ names and bad values are returned as errors naming the variable; the field keeps its value.
inline std::vector<ConfigError> apply_environment(Config& cfg,
                                                  const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<ConfigError> errors;
  for (const auto& [name, value] : env) {
    if (name.rfind("STEPTRACE_", 0) != 0) continue;
    // steptrace's own variables read elsewhere, not by the runtime: python/setup.py's configure arguments.
    if (name == "STEPTRACE_CMAKE_ARGS") continue;
    const Setting* setting = nullptr;
    for (const auto& s : settings())
      if (s.variable == name) setting = &s;
    if (!setting) {
      errors.push_back({details::printable(name), "unknown steptrace setting (ignored); see docs/configuration.md"});
      continue;
    }
    const std::string why = setting->parse(cfg, value);
    if (!why.empty())
      errors.push_back({name, "cannot use value '" + details::printable(value, 128) + "' (" + why + "); keeping " + setting->name + " = " +
                                  setting->text(cfg)});
  }
  return errors;
}

/// Checks every field against its range; a bad value is reported and replaced by its default.
inline std::vector<ConfigError> validate(Config& cfg) {
  std::vector<ConfigError> errors;
  const Config defaults;
  for (const auto& s : settings()) {
    const std::string why = s.check(cfg);
    if (why.empty()) continue;
    s.reset(cfg, defaults);
    errors.push_back({s.name, why + "; using the default " + s.text(cfg)});
  }
  return errors;
}

STEPTRACE_END_NAMESPACE  // steptrace
