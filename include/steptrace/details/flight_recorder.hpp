// steptrace/details/flight_recorder.hpp - the flight recorder: the background thread keeps the last
// trace_keep_steps steps (phase spans and GPU records) in a ring bounded in bytes, and writes a trace
// (core/trace_events.hpp) of a step and its neighbours when the trigger (core/trace_trigger.hpp) or
// the program asks for it. Consecutive captured steps share one file while they fit in the ring. At
// most trace_max_files files per run. Nothing here runs on the training thread.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../core/attribution.hpp"
#include "../core/capture_budget.hpp"
#include "../core/phase.hpp"
#include "../core/records.hpp"
#include "../core/chrome_trace.hpp"
#include "../core/trace_trigger.hpp"
#include "../sink/prometheus_textfile.hpp"
#include "demangle.hpp"
#include "host_clock.hpp"
#include "log.hpp"
#include "thread_slots.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// Steps the program asked for with capture_steps(n): written by any thread, read by the worker.
class CaptureRequests {
 public:
  /// Steps first..last (inclusive). At most 64 ranges are held; older ones that ended go first.
  bool add(uint64_t first, uint64_t last) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ranges_.size() >= 64) return false;
    ranges_.emplace_back(first, last);
    return true;
  }
  /// A new run numbers its steps from 0 again: requests of the previous one are dropped.
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.clear();
  }
  /// Whether `step` was asked for; ranges that ended before it are forgotten.
  bool covers(uint64_t step) {
    std::lock_guard<std::mutex> lock(mutex_);
    bool in = false;
    for (auto it = ranges_.begin(); it != ranges_.end();) {
      if (it->second < step) {
        it = ranges_.erase(it);
        continue;
      }
      in = in || it->first <= step;
      ++it;
    }
    return in;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
};

/// What a trace needs from the worker when it is written.
struct TraceEnv {
  std::string run_id;
  int64_t gpu_clock_offset_ns = 0;         // GPU record clock - monotonic_ns()
  int64_t unix_minus_monotonic_ns = 0;     // wall clock - monotonic_ns()
};

class FlightRecorder {
 public:
  struct Settings {
    int keep_steps = 8;            // 0 = off
    std::size_t max_bytes = 64u << 20;
    int max_files = 20;
    std::string dir = ".";
    int rank = 0;
    int device = 0;
    std::string device_name;
    TraceTrigger::Settings trigger;
    double budget = 0;  // overhead_budget: automatic captures spend at most CaptureBudget::kShare of it
    std::string off_reason = reason_text(Reason::flight_recorder_off);  // keep_steps 0: why
  };
  static constexpr std::size_t kMaxNames = 1 << 16;

  explicit FlightRecorder(Settings s) : s_(std::move(s)), trigger_(s_.trigger), budget_(s_.budget) {
    stats_.on = s_.keep_steps > 0;
    stats_.off_reason = s_.off_reason;
    stats_.keep_steps = s_.keep_steps;
    stats_.max_bytes = s_.max_bytes;
  }
  bool on() const { return s_.keep_steps > 0; }

  /// At the step's line: whether it is captured and in which file. `label`: the diagnosis, for steps
  /// with GPU attribution.
  StepTrace decide(uint64_t step, double step_ms, std::optional<Bottleneck> label, bool requested,
                   const std::string& run_id) {
    StepTrace t;
    if (!on()) {
      t.null_reason = s_.off_reason;
      return t;
    }
    TraceTrigger::Step st;
    st.index = step;
    st.step_ms = step_ms;
    st.label = label;
    st.requested = requested;
    budget_.earn(step_ms);
    const TraceTrigger::Decision d = trigger_.look(st);
    stats_.slow_suppressed = trigger_.slow_suppressed();
    if (d.reasons.empty()) {
      t.null_reason = d.slow_suppressed ? reason_text(Reason::slow_not_captured, std::to_string(trigger_.gap_steps()) + " steps at most)")
                                        : std::string(reason_text(Reason::not_captured));
      return t;
    }
    const bool automatic = std::all_of(d.reasons.begin(), d.reasons.end(), [](const std::string& r) {
      return r == "slow_step" || r == "diagnosis_changed";
    });
    const bool extends = open_ && step == open_->last + 1 && step - open_->first + 3 <= static_cast<uint64_t>(s_.keep_steps);
    if (automatic && !extends && !budget_.affordable()) {
      ++stats_.refused_budget;
      char buf[200];
      std::snprintf(buf, sizeof buf, "a %s capture; %.3g ms of background CPU to pay back, ~%.0f steps like this one)",
                    d.reasons.front().c_str(), -budget_.credit_ms(), std::ceil(budget_.steps_to_afford(step_ms)));
      t.null_reason = reason_text(Reason::capture_budget_spent, buf);
      return t;
    }
    t.captured = true;
    t.reasons = d.reasons;
    if (extends) {
      open_->last = step;  // one more captured step in the open capture's file
      open_->captured.push_back(step);
      for (const std::string& r : d.reasons)
        if (std::find(open_->reasons.begin(), open_->reasons.end(), r) == open_->reasons.end()) open_->reasons.push_back(r);
      t.file = open_->file;
      t.capture_first = open_->first;
      return t;
    }
    if (open_) due_.push_back(std::move(*std::exchange(open_, std::nullopt)));
    if (stats_.captures >= static_cast<uint64_t>(s_.max_files)) {
      ++stats_.refused_max_files;
      t.not_written = reason_text(Reason::trace_max_files, std::to_string(s_.max_files) + ") traces written or due this run");
      return t;
    }
    ++stats_.captures;
    Capture c;
    c.first = c.last = step;
    c.captured.push_back(step);
    c.reasons = d.reasons;
    c.file = s_.dir + "/trace-" + run_id.substr(0, 8) + "-r" + std::to_string(s_.rank) + "-s" + std::to_string(step) + ".json";
    t.file = c.file;
    t.capture_first = step;
    open_ = std::move(c);
    return t;
  }

