// steptrace/core/trace_trigger.hpp - which steps the flight recorder writes out (docs/schema.md,
// "Traces of the steps that matter"): a step slower than trace_trigger x the rolling median, the first
// step of a stretch whose diagnosis differs from the run's usual one, the steps the program asked for
// (capture_steps(n)) and those STEPTRACE_CAPTURE_STEPS names. Pure C++17; tested without a GPU.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diagnosis.hpp"
#include "step_ranges.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// What a step's line says about its trace (docs/schema.md, `trace`).
struct StepTrace {
  bool captured = false;
  std::string file;                  // where the capture is written ("" = not written: see not_written)
  std::vector<std::string> reasons;
  uint64_t capture_first = 0;        // the capture's first captured step
  std::string not_written;           // why a captured step has no file
  std::string null_reason;           // why `trace` is null (not captured, recorder off)
};

/// Counts for the end record (`traces`).
struct TraceStats {
  bool on = false;
  std::string off_reason = reason_text(Reason::flight_recorder_off);  // when !on
  int keep_steps = 0;
  uint64_t max_bytes = 0, bytes = 0, bytes_peak = 0, step_bytes_max = 0;
  uint64_t steps_kept = 0, steps_evicted_for_bytes = 0, records_left_out = 0;
  uint64_t captures = 0, written = 0, failed = 0, refused_max_files = 0;
  uint64_t refused_budget = 0;       // automatic captures the capture budget could not afford
  uint64_t slow_suppressed = 0;      // slow steps within the slow-step rule's rate-limit gap
  double capture_cpu_ms = 0;         // the background thread's CPU time writing captures
  // Requests from outside (steptrace-ctl; details/remote_captures.hpp): read for this run, refused,
  // planned (steps chosen), planned too late (the steps had begun when this rank learned them).
  uint64_t requests = 0, requests_refused = 0, requests_planned = 0, requests_late = 0;
};

/// The rule. One owner (the background thread); steps are shown in order.
///
/// Slow step (docs/schema.md, "Traces of the steps that matter"): over the last kWindow step times
/// (after kWarmup of them), with m their median and s = 1.4826 x their median absolute deviation
/// (the MAD scaled to estimate a normal spread's standard deviation: Rousseeuw and Croux, "Alternatives
/// to the median absolute deviation", JASA 1993), a step is slow when
///   step > trigger x m   and   step - m > max(kSpreads x s, kMinExcessMs)   and   step > p90
/// so a loop whose steps spread widely needs a larger excess, a microsecond-scale loop a real one, and
/// a longer step that is the loop's habit (one in two, one in five: over a tenth of the window) is not
/// news (p90: the window's 90th percentile; more than half the steps alike makes the MAD 0).
/// Slow-step captures are rate-limited: after one, the next waits `gap` steps; the gap starts at
/// kMinGapSteps; at each slow-step capture it doubles (up to kMaxGapSteps) if slow steps came during
/// the previous gap, and falls back to kMinGapSteps if none did. A slow step within the gap is counted
/// (slow_suppressed), not captured.
class TraceTrigger {
 public:
  static constexpr std::size_t kWindow = 64;  // steps the rolling median is over
  static constexpr std::size_t kWarmup = 20;  // steps seen before the automatic triggers arm
  static constexpr double kMadToSigma = 1.4826;
  static constexpr double kSpreads = 5;         // excess over the median, in robust standard deviations
  static constexpr double kMinExcessMs = 1.0;   // excess over the median, at least
  static constexpr uint64_t kMinGapSteps = 100;
  static constexpr uint64_t kMaxGapSteps = 1600;

