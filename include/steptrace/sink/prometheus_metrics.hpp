// steptrace/sink/prometheus_metrics.hpp - the step lines as Prometheus metrics, and their text
// exposition. Pure: fed the lines as written (it reads them as any outside reader would, so a metric
// always equals its line's field), it keeps the last line's values (the last traced line's for what
// only CUPTI attribution gives), a mean over the last `window_lines` lines (traced lines for those)
// and the counters, and renders them.
//
// Conventions (https://prometheus.io/docs/practices/naming/): base units (seconds, bytes, ratios 0-1),
// `_total` for counters, HELP and TYPE for every family; a null field is an absent series, never 0.
// Every family, its type, unit and line field: docs/prometheus.md (a test holds the two together).
// Text format: https://prometheus.io/docs/instrumenting/exposition_formats/ (label values escape
// backslash, double quote and newline; HELP escapes backslash and newline).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
/// One series: its own labels (phase and source, without the common ones) and value; a histogram's
/// series name the family's name with `suffix` (`_bucket`, `_sum`, `_count`).
struct PromSample {
  PromLabels labels;
  double value = 0;
  const char* suffix = "";
};
struct PromFamily {
  std::string name, type, help;  // type: "gauge" | "counter" | "histogram"
  std::vector<PromSample> samples;
};

/// The step-time histogram's upper bounds in seconds: the R5 Renard series (ISO 3: 1, 1.6, 2.5, 4,
/// 6.3 per decade, each ~1.58 x the one before) from 1 ms to 100 s, then +Inf. histogram_quantile()
/// interpolates inside a bucket, so a quantile is known to within that ratio.
inline const std::vector<double>& prom_step_time_buckets() {
  static const auto* b = [] {
    auto* v = new std::vector<double>;
    char text[16];
    for (int exponent = -3; exponent <= 1; ++exponent)
      for (const char* m : {"1", "1.6", "2.5", "4", "6.3"}) {  // parsed, not multiplied: 0.0016, not 0.0016000000000000001
        std::snprintf(text, sizeof text, "%se%d", m, exponent);
        v->push_back(std::strtod(text, nullptr));
      }
    v->push_back(100.0);
    return v;
  }();
  return *b;
}
/// A bucket bound as its `le` label: the shortest text that reads back as the bound.
inline std::string prom_bound_text(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", bound);
  return text;
}

/// A gauge read from one field of the line: value = field x scale.
struct PromGaugeSpec {
  const char* name;
  const char* pointer;  // JSON pointer into the line
  double scale;
  const char* help;
  bool windowed;        // also as steptrace_window_<rest of the name>: the mean over the window
};

// The tables are never destroyed: the background thread may still export while a program that skipped
// stop() runs its static destructors.
inline const std::vector<PromGaugeSpec>& prom_gauges() {
  static const auto* specs = new std::vector<PromGaugeSpec>{
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
      {"steptrace_gpu_held_ratio", "/gpu_markers/pending_share", 1, "Share of the step the GPU was busy with or held by the program's stream, from the stream markers (a lower bound of its busy share; every marked step)", true},
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
      {"steptrace_between_steps_seconds", "/between_steps/host_ms", 1e-3,
       "Time between the previous step's scope end and this step's begin (evaluation, checkpoints)", false},
      {"steptrace_global_step", "/global_step", 1, "Index of the step these values are from", false},
      {"steptrace_last_step_start_timestamp_seconds", "/start_unix_ms", 1e-3, "Wall clock at the start of the step these values are from", false},
      // The cross-rank view (rank 0, with a communicator): kept until the next view.
      {"steptrace_cross_rank_step", "/cross_rank/step", 1, "Step of the last cross-rank view", false},
      {"steptrace_cross_rank_step_skew_ratio", "/cross_rank/step_skew", 1, "Share of every rank's step lost to the slowest rank", false},
      {"steptrace_cross_rank_gap_seconds", "/cross_rank/gap_ms", 1e-3, "Slowest rank's own work minus the median rank's: what the median rank waits for it per step", false},
      {"steptrace_cross_rank_slowest_rank", "/cross_rank/slowest_rank", 1, "Rank the others wait for (the most own work) in the last view", false},
      {"steptrace_cross_rank_wait_share_ratio", "/cross_rank/wait_share", 1, "Largest minus smallest collective wait across ranks, share of the median step", false},
      {"steptrace_cross_rank_balanced", "/cross_rank/balanced", 1, "1 when every rank measured its collective wait and the waits differ by under 5 % of the step", false},
      {"steptrace_cross_rank_reporting_ranks", "/cross_rank/reporting", 1, "Ranks whose summary was in the last view", false},
      {"steptrace_cross_rank_missing_ranks", "/cross_rank/missing_count", 1, "Ranks whose summary was missing from the last view", false},
      // Every rank's own summary as exchanged (rank_wait): kept until the next one; with the rank label,
      // a panel of every rank's wait and own work.
      {"steptrace_rank_wait_seconds", "/rank_wait/wait_ms", 1e-3, "This rank's collective wait per step over its last exchange window (GPU-measured: rank_wait.wait_basis)", false},
      {"steptrace_rank_own_work_seconds", "/rank_wait/work_ms", 1e-3, "This rank's own work per step over its last exchange window: its iteration less its collective wait", false},
  };
  return *specs;
}

