// steptrace/details/worker_decl.hpp - the background thread's class (worker.hpp includes it whole):
// takes closed steps from the queue, reads memory, device state and hardware counters, moves GPU
// records from the backend into the attribution, decides when to ask for records and when a line stops
// waiting (line_policy.hpp), assembles each line and hands it to the sinks. Nothing here runs on the training thread. The loop and
// the intake are here; the lines in worker_lines.hpp, the overhead budget's part in worker_overhead.hpp;
// memory, NVML and counter readings are a ReadingsPoller's (readings_poller.hpp).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../backend/gpu_backend.hpp"
#include "../core/attribution.hpp"
#include "../core/clock.hpp"
#include "../core/end_line.hpp"
#include "../core/line_tiers.hpp"
#include "../core/overhead_parts.hpp"
#include "../core/plausibility.hpp"
#include "../settings.hpp"
#include "../sink/sink.hpp"
#include "cross_rank_link.hpp"
#include "demangle.hpp"
#include "flight_recorder.hpp"
#include "line_assembler.hpp"
#include "line_policy.hpp"
#include "log.hpp"
#include "marker_ring.hpp"
#include "readings_poller.hpp"
#include "remote_captures.hpp"
#include "signals.hpp"
#include "stall_watchdog.hpp"
#include "step_queue.hpp"
#include "step_recorder.hpp"
#include "trace_controller.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// What the worker is given at start(); it owns the rest.
struct WorkerSetup {
  LineContext context;
  backend::GpuBackend* gpu = nullptr;
  StepRecorder* recorder = nullptr;  // the scope clock it keeps anchored
  StepQueue* queue = nullptr;
  CrossRankLink* link = nullptr;
  CaptureRequests* captures = nullptr;  // capture_steps(n)
  FlightRecorder::Settings flight;
  RemoteCaptures::Settings remote;  // steptrace-ctl's requests
  std::vector<sink::LineSink*> sinks;
  bool attribution = false;  // the backend collects launches and records
  bool detach = false;       // untraced_cupti=detach in effect from the start
  bool may_detach = false;   // untraced_cupti=auto under the budget: the worker may switch to detach
};

class Worker {
 public:
  /// The longest this thread sleeps between looks at the queue (the training thread wakes it only for
  /// stop() or a queue a quarter full: StepQueue::push).
  static constexpr int kLookEveryMs = 20;

  explicit Worker(WorkerSetup setup)
      : s_(std::move(setup)),
        lines_(s_.context),
        watchdog_(s_.context.cfg.stall_after_s),
        flight_(s_.flight),
        remote_(s_.remote, s_.link, s_.captures, s_.recorder),
        controller_(TraceController::Settings{s_.context.cfg.overhead_budget, budget_decides(s_.context.cfg), s_.detach,
                                              s_.may_detach}),
        ledger_(host_call_ns().load(std::memory_order_relaxed)),
        readings_(*s_.gpu, lines_, ledger_, watchdog_, *s_.recorder),
        detach_since_(s_.detach ? std::optional<uint64_t>(0) : std::nullopt) {}