  /// After the line: keeps the step (its records are moved out of `activity`). Then write_due().
  void keep(const StepRecord& r, StepActivity* activity, bool gpu_complete, const std::string& gpu_note,
            Demangler& demangle) {
    if (!on()) return;
    KeptStep k;
    k.index = r.index;
    k.begin_ns = r.begin_ns;
    k.end_ns = r.end_ns;
    k.own_end_ns = r.own_end_ns();
    k.spans = r.spans;
    k.traced = activity != nullptr;
    k.gpu_complete = gpu_complete;
    k.gpu_note = gpu_note;
    if (activity) {
      k.records.reserve(activity->kernels.size() + activity->copies.size());
      for (const auto& p : activity->kernels) {
        KeptRecord x = common(p);
        x.name = name_index(p.record.name, demangle);
        x.bytes_or_blocks = p.record.blocks;
        x.threads_per_block = p.record.threads_per_block;
        x.sm_efficiency = static_cast<float>(p.record.sm_efficiency);
        x.occupancy = static_cast<float>(p.record.occupancy);
        k.records.push_back(x);
      }
      for (const auto& p : activity->copies) {
        KeptRecord x = common(p);
        x.kernel = false;
        x.copy_kind = p.record.kind;
        x.bytes_or_blocks = p.record.bytes;
        k.records.push_back(x);
      }
    }
    add(std::move(k));
  }

  /// Whether a capture waits to be written: its following step is in the ring.
  bool has_due() const { return !due_.empty() || (open_ && !ring_.empty() && ring_.back().index > open_->last); }
  void write_due(const TraceEnv& env) {
    for (Capture& c : due_) write(c, env);
    due_.clear();
    if (open_ && !ring_.empty() && ring_.back().index > open_->last) {
      write(*open_, env);
      open_.reset();
    }
  }

  /// An ending (stop(), SIGTERM, exit): the open capture is written with what the ring holds.
  void finish(const TraceEnv& env) {
    if (!on()) return;
    for (Capture& c : due_) write(c, env);
    due_.clear();
    if (open_) write(*open_, env);
    open_.reset();
  }

  const TraceStats& stats() const { return stats_; }
  const CaptureBudget& budget() const { return budget_; }

 private:
  struct Capture {
    uint64_t first = 0, last = 0;
    std::vector<uint64_t> captured;
    std::vector<std::string> reasons;
    std::string file;
  };

  template <class R>
  static KeptRecord common(const Placed<R>& p) {
    KeptRecord x;
    x.start_ns = p.record.start_ns;
    x.end_ns = p.record.end_ns;
    x.launch_ns = p.launch_ns;
    x.launch_tid = p.launch_tid;
    x.stream = p.record.stream;
    x.correlation = p.record.correlation;
    x.phase = p.phase;
    return x;
  }

  uint32_t name_index(const char* mangled, Demangler& demangle) {
    const std::string key = mangled ? mangled : "";
    auto it = name_ids_.find(key);
    if (it != name_ids_.end()) return it->second;
    if (names_.size() >= kMaxNames || names_bytes_ > s_.max_bytes / 4) {  // the table takes a quarter at most
      if (overflow_name_ < 0) {
        overflow_name_ = static_cast<int64_t>(names_.size());
        names_.push_back("kernel (name table full)");
      }
      return static_cast<uint32_t>(overflow_name_);
    }
    const auto id = static_cast<uint32_t>(names_.size());
    names_.push_back(demangle(key));
    names_bytes_ += 2 * key.size() + names_.back().size() + 64;
    name_ids_.emplace(key, id);
    return id;
  }

