// steptrace/sink/prometheus_metrics.hpp - the step lines as Prometheus metrics, and their text
// exposition. Pure: fed the lines as written (it reads them as any outside reader would, so a metric
// always equals its line's field), it keeps the last step's values, a mean over the last
// `window_steps` steps and the counters, and renders them.
//
// Conventions (https://prometheus.io/docs/practices/naming/): base units (seconds, bytes, ratios 0-1),
// `_total` for counters, HELP and TYPE for every family; a null field is an absent series, never 0.
// Every family, its type, unit and line field: docs/prometheus.md (a test holds the two together).
// Text format: https://prometheus.io/docs/instrumenting/exposition_formats/ (label values escape
// backslash, double quote and newline; HELP escapes backslash and newline).
#pragma once
#include "../version.hpp"
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/diagnosis.hpp"
#include "../core/json_flat.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace sink {

/// Label names and values, in order.
using PromLabels = std::vector<std::pair<std::string, std::string>>;
/// One series: its own labels (phase and source, without the common ones) and value.
struct PromSample {
  PromLabels labels;
  double value = 0;
};
struct PromFamily {
  std::string name, type, help;  // type: "gauge" | "counter"
  std::vector<PromSample> samples;
};

/// A gauge read from one field of the line: value = field x scale.
struct PromGaugeSpec {
  const char* name;
  const char* pointer;  // JSON pointer into the line
  double scale;
  const char* help;
  bool windowed;        // also as steptrace_window_<rest of the name>: the mean over the window
};

inline const std::vector<PromGaugeSpec>& prom_gauges() {
  static const std::vector<PromGaugeSpec> specs = {
      {"steptrace_step_time_seconds", "/step_time_ms", 1e-3, "Step time: this step's begin to the next one's", true},
      {"steptrace_tokens_per_second", "/tokens_per_second", 1, "Tokens per second of this rank", true},
      {"steptrace_samples_per_second", "/samples_per_second", 1, "Samples per second of this rank", true},
      {"steptrace_mfu_ratio", "/estimated_mfu", 1, "Model FLOPs utilization (0-1)", true},
      {"steptrace_gpu_utilization_ratio", "/gpu_utilization", 1, "Share of the step with any GPU work of the program (what nvidia-smi calls utilization)", true},
      {"steptrace_sm_activity_ratio", "/sm_activity", 1, "Share of SM cycles with a warp resident, mean over SMs (DCGM SM_ACTIVE)", true},
      {"steptrace_tensor_pipe_utilization_ratio", "/tensor_core_or_pipe_utilization", 1, "Tensor pipe utilization (0-1)", true},
      {"steptrace_dram_utilization_ratio", "/memory_bandwidth_utilization", 1, "DRAM bandwidth utilization (0-1)", true},
      {"steptrace_dataloader_wait_seconds", "/dataloader_wait_ms", 1e-3, "Time waiting for input in the step", true},
      {"steptrace_untracked_seconds", "/untracked_time_ms", 1e-3, "Step time outside every built-in phase", true},
      {"steptrace_gpu_busy_seconds", "/gpu/busy_ms", 1e-3, "GPU time with the step's work running (union of kernels, copies, memsets)", true},
      {"steptrace_nccl_seconds", "/nccl_time_ms", 1e-3, "NCCL kernel time in the step", true},
      {"steptrace_nccl_exposed_seconds", "/gpu/nccl_exposed_ms", 1e-3, "NCCL time not overlapped by other kernels", true},
      {"steptrace_loss", "/loss", 1, "Loss recorded in the step", true},
      {"steptrace_grad_norm", "/grad_norm", 1, "Gradient norm recorded in the step", true},
      {"steptrace_power_watts", "/device_state/power_w_mean", 1, "GPU power, mean of the step's NVML readings", true},
      {"steptrace_sm_clock_hertz", "/device_state/sm_clock_mhz_mean", 1e6, "SM clock, mean of the step's NVML readings", true},
      {"steptrace_peak_memory_bytes", "/peak_memory_allocated", 1, "Peak device memory of the step (allocator, else device used)", false},
      {"steptrace_device_memory_total_bytes", "/memory/device_total_bytes", 1, "Device memory in total", false},
      {"steptrace_overhead_ratio", "/overhead/estimated_fraction", 1, "What steptrace estimates it costs, share of step time", false},
      {"steptrace_trace_every", "/overhead/trace_every", 1, "Trace interval in force: one step in N is attributed by CUPTI", false},
      {"steptrace_global_step", "/global_step", 1, "Index of the step these values are from", false},
      {"steptrace_last_step_start_timestamp_seconds", "/start_unix_ms", 1e-3, "Wall clock at the start of the step these values are from", false},
      // The cross-rank view (rank 0, with a communicator): kept until the next view.
      {"steptrace_cross_rank_step", "/cross_rank/step", 1, "Step of the last cross-rank view", false},
      {"steptrace_cross_rank_step_skew_ratio", "/cross_rank/step_skew", 1, "Share of every rank's step lost to the slowest rank", false},
      {"steptrace_cross_rank_gap_seconds", "/cross_rank/gap_ms", 1e-3, "Slowest rank's work minus the median work", false},
      {"steptrace_cross_rank_slowest_rank", "/cross_rank/slowest_rank", 1, "Rank with the most work in the last view", false},
      {"steptrace_cross_rank_balanced", "/cross_rank/balanced", 1, "1 when the step skew is under 0.05 and every rank reported", false},
      {"steptrace_cross_rank_reporting_ranks", "/cross_rank/reporting", 1, "Ranks whose summary was in the last view", false},
      {"steptrace_cross_rank_missing_ranks", "/cross_rank/missing_count", 1, "Ranks whose summary was missing from the last view", false},
  };
  return specs;
}

