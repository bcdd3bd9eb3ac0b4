// steptrace/details/worker_lines.hpp - the background thread's lines: which waiting lines are ready
// (line_policy.hpp), each one assembled and handed to the sinks, the GPU work after a step, and the
// end record (Worker's members; worker.hpp includes them all).
#pragma once
#include "worker_decl.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline void Worker::emit_ready(bool stopping) {
  const Config& cfg = lines_.context().cfg;
  while (!waiting_.empty()) {
    if (end_deadline_ && std::chrono::steady_clock::now() >= *end_deadline_) {  // the end record first
      for (const StepRecord& r : waiting_)
        if (s_.attribution) attributor_.skip(static_cast<int64_t>(r.index));
      lines_cut_at_end_ += waiting_.size();
      warn_once("end.cut", "an ending (SIGTERM or exit) left no time for " + std::to_string(waiting_.size()) +
                               " waiting lines: cut, counted in the end record's dropped.lines_cut_at_end");
      waiting_.clear();
      return;
    }
    if (!stopping && !end_deadline_ && s_.queue->flush_pending()) return;  // an ending was asked: it goes first
    const StepRecord& r = waiting_.front();
    std::optional<StepGpu> gpu;
    std::string untraced;
    StepActivity activity;  // the step's records, for the flight recorder
    const int64_t before = static_cast<int64_t>(r.index) - 1;  // the step the work between belongs after
    // Work launched between the previous step and this one is in this line: an untraced line waits
    // for it as a traced one waits for its own records.
    const bool between_in = before < 0 || attributor_.between_complete(before, stopping);
    if (s_.attribution && !r.traced && !between_in && !incomplete_line_due(r, stopping)) return;
    if (!take_markers(r, stopping)) return;
    Measured<BetweenGpu> between = before >= 0 ? gpu_after(before) : Measured<BetweenGpu>(reason_text(Reason::first_step_between));
    prev_traced_ = r.traced;
    last_taken_ = LastTaken{static_cast<int64_t>(r.index), r.scope_end_ns};
    if (s_.attribution && !r.traced) {
      attributor_.skip(static_cast<int64_t>(r.index));
      untraced = untraced_reason(r, cfg, detached(r));
    } else if (s_.attribution) {
      LineWait w;
      w.records_complete = attributor_.is_complete(static_cast<int64_t>(r.index)) && between_in;
      w.counters_in = lines_.counters_cover(r.end_ns);
      w.lines_waiting = waiting_.size();
      w.waited_ms = ns_to_ms(monotonic_ns() - r.end_ns);
      w.stopping = stopping;
      if (!line_due(w, cfg)) return;
      gpu = attributor_.take(static_cast<int64_t>(r.index), /*drained=*/stopping, flight_.on() ? &activity : nullptr);
      ++traced_done_;
      if (gpu->complete) gate_markers(*gpu, r.index);
      if (gpu->complete)
        if (const std::optional<Interval> work = gpu_work_interval(*gpu))
          readings_.saw_gpu_tail(work->second - (r.end_ns + lines_.gpu_clock_offset_ns()));
      for (const auto& [key, text] : excluded_record_notes(gpu->excluded, gpu->implausible_phases, r.index))
        warn_once(key, text);  // impossible records are left out of the line's sums and counted there
      for (auto& [id, pg] : gpu->phases)
        for (auto& t : pg.top_kernels) t.name = demangle_(t.name);
    }
    const bool traced = gpu.has_value(), complete = gpu && gpu->complete;
    process(r, std::move(gpu), untraced, std::move(between));
    try {
      flight_.keep(r, traced ? &activity : nullptr, complete,
                   traced ? std::string() : untraced.empty() ? reason_text(Reason::no_attribution_because, lines_.context().gpu_null_reason) : untraced,
                   demangle_);
      if (flight_.has_due()) flight_.write_due(trace_env());
    } catch (const std::exception& e) {
      warn_once("trace.keep", std::string("flight recorder: ") + e.what() + " (this step is not kept; training continues)");
    }
    waiting_.pop_front();
  }
}

inline bool Worker::incomplete_line_due(const StepRecord& r, bool stopping) const {
  LineWait w;
  w.records_complete = false;
  w.counters_in = true;
  w.lines_waiting = waiting_.size();
  w.waited_ms = ns_to_ms(monotonic_ns() - r.end_ns);
  w.stopping = stopping;
  return line_due(w, lines_.context().cfg);
}