  struct Settings {
    double trigger = 1.5;  // x the rolling median; 0 = no slow-step trigger
    bool diagnosis = true;  // the diagnosis trigger (on whenever the flight recorder is)
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // STEPTRACE_CAPTURE_STEPS
  };
  struct Step {
    uint64_t index = 0;
    double step_ms = 0;
    std::optional<Bottleneck> label;  // with GPU attribution only (an untraced step's label is partial)
    bool requested = false;           // capture_steps(n) covers it
  };
  struct Decision {
    std::vector<std::string> reasons;  // empty: not captured
    std::optional<double> median_ms;   // the median the slow-step rule compared with
    std::optional<double> threshold_ms;  // the step time above which a step is slow
    bool slow_suppressed = false;      // slow, but within the rate limit's gap
    std::string usual_label;           // the run's usual label, for diagnosis_changed
  };

  explicit TraceTrigger(Settings s) : s_(std::move(s)) {}

  Decision look(const Step& st) {
    Decision d;
    if (st.requested) d.reasons.push_back("capture_steps");
    for (const auto& [a, b] : s_.ranges)
      if (st.index >= a && st.index <= b) {
        d.reasons.push_back("capture_steps_env");
        break;
      }
    if (times_.size() >= kWarmup && s_.trigger > 0) {
      const double median = median_of(std::vector<double>(times_.begin(), times_.end()));
      std::vector<double> deviations;
      deviations.reserve(times_.size());
      for (double t : times_) deviations.push_back(std::abs(t - median));
      const double spread = kMadToSigma * median_of(std::move(deviations));
      // The window's 90th percentile: more than half the steps alike makes the MAD 0, and a loop whose
      // every other (or every fifth) step is longer would then have each of them called slow.
      std::vector<double> sorted(times_.begin(), times_.end());
      std::sort(sorted.begin(), sorted.end());
      const double p90 = sorted[std::min(sorted.size() - 1, (sorted.size() * 9) / 10)];
      d.median_ms = median;
      d.threshold_ms = std::max({s_.trigger * median, median + std::max(kSpreads * spread, kMinExcessMs), p90});
      if (median > 0 && st.step_ms > *d.threshold_ms) {
        if (last_slow_ && st.index < *last_slow_ + gap_) {
          d.slow_suppressed = true;
          ++slow_suppressed_;
          ++suppressed_in_gap_;
        } else {
          d.reasons.push_back("slow_step");
          // Slow steps kept coming during the last gap: they are the loop's habit, capture them half as
          // often; none came: back to the shortest gap.
          if (last_slow_) gap_ = suppressed_in_gap_ ? std::min(kMaxGapSteps, 2 * gap_) : kMinGapSteps;
          suppressed_in_gap_ = 0;
          last_slow_ = st.index;
        }
      }
    }
    if (st.label && s_.diagnosis) {
      if (labelled_ >= kWarmup) {
        const DominantLabel usual = dominant_label(labels_);
        d.usual_label = bottleneck_name(usual.label);
        // The first step of a stretch that differs: a stretch is one capture, not one per step.
        if (*st.label != usual.label && previous_label_ == usual.label) d.reasons.push_back("diagnosis_changed");
      }
      ++labels_[*st.label];
      ++labelled_;
      previous_label_ = *st.label;
    }
    times_.push_back(st.step_ms);
    if (times_.size() > kWindow) times_.pop_front();
    return d;
  }

  uint64_t slow_suppressed() const { return slow_suppressed_; }
  uint64_t gap_steps() const { return gap_; }

 private:
  static double median_of(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    double m = v[v.size() / 2];
    if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + v.size() / 2)) / 2;
    return m;
  }

  Settings s_;
  std::deque<double> times_;
  std::map<Bottleneck, uint64_t> labels_;
  uint64_t labelled_ = 0;
  Bottleneck previous_label_ = Bottleneck::unknown;
  std::optional<uint64_t> last_slow_;  // the step the rate limit's gap runs from
  uint64_t gap_ = kMinGapSteps;
  uint64_t suppressed_in_gap_ = 0;
  uint64_t slow_suppressed_ = 0;
};

STEPTRACE_END_NAMESPACE  // steptrace