/// Counters: the sum of a field over the lines, or (`cumulative`) the field itself.
struct PromCounterSpec {
  const char* name;
  const char* pointer;
  bool cumulative;
  const char* help;
};
inline const std::vector<PromCounterSpec>& prom_counters() {
  static const std::vector<PromCounterSpec> specs = {
      {"steptrace_dropped_steps_total", "/dropped/steps_total", true, "Steps whose line was dropped (writer queue full)"},
      {"steptrace_dropped_phase_scopes_total", "/dropped/phase_scopes", false, "Phase scopes over max_spans_per_step"},
      {"steptrace_dropped_scalars_total", "/dropped/scalars", false, "record() calls over the per-step limit"},
      {"steptrace_dropped_gpu_records_total", "/gpu/dropped_records", false, "GPU records CUPTI could not store"},
      {"steptrace_excluded_gpu_records_total", "/gpu/excluded_records", false, "Impossible GPU records left out of every sum"},
      {"steptrace_traced_steps_total", "/traced", false, "Lines of steps attributed by CUPTI"},
  };
  return specs;
}

namespace details {
inline void append_escaped(std::string& out, std::string_view v, bool quote) {
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
}
inline void append_labels(std::string& out, const PromLabels& labels) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    out += i ? "," : "{";
    out += labels[i].first + "=\"";
    append_escaped(out, labels[i].second, true);
    out += '"';
  }
  if (!labels.empty()) out += '}';
}
inline std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace details

class PrometheusModel {
 public:
  /// `job`: the job label ("" = none); `window_steps`: steps in the window means; `labels`: the
  /// common labels until the first line brings its own (rank, local_rank, world_size, hostname, device).
  PrometheusModel(std::string job, int window_steps, PromLabels labels)
      : job_(std::move(job)), window_(window_steps < 1 ? 1 : window_steps), common_(std::move(labels)) {
    if (!job_.empty()) common_.emplace_back("job", job_);
  }

