// steptrace/core/stall.hpp - the stall watchdog's rule and its records. Pure C++17.
//
// A run stalls when no step has begun (so none has closed) for the threshold: stall_after_s, and at
// least kMedianFactor times the median of the recent steps (a run of 30 s steps is not stalled at
// 61 s). The background thread then writes {"event":"stall", ...} naming the open step, the phases
// open on each thread and for how long, the last GPU activity seen and the open step's outstanding
// GPU work; again at 2x, 4x, 8x ... the threshold; and {"event":"resumed", ...} once a step begins.
// Their rows: core/line_fields_events.hpp (docs/schema.md, "Stall and resumed records", renders them).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "end_line.hpp"
#include "json_writer.hpp"
#include "line_sections.hpp"
#include "measured.hpp"
#include "reasons.hpp"
#include "run_info.hpp"

STEPTRACE_BEGIN_NAMESPACE

inline constexpr const char* kStallSchemaVersion = "steptrace.stall/1";

class StallWatch {
 public:
  static constexpr double kMedianFactor = 10;  // the threshold is at least this many median steps
  static constexpr std::size_t kWindow = 64;   // closed steps the median is taken over
  static constexpr int kMaxReports = 40;       // 2^40 thresholds: never reached, but no overflow

  enum class Due { none, stall, resumed };

  explicit StallWatch(double after_s = 60) : after_s_(after_s) {}
  bool enabled() const { return after_s_ > 0; }
  double after_s() const { return after_s_; }

  /// A closed step's duration, for the median.
  void step_closed(double step_ms) {
    if (!(step_ms >= 0)) return;
    if (recent_.size() < kWindow) recent_.push_back(step_ms);
    else recent_[next_++ % kWindow] = step_ms;
  }

  std::optional<double> median_step_ms() const {
    if (recent_.empty()) return std::nullopt;
    std::vector<double> v = recent_;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  }

  /// stall_after_s, or kMedianFactor median steps when that is longer.
  double threshold_s() const {
    const auto m = median_step_ms();
    return std::max(after_s_, m ? kMedianFactor * *m / 1000.0 : 0.0);
  }

  /// One look at time `now_ns` with step `step` open (-1: none has begun), which began at `began_ns`
  /// (same clock; nullopt: not known, taken as now). A new step ends a stall (resumed, when one was
  /// reported); an unchanged one is due a report at 1x, 2x, 4x ... threshold.
  ///
  /// A stall is timed from the step's begin, not from the look that first saw the step: the looker
  /// wakes some time after the step began (a loaded machine delays it by a scheduler slice), and timed
  /// from there a stall would read shorter than the phases opened inside its step.
  Due look(int64_t now_ns, int64_t step, std::optional<int64_t> began_ns = std::nullopt) {
    if (!enabled()) return Due::none;
    if (step != step_) {
      // A begin read after now_ns (the step began between the two readings) counts as now.
      const int64_t began = began_ns ? std::min(*began_ns, now_ns) : now_ns;
      const bool reported = reports_ > 0;
      ended_step_ = step_;
      ended_stalled_s_ = seconds(std::max(began, since_ns_) - since_ns_);  // to the next step's begin
      ended_reports_ = reports_;
      step_ = step;
      since_ns_ = began;
      since_begin_ = began_ns.has_value();
      reports_ = 0;
      return reported ? Due::resumed : Due::none;
    }
    if (step < 0) return Due::none;  // before the first step: start-up is not watched
    const double elapsed = seconds(now_ns - since_ns_);
    if (reports_ == 0) {
      const double t = threshold_s();
      if (elapsed < t) return Due::none;
      base_s_ = t;
    } else if (reports_ >= kMaxReports || elapsed < next_report_s()) {
      return Due::none;
    }
    ++reports_;
    return Due::stall;
  }

  // The stall being reported (after look() said stall).
  int64_t step() const { return step_; }
  double stalled_s(int64_t now_ns) const { return seconds(now_ns - since_ns_); }
  /// Whether stalled_s runs from the step's own begin (else from the first look that saw the step:
  /// shorter than the step has been open).
  bool timed_from_begin() const { return since_begin_; }
  int reports() const { return reports_; }
  double reported_threshold_s() const { return base_s_; }
  double next_report_s() const { return base_s_ * static_cast<double>(int64_t{1} << reports_); }
  // The stall that ended (after look() said resumed).
  int64_t ended_step() const { return ended_step_; }
  double ended_stalled_s() const { return ended_stalled_s_; }
  int ended_reports() const { return ended_reports_; }

 private:
  static double seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

  double after_s_;
  std::vector<double> recent_;
  std::size_t next_ = 0;
  int64_t step_ = -1, since_ns_ = 0;
  bool since_begin_ = false;
  int reports_ = 0;
  double base_s_ = 0;
  int64_t ended_step_ = -1;
  double ended_stalled_s_ = 0;
  int ended_reports_ = 0;
};

/// What a stall record says; the background thread fills it in.
struct StallReport {
  int64_t unix_ns = 0;
  int64_t open_step = -1;
  double stalled_s = 0;      // since the open step began
  double threshold_s = 0;    // the threshold this stall was first reported at
  std::optional<double> median_step_ms;
  int report = 1;            // 1, 2, 3 ... for this stall
  double next_report_s = 0;  // stalled_s at which the next report is due
  bool step_scope_open = true;
  std::optional<double> step_scope_closed_s;  // the step's TRACE_STEP scope ended this long ago

  struct Phase {
    std::string name;
    std::optional<double> open_s;  // null: its clock reading could not be converted
  };
  struct Thread {
    int tid = 0;
    std::string name;
    bool step_thread = false;
    std::vector<Phase> phases;  // outermost first
  };
  std::vector<Thread> threads;
  uint64_t threads_untracked = 0;  // threads that found the open-phase table full