  /// The thread's body; returns once stop() was asked and every step has its line.
  void run() {
    const LineContext& ctx = lines_.context();
    readings_.start();
    // The training thread does not wake this thread at each step (StepQueue::push): it looks at least
    // every kLookEveryMs, so that a line is never held longer for it.
    const auto period = std::min<std::chrono::microseconds>(
        std::chrono::microseconds(static_cast<int64_t>(ctx.cfg.memory_sample_ms * 1000)),
        std::chrono::milliseconds(kLookEveryMs));
    // While a line waits for its GPU records, look more often than the memory period.
    const auto waiting_period = std::min<std::chrono::microseconds>(period, std::chrono::microseconds(2000));
    // The stall watchdog looks at least every tenth of its threshold (at most every second).
    const auto idle_period = watchdog_.enabled()
                                 ? std::min<std::chrono::microseconds>(period, std::chrono::microseconds(watchdog_.look_every_us()))
                                 : period;
    for (;;) {
      std::deque<StepRecord> batch;
      const bool stopping = s_.queue->take(batch, waiting_.empty() ? idle_period : waiting_period);
      readings_.resume_counters_if_wanted(waiting_, attributor_);  // first: before reads that may wait
      s_.recorder->refresh_clock_anchor();
      s_.recorder->gather_spans();  // the threads' closed scopes, so that their rings never fill within a step
      readings_.read();
      take_in(batch);
      if (s_.attribution) collect_gpu_records();
      readings_.poll_counters(waiting_, attributor_);
      s_.link->collect(last_step_of_key(current_step().load(std::memory_order_relaxed)));
      if (std::string id = s_.link->take_agreed_run_id(); !id.empty()) lines_.context().run.run_id = std::move(id);
      remote_.poll(lines_.context().run.run_id);
      if (controller_.detach_asked() && !detach_since_) {
        detach_since_ = s_.gpu->detach_since();
        if (detach_since_) stop_counters_for_detach();
      }
      uint64_t flush_id = 0;
      std::deque<StepRecord> queued;
      std::chrono::steady_clock::time_point asked_at{};
      uint64_t cut = 0;
      const std::string flush_reason = s_.queue->take_flush(flush_id, queued, &asked_at, &cut);
      // An ending (SIGTERM, exit) allows end_wait_ms in all: the waiting lines get 6/10 of it,
      // those left then are cut (counted in the end record), so that the end record always comes.
      if (!flush_reason.empty()) end_deadline_ = asked_at + std::chrono::milliseconds(lines_.context().cfg.end_wait_ms * 6 / 10);
      take_in(queued);
      emit_ready(stopping || !flush_reason.empty());  // an ending: every waiting line now, as it is
      if (!flush_reason.empty()) {
        write_end(flush_reason, cut);
        end_deadline_.reset();
        s_.queue->flush_done(flush_id);
      }
      if (detach_since_ && !stopping) {  // once per traced line, again while records are still on
        const uint64_t done = traced_done_ + s_.queue->dropped_traced();
        if (done != detach_asked_for_ && s_.gpu->request_detach(done)) detach_asked_for_ = done;
      }
      if (!stopping) look_for_stall();
      if (stopping && waiting_.empty() && s_.queue->empty()) break;
    }
    write_end("stop");
    for (sink::LineSink* sink : s_.sinks) {
      const std::string abandoned = sink->finish_lines();
      if (!abandoned.empty()) warn_once("finish." + sink->describe(), "at stop(): " + abandoned);
    }
    readings_.finish();
  }

  // After run() returned (stop()).
  bool counters_on() { return lines_.context().counters_on; }
  /// stop(), after the thread joined: the markers' pace as the run ended and what it read (info).
  void log_markers_at_stop() const;
  SummaryBuilder& summary() { return lines_.summary(); }
  uint64_t lines_written() const { return lines_written_; }
  uint64_t lines_failed() const { return lines_failed_.load(std::memory_order_relaxed); }

 private:
  /// Moves what the backend has handed over into the attributor (launch sites first: records join
  /// them). Asks for completed records when should_flush_records says so. Never a forced flush while
  /// the program runs: that returns records of kernels still running, with no end time.
  void collect_gpu_records() {
    const int64_t now = monotonic_ns();
    FlushInputs in;
    in.now = now;
    if (!waiting_.empty()) in.oldest_end = waiting_.front().end_ns;
    in.last_flush = last_flush_ns_;
    in.launches_since_flush = launches_since_flush_;
    in.detach_waits =
        detach_since_ && std::any_of(waiting_.begin(), waiting_.end(), [](const StepRecord& r) { return r.traced; });
    in.flush_after_ms = lines_.context().cfg.flush_after_ms;
    if (should_flush_records(in)) {
      s_.gpu->flush_records(/*forced=*/false);
      last_flush_ns_ = now;
      launches_since_flush_ = 0;
    }
    GpuDrain d = s_.gpu->drain_records();
    watchdog_.saw(d);
    if (d.correlations_restarted) attributor_.forget_correlations();  // before the new ids come in
    launches_since_flush_ += d.launches.size();
    for (const auto& l : d.launches) attributor_.add_launch(l);
    for (const auto& u : d.unsettled) attributor_.add_unsettled(u);
    for (uint32_t corr : d.windowed) attributor_.make_window(corr);
    for (int64_t t : d.detached_at_ns)
      if (detach_times_.size() < 1024) detach_times_.push_back(t);
    for (int64_t t : d.attached_ahead_at_ns)
      if (attach_times_.size() < 1024) attach_times_.push_back(t);
    for (double ms : d.attach_ms) {
      if (cycle_attach_ms_.size() < 64) cycle_attach_ms_.push_back(ms);
      cycles_.attach.add(ms);
    }
    for (double ms : d.detach_ms) {
      if (cycle_detach_ms_.size() < 64) cycle_detach_ms_.push_back(ms);
      cycles_.detach.add(ms);
    }
    for (const auto& k : d.kernels) attributor_.add_kernel(k);
    for (const auto& c : d.copies) attributor_.add_copy(c);
    gpu_dropped_records_ += d.dropped_records + d.dropped_launches;
  }

  /// Closed steps from the queue: their lines wait for GPU records; the watchdog learns their durations.
  void take_in(std::deque<StepRecord>& closed) {
    for (auto& record : closed) {
      watchdog_.step_closed(record);
      waiting_.push_back(std::move(record));
    }
  }

