// steptrace/details/session_decl.hpp - the running session's class (session.hpp includes it whole):
// start() and stop(), and the calls the training thread makes, each handed to the part that does the job:
//   environment.hpp    rank, host, STEPTRACE_* variables         step_recorder.hpp  the open step, scopes, clock
//   line_policy.hpp    traced steps, flushes, overdue lines       step_queue.hpp     closed steps -> background
//   worker.hpp         the background thread                      line_assembler.hpp one step's line, pure
//   cross_rank_link.hpp the exchange between ranks                ../backend/gpu_backend.hpp  the GPU, behind an interface
//   session_setup.hpp  what start() sets up: device, CUPTI, counters, exporter
// The training thread never formats, writes, flushes or waits on the GPU (stop() excepted).
#pragma once
#include "../version.hpp"
#include <atomic>
#include <chrono>
#include <cerrno>  // program_invocation_short_name (glibc)
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../backend/gpu_backend.hpp"
#include "../config.hpp"
#include "../settings.hpp"
#include "launch_context.hpp"
#include "../core/metrics.hpp"
#include "../core/summary.hpp"
#include "../sink/jsonl_file.hpp"
#include "../sink/prometheus.hpp"
#include "cross_rank_link.hpp"
#include "environment.hpp"
#include "../exchange.hpp"
#include "fork.hpp"
#include "host_clock.hpp"
#include "line_assembler.hpp"
#include "line_policy.hpp"
#include "log.hpp"
#include "marker_ring.hpp"
#include "reading_pace.hpp"
#include "signals.hpp"
#include "step_queue.hpp"
#include "step_recorder.hpp"
#include "worker.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class Session {
 public:
  /// The one session of the process, on the real GPU backend (details/instance.hpp). Never
  /// destroyed: no teardown in static destructors; stop() releases everything.
  static Session& instance();

  /// A session on any backend (tests hand in a fake). One runs at a time: scopes find it through
  /// the process-wide launch context.
  explicit Session(std::unique_ptr<backend::GpuBackend> gpu) : gpu_(std::move(gpu)) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {  // only test sessions end: instance() is never destroyed
    if (thread_.joinable()) stop();
    Session* self = this;
    last_started().compare_exchange_strong(self, nullptr);
  }

  /// The flight recorder's settings: traces go to trace_dir, else beside the log.
  FlightRecorder::Settings flight_settings(const Config& cfg, const LineContext& ctx) const;

  /// The session that scopes and calls go to: the one last started, else instance().
  static Session& current() {
    Session* s = last_started().load(std::memory_order_acquire);
    return s ? *s : instance();
  }

  bool start(Config cfg, std::vector<std::pair<std::string, std::string>> env = read_environment()) {
    // Before any lock or thread of this session: a fork from another thread meanwhile is handled.
    const std::string fork_err = install_fork_handlers(&Session::after_fork_in_child);
    if (!fork_err.empty()) warn_once("fork", fork_err + ": a child made by fork() may find steptrace's locks held");
    make_lazy_statics();  // before any thread of this session reads them (a fork meanwhile waits)
    std::lock_guard<std::mutex> life(lifecycle_);
    if (running_flag().load()) {
      warn_once("start.twice", "steptrace::start() called while running; the second call is ignored");
      return false;
    }
    binding_step_extra_ns_now().store(0, std::memory_order_relaxed);  // a binding measures its own anew
    for (const auto& e : apply_environment(cfg, env)) report_config_error(e);
    for (const auto& e : validate(cfg)) report_config_error(e);
    if (!cfg.enabled) {
      logger()->info("disabled by configuration (enabled=false / STEPTRACE_ENABLED=0)");
      return false;
    }
    recorder_.reset(cfg);
    relearned_at_.store(kNeverRelearned, std::memory_order_relaxed);
    const std::string clock_reason = recorder_.begin_clock_calibration(cfg.clock);
    LineContext ctx;
    ctx.cfg = cfg;
    ctx.run = discover_run(cfg);
    probe_device(ctx);
    start_attribution(ctx);
    recorder_.set_budget_start(attribution_);
    start_counters(ctx);
    ctx.peak = resolve_peak_flops(ctx.run.device ? std::optional<std::string_view>(ctx.run.device->name) : std::nullopt,
                                  cfg.dtype, cfg.peak_flops);
    if (ctx.run.world_size % cfg.model_parallel.size() != 0)
      report_config_error({"model_parallel", "tensor " + std::to_string(cfg.model_parallel.tensor) + " x pipeline " +
                                                 std::to_string(cfg.model_parallel.pipeline) + " x context " +
                                                 std::to_string(cfg.model_parallel.context) + " does not divide world_size " +
                                                 std::to_string(ctx.run.world_size) + "; estimated_mfu is null"});
    if (cfg.flops_per_token > 0 && !ctx.peak.flops_per_second)
      warn_once("peak", "estimated_mfu will be null: " + ctx.peak.null_reason);

    cfg_ = cfg;
    run_ = ctx.run;
    log_path_ = expand_log_path(cfg.log_path, ctx.run.rank);
    file_.close();
    if (!log_path_.empty()) {
      std::string err = file_.open(log_path_);
      if (!err.empty() && file_.held_by_another_writer()) {
        // Two processes in one file tear each other's lines on a full disk: this one writes beside it.
        const std::string shared = log_path_;
        // PID namespaces (containers) may give several writers of one shared volume the same PID: the
        // next free name of a few.
        for (int n = 0; n < 8; ++n) {
          log_path_ = per_process_log_path(shared, ::getpid(), n);
          err = file_.open(log_path_);
          if (err.empty() || !file_.held_by_another_writer()) break;
        }
        if (err.empty())
          warn_once("log.shared", "the log '" + shared + "' is being written by another process (put {rank} in log_path "
                                  "for one log per rank); this process writes '" + log_path_ + "'");
      }
      if (!err.empty()) {
        report_config_error({"log_path", err + "; JSON lines disabled, training continues"});
        log_path_.clear();
      }
      if (file_.ended_fragment())
        warn_once("log.fragment", "the log '" + log_path_ + "' ended in part of a line (a run killed while writing it); "
                                  "a newline now ends that fragment, which readers skip as unparsable");
    }
    prometheus_.reset();
    if (!cfg.prometheus_textfile.empty() || !cfg.prometheus_listen.empty()) open_prometheus(cfg, ctx.run);
    link_.reset();
    queue_.reset(cfg.max_pending_steps);
    ended_at_begun_.store(kNotEnded, std::memory_order_relaxed);
    WorkerSetup setup;
    setup.context = std::move(ctx);
    setup.gpu = gpu_.get();
    setup.recorder = &recorder_;
    setup.queue = &queue_;
    setup.link = &link_;
    captures_.clear();
    setup.captures = &captures_;
    setup.flight = flight_settings(cfg, setup.context);
    flight_on_ = setup.flight.keep_steps > 0;
    setup.remote.on = cfg.remote_captures && setup.flight.keep_steps > 0;
    setup.remote.dir = setup.flight.dir;
    setup.remote.rank = setup.context.run.rank;
    setup.remote.world_size = setup.context.run.world_size;
    setup.remote.pid = setup.context.run.pid;
    setup.remote.host = setup.context.run.hostname;
    setup.remote.job_id = setup.context.run.job_id;
    setup.remote.log_path = log_path_;
    if (file_.is_open()) setup.sinks.push_back(&file_);
    if (prometheus_) setup.sinks.push_back(prometheus_.get());
    setup.attribution = attribution_;
    setup.detach = detach_;
    setup.may_detach = attribution_ && !detach_ && cfg.untraced_cupti == UntracedCupti::automatic && budget_decides(cfg);
    worker_ = std::make_unique<Worker>(std::move(setup));
    recorder_.finish_clock_calibration(clock_reason);
    try {
      thread_ = std::thread([w = worker_.get()] {
        block_write_signals();
        w->run();
      });
    } catch (const std::exception& e) {
      warn_once("thread", std::string("cannot start the background thread: ") + e.what() + "; steptrace stays off");
      release_gpu();
      file_.close();
      prometheus_.reset();
      return false;
    }
    last_started().store(this, std::memory_order_release);
    running_flag().store(true, std::memory_order_release);
    if (cfg.flush_on_exit) {
      const std::string err = install_end_handlers(&Session::end_hook);
      if (!err.empty()) warn_once("flush_on_exit", "flush_on_exit: " + err + "; a SIGTERM may lose the last lines");
      end_signals().wait_ms.store(cfg.end_wait_ms, std::memory_order_relaxed);
      end_signals().armed.store(true, std::memory_order_release);
    }
    logger()->info("started: rank {}/{} on {}, device {}, log {}", run_.rank, run_.world_size, run_.hostname,
                   run_.device ? run_.device->name : std::string("none (") + run_.device_null_reason + ")",
                   log_path_.empty() ? "(none)" : log_path_);
    return true;
  }

  Summary stop() {
    std::lock_guard<std::mutex> life(lifecycle_);
    if (!running_flag().load()) return Summary{};  // started = false
    end_signals().armed.store(false, std::memory_order_release);
    running_flag().store(false, std::memory_order_release);
    scopes_read_ticks().store(false, std::memory_order_relaxed);
    current_step().store(-1, std::memory_order_relaxed);
    step_thread().store(nullptr, std::memory_order_relaxed);
    step_thread_phase().store(kNoPhase, std::memory_order_relaxed);
    if (auto last = recorder_.close_last()) queue_.push(std::move(*last), /*last=*/true);
    if (attribution_) {
      // The last steps' kernels may still run: wait for the measured device, then take every record.
      gpu_->synchronize(run_.device->index);
      gpu_->flush_records(/*forced=*/true);
    }
    queue_.stop();
    if (thread_.joinable()) thread_.join();
    link_.reset();
    counters_on_ = worker_->counters_on();
    if (const uint64_t marks = marker_ring().recorded(), shared = marker_ring().shared(), failed = marker_ring().failed();
        marks + failed) {
      const uint64_t all = marks + shared + failed;
      const uint64_t once = std::min(marker_ring().open_marks(), all), after = all - once;
      logger()->info("stream markers: {} recorded, {} sharing the marker of the boundary before them ({:.2f} us a mark on the "
                     "training thread after the first marked step, trying included; {:.2f} ms once to make the "
                     "events and for that step's {} marks), {} not recorded, {} steps' left out", marks, shared,
                     after ? static_cast<double>(marker_ring().recorded_ns()) / 1e3 / static_cast<double>(after) : 0.0,
                     static_cast<double>(marker_ring().open_ns()) / 1e6, once, failed, marker_ring().steps_left_out());
    }
    if (attribution_) worker_->log_markers_at_stop();
    release_gpu();
    file_.close();
    if (prometheus_) {  // the textfile's last values (steptrace_up 0) were written by the background thread
      prometheus_->close_endpoint();
      prometheus_.reset();
    }

    Summary s = worker_->summary().build();
    s.lines_written = worker_->lines_written();
    s.lines_failed = worker_->lines_failed();
    s.steps_dropped = queue_.dropped();
    s.log_path = log_path_;
    s.table = render_summary_table(s);
    worker_.reset();
    if (cfg_.summary) {
      try {
        logger()->info("\n{}", s.table);
      } catch (...) {
      }
    }
    return s;
  }

  /// An ending without stop() (SIGTERM, exit; signals.hpp): the open step closed now, every pending
  /// line written as it is (gpu.complete false where records are missing) and an end record, within
  /// end_wait_ms. Any thread; never takes the lifecycle lock (stop() may hold it).
  /// The wait counts from `asked_ns` (CLOCK_MONOTONIC: steady_clock's on Linux), when the handler or
  /// the exit hook asked, not from when this thread woke: the asker waits end_wait_ms from there.
  /// Returns whether the ending was served (its end record written) within its wait.
  bool end_now(const char* reason, int64_t asked_ns) {
    if (!running_flag().load(std::memory_order_acquire)) return false;
    // An ending served already, and no step begun since: a program's own SIGTERM handler (installed
    // before start(), called after steptrace's ending) that calls exit() asks again. One end record.
    if (ended_at_begun_.load(std::memory_order_acquire) == recorder_.steps_begun()) return true;
    const auto now = std::chrono::steady_clock::now();
    const auto asked = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(asked_ns));
    const auto from = asked_ns > 0 && asked <= now ? asked : now;
    const int wait_ms = end_signals().wait_ms.load(std::memory_order_relaxed);
    uint64_t begun = 0;
    if (auto last = recorder_.try_close_open(from + std::chrono::milliseconds(wait_ms / 5), &begun))
      queue_.push(std::move(*last), /*last=*/true);
    const uint64_t id = queue_.request_flush(reason, begun, from);
    if (queue_.wait_flushed(id, from + std::chrono::milliseconds(wait_ms * 9 / 10))) {
      ended_at_begun_.store(begun, std::memory_order_release);
      return true;
    }
    warn_once("end.timeout", std::string("at ") + reason + ": the pending lines were not all written within " +
                                 std::to_string(wait_ms) + " ms (end_wait_ms)");
    return false;
  }
  static bool end_hook(const char* reason, int64_t asked_ns) {
    try {
      return current().end_now(reason, asked_ns);
    } catch (...) {
      return false;
    }
  }

  // ---- training-thread side -----------------------------------------------------------------

  /// Opens a step and returns its index; nullopt (counted) if a step scope is already open.
  std::optional<uint64_t> begin_step(std::optional<double> tokens, std::optional<double> samples) {
    // From the recorder's lock until the closed step is in the queue, a SIGTERM waits (signals.hpp):
    // an ending run between the two would find that step in no one's hands and count it cut.
    DeferEndings held;
    StepRecorder::Begun b = recorder_.begin(tokens, samples, std::exchange(next_step_framework_here(), false));
    if (!b.index) return std::nullopt;
    MarkerRing& markers = marker_ring();
    if (attribution_ && sampling_possible(cfg_) && !b.tracing_failed) {  // read in begin()'s lock: no second lock per step
      // Sampled attribution: CUPTI on for traced steps only (a no-op when it already is as wanted).
      // A failure leaves it off for good.
      const std::string err = gpu_->set_tracing(b.traced);
      if (!err.empty()) {
        warn_once("cupti.toggle", "cannot switch CUPTI tracing between steps (" + err +
                                      "); GPU attribution stays off for the rest of the run");
        recorder_.tracing_failed(*b.index);
      }
    }
    // A boundary that switches tracing (into a traced step from an untraced one, or out) costs the thread
    // what the lines charge as tracing: a binding timing its own calls leaves such steps out
    // (tracing_boundaries). Traced after traced switches nothing.
    if (attribution_ && sampling_possible(cfg_) && b.traced != after_traced_)
      tracing_boundaries().fetch_add(1, std::memory_order_relaxed);
    // After a traced step: the stream its kernels went to is the markers' (learn_stream), unless named.
    if (attribution_ && after_traced_)
      markers.learn_stream(gpu_->take_launch_streams(), /*twice=*/gpu_->detach_since().has_value());
    after_traced_ = b.traced && attribution_;
    if (b.traced && attribution_) markers.learn_stream_id();  // records are on: CUPTI names the stream
    marker_depth().store(thread_state().depth, std::memory_order_relaxed);
    markers.marks_step(*b.index, b.traced);  // thinned by overhead_budget: this step left unmarked
    // What the closed step's markers cost, by difference with the step before it (the budget's ledger):
    // taken here, per step, not when the background thread reaches the line (lines come in batches).
    if (b.closed) {
      b.closed->markers_ns_at_close = markers.recorded_ns();
      b.closed->binding_extra_ns = binding_step_extra_ns_now().load(std::memory_order_relaxed);
    }
    markers.mark(*b.index, MarkerKind::step_begin, kNoPhase);
    if (b.closed) {
      link_.post(*b.closed);
      queue_.push(std::move(*b.closed));
      b.closed.reset();  // its memory is freed inside, too
    }
    return b.index;
  }

  /// Lines the sinks refused so far (a full disk, a size limit): tests wait for this event.
  uint64_t lines_failed_so_far() const { return worker_ ? worker_->lines_failed() : 0; }
  /// The background thread is asleep waiting for steps, none queued (tests: what is pushed from here
  /// on waits for its next look unless a push wakes it).
  bool background_asleep() { return queue_.reader_inside() && queue_.empty(); }
  /// The rank and world size the lines say (set at start(); the Python package compares them with
  /// torch.distributed's). Training thread, while running.
  std::pair<int, int> rank_and_world() const { return {run_.rank, run_.world_size}; }

  /// The program destroyed the stream the markers were recorded on (any thread, from CUPTI's callback as
  /// it destroys it): the next two steps are traced whatever the interval (session_setup.hpp).
  void relearn_marker_stream();
  static constexpr uint64_t kRelearnEverySteps = 100;

  /// capture_steps(n): the next n steps to begin are written as a trace.
  bool capture_steps(int n) {
    if (n <= 0) {
      warn_once("capture_steps.n", "capture_steps(n): n must be >= 1; ignored");
      return false;
    }
    if (cfg_.trace_keep_steps <= 0 || !flight_on_) {
      warn_once("capture_steps.off", "capture_steps(): the flight recorder is off (trace_keep_steps=0, or no log and no "
                                     "trace_dir); ignored");
      return false;
    }
    const uint64_t first = static_cast<uint64_t>(last_step_of_key(current_step().load(std::memory_order_relaxed)) + 1);
    if (captures_.add(first, first + static_cast<uint64_t>(n) - 1)) return true;
    warn_once("capture_steps.full", "capture_steps(): 64 requests are pending; this one is ignored");
    return false;
  }

  // The training thread's calls that take a lock an ending needs hold a SIGTERM until they return
  // (DeferEndings, signals.hpp); the allocator hook is the program's code and runs outside.
  void mark_step_work_done() {
    DeferEndings held;
    recorder_.mark_work_done();
  }
  void add_collective_wait(double ms) { link_.add_wait(ms, WaitBasis::backward_end); }
  int64_t steps_begun() const { return static_cast<int64_t>(recorder_.steps_begun()); }
  void end_next_step_at_work_end() {
    DeferEndings held;
    recorder_.end_next_at_work_end();
  }
  void end_step() {
    const int64_t key = current_step().load(std::memory_order_relaxed);
    if (key >= 0) marker_ring().mark(static_cast<uint64_t>(key), MarkerKind::step_end, kNoPhase);
    const auto stats = call_allocator_hook();
    {
      DeferEndings held;
      recorder_.end(stats);
    }
    // Detach mode: the next step traced attaches CUPTI here, between the steps, so that its own time
    // and diagnosis are an untraced step's (the attach costs ~7-10 ms on an H200). A failure: that
    // step attaches at its begin, as before.
    if (attribution_ && sampling_possible(cfg_) && recorder_.open_view().next_traced) {
      tracing_boundaries().fetch_add(1, std::memory_order_relaxed);
      (void)gpu_->attach_ahead();
    }
  }
  void set_step_counts(std::optional<double> tokens, std::optional<double> samples) {
    DeferEndings held;
    recorder_.set_counts(tokens, samples);
  }
  void add_span(PhaseSpan span, bool ticks, uint64_t begin, uint64_t end) {
    DeferEndings held;
    recorder_.add_span(span, ticks, begin, end);
  }
  void record_scalar(std::string name, double value) {
    DeferEndings held;
    recorder_.record_scalar(std::move(name), value);
  }

  /// Hands over a way to reach the other ranks (steptrace/nccl.hpp). Training thread, while running.
  bool set_exchange(std::unique_ptr<CrossRankExchange> exchange, int every) {
    if (!running_flag().load()) {
      warn_once("cross_rank.not_running", "enable_cross_rank() before steptrace::start(): ignored");
      return false;
    }
    // One run, one run_id: every rank takes rank 0's (a collective, once, bounded; lines written
    // before this call keep the rank's own).
    std::string agreed;
    std::string err = exchange->agree_run_id(run_.run_id, agreed);
    if (err.empty() && (agreed.size() != 16 || agreed.find_first_not_of("0123456789abcdef") != std::string::npos))
      err = "rank 0 sent '" + printable(agreed.substr(0, 32)) + "', not 16 hex digits";
    if (!err.empty())
      warn_once("cross_rank.run_id", "run_id not agreed across ranks: " + err + "; this rank's lines keep run_id " + run_.run_id);
    if (!link_.set(std::move(exchange), every > 0 ? every : cfg_.cross_rank_every)) return false;
    if (err.empty() && agreed != run_.run_id) {
      logger()->info("run_id {} (rank 0's) replaces this rank's {}", agreed, run_.run_id);
      run_.run_id = agreed;
      link_.set_agreed_run_id(agreed);
    }
    return true;
  }

  void set_allocator_hook(std::function<AllocatorStats()> hook) {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    allocator_hook_ = std::move(hook);
  }

 private:
  static std::atomic<Session*>& last_started() {
    static std::atomic<Session*> session{nullptr};
    return session;
  }
  static std::atomic<Session*>& instance_slot() {
    static std::atomic<Session*> session{nullptr};
    return session;
  }
  /// In a fork's child (details/fork.hpp), on its one thread: the parent's session is left behind,
  /// untouched but for the endpoint's listening socket, which the child must not keep open (the port
  /// would stay taken, unanswered, after the parent closes it). The next call finds a new session.
  static void after_fork_in_child() {
    // Left behind, still reachable (a leak checker sees no leak), chained through every generation.
    static std::atomic<Session*> left_behind{nullptr};
    for (Session* old : {last_started().load(std::memory_order_acquire), instance_slot().load(std::memory_order_acquire)}) {
      if (!old || old->left_next_ || old == left_behind.load(std::memory_order_relaxed)) continue;  // listed already
      if (old->prometheus_) old->prometheus_->close_endpoint_in_child();
      // The log's descriptor too: a child that outlives its parent's run (a DataLoader worker) would
      // keep the log's lock (its open file description) and send the parent's next start() beside it.
      // Closed without unlocking: the parent's descriptor keeps the lock (its stop() releases it).
      old->file_.abandon();
      old->left_next_ = left_behind.load(std::memory_order_relaxed);
      if (!old->left_next_) old->left_next_ = old;  // the chain's end points to itself: "listed"
      left_behind.store(old, std::memory_order_relaxed);
    }
    last_started().store(nullptr, std::memory_order_release);
    instance_slot().store(nullptr, std::memory_order_release);
  }
  Session* left_next_ = nullptr;  // the chain of sessions left behind in fork children

  /// The Prometheus exporter (sink/prometheus.hpp): what cannot be started is warned about, once per setting.
  void open_prometheus(const Config& cfg, const RunInfo& run);

  void report_config_error(const ConfigError& e) {
    warn_once("config." + e.setting, "configuration error in " + e.setting + ": " + e.message);
  }

  void probe_device(LineContext& ctx);

  /// Launch callbacks and GPU records; or why the lines' GPU sections are null.
  void start_attribution(LineContext& ctx);

  /// Hardware counters (PM sampling); or why the lines' counters are null.
  void start_counters(LineContext& ctx);

  /// Counters and attribution off, CUPTI detached: the program runs at full speed again.
  void release_gpu();
  static void make_lazy_statics();

  std::optional<AllocatorStats> call_allocator_hook() {
    std::function<AllocatorStats()> hook;
    {
      std::lock_guard<std::mutex> lock(hook_mutex_);
      hook = allocator_hook_;
    }
    if (!hook) return std::nullopt;
    try {
      return hook();
    } catch (const std::exception& e) {
      warn_once("hook", std::string("allocator stats hook threw: ") + e.what() + "; hook removed");
    } catch (...) {
      warn_once("hook", "allocator stats hook threw; hook removed");
    }
    set_allocator_hook(nullptr);
    return std::nullopt;
  }

  std::unique_ptr<backend::GpuBackend> gpu_;
  std::mutex lifecycle_;  // start/stop
  StepRecorder recorder_;
  CaptureRequests captures_;
  bool flight_on_ = false;  // the flight recorder runs (trace_keep_steps > 0 and somewhere to write)
  StepQueue queue_;
  CrossRankLink link_;
  std::mutex hook_mutex_;
  std::function<AllocatorStats()> allocator_hook_;

  // Fixed at start(); read by both sides afterwards.
  Config cfg_;
  RunInfo run_;
  static constexpr uint64_t kNotEnded = ~uint64_t{0};
  static constexpr uint64_t kNeverRelearned = ~uint64_t{0};
  std::atomic<uint64_t> relearned_at_{kNeverRelearned};  // the step relearn_marker_stream() last traced
  std::atomic<uint64_t> ended_at_begun_{kNotEnded};  // steps begun when an ending was served (end_now)
  std::string log_path_;
  bool attribution_ = false;  // the backend collects launches and records
  bool detach_ = false;       // untraced_cupti=detach in effect
  bool after_traced_ = false;  // training thread: the step begun last was traced
  bool counters_on_ = false;  // PM sampling started (the worker may stop it; stop() asks it)

  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  sink::JsonlFile file_;
  std::unique_ptr<sink::PrometheusSink> prometheus_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