inline bool Worker::take_markers(const StepRecord& r, bool stopping) {
  if (markers_.step == static_cast<int64_t>(r.index)) return true;  // taken on an earlier pass
  MarkerRing& ring = marker_ring();
  TakenMarkers t;
  t.step = static_cast<int64_t>(r.index);
  if (!ring.has_events()) {
    t.why = s_.attribution ? ring.why_off() : reason_text(Reason::markers_need_attribution, ": " + lines_.context().gpu_null_reason);
  } else {
    std::vector<MarkerPoint> points;
    switch (ring.collect(r.index, points, &t.why)) {
      case MarkerRing::Collect::pending: {
        if (!incomplete_line_due(r, stopping)) return false;
        t.why = reason_text(Reason::markers_line_due);
        break;
      }
      case MarkerRing::Collect::none: {
        if (const auto thinned = r.traced ? std::nullopt : ring.thinned(r.index)) {
          t.why = *thinned;
          break;
        }
        const int64_t first = ring.first_marked_step();
        t.why = !ring.armed() ? ring.why_off()
                : first < 0 || static_cast<int64_t>(r.index) < first
                    ? reason_text(Reason::markers_armed_late)
                    : reason_text(Reason::markers_none_recorded);
        break;
      }
      case MarkerRing::Collect::ready:
        t.markers = summarize_markers(points, r.begin_ns, r.own_end_ns(), &t.why);
        if (!t.markers) {
          warn_once("markers.check", "step " + std::to_string(r.index) + ": stream markers left out: " + t.why + " (said once)");
          ring.ask_recalibration();
        }
        break;
      case MarkerRing::Collect::left_out:
        break;
    }
  }
  markers_ = std::move(t);
  return true;
}