  /// One written line. Returns "" or why it was not read (it then changes nothing).
  std::string add_line(std::string_view line) {
    FlatJson f;
    std::string err = flatten_json(line, f);
    if (!err.empty()) return "line not read: " + err;
    if (!number(f, "/global_step")) return "line not read: no global_step";
    common_ = common_labels(f);
    Step s;
    for (const auto& g : prom_gauges()) {
      auto v = number(f, g.pointer);
      if (std::string_view(g.pointer).rfind("/cross_rank/", 0) == 0) {  // a view stays until the next one
        if (f.count("/cross_rank/step")) cross_[g.name] = v;
        continue;
      }
      if (v) s.values[g.name] = *v * g.scale;
    }
    if (f.count("/cross_rank/step"))
      for (const char* part : {"step_time_ms", "work_ms"})
        for (const char* stat : {"median", "min", "max"})
          cross_[std::string(part) + "/" + stat] = number(f, std::string("/cross_rank/") + part + "/" + stat);
    for (const auto& [path, leaf] : f) {  // /phases/<name>/host_ms and /phases/<name>/gpu/busy_ms
      if (path.rfind("/phases/", 0) != 0 || leaf.kind != JsonLeaf::Kind::number) continue;
      const std::size_t slash = path.find('/', 8);
      if (slash == std::string::npos) continue;
      const std::string rest = path.substr(slash);
      const char* source = rest == "/host_ms" ? "host" : rest == "/gpu/busy_ms" ? "gpu" : nullptr;
      if (!source) continue;
      std::string name = unescape_pointer(path.substr(8, slash - 8));
      s.phases[{std::move(name), source}] = leaf.number * 1e-3;
    }
    const auto d = f.find("/diagnosis/label");
    if (d != f.end() && d->second.kind == JsonLeaf::Kind::string) s.diagnosis = d->second.text;
    for (const auto& c : prom_counters()) {
      auto v = number(f, c.pointer);
      if (!v) continue;
      if (c.cumulative) counters_[c.name] = *v;
      else counters_[c.name] += *v;
    }
    steps_total_ = *number(f, "/global_step") + 1;
    ++lines_;
    last_ = s;
    recent_.push_back(std::move(s));
    while (recent_.size() > static_cast<std::size_t>(window_)) recent_.pop_front();
    return {};
  }

  bool empty() const { return lines_ == 0; }

  /// Every family; `up` = the run is live (false once stop() wrote the last values).
  std::vector<PromFamily> families(bool up) const {
    std::vector<PromFamily> out;
    out.push_back({"steptrace_up", "gauge", "1 while the run is live, 0 once it stopped (the values are its last)", {{{}, up ? 1.0 : 0.0}}});
    if (lines_ == 0) return out;
    for (const auto& g : prom_gauges()) {
      std::optional<double> v;
      if (std::string_view(g.pointer).rfind("/cross_rank/", 0) == 0) {
        auto it = cross_.find(g.name);
        if (it != cross_.end() && it->second) v = *it->second * g.scale;
      } else if (auto it = last_.values.find(g.name); it != last_.values.end()) {
        v = it->second;
      }
      add(out, g.name, "gauge", g.help, v ? std::vector<PromSample>{{{}, *v}} : std::vector<PromSample>{});
    }
    for (const char* part : {"step_time_ms", "work_ms"}) {
      std::vector<PromSample> samples;
      for (const char* stat : {"median", "min", "max"}) {
        auto it = cross_.find(std::string(part) + "/" + stat);
        if (it != cross_.end() && it->second) samples.push_back({{{"stat", stat}}, *it->second * 1e-3});
      }
      add(out, std::string(part) == "work_ms" ? "steptrace_cross_rank_work_seconds" : "steptrace_cross_rank_step_time_seconds",
          "gauge", std::string(part) == "work_ms" ? "Work (step time minus NCCL phase host time) across ranks in the last view"
                                                  : "Step time across ranks in the last view", samples);
    }
    std::vector<PromSample> phases;
    for (const auto& [key, v] : last_.phases) phases.push_back({phase_labels(key), v});
    add(out, "steptrace_phase_seconds", "gauge", "Time in a phase in the step: host scope time, or GPU busy time of the work it launched", phases);
    add(out, "steptrace_diagnosis", "gauge", "1 for what holds the last step back, 0 for the other labels", diagnosis_states(false));
    // Window means: each over the steps of the window where the value was not null.
    add(out, "steptrace_window_steps", "gauge", "Steps in the window the steptrace_window_* means are over",
        {{{}, static_cast<double>(recent_.size())}});
    for (const auto& g : prom_gauges()) {
      if (!g.windowed) continue;
      double sum = 0;
      int n = 0;
      for (const auto& s : recent_)
        if (auto it = s.values.find(g.name); it != s.values.end()) sum += it->second, ++n;
      const std::string name = "steptrace_window_" + std::string(g.name).substr(10);
      add(out, name, "gauge", std::string(g.help) + ", mean over the window",
          n ? std::vector<PromSample>{{{}, sum / n}} : std::vector<PromSample>{});
    }
    std::map<PhaseKey, std::pair<double, int>> phase_sums;
    for (const auto& s : recent_)
      for (const auto& [key, v] : s.phases) phase_sums[key].first += v, ++phase_sums[key].second;
    std::vector<PromSample> window_phases;
    for (const auto& [key, sn] : phase_sums) window_phases.push_back({phase_labels(key), sn.first / sn.second});
    add(out, "steptrace_window_phase_seconds", "gauge", "Time in a phase, mean over the window's steps that had the phase", window_phases);
    add(out, "steptrace_window_diagnosis_share", "gauge", "Share of the window's steps with each diagnosis label", diagnosis_states(true));
    add(out, "steptrace_steps_total", "counter", "Steps begun since start()", {{{}, steps_total_}});
    add(out, "steptrace_lines_total", "counter", "Step lines the exporter read", {{{}, static_cast<double>(lines_)}});
    for (const auto& c : prom_counters()) {
      auto it = counters_.find(c.name);
      add(out, c.name, "counter", c.help, {{{}, it == counters_.end() ? 0.0 : it->second}});
    }
    return out;
  }

