// steptrace/core/trace_trigger.hpp - which steps the flight recorder writes out (docs/schema.md,
// "Traces of the steps that matter"): a step slower than trace_trigger x the rolling median, the first
// step of a stretch whose diagnosis differs from the run's usual one, the steps the program asked for
// (capture_steps(n)) and those STEPTRACE_CAPTURE_STEPS names. Pure C++17; tested without a GPU.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diagnosis.hpp"
#include "step_ranges.hpp"

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
  int keep_steps = 0;
  uint64_t max_bytes = 0, bytes = 0, bytes_peak = 0, step_bytes_max = 0;
  uint64_t steps_kept = 0, steps_evicted_for_bytes = 0, records_left_out = 0;
  uint64_t captures = 0, written = 0, failed = 0, refused_max_files = 0;
};

/// The rule. One owner (the background thread); steps are shown in order.
class TraceTrigger {
 public:
  static constexpr std::size_t kWindow = 64;  // steps the rolling median is over
  static constexpr std::size_t kWarmup = 20;  // steps seen before the automatic triggers arm

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
      std::vector<double> sorted(times_.begin(), times_.end());
      std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
      double median = sorted[sorted.size() / 2];
      if (sorted.size() % 2 == 0) {
        const double below = *std::max_element(sorted.begin(), sorted.begin() + sorted.size() / 2);
        median = (median + below) / 2;
      }
      d.median_ms = median;
      if (median > 0 && st.step_ms > s_.trigger * median) d.reasons.push_back("slow_step");
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

 private:
  Settings s_;
  std::deque<double> times_;
  std::map<Bottleneck, uint64_t> labels_;
  uint64_t labelled_ = 0;
  Bottleneck previous_label_ = Bottleneck::unknown;
};

STEPTRACE_END_NAMESPACE  // steptrace