/// Counters: the sum of a field over the lines, or (`cumulative`) the field itself.
struct PromCounterSpec {
  const char* name;
  const char* pointer;
  bool cumulative;
  const char* help;
  bool absent_until_seen = false;  // no series until a line has the field (a count nobody gave is not 0)
};
inline const std::vector<PromCounterSpec>& prom_counters() {
  static const auto* specs = new std::vector<PromCounterSpec>{
      {"steptrace_dropped_steps_total", "/dropped/steps_total", true, "Steps whose line was dropped (writer queue full)"},
      {"steptrace_dropped_phase_scopes_total", "/dropped/phase_scopes", false, "Phase scopes over max_spans_per_step"},
      {"steptrace_dropped_scalars_total", "/dropped/scalars", false, "record() calls over the per-step limit"},
      {"steptrace_dropped_gpu_records_total", "/gpu/dropped_records", false, "GPU records CUPTI could not store"},
      {"steptrace_excluded_gpu_records_total", "/gpu/excluded_records", false, "Impossible GPU records left out of every sum"},
      {"steptrace_traced_steps_total", "/traced", false, "Lines of steps attributed by CUPTI"},
      {"steptrace_tokens_total", "/tokens_total", true, "Tokens of this rank's steps since start() (rate() gives tokens per second)", true},
      {"steptrace_samples_total", "/samples_total", true, "Samples of this rank's steps since start()", true},
  };
  return *specs;
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

/// The line's diagnosis.basis (docs/schema.md); a line written before the field: traced when its `gpu`
/// object is non-null, else none when its label is UNKNOWN (or absent), else host_only (issue #31).
inline DiagnosisBasis prom_line_basis(const FlatJson& f) {
  const auto b = f.find("/diagnosis/basis");
  if (b != f.end() && b->second.kind == JsonLeaf::Kind::string)
    for (DiagnosisBasis d : {DiagnosisBasis::traced, DiagnosisBasis::markers, DiagnosisBasis::carried, DiagnosisBasis::carried_scaled, DiagnosisBasis::host_only,
                           DiagnosisBasis::none})
      if (b->second.text == diagnosis_basis_name(d)) return d;
  for (const auto& [path, leaf] : f)  // a non-null `gpu` object leaves /gpu/... leaves
    if (path.rfind("/gpu/", 0) == 0) return DiagnosisBasis::traced;
  const auto l = f.find("/diagnosis/label");
  const bool unknown = l == f.end() || l->second.kind != JsonLeaf::Kind::string ||
                       l->second.text == bottleneck_name(Bottleneck::unknown);
  return unknown ? DiagnosisBasis::none : DiagnosisBasis::host_only;
}

/// Fields that only a traced step has (CUPTI attribution): between traced steps the exporter keeps the
/// last traced step's value (steptrace_last_traced_step says which), and their window is over traced steps.
inline bool prom_traced_only(std::string_view pointer) {
  return pointer == "/gpu_utilization" || pointer == "/gpu/busy_ms" || pointer == "/nccl_time_ms" ||
         pointer == "/gpu/nccl_exposed_ms";
}

class PrometheusModel {
 public:
  static constexpr int kMaxWindow = 1024;

  /// `job`: the steptrace_job label ("" = none); `window_lines`: lines in the window means (1 -
  /// kMaxWindow); `labels`: the common labels until the first line brings its own (rank, local_rank,
  /// world_size, Hostname, and with a GPU cuda_device, UUID, pci_bus_id).
  PrometheusModel(std::string job, int window_lines, PromLabels labels)
      : job_(std::move(job)), window_(std::clamp(window_lines, 1, kMaxWindow)), common_(std::move(labels)) {
    if (!job_.empty()) common_.emplace_back("steptrace_job", job_);
  }

  /// One written line. Returns "" or why it was not read (it then changes nothing).
  std::string add_line(std::string_view line) {
    FlatJson f;
    std::string err = flatten_json(line, f);
    if (!err.empty()) return "line not read: " + err;
    return add_fields(f);
  }
  /// One written line's fields by JSON pointer (make_step_line's, or read from the text above).
  std::string add_fields(const FlatJson& f) {
    if (!number(f, "/global_step")) return "line not read: no global_step";
    const bool traced = number(f, "/traced").value_or(0) != 0;
    ++lines_;
    if (traced) ++traced_lines_, last_traced_step_ = *number(f, "/global_step");
    common_ = common_labels(f);
    for (const auto& g : prom_gauges()) {
      const std::optional<double> v = number(f, g.pointer);
      if (std::string_view(g.pointer).rfind("/cross_rank/", 0) == 0) {  // a view stays until the next one
        if (f.count("/cross_rank/step")) set(g.name, v ? std::optional<double>(*v * g.scale) : std::nullopt, false, false);
        continue;
      }
      if (std::string_view(g.pointer).rfind("/rank_wait/", 0) == 0) {  // so does this rank's own summary
        if (f.count("/rank_wait/step")) set(g.name, v ? std::optional<double>(*v * g.scale) : std::nullopt, false, false);
        continue;
      }
      const bool carry = prom_traced_only(g.pointer) && !traced;  // the last traced step's value stays
      if (!carry) set(g.name, v ? std::optional<double>(*v * g.scale) : std::nullopt, g.windowed, prom_traced_only(g.pointer));
    }
    if (f.count("/cross_rank/step"))
      for (const char* part : {"step_time_ms", "work_ms"})
        for (const char* stat : {"median", "min", "max"}) {
          const auto v = number(f, std::string("/cross_rank/") + part + "/" + stat);
          set(std::string(part) + "/" + stat, v ? std::optional<double>(*v * 1e-3) : std::nullopt, false, false);
        }
    // Phases: /phases/<name>/host_ms and self_ms, and /phases/<name>/gpu/busy_ms on traced steps (kept
    // between them); /gpu_markers/phases/<name>/span_ms on marked steps.
    std::map<PhaseKey, double> now;
    constexpr std::string_view kMarked = "/gpu_markers/phases/";
    for (const auto& [path, leaf] : f) {
      if (path.rfind(kMarked, 0) == 0 && leaf.kind == JsonLeaf::Kind::number && std::isfinite(leaf.number)) {
        const std::size_t slash = path.find('/', kMarked.size());
        if (slash != std::string::npos && path.compare(slash, std::string::npos, "/span_ms") == 0)
          now[{unescape_pointer(path.substr(kMarked.size(), slash - kMarked.size())), "gpu_markers"}] = leaf.number * 1e-3;
        continue;
      }
      if (path.rfind("/phases/", 0) != 0 || leaf.kind != JsonLeaf::Kind::number) continue;
      const std::size_t slash = path.find('/', 8);
      if (slash == std::string::npos) continue;
      const std::string rest = path.substr(slash);
      const char* source = rest == "/host_ms" ? "host" : rest == "/self_ms" ? "host_self" : rest == "/gpu/busy_ms" ? "gpu" : nullptr;
      if (source && std::isfinite(leaf.number)) now[{unescape_pointer(path.substr(8, slash - 8)), source}] = leaf.number * 1e-3;
    }
    for (auto it = phases_.begin(); it != phases_.end();)  // what this line does not carry: gone, unless kept
      it = (now.count(it->first) || (it->first.second == "gpu" && !traced)) ? std::next(it) : phases_.erase(it);
    for (const auto& [key, v] : now) {
      phases_[key] = v;
      remember(phase_recent_[key], v, key.second == "gpu");
    }
    const auto d = f.find("/diagnosis/label");
    diagnoses_.push_back(d != f.end() && d->second.kind == JsonLeaf::Kind::string ? d->second.text : "");
    basis_ = prom_line_basis(f);
    carried_from_step_ = basis_ == DiagnosisBasis::carried || basis_ == DiagnosisBasis::carried_scaled || basis_ == DiagnosisBasis::markers ? number(f, "/diagnosis/carried_from_step") : std::nullopt;
    while (diagnoses_.size() > static_cast<std::size_t>(window_)) diagnoses_.pop_front();
    for (const auto& c : prom_counters()) {
      const auto v = number(f, c.pointer);
      if (!v) continue;
      if (c.cumulative) counters_[c.name] = *v;
      else counters_[c.name] += *v;
    }
    steps_total_ = *number(f, "/global_step") + 1;
    // The histogram holds steps: a log_every window's line (its `window` object) is not one step.
    const auto step_s = number(f, "/step_time_ms");
    if (step_s && *step_s >= 0 && !f.count("/window/steps")) {
      const double v = *step_s * 1e-3;
      const auto& bounds = prom_step_time_buckets();
      if (buckets_.empty()) buckets_.assign(bounds.size(), 0);
      for (std::size_t i = 0; i < bounds.size(); ++i) buckets_[i] += v <= bounds[i];
      ++step_count_;
      step_sum_ += v;
    }
    return {};
  }

  /// Every family; `up` = the run is live (false once stop() wrote the last values).
  std::vector<PromFamily> families(bool up) const {
    std::vector<PromFamily> out;
    out.push_back({"steptrace_up", "gauge", "1 while the run is live, 0 once it stopped (the values are its last)", {{{}, up ? 1.0 : 0.0}}});
    if (lines_ == 0) return out;
    for (const auto& g : prom_gauges()) add(out, g.name, "gauge", g.help, one(g.name));
    add(out, "steptrace_last_traced_step", "gauge", "Step of the last traced line: the GPU-attribution values are from it",
        last_traced_step_ ? std::vector<PromSample>{{{}, *last_traced_step_}} : std::vector<PromSample>{});
    for (const char* part : {"step_time_ms", "work_ms"}) {
      std::vector<PromSample> samples;
      for (const char* stat : {"median", "min", "max"})
        if (auto v = value(std::string(part) + "/" + stat)) samples.push_back({{{"stat", stat}}, *v});
      const bool work = std::string(part) == "work_ms";
      add(out, work ? "steptrace_cross_rank_work_seconds" : "steptrace_cross_rank_step_time_seconds", "gauge",
          work ? "Own work (iteration less collective wait) across ranks in the last view" : "Step time across ranks in the last view",
          samples);
    }
    std::vector<PromSample> phases;
    for (const auto& [key, v] : phases_) phases.push_back({phase_labels(key), v});
    add(out, "steptrace_phase_seconds", "gauge",
        "Time in a phase in the step: host scope time (host), the same less the phases nested in it (host_self), "
        "GPU busy time of the work it launched (gpu, traced steps), or GPU time from its begin marker to its end "
        "marker on the program's stream (gpu_markers, marked steps)", phases);
    add(out, "steptrace_diagnosis", "gauge", "1 for what holds the last step back, 0 for the other labels", diagnosis_states(false));
    std::vector<PromSample> bases;
    for (DiagnosisBasis b : {DiagnosisBasis::traced, DiagnosisBasis::markers, DiagnosisBasis::carried, DiagnosisBasis::carried_scaled, DiagnosisBasis::host_only,
                           DiagnosisBasis::none})
      bases.push_back({{{"basis", diagnosis_basis_name(b)}}, b == basis_ ? 1.0 : 0.0});
    add(out, "steptrace_diagnosis_basis", "gauge", "1 for what the last step's diagnosis was decided from, 0 for the other bases", bases);
    add(out, "steptrace_diagnosis_carried_from_step", "gauge", "Traced step whose GPU view the last step's diagnosis carried (basis carried, carried_scaled, or markers)",
        carried_from_step_ ? std::vector<PromSample>{{{}, *carried_from_step_}} : std::vector<PromSample>{});
    add(out, "steptrace_window_lines", "gauge", "Lines in the window the steptrace_window_* means are over (steps, or log_every windows)",
        {{{}, static_cast<double>(std::min<uint64_t>(lines_, static_cast<uint64_t>(window_)))}});
    for (const auto& g : prom_gauges()) {
      if (!g.windowed) continue;
      const auto it = recent_.find(g.name);
      const auto m = it != recent_.end() ? mean(it->second) : std::nullopt;
      add(out, "steptrace_window_" + std::string(g.name).substr(10), "gauge", std::string(g.help) + ", mean over the window",
          m ? std::vector<PromSample>{{{}, *m}} : std::vector<PromSample>{});
    }
    std::vector<PromSample> window_phases;
    for (const auto& [key, values] : phase_recent_)
      if (const auto m = mean(values)) window_phases.push_back({phase_labels(key), *m});
    add(out, "steptrace_window_phase_seconds", "gauge", "Time in a phase, mean over the window's lines that had the phase", window_phases);
    add(out, "steptrace_window_diagnosis_share", "gauge", "Share of the window's lines with each diagnosis label", diagnosis_states(true));
    add(out, "steptrace_steps_total", "counter", "Steps begun since start()", {{{}, steps_total_}});
    add(out, "steptrace_lines_total", "counter", "Step lines the exporter read", {{{}, static_cast<double>(lines_)}});
    for (const auto& c : prom_counters()) {
      auto it = counters_.find(c.name);
      if (it == counters_.end() && c.absent_until_seen) add(out, c.name, "counter", c.help, {});
      else add(out, c.name, "counter", c.help, {{{}, it == counters_.end() ? 0.0 : it->second}});
    }
    std::vector<PromSample> histogram;  // cumulative buckets, then +Inf, sum and count
    if (step_count_ > 0) {
      const auto& bounds = prom_step_time_buckets();
      for (std::size_t i = 0; i < bounds.size(); ++i)
        histogram.push_back({{{"le", prom_bound_text(bounds[i])}}, static_cast<double>(buckets_[i]), "_bucket"});
      histogram.push_back({{{"le", "+Inf"}}, static_cast<double>(step_count_), "_bucket"});
      histogram.push_back({{}, step_sum_, "_sum"});
      histogram.push_back({{}, static_cast<double>(step_count_), "_count"});
    }
    add(out, "steptrace_step_duration_seconds", "histogram",
        "Step times of every step line since start() (histogram_quantile() for p50/p99; not with log_every > 1)", histogram);
    return out;
  }

  /// The text exposition of families(up), every series with the common labels and `sink` (which way
  /// out it was read from: "endpoint" or "textfile"; "" = no such label); a family without series
  /// (its field null) is left out.
  std::string render(bool up, std::string_view sink = {}) const {
    std::string out;
    PromLabels common = common_;
    if (!sink.empty()) common.emplace_back("sink", std::string(sink));
    for (const auto& fam : families(up)) {
      if (fam.samples.empty()) continue;
      out += "# HELP " + fam.name + " ";
      details::append_escaped(out, fam.help, false);
      out += "\n# TYPE " + fam.name + " " + fam.type + "\n";
      for (const auto& s : fam.samples) {
        out += fam.name;
        out += s.suffix;
        PromLabels labels = common;
        labels.insert(labels.end(), s.labels.begin(), s.labels.end());
        details::append_labels(out, labels);
        out += " " + details::number_text(s.value) + "\n";
      }
    }
    return out;
  }

  /// The labels every series carries (rank, local_rank, world_size, Hostname, GPU identity, steptrace_job).
  const PromLabels& common_labels() const { return common_; }

 private:
  using PhaseKey = std::pair<std::string, std::string>;  // phase, source
  /// A window's values with the index of the line (or of the traced line) they came from.
  struct Recent {
    bool traced_only = false;  // indexed by traced lines
    std::deque<std::pair<uint64_t, double>> values;
  };
  static PromLabels phase_labels(const PhaseKey& k) { return {{"phase", k.first}, {"source", k.second}}; }

  /// Keeps `v` in a window: over the last window_ lines, or the last window_ traced lines.
  void remember(Recent& r, double v, bool traced_only) {
    r.traced_only = traced_only;
    const uint64_t at = traced_only ? traced_lines_ : lines_;
    r.values.emplace_back(at, v);
    while (!r.values.empty() && r.values.front().first + static_cast<uint64_t>(window_) <= at) r.values.pop_front();
  }
  /// The mean of the values inside the window now (a field that stopped coming ages out); none: nullopt.
  std::optional<double> mean(const Recent& r) const {
    const uint64_t now = r.traced_only ? traced_lines_ : lines_;
    double sum = 0;
    int n = 0;
    for (const auto& [at, v] : r.values)
      if (at + static_cast<uint64_t>(window_) > now) sum += v, ++n;
    return n ? std::optional<double>(sum / n) : std::nullopt;
  }
  void set(const std::string& name, std::optional<double> v, bool windowed, bool traced_only) {
    if (v) {
      values_[name] = *v;
      if (windowed) remember(recent_[name], *v, traced_only);
    } else {
      values_.erase(name);
    }
  }
  std::optional<double> value(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional<double>(it->second);
  }
  std::vector<PromSample> one(const std::string& name) const {
    auto v = value(name);
    return v ? std::vector<PromSample>{{{}, *v}} : std::vector<PromSample>{};
  }

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
    // Hostname, UUID and pci_bus_id are spelled as dcgm-exporter spells its labels, so its series join
    // these (docs/prometheus.md). Not its camelCase `modelName` (promtool's lint refuses it), nor its
    // `gpu` and `device` (nvidia<N>): the NVML index, not the CUDA index that `cuda_device` holds.
    PromLabels l = {{"rank", text(f, "/rank")}, {"local_rank", text(f, "/local_rank")}, {"world_size", text(f, "/world_size")},
                    {"Hostname", text(f, "/hostname")}};
    if (f.count("/device/index")) l.emplace_back("cuda_device", text(f, "/device/index"));
    for (const auto& [label, pointer] : {std::pair<const char*, const char*>{"UUID", "/device/uuid"}, {"pci_bus_id", "/device/pci_bus_id"}})
      if (!text(f, pointer).empty()) l.emplace_back(label, text(f, pointer));
    if (!job_.empty()) l.emplace_back("steptrace_job", job_);
    return l;
  }
  std::vector<PromSample> diagnosis_states(bool window) const {
    std::vector<PromSample> out;
    for (int b = 0; b <= static_cast<int>(Bottleneck::unknown); ++b) {
      const char* name = bottleneck_name(static_cast<Bottleneck>(b));
      double v = 0;
      if (!window) {
        v = !diagnoses_.empty() && diagnoses_.back() == name;
      } else {
        for (const auto& d : diagnoses_) v += d == name;
        v /= diagnoses_.empty() ? 1.0 : static_cast<double>(diagnoses_.size());
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
  uint64_t lines_ = 0, traced_lines_ = 0;
  std::optional<double> last_traced_step_;
  std::map<std::string, double> values_;        // gauge (or cross-rank part/stat) -> value exposed; absent: null
  std::map<std::string, Recent> recent_;        // windowed gauge -> its window
  std::map<PhaseKey, double> phases_;           // phase seconds exposed
  std::map<PhaseKey, Recent> phase_recent_;
  std::deque<std::string> diagnoses_;           // the window's diagnosis labels (carried ones too), oldest first
  DiagnosisBasis basis_ = DiagnosisBasis::none;  // the last line's
  std::optional<double> carried_from_step_;     // the last line's, when its basis is carried
  std::map<std::string, double> counters_;
  double steps_total_ = 0;
  std::vector<uint64_t> buckets_;               // steps with a time <= each bound of prom_step_time_buckets()
  uint64_t step_count_ = 0;
  double step_sum_ = 0;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