  /// The text exposition of families(up), every series with the common labels; a family without
  /// series (its field null) is left out.
  std::string render(bool up) const {
    std::string out;
    for (const auto& fam : families(up)) {
      if (fam.samples.empty()) continue;
      out += "# HELP " + fam.name + " ";
      details::append_escaped(out, fam.help, false);
      out += "\n# TYPE " + fam.name + " " + fam.type + "\n";
      for (const auto& s : fam.samples) {
        out += fam.name;
        PromLabels labels = common_;
        labels.insert(labels.end(), s.labels.begin(), s.labels.end());
        details::append_labels(out, labels);
        out += " " + details::number_text(s.value) + "\n";
      }
    }
    return out;
  }

  /// The labels every series carries (rank, local_rank, world_size, hostname, device, job).
  const PromLabels& common_labels() const { return common_; }

 private:
  using PhaseKey = std::pair<std::string, std::string>;  // phase, source
  struct Step {
    std::map<std::string, double> values;  // gauge name -> value (absent: null)
    std::map<PhaseKey, double> phases;     // seconds
    std::string diagnosis;
  };
  static PromLabels phase_labels(const PhaseKey& k) { return {{"phase", k.first}, {"source", k.second}}; }

  static std::optional<double> number(const FlatJson& f, const std::string& pointer) {
    auto it = f.find(pointer);
    if (it == f.end() || (it->second.kind != JsonLeaf::Kind::number && it->second.kind != JsonLeaf::Kind::boolean))
      return std::nullopt;
    if (!std::isfinite(it->second.number)) return std::nullopt;
    return it->second.number;
  }
  static std::string text(const FlatJson& f, const std::string& pointer) {
    auto it = f.find(pointer);
    if (it == f.end()) return {};
    if (it->second.kind == JsonLeaf::Kind::string) return it->second.text;
    if (it->second.kind == JsonLeaf::Kind::number) return details::number_text(it->second.number);
    return {};
  }
  static std::string unescape_pointer(std::string s) {
    for (std::size_t p = s.find('~'); p != std::string::npos && p + 1 < s.size(); p = s.find('~', p + 1))
      s.replace(p, 2, s[p + 1] == '1' ? "/" : "~");
    return s;
  }
  PromLabels common_labels(const FlatJson& f) const {
    PromLabels l = {{"rank", text(f, "/rank")}, {"local_rank", text(f, "/local_rank")}, {"world_size", text(f, "/world_size")},
                    {"hostname", text(f, "/hostname")}, {"device", f.count("/device/index") ? text(f, "/device/index") : "none"}};
    if (!job_.empty()) l.emplace_back("job", job_);
    return l;
  }
  std::vector<PromSample> diagnosis_states(bool window) const {
    std::vector<PromSample> out;
    for (int b = 0; b <= static_cast<int>(Bottleneck::unknown); ++b) {
      const char* name = bottleneck_name(static_cast<Bottleneck>(b));
      double v = 0;
      if (!window) {
        v = last_.diagnosis == name;
      } else {
        for (const auto& s : recent_) v += s.diagnosis == name;
        v /= recent_.empty() ? 1.0 : static_cast<double>(recent_.size());
      }
      out.push_back({{{"label", name}}, v});
    }
    return out;
  }
  static void add(std::vector<PromFamily>& out, std::string name, const char* type, std::string help,
                  std::vector<PromSample> samples) {
    out.push_back({std::move(name), type, std::move(help), std::move(samples)});
  }

  std::string job_;
  int window_;
  PromLabels common_;
  Step last_;
  std::deque<Step> recent_;
  std::map<std::string, std::optional<double>> cross_;  // gauge name (or part/stat) -> last view's value
  std::map<std::string, double> counters_;
  double steps_total_ = 0;
  uint64_t lines_ = 0;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