  // GPU: what the records seen so far say, each value or why it is null (the watchdog fills them; a
  // report made by hand says stall_not_read).
  Measured<double> last_gpu_activity_s{reason_text(Reason::stall_not_read)};  // the latest end of a kernel/copy record seen, seconds ago
  std::string last_gpu_activity_name;                   // its kernel name, or the copy's kind
  Measured<uint32_t> open_step_launches{reason_text(Reason::stall_not_read)};
  Measured<uint32_t> open_step_outstanding{reason_text(Reason::stall_not_read)};
  std::vector<std::pair<std::string, uint32_t>> outstanding_by_phase;
  // PM sampling: is the GPU running anything now (a kernel that never ends keeps SMs active; a host
  // stall leaves them idle)? Mean SM activity over the last second of samples, and the newest's age.
  Measured<double> sm_active_recent{reason_text(Reason::stall_not_read)};
  Measured<double> sm_active_sample_age_s{reason_text(Reason::stall_not_read)};
};

/// The stall record, each value checked against its row as it is written (core/line_fields_events.hpp).
inline std::string make_stall_line(const StallReport& r, const RunInfo& run) {
  LineOut out(nullptr, nullptr, &details::RowTree::stall());
  out.begin();
  out.field(STEPTRACE_STALL_ROW("/event"), "stall").field(STEPTRACE_STALL_ROW("/schema"), kStallSchemaVersion);
  write_event_identity<Record::stall>(out, run, r.unix_ns);
  out.field(STEPTRACE_STALL_ROW("/open_step"), r.open_step).field(STEPTRACE_STALL_ROW("/stalled_s"), r.stalled_s);
  out.field(STEPTRACE_STALL_ROW("/threshold_s"), r.threshold_s);
  out.field(STEPTRACE_STALL_ROW("/median_step_ms"), r.median_step_ms, reason_text(Reason::no_step_closed));
  out.field(STEPTRACE_STALL_ROW("/report"), r.report).field(STEPTRACE_STALL_ROW("/next_report_s"), r.next_report_s);
  out.field(STEPTRACE_STALL_ROW("/step_scope_open"), r.step_scope_open);
  out.field(STEPTRACE_STALL_ROW("/step_scope_closed_s"), r.step_scope_closed_s, reason_text(Reason::step_scope_still_open));
  out.begin_array(STEPTRACE_STALL_ROW("/threads"));
  for (const auto& t : r.threads) {
    out.begin_element()
        .field(STEPTRACE_STALL_ROW("/threads/*/tid"), t.tid)
        .field(STEPTRACE_STALL_ROW("/threads/*/name"), t.name)
        .field(STEPTRACE_STALL_ROW("/threads/*/step_thread"), t.step_thread);
    out.begin_array(STEPTRACE_STALL_ROW("/threads/*/open_phases"));
    for (const auto& p : t.phases)
      out.begin_element()
          .field(STEPTRACE_STALL_ROW("/threads/*/open_phases/*/phase"), p.name)
          .field(STEPTRACE_STALL_ROW("/threads/*/open_phases/*/open_s"), p.open_s, reason_text(Reason::clock_unconvertible))
          .end_object();
    out.end_array().end_object();
  }
  out.end_array();
  out.field(STEPTRACE_STALL_ROW("/threads_untracked"), r.threads_untracked);
  out.begin_object(STEPTRACE_STALL_ROW("/gpu"));
  out.field(STEPTRACE_STALL_ROW("/gpu/last_activity_s"), r.last_gpu_activity_s);
  out.optional_text(STEPTRACE_STALL_ROW("/gpu/last_activity"), r.last_gpu_activity_name,
                    r.last_gpu_activity_s ? std::string(reason_text(Reason::gpu_record_unnamed)) : r.last_gpu_activity_s.why());
  out.field(STEPTRACE_STALL_ROW("/gpu/open_step_launches"), r.open_step_launches);
  out.field(STEPTRACE_STALL_ROW("/gpu/open_step_outstanding"), r.open_step_outstanding);
  out.begin_object(STEPTRACE_STALL_ROW("/gpu/outstanding_by_phase"));
  for (const auto& [phase, n] : r.outstanding_by_phase) out.field(phase, n);  // a "*" row: keyed by the phase
  out.end_object();
  out.field(STEPTRACE_STALL_ROW("/gpu/sm_active_recent"), r.sm_active_recent);
  out.field(STEPTRACE_STALL_ROW("/gpu/sm_active_sample_age_s"), r.sm_active_sample_age_s);
  out.end_object();
  return out.finish();
}

/// The record that ends a reported stall: a step began (checked against its rows as the stall record).
inline std::string make_resumed_line(int64_t unix_ns, int64_t stalled_step, double stalled_s, int reports,
                                     int64_t step_now, const RunInfo& run) {
  LineOut out(nullptr, nullptr, &details::RowTree::resumed());
  out.begin();
  out.field(STEPTRACE_RESUMED_ROW("/event"), "resumed").field(STEPTRACE_RESUMED_ROW("/schema"), kStallSchemaVersion);
  write_event_identity<Record::resumed>(out, run, unix_ns);
  out.field(STEPTRACE_RESUMED_ROW("/stalled_step"), stalled_step)
      .field(STEPTRACE_RESUMED_ROW("/stalled_s"), stalled_s)
      .field(STEPTRACE_RESUMED_ROW("/reports"), reports);
  out.field(STEPTRACE_RESUMED_ROW("/open_step"), step_now);
  return out.finish();
}

STEPTRACE_END_NAMESPACE  // steptrace