  /// The stall watchdog (stall_watchdog.hpp): a stall record when no step has begun for the
  /// threshold (again at 2x, 4x ...), a resumed record when one does.
  void look_for_stall() {
    if (!watchdog_.enabled()) return;
    const int64_t now = monotonic_ns();
    const StallWatch::Due due = watchdog_.look(now, *s_.recorder);
    if (due == StallWatch::Due::none) return;
    const LineContext& ctx = lines_.context();
    std::string line;
    if (due == StallWatch::Due::resumed) {
      line = watchdog_.resumed_line(unix_ns(), ctx.run);
      if (line.empty()) return;
      logger()->warn("step {} began: the stall of step {} ended after {:.1f} s", watchdog_.watch().step(),
                     watchdog_.watch().ended_step(), watchdog_.watch().ended_stalled_s());
    } else {
      StallWatchdog::Gpu g;
      if (s_.attribution) {
        s_.gpu->flush_records(/*forced=*/false);  // completed records only: what is missing has not finished
        last_flush_ns_ = now;
        collect_gpu_records();
        g.attributor = &attributor_;
        g.clock_offset_ns = s_.gpu->gpu_clock_offset_ns();
        if (!ctx.counters_on) g.counters_off_reason = ctx.counters_null_reason.empty() ? std::string(reason_text(Reason::counters_off)) : ctx.counters_null_reason;
        else if (readings_.counters_paused())  // the samples held are from the last traced step, not from now
          g.counters_off_reason = reason_text(Reason::stall_counters_paused);
        if (!s_.recorder->open_view().traced)
          g.untraced_reason = reason_text(Reason::stall_step_untraced, std::to_string(s_.recorder->trace_every_in_force()) +
                              "): its launches are not followed");
      } else {
        g.off_reason = reason_text(Reason::no_attribution_because, ctx.gpu_null_reason);
      }
      line = watchdog_.stall_line(now, unix_ns(), *s_.recorder, g, ctx.run, demangle_);
      ++stall_records_;
      logger()->warn("stall: step {} has been open {:.1f} s (threshold {:.1f} s); the stall record names the open "
                     "phases (report {})", watchdog_.watch().step(), watchdog_.watch().stalled_s(now),
                     watchdog_.watch().reported_threshold_s(), watchdog_.watch().reports());
    }
    for (sink::LineSink* sink : s_.sinks)
      if (sink->counts_lines()) sink->write_line(line);
  }

  /// Writes the lines whose GPU records are all in, in step order (line_due decides).
  void emit_ready(bool stopping);

  /// The GPU work launched after `step`'s scope ended and before the next step began (or the end):
  /// known when `step` was traced (records stay on until the next step begins); else why not.
  Measured<BetweenGpu> gpu_after(int64_t step);

  /// One step's line: assembled (line_assembler.hpp), checked, handed to the sinks and the flight recorder.
  void process(const StepRecord& r, std::optional<StepGpu> gpu, const std::string& untraced,
               Measured<BetweenGpu> between = Measured<BetweenGpu>(reason_text(Reason::first_step_between)));

  /// Whether a line still waiting for something of its GPU evidence goes out now (line_due).
  bool incomplete_line_due(const StepRecord& r, bool stopping) const;
  /// The step's stream markers (marker_ring.hpp), read back once all are reached; false: not yet, and
  /// the line may still wait for them (line_due).
  bool take_markers(const StepRecord& r, bool stopping);
  void feed_wait(const StepLineInput& in);
  /// A traced step's records show where its GPU work ran: markers on the legacy default stream are armed
  /// only while that is where it runs (an event there would order the program's other blocking streams).
  void gate_markers(const StepGpu& gpu, uint64_t step);
  /// overhead_budget: how many steps the stream markers skip (MarkerRing::want_every).
  void pace_markers(const Config& cfg, uint64_t index);
  void log_markers_pace(uint64_t index, const MarkersPace& pace, double charged, double others,
                        std::optional<double> upper, double budget);
  /// What the pace reads, in words: the records' own time on a marked step and the in-run comparison.
  std::string marked_cost_words() const;
  /// The markers' in-run comparison's input from the step's line (core/marked_steps.hpp).
  void feed_marking(const StepRecord& r, double marked_ms, bool cupti_switched);

  /// Feeds the step to the controller (trace_controller.hpp) and applies what it decides: a new trace
  /// interval for the recorder, the switch to detach. Returns the line's `overhead` section.
  OverheadLine observe_overhead(const StepRecord& r, const std::optional<StepGpu>& gpu);

  /// What CUPTI did between traced steps when step `r` ran: "keep", "detach" ("" without attribution).
  std::string untraced_cupti_of(const StepRecord& r) const;
  /// Whether step `r` ran with CUPTI detached between traced steps.
  bool detached(const StepRecord& r) const { return detach_since_ && r.index >= *detach_since_; }