inline void Worker::gate_markers(const StepGpu& gpu, uint64_t step) {
  MarkerRing& ring = marker_ring();
  if (!ring.has_events()) return;
  int64_t total = 0;
  for (const auto& [stream, busy] : gpu.stream_busy_ns) total += busy;
  if (total <= 0) return;  // no GPU work: nothing learned
  // The program's own stream (named, or learned from its launches), or one it destroyed (never armed again).
  if (ring.stream_chosen() || ring.stream_forgotten()) return;
  const int64_t id = ring.stream_id();
  if (id < 0) {
    ring.arm(false, reason_text(Reason::markers_stream_id_unknown));
    return;
  }
  auto it = gpu.stream_busy_ns.find(static_cast<uint32_t>(id));
  const double share = it == gpu.stream_busy_ns.end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(total);
  if (share >= 0.9) {
    ring.arm(true, {});
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f %%", (1 - share) * 100);
  ring.arm(false, reason_text(Reason::markers_other_streams, std::to_string(step)) + " ran " + buf +
                      " of its GPU work on other streams than the legacy default stream (a marker there would order "
                      "them), and no stream took 9 in 10 of the step thread's kernel launches: name the program's "
                      "stream with steptrace::set_marker_stream");
}

inline Measured<BetweenGpu> Worker::gpu_after(int64_t step) {
  if (!s_.attribution) return Measured<BetweenGpu>(lines_.context().gpu_null_reason);
  std::optional<BetweenGpu> g = attributor_.take_between(step);
  if (g) {
    for (auto& t : g->top_kernels) t.name = demangle_(t.name);
    return {std::move(g), {}};
  }
  if (prev_traced_) return {BetweenGpu{}, {}};  // records were on and nothing was launched
  return Measured<BetweenGpu>(reason_text(Reason::between_untraced, std::to_string(step) +
                              " was not traced (GPU records run from a traced step's begin to the next step's begin)"));
}

/// A step's collective wait for the cross-rank window (cross_rank_link.hpp), from its own GPU evidence:
/// a complete trace's exposed NCCL time, else the `nccl` phase's span in its stream markers.
inline void Worker::feed_wait(const StepLineInput& in) {
  if (!s_.link->exchanging()) return;
  const int64_t step = in.step ? static_cast<int64_t>(in.step->index) : -1;  // the step measured
  if (in.gpu && in.gpu->complete) {
    s_.link->add_wait(ns_to_ms(in.gpu->nccl_exposed_ns), WaitBasis::trace, step);
  } else if (in.markers) {
    const auto it = in.markers->phases.find(phase_tag::nccl);
    if (it != in.markers->phases.end() && it->second.count > 0)
      s_.link->add_wait(ns_to_ms(it->second.span_ns), WaitBasis::markers, step);
  }
}

inline void Worker::process(const StepRecord& r, std::optional<StepGpu> gpu, const std::string& untraced,
                            Measured<BetweenGpu> between) {
  try {
    for (const auto& [name, v] : r.scalars)
      if (!std::isfinite(v))
        warn_once("scalar.nonfinite", "step " + std::to_string(r.index) + ": record(\"" + name.substr(0, 64) + "\", " +
                                          (std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf") +
                                          "): a non-finite value is written as null, with the reason in null_reasons "
                                          "(said once; every such line says it)");
    LineAssembler::Extra x;
    if (markers_.step == static_cast<int64_t>(r.index)) x.markers.set(std::move(markers_.markers), std::move(markers_.why));
    else x.markers.unknown(reason_text(Reason::markers_not_read));
    x.gpu_dropped_records = std::exchange(gpu_dropped_records_, 0);
    x.steps_dropped_total = s_.queue->dropped();
    x.lines_unwritten_total = lines_failed_.load(std::memory_order_relaxed);
    OverheadLine overhead = observe_overhead(r, gpu);
    StepLineInput in = lines_.assemble(r, std::move(gpu), untraced, x);
    feed_wait(in);
    in.overhead = std::move(overhead);
    in.between_gpu = std::move(between);
    in.trace = flight_.decide(r.index, ns_to_ms(in.host.step_time_ns),
                              in.gpu ? std::optional<Bottleneck>(in.diagnosis.label) : std::nullopt,
                              s_.captures && s_.captures->covers(r.index), lines_.context().run.run_id);
    if (!lines_.written(r)) return;  // a line never written takes no cross-rank view (it would be lost)
    const LineContext& ctx = lines_.context();
    s_.link->fill_line(r.index, ctx.run.rank, in);
    lines_.close_window(in);
    if (s_.sinks.empty()) return;
    bool log_sink = false;  // a sink that holds the lines (the log), not a view of them (the exporter)
    for (const sink::LineSink* sink : s_.sinks) log_sink = log_sink || sink->counts_lines();
    const bool compact = ctx.cfg.line_detail == LineDetail::compact && log_sink;
    bool fields_read = false;
    for (const sink::LineSink* sink : s_.sinks) fields_read = fields_read || sink->reads_fields();
    FlatJson fields;    // the line's leaves, for a sink that reads fields (the Prometheus exporter)
    TierLeaves tiers;   // the compact line's and the run record's values, from the same pass
    const std::string line = make_step_line(in, fields_read ? &fields : nullptr, compact ? &tiers : nullptr);
    // line_detail=compact: the log's sinks get the compact line, after the run record when it is new
    // or changed (a new record starts the reasons' sentences anew: its run_id may be another, rank 0's);
    // a view of the lines (the exporter) keeps the full one. What a failed write did not carry (the
    // record, a sentence) is written again with the next line.
    std::string compact_line;
    // The log sinks whose run record just failed: the compact line is not written there either (a line
    // without its record has no host, pid or settings); it is counted unwritten, and the record is
    // tried again before the next line.
    std::vector<const sink::LineSink*> record_failed;
    if (compact) {
      std::string facts;
      compact_line = make_compact_line(tiers, reasons_written_, &facts);
      if (facts != run_record_) {
        if (settings_in_force_.empty())
          for (const Setting& s : settings()) settings_in_force_.emplace_back(s.name, s.text(ctx.cfg));
        const std::string record = make_run_record(tiers, settings_in_force_, true);
        bool written = true;
        for (sink::LineSink* sink : s_.sinks)
          if (sink->counts_lines() && !sink->write_line(record).empty()) {
            written = false;
            record_failed.push_back(sink);
          }
        run_record_ = written ? std::move(facts) : std::string();
        reasons_written_ = ReasonBook{};  // the line after a new record carries every sentence again
        compact_line = make_compact_line(tiers, reasons_written_);
      }
    }
    if (details::line_out_undeclared().load(std::memory_order_relaxed))
      warn_once("line_out.undeclared", "a line's writer wrote a value its declaration (core/line_fields.hpp) does not hold "
                                       "(a steptrace bug; the line is written as it is): please report it");
    if (details::line_out_unbalanced().load(std::memory_order_relaxed))
      warn_once("line_out", "a line's writer closed an object it had not opened or left one open (a steptrace bug; "
                            "the lines are kept well formed): please report it");
    last_line_step_ = static_cast<int64_t>(r.index);
    if (in.gpu && !in.gpu->complete) ++lines_incomplete_;
    for (sink::LineSink* sink : s_.sinks) {
      const bool no_record = std::find(record_failed.begin(), record_failed.end(), sink) != record_failed.end();
      const std::string err =
          no_record ? std::string("its run record could not be written")
                    : sink->write_step_line(compact && sink->counts_lines() ? compact_line : line, fields_read ? &fields : nullptr);
      if (sink->counts_lines()) {
        if (err.empty()) ++lines_written_;
        else lines_failed_.store(lines_failed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        if (!err.empty() && compact) reasons_written_.unwrite_last();  // its sentences go with a later line
      }
      if (!err.empty())
        warn_once("write." + sink->describe(), "cannot write to " + sink->describe() + ": " + err +
                                                   (sink->counts_lines() ? " (failures are counted; training continues)"
                                                                         : " (training continues)"));
    }
  } catch (const std::exception& e) {
    warn_once("process", std::string("step line not produced: ") + e.what());
  }
}

inline void Worker::write_end(const std::string& reason, uint64_t steps_cut) {
  try {
    // At stop() the captures still open are written with what the ring holds. SIGTERM and exit allow
    // 1 s for everything: the end record goes first, unwritten captures stay counted (captures - written).
    if (reason == "stop") {
      try {
        flight_.finish(trace_env());
      } catch (const std::exception& e) {
        warn_once("trace.finish", std::string("flight recorder: ") + e.what());
      }
    }
    remote_.stop();
    if (reason == "stop" && (cycles_.attach.n || cycles_.detach.n))
      logger()->info("CUPTI between traced steps: attached again {} times ({:.2f} ms on average, {:.2f} at most), "
                     "detached {} times ({:.2f} ms on average, {:.2f} at most), timed on the threads that did it",
                     cycles_.attach.n, cycles_.attach.n ? cycles_.attach.sum_ms / cycles_.attach.n : 0.0,
                     cycles_.attach.max_ms, cycles_.detach.n,
                     cycles_.detach.n ? cycles_.detach.sum_ms / cycles_.detach.n : 0.0, cycles_.detach.max_ms);
    EndRecord e;
    e.traces = flight_.stats();
    const RemoteCaptures::Stats& asked = remote_.stats();
    e.traces.requests = asked.requests;
    e.traces.requests_refused = asked.refused;
    e.traces.requests_planned = asked.planned;
    e.traces.requests_late = asked.late;
    e.reason = reason;
    e.unix_ns = unix_ns();
    e.last_global_step = last_line_step_;
    e.lines_written = lines_written_;
    e.lines_unwritten_total = lines_failed_.load(std::memory_order_relaxed);
    e.steps_dropped_total = s_.queue->dropped();
    e.lines_incomplete = lines_incomplete_;
    e.lines_cut_at_end = lines_cut_at_end_;
    if (watchdog_.enabled()) e.stall_records = stall_records_;
    e.steps_cut_at_end = steps_cut;
    if (last_taken_.index >= 0 && last_taken_.scope_end_ns > 0) {  // what ran after the last step
      e.after_last_step_ns = std::max<int64_t>(0, monotonic_ns() - last_taken_.scope_end_ns);
      e.after_last_step_gpu = gpu_after(last_taken_.index);
    }
    const std::string line = make_end_line(e, lines_.context().run);
    for (sink::LineSink* sink : s_.sinks)
      if (sink->counts_lines()) sink->write_line(line);
  } catch (...) {
  }
}

inline TraceEnv Worker::trace_env() {
  TraceEnv env;
  env.run_id = lines_.context().run.run_id;
  env.gpu_clock_offset_ns = s_.attribution ? s_.gpu->gpu_clock_offset_ns() : 0;
  env.unix_minus_monotonic_ns = unix_ns() - monotonic_ns();
  return env;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