  /// Into the ring; then the bounds: trace_keep_steps steps, max_bytes (oldest steps go first; a
  /// single step above the bound keeps the records that fit).
  void add(KeptStep k) {
    const std::size_t others = ring_bytes_;
    if (others + k.bytes() + names_bytes_ > s_.max_bytes && !k.records.empty()) {
      // Room for this step alone: what fits once every older step is gone.
      // KeptStep::bytes() less its records: the step, its note and its spans, and the name table.
      const std::size_t fixed = k.bytes() - k.records.capacity() * sizeof(KeptRecord) + names_bytes_;
      const std::size_t room = s_.max_bytes > fixed ? (s_.max_bytes - fixed) / sizeof(KeptRecord) : 0;
      if (k.records.size() > room) {
        stats_.records_left_out += k.records.size() - room;
        k.records_truncated = k.records.size() - room;
        warn_once("trace.ring_bytes", "flight recorder: step " + std::to_string(k.index) + " holds more GPU records than " +
                                          "trace_ring_mib allows; its trace keeps the first " + std::to_string(room) +
                                          " (counted in the end record's traces.records_left_out)");
        std::vector<KeptRecord>(k.records.begin(), k.records.begin() + static_cast<std::ptrdiff_t>(room)).swap(k.records);  // capacity == room
      }
    }
    stats_.step_bytes_max = std::max<uint64_t>(stats_.step_bytes_max, k.bytes());
    ring_bytes_ += k.bytes();
    ring_.push_back(std::move(k));
    ++stats_.steps_kept;
    // A capture waiting for its following step keeps its steps (and the one before, while the byte
    // bound allows): the ring may hold up to two steps more than keep_steps meanwhile.
    uint64_t captured_from = UINT64_MAX;
    for (const Capture& c : due_) captured_from = std::min(captured_from, c.first);
    if (open_) captured_from = std::min(captured_from, open_->first);
    const uint64_t neighbour_from = captured_from == 0 || captured_from == UINT64_MAX ? captured_from : captured_from - 1;
    while (ring_.size() > static_cast<std::size_t>(s_.keep_steps) && ring_.front().index < neighbour_from) pop_front();
    while (ring_.size() > 1 && ring_bytes_ + names_bytes_ > s_.max_bytes && ring_.front().index < captured_from) {
      ++stats_.steps_evicted_for_bytes;
      pop_front();
    }
    stats_.bytes = ring_bytes_ + names_bytes_;
    stats_.bytes_peak = std::max(stats_.bytes_peak, stats_.bytes);
  }
  void pop_front() {
    ring_bytes_ -= ring_.front().bytes();
    ring_.pop_front();
  }

  void write(const Capture& c, const TraceEnv& env) {
    TraceDocument d;
    const uint64_t from = c.first == 0 ? 0 : c.first - 1;
    for (const KeptStep& k : ring_)
      if (k.index >= from && k.index <= c.last + 1) d.steps.push_back(&k);
    d.captured = c.captured;
    d.reasons = c.reasons;
    d.names = &names_;
    d.phase_name = [](PhaseId id) { return id == kNoPhase ? std::string("unphased") : phase_name(id); };  // as the line
    d.thread_name = [](int32_t tid) { return details::thread_name(tid); };
    d.pid = static_cast<int32_t>(::getpid());
    d.rank = s_.rank;
    d.device = s_.device;
    d.device_name = s_.device_name;
    d.run_id = env.run_id;
    d.gpu_clock_offset_ns = env.gpu_clock_offset_ns;
    d.unix_minus_monotonic_ns = env.unix_minus_monotonic_ns;
    std::string err;
    const double cpu_before = thread_cpu_ms();
    try {
      err = sink::replace_file_atomically(c.file, make_chrome_trace(d));
    } catch (const std::exception& e) {
      err = e.what();
    }
    const double cost = std::max(0.0, thread_cpu_ms() - cpu_before);
    budget_.spend(cost);
    stats_.capture_cpu_ms += cost;
    if (err.empty()) {
      ++stats_.written;
      return;
    }
    ++stats_.failed;
    warn_once("trace.write", "flight recorder: cannot write the trace '" + c.file + "': " + err +
                                 " (counted in the end record's traces.failed; training continues)");
  }

  Settings s_;
  TraceTrigger trigger_;
  CaptureBudget budget_;
  std::deque<KeptStep> ring_;
  std::size_t ring_bytes_ = 0;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::size_t names_bytes_ = 0;
  int64_t overflow_name_ = -1;
  std::optional<Capture> open_;
  std::vector<Capture> due_;
  TraceStats stats_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