  /// untraced_cupti=auto: staying attached costs more than the budget at any interval, and detaching
  /// is modelled cheaper. The collector detaches from its next switch-off after a traced step
  /// (detach_since); until then the lines say keep and the counters run.
  void switch_to_detach(const StepRecord& r, const OverheadEstimate& keep);
  /// Detach mode in force: PM sampling stops before the first detach is asked for (a detach ends it).
  void stop_counters_for_detach();

 private:
  WorkerSetup s_;
  LineAssembler lines_;
  Attributor attributor_;
  Demangler demangle_;
  StallWatchdog watchdog_;
  FlightRecorder flight_;
  RemoteCaptures remote_;
  std::deque<StepRecord> waiting_;  // host records whose lines wait for GPU records
  struct LastTaken {
    int64_t index = -1;
    int64_t scope_end_ns = 0;
  } last_taken_;                    // the last step whose line was made (the end record's after_last_step)
  bool prev_traced_ = false;       // the last step taken in was traced (records on until the next began)
  std::optional<std::chrono::steady_clock::time_point> end_deadline_;  // an ending's, while it is served
  uint64_t lines_cut_at_end_ = 0;  // waiting lines an ending had no time left for
  uint64_t stall_records_ = 0;     // stall records written (the end record's stall_records)
  uint64_t gpu_dropped_records_ = 0;
  int64_t last_flush_ns_ = 0;
  uint64_t launches_since_flush_ = 0;
  uint64_t traced_done_ = 0;       // traced steps whose line was taken: detach after
  uint64_t detach_asked_for_ = 0;  // traced steps done when the worker last asked for a detach
  TraceController controller_;    // the trace interval and keep or detach (trace_controller.hpp)
  std::deque<int64_t> detach_times_;  // CUPTI's detaches not yet charged to a step (GpuDrain::detached_at_ns)
  std::deque<int64_t> attach_times_;  // attaches ahead of a traced step not yet charged (GpuDrain::attached_ahead_at_ns)
  std::vector<double> cycle_attach_ms_, cycle_detach_ms_;  // how long CUPTI's attaches / detaches took, not yet handed on
  struct CycleTally {  // every timed attach / detach of the run, for the log at stop()
    uint64_t n = 0;
    double sum_ms = 0, max_ms = 0;
    void add(double ms) { ++n, sum_ms += ms, max_ms = std::max(max_ms, ms); }
  };
  struct {
    CycleTally attach, detach;
  } cycles_;
  OverheadLedger ledger_;          // host scopes and background readings (overhead.parts)
  ReadingsPoller readings_;        // memory, NVML, PM samples (after the members it is handed)
  std::string switch_why_;         // what staying attached was estimated to cost then
  std::optional<uint64_t> detach_since_;  // first step in detach mode, once in force
  uint64_t lines_written_ = 0;
  std::atomic<uint64_t> lines_failed_{0};  // written by this thread only; read by lines_failed_so_far() too
  uint64_t lines_incomplete_ = 0;  // written without all of their GPU records
  int64_t last_line_step_ = -1;    // the last step whose line was produced
  ReasonBook reasons_written_;     // line_detail=compact: the sentences the log has so far
  std::string run_record_;         // line_detail=compact: the facts of the run record last written
  std::vector<std::pair<std::string, std::string>> settings_in_force_;  // its settings (the run's Config)
  struct TakenMarkers {
    int64_t step = -1;
    std::optional<StepMarkers> markers;
    std::string why;  // when markers is empty
  } markers_;                       // the markers of the step whose line is being made
  double attached_fraction_ = 0;    // the last estimate's CUPTI-attached share (the markers' pace reads it)
  int64_t last_traced_index_ = -1;  // the last traced step seen: the markers' comparison skips 2 after it
  MarkersPace::Why markers_why_ = MarkersPace::Why::cost;  // what decided the markers' pace last (pace_markers)
  bool markers_held_said_ = false;  // the markers' hold logged once
  static constexpr int kMarkersPaceLogged = 32;  // the markers' pace changes logged (log_markers_pace)
  int markers_pace_logged_ = 0;
  static constexpr uint64_t kReasonRewriteSteps = 512;  // the least steps between two writes at one pace
  uint64_t markers_said_index_ = 0;   // the step whose line last wrote the pace's reason (pace_markers)
  double markers_said_charge_ = 0;    // what the pace's reason was last written with
  bool markers_said_in_run_ = false;  // ... and whether that was the in-run comparison's
  int64_t marked_ns_seen_ = 0;      // the markers' recording time charged to the overhead so far (per step:
                                    // StepRecord::markers_ns_at_close)

  TraceEnv trace_env();

  /// The end record (core/end_line.hpp), to the sinks that hold the lines (not a view of them, such as
  /// the Prometheus exporter); not counted as a line.
  void write_end(const std::string& reason, uint64_t steps_cut = 0);
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
