// steptrace/core/summary.hpp - the run summary that stop() returns and prints. Bounded memory:
// running sums for the whole run, and the last kRecentSteps step times for the median and p90.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clock.hpp"
#include "cross_rank.hpp"  // details::median_of
#include "diagnosis.hpp"
#include "phase.hpp"
#include "step_metrics.hpp"
#include "summary_result.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Accumulates per-step metrics into a Summary. Not thread-safe: the background thread owns it.
class SummaryBuilder {
 public:
  static constexpr std::size_t kRecentSteps = 10000;

  void add(const HostStepMetrics& m, const std::optional<double>& mfu, Bottleneck label = Bottleneck::unknown) {
    ++steps_;
    ++labels_[label];
    step_ns_total_ += m.step_time_ns;
    untracked_ns_total_ += m.untracked_ns;
    recent_ms_.push_back(ns_to_ms(m.step_time_ns));
    if (recent_ms_.size() > kRecentSteps) recent_ms_.pop_front();
    if (m.tokens_per_second) {  // tokens over time: the run's throughput, not a mean of per-step rates
      tokens_ += *m.tokens_per_second * static_cast<double>(m.step_time_ns) * 1e-9;
      tokens_ns_ += m.step_time_ns;
    }
    if (mfu) {
      mfu_sum_ += *mfu;
      ++mfu_n_;
    }
    for (const auto& [id, p] : m.phases) phase_ns_[id] += p.total_ns;
  }

  Summary build() const {
    Summary s;
    s.started = true;
    s.steps = steps_;
    if (steps_ == 0) return s;
    s.step_time_ms_mean = ns_to_ms(step_ns_total_) / static_cast<double>(steps_);
    std::vector<double> sorted(recent_ms_.begin(), recent_ms_.end());
    // The median as the report and Python's statistics.median take it (the mean of the two middle
    // values of an even count), over the last kRecentSteps steps (the table says so when that is fewer).
    s.step_time_ms_median = details::median_of(sorted);
    s.median_steps = sorted.size();
    std::sort(sorted.begin(), sorted.end());
    s.step_time_ms_p90 = sorted[std::min(sorted.size() - 1, sorted.size() * 9 / 10)];
    if (tokens_ns_ > 0) s.tokens_per_second_mean = tokens_ / (static_cast<double>(tokens_ns_) * 1e-9);
    if (mfu_n_) s.estimated_mfu_mean = mfu_sum_ / static_cast<double>(mfu_n_);
    for (const auto& [id, ns] : phase_ns_) {
      Summary::Phase p;
      p.name = phase_name(id);
      p.host_ms_mean = ns_to_ms(ns) / static_cast<double>(steps_);
      p.share = step_ns_total_ > 0 ? static_cast<double>(ns) / static_cast<double>(step_ns_total_) : 0;
      s.phases.push_back(p);
    }
    const DominantLabel dominant = dominant_label(labels_);
    s.diagnosis = bottleneck_name(dominant.label);
    s.diagnosis_fraction = dominant.fraction;
    s.untracked_share =
        step_ns_total_ > 0 ? static_cast<double>(untracked_ns_total_) / static_cast<double>(step_ns_total_) : 0;
    return s;
  }

 private:
  uint64_t steps_ = 0;
  int64_t step_ns_total_ = 0, untracked_ns_total_ = 0;
  std::deque<double> recent_ms_;
  double tokens_ = 0, mfu_sum_ = 0;
  int64_t tokens_ns_ = 0;  // the time of the steps that had a rate
  uint64_t mfu_n_ = 0;
  std::map<PhaseId, int64_t> phase_ns_;
  std::map<Bottleneck, uint64_t> labels_;
};

/// Renders the summary as a small fixed-width table.
inline std::string render_summary_table(const Summary& s) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "steptrace summary: %llu steps, %llu lines written%s%s\n",
                static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(s.lines_written),
                s.log_path.empty() ? "" : " to ", s.log_path.c_str());
  out += buf;
  if (s.steps == 0) return out;
  std::snprintf(buf, sizeof buf, "  step time ms: mean %.3f  median %.3f  p90 %.3f", s.step_time_ms_mean,
                s.step_time_ms_median, s.step_time_ms_p90);
  out += buf;
  if (s.median_steps < s.steps) {  // the median and p90 cover the last steps only; the mean, all
    std::snprintf(buf, sizeof buf, " (mean of all %llu steps; median and p90 of the last %llu)",
                  static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(s.median_steps));
    out += buf;
  }
  out += "\n";
  if (s.tokens_per_second_mean) {
    std::snprintf(buf, sizeof buf, "  tokens/s: %.1f (tokens over time)\n", *s.tokens_per_second_mean);
    out += buf;
  }
  if (s.estimated_mfu_mean) {
    std::snprintf(buf, sizeof buf, "  estimated MFU mean: %.2f %%\n", 100.0 * *s.estimated_mfu_mean);
    out += buf;
  } else {
    out += "  estimated MFU: n/a (see null_reasons in the log)\n";
  }
  std::snprintf(buf, sizeof buf, "  diagnosis: %s (%.0f %% of steps)\n", s.diagnosis.c_str(), 100.0 * s.diagnosis_fraction);
  out += buf;
  out += "  phase            host ms/step   share of step\n";
  for (const auto& p : s.phases) {
    std::snprintf(buf, sizeof buf, "  %-16s %12.3f   %6.1f %%\n", p.name.c_str(), p.host_ms_mean, 100.0 * p.share);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  %-16s %12s   %6.1f %%\n", "(untracked)", "", 100.0 * s.untracked_share);
  out += buf;
  if (s.steps_dropped || s.lines_failed) {
    std::snprintf(buf, sizeof buf, "  dropped steps: %llu, failed writes: %llu\n",
                  static_cast<unsigned long long>(s.steps_dropped), static_cast<unsigned long long>(s.lines_failed));
    out += buf;
  }
  return out;
}

STEPTRACE_END_NAMESPACE  // steptrace
