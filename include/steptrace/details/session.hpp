// steptrace/details/session.hpp - the running session: the step/phase bookkeeping the training
// thread touches (a mutex-guarded append per scope), and the background thread that samples
// memory, builds lines and writes them. The training thread never formats or writes.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <cxxabi.h>

#include <unordered_map>

#include "../backend/cupti/collector.hpp"
#include "../backend/cupti/pm_sampler.hpp"
#include "../backend/device.hpp"
#include "../backend/nvml.hpp"
#include "../core/attribution.hpp"
#include "../core/counters.hpp"
#include "../core/cross_rank.hpp"
#include "../core/device_state.hpp"
#include "../config.hpp"
#include "../core/clock.hpp"
#include "../core/records.hpp"
#include "../core/step_line.hpp"
#include "../core/step_metrics.hpp"
#include "../core/summary.hpp"
#include "../sink/jsonl_file.hpp"
#include "context.hpp"
#include "exchange.hpp"
#include "host_clock.hpp"
#include "log.hpp"

extern char** environ;

namespace steptrace::details {

inline constexpr std::size_t kMaxScalarsPerStep = 256;
// CUPTI hands over a buffer of GPU records by itself only once the buffer is full; partly filled
// ones come only when asked (cuptiActivityFlushAll). Asking costs GPU time: measured on an H200, a
// flush every 20 ms slowed a 770-kernel, 62 ms step by 0.5-0.6 ms (benchmarks/README.md). So the
// background thread asks only once the oldest waiting line has waited kFlushAfterMs, and at most that
// often: fast steps then get their lines about kFlushAfterMs late, in batches, for ~one flush per
// kFlushAfterMs. A line is not declared incomplete before its records have had kMinRecordLagMs: two
// flushes and a margin (on an H200 the records of a step sometimes came only with the second flush).
#ifndef STEPTRACE_FLUSH_AFTER_MS
#define STEPTRACE_FLUSH_AFTER_MS 200
#endif
inline constexpr double kFlushAfterMs = STEPTRACE_FLUSH_AFTER_MS;
inline constexpr double kMinRecordLagMs = 2 * kFlushAfterMs + 150;
// Launch-heavy programs ask sooner, so that what waits in CUPTI's buffers is bounded by a launch
// count rather than by the launch rate (the pool of 8 x 4 MiB holds roughly 140 000 kernel records):
// after kFlushAfterLaunches launches since the last flush, but not more often than kMinFlushGapMs
// (the old cadence; its GPU cost matters little when the host, not the GPU, bounds the step). A CUDA
// Graph launch counts once however many kernels it runs.
inline constexpr uint64_t kFlushAfterLaunches = 16384;
inline constexpr double kMinFlushGapMs = 20;

/// What the background thread knows when it decides whether to ask CUPTI for partly filled buffers.
struct FlushInputs {
  int64_t now = 0;
  std::optional<int64_t> oldest_end;  // end of the oldest line waiting for records, if any
  int64_t last_flush = 0;
  uint64_t launches_since_flush = 0;
  bool detach_waits = false;  // untraced_cupti=detach: a traced step's line waits; CUPTI detaches after it
};

/// Ask once the oldest waiting line has waited kFlushAfterMs (at most that often), or sooner after
/// kFlushAfterLaunches launches (at most every kMinFlushGapMs). In detach mode a traced step's line
/// is asked for at once (at most every kMinFlushGapMs): until it is out, CUPTI stays attached and
/// every launch of the untraced steps pays for it.
inline bool should_flush_records(const FlushInputs& in) {
  const auto after = static_cast<int64_t>(kFlushAfterMs * 1e6);
  if (in.oldest_end && in.now - *in.oldest_end >= after && in.now - in.last_flush >= after) return true;
  return (in.launches_since_flush >= kFlushAfterLaunches || (in.detach_waits && in.oldest_end)) &&
         in.now - in.last_flush >= static_cast<int64_t>(kMinFlushGapMs * 1e6);
}
inline constexpr std::size_t kMaxMemorySamples = 4096;
inline constexpr int64_t kMaxTickDriftNs = 20000;  // tick clock vs steady_clock between two anchors
inline constexpr std::size_t kMaxCounterSamples = 1u << 16;  // ~65 s of samples at the 1 ms default
inline constexpr int kMaxCounterRestarts = 3;  // PM sampling started again after a failed decode, per run

inline std::vector<std::pair<std::string, std::string>> read_environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e && *e; ++e) {
    std::string s(*e);
    const auto eq = s.find('=');
    if (eq != std::string::npos && s.rfind("STEPTRACE_", 0) == 0) env.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return env;
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  long long i = 0;
  return (v && parse_int(v, i)) ? static_cast<int>(i) : fallback;
}

class Session {
 public:
  /// The one session of the process. Deliberately never destroyed: no teardown in static
  /// destructors; stop() releases everything.
  static Session& instance() {
    static Session* session = new Session();
    return *session;
  }

  bool start(Config cfg) {
    std::lock_guard<std::mutex> life(lifecycle_);
    if (running_flag().load()) {
      warn_once("start.twice", "steptrace::start() called while running; the second call is ignored");
      return false;
    }
    for (const auto& e : apply_environment(cfg, read_environment())) report_config_error(e);
    for (const auto& e : validate(cfg)) report_config_error(e);
    if (!cfg.enabled) {
      logger()->info("disabled by configuration (enabled=false / STEPTRACE_ENABLED=0)");
      return false;
    }
    cfg_ = cfg;
    const std::string clock_reason = begin_clock_calibration();
    run_ = RunInfo{};
    run_.rank = cfg_.rank >= 0 ? cfg_.rank : env_int("RANK", env_int("OMPI_COMM_WORLD_RANK", env_int("SLURM_PROCID", 0)));
    run_.local_rank = cfg_.local_rank >= 0 ? cfg_.local_rank
                                           : env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0)));
    run_.world_size = cfg_.world_size >= 0 ? cfg_.world_size
                                           : env_int("WORLD_SIZE", env_int("OMPI_COMM_WORLD_SIZE", env_int("SLURM_NTASKS", 1)));
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) run_.hostname = host;
    run_.pid = static_cast<int64_t>(getpid());

    if (cfg_.gpu == "off") {
      run_.device_null_reason = "GPU measurement switched off (gpu=off / STEPTRACE_GPU=off)";
    } else {
      auto probe = backend::probe_device(cfg_.device);
      run_.device = probe.device;
      run_.device_null_reason = probe.null_reason;
      if (!probe.device) warn_once("no_gpu", probe.null_reason + "; host timings only, GPU fields are null");
    }
    attribution_ = false;
    detach_ = false;
    traced_done_.store(0, std::memory_order_relaxed);
    detach_asked_for_ = 0;
    if (!run_.device) {
      gpu_null_reason_ = "no GPU measured: " + run_.device_null_reason;
    } else if (cfg_.cupti == "off") {
      gpu_null_reason_ = "CUPTI attribution switched off (cupti=off / STEPTRACE_CUPTI=off)";
    } else {
      detach_ = cfg_.untraced_cupti == "detach" && cfg_.trace_every > 1;
      if (cfg_.untraced_cupti == "detach" && !detach_)
        logger()->info("untraced_cupti=detach has no effect with trace_every=1 (every step is traced)");
      const std::string err = backend::cupti::Collector::instance().start(device_table(), detach_);
      if (err.empty()) {
        attribution_ = true;
        gpu_null_reason_.clear();
      } else {
        gpu_null_reason_ = "CUPTI unavailable: " + err;
        warn_once("cupti", gpu_null_reason_ + "; falling back to host timings");
      }
    }
    counters_on_ = false;
    if (!run_.device) {
      counters_null_reason_ = "no GPU measured: " + run_.device_null_reason;
    } else if (cfg_.counters == "off") {
      counters_null_reason_ = "hardware counters switched off (counters=off / STEPTRACE_COUNTERS=off)";
    } else if (cfg_.cupti == "off") {
      counters_null_reason_ = "hardware counters are read through CUPTI, switched off (cupti=off / STEPTRACE_CUPTI=off)";
    } else if (detach_) {
      counters_null_reason_ = "hardware counters are not read with untraced_cupti=detach: detaching CUPTI between "
                              "traced steps would end PM sampling";
    } else {
      const std::string err =
          pm_.start(run_.device->index, static_cast<uint64_t>(cfg_.counters_interval_us * 1000.0));
      if (err.empty()) {
        counters_on_ = true;
        counters_null_reason_.clear();
        logger()->info("hardware counters: CUPTI PM sampling every {} us on {} ({})", cfg_.counters_interval_us,
                       pm_.chip(), pm_.describe());
      } else {
        counters_null_reason_ = "hardware counters unavailable: " + err + "; gpu.sm_efficiency is the launch-geometry estimate";
        warn_once("counters", counters_null_reason_);
      }
    }
    peak_ = resolve_peak_flops(run_.device ? std::optional<std::string_view>(run_.device->name) : std::nullopt,
                               *parse_dtype(cfg_.dtype), cfg_.peak_flops);
    if (cfg_.flops_per_token > 0 && !peak_.flops_per_second)
      warn_once("peak", "estimated_mfu will be null: " + peak_.null_reason);

    log_path_ = expand_log_path(cfg_.log_path, run_.rank);
    file_.close();
    if (!log_path_.empty()) {
      const std::string err = file_.open(log_path_);
      if (!err.empty()) {
        report_config_error({"log_path", err + "; JSON lines disabled, training continues"});
        log_path_.clear();
      }
    }

    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = OpenStep{};
      next_index_ = 0;
      spans_outside_step_ = 0;
      tracing_failed_ = false;
    }
    {
      std::lock_guard<std::mutex> lock(exchange_mutex_);
      exchange_null_reason_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.clear();
      stopping_ = false;
      steps_dropped_ = 0;
    }
    summary_ = SummaryBuilder{};
    attributor_ = Attributor{};
    waiting_.clear();
    gpu_dropped_records_ = 0;
    last_flush_ns_ = 0;
    launches_since_flush_ = 0;
    counter_samples_.clear();
    latest_counter_end_ns_ = 0;
    counter_restarts_ = 0;
    device_states_.clear();
    lines_written_ = lines_failed_ = 0;
    memory_samples_.clear();
    window_ = Window{};
    finish_clock_calibration(clock_reason);
    try {
      worker_ = std::thread([this] { worker_loop(); });
    } catch (const std::exception& e) {
      warn_once("thread", std::string("cannot start the background thread: ") + e.what() + "; steptrace stays off");
      file_.close();
      return false;
    }
    running_flag().store(true, std::memory_order_release);
    logger()->info("started: rank {}/{} on {}, device {}, log {}", run_.rank, run_.world_size, run_.hostname,
                   run_.device ? run_.device->name : std::string("none (") + run_.device_null_reason + ")",
                   log_path_.empty() ? "(none)" : log_path_);
    return true;
  }

  Summary stop() {
    std::lock_guard<std::mutex> life(lifecycle_);
    if (!running_flag().load()) {
      Summary s;  // started = false
      return s;
    }
    running_flag().store(false, std::memory_order_release);
    scopes_read_ticks().store(false, std::memory_order_relaxed);
    current_step().store(-1, std::memory_order_relaxed);
    step_thread().store(nullptr, std::memory_order_relaxed);
    step_thread_phase().store(kNoPhase, std::memory_order_relaxed);
    std::optional<StepRecord> last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_.exists) {
        const int64_t now = monotonic_ns();
        open_.record.end_ns = open_.scope_open ? now : open_.record.scope_end_ns;
        open_.record.end_is_next_step = false;
        last = std::move(open_.record);
        open_ = OpenStep{};
      }
    }
    if (last) enqueue(std::move(*last));
    if (attribution_) {
      // The last steps' kernels may still run: wait for the measured device, then take every record.
      int previous = -1;
      const bool restore = cudaGetDevice(&previous) == cudaSuccess;
      if (cudaSetDevice(run_.device->index) == cudaSuccess) (void)cudaDeviceSynchronize();
      if (restore) (void)cudaSetDevice(previous);
      (void)cudaGetLastError();
      backend::cupti::Collector::instance().flush(/*forced=*/true);
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    {
      std::lock_guard<std::mutex> lock(exchange_mutex_);
      exchange_.reset();  // its destructor waits (bounded) for its own stream, never for the job's
      has_exchange_.store(false, std::memory_order_release);
      exchange_posted_.clear();
      views_.clear();
    }
    if (counters_on_) pm_.stop();
    counters_on_ = false;
    if (attribution_) backend::cupti::Collector::instance().stop();  // disabled and detached: full speed again
    attribution_ = false;
    file_.close();

    Summary s = summary_.build();
    s.lines_written = lines_written_;
    s.lines_failed = lines_failed_;
    s.steps_dropped = steps_dropped_;
    s.log_path = log_path_;
    s.table = render_summary_table(s);
    if (cfg_.summary) {
      try {
        logger()->info("\n{}", s.table);
      } catch (...) {
      }
    }
    return s;
  }

  // ---- training-thread side -----------------------------------------------------------------

  /// Opens a step and returns its index; nullopt (counted) if a step scope is already open.
  std::optional<uint64_t> begin_step(std::optional<double> tokens, std::optional<double> samples) {
    std::optional<StepRecord> closed;
    uint64_t index = 0;
    bool toggle = false, traced = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_.exists && open_.scope_open) {
        ++open_.record.ignored_step_scopes;
        const bool same_thread = step_thread().load(std::memory_order_relaxed) == &thread_state();
        warn_once("step.nested", same_thread ? "TRACE_STEP opened inside an open TRACE_STEP; the inner one is ignored"
                                             : "TRACE_STEP opened on a second thread while a step is open; ignored "
                                               "(steps are process-wide and sequential)");
        return std::nullopt;
      }
      const int64_t now = monotonic_ns();
      if (open_.exists) {
        open_.record.end_ns = now;
        open_.record.end_is_next_step = true;
        open_.record.spans_outside_step += static_cast<uint32_t>(std::exchange(spans_outside_step_, 0));
        closed = std::move(open_.record);
      }
      open_ = OpenStep{};
      open_.exists = true;
      open_.scope_open = true;
      StepRecord& r = open_.record;
      r.index = index = next_index_++;
      current_step().store(static_cast<int64_t>(index), std::memory_order_relaxed);
      step_thread().store(&thread_state(), std::memory_order_relaxed);
      step_thread_phase().store(thread_state().innermost(), std::memory_order_relaxed);
      r.begin_ns = now;
      r.begin_unix_ns = unix_ns();
      r.spans.reserve(16);
      r.traced = !tracing_failed_ && scheduled_for_tracing(index);
      toggle = attribution_ && cfg_.trace_every > 1 && !tracing_failed_;
      traced = r.traced;
      if (tokens) r.tokens = tokens;
      else if (cfg_.tokens_per_step > 0) r.tokens = cfg_.tokens_per_step;
      if (samples) r.samples = samples;
      else if (cfg_.samples_per_step > 0) r.samples = cfg_.samples_per_step;
    }
    if (toggle) {
      // Sampled attribution: CUPTI on for traced steps only (a no-op when it already is as wanted).
      // A failure leaves it off for good.
      const std::string err = backend::cupti::Collector::instance().set_tracing(traced);
      if (!err.empty()) {
        warn_once("cupti.toggle", "cannot switch CUPTI tracing between steps (" + err +
                                      "); GPU attribution stays off for the rest of the run");
        std::lock_guard<std::mutex> lock(mutex_);
        tracing_failed_ = true;
        if (open_.exists && open_.record.index == index) open_.record.traced = false;
      }
    }
    if (closed) {
      post_summary(*closed);
      enqueue(std::move(*closed));
    }
    return index;
  }

  void end_step() {
    std::optional<AllocatorStats> stats = call_allocator_hook();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.exists || !open_.scope_open) return;
    open_.scope_open = false;
    open_.record.scope_end_ns = monotonic_ns();
    if (stats) open_.record.allocator = stats;
  }

  void set_step_counts(std::optional<double> tokens, std::optional<double> samples) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.exists) return;
    if (tokens) open_.record.tokens = tokens;
    if (samples) open_.record.samples = samples;
  }

  /// A closed phase scope. `ticks`: begin and end are read_ticks() readings, converted here;
  /// otherwise they are monotonic_ns().
  void add_span(PhaseSpan span, bool ticks, uint64_t begin, uint64_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticks && !tick_clock_.calibrated()) {  // opened in an earlier session; this one reads steady_clock
      ++spans_outside_step_;
      return;
    }
    span.begin_ns = ticks ? tick_clock_.to_ns(begin) : static_cast<int64_t>(begin);
    span.end_ns = ticks ? tick_clock_.to_ns(end) : static_cast<int64_t>(end);
    if (!open_.exists) {
      ++spans_outside_step_;  // reported in the first step's phase_scopes_outside_step
      return;
    }
    StepRecord& r = open_.record;
    if (r.spans.size() >= cfg_.max_spans_per_step) {
      ++r.spans_dropped;
      return;
    }
    r.spans.push_back(span);  // span.on_step_thread: set by the scope
  }

  void record_scalar(std::string name, double value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_.exists) {
      warn_once("record.nostep", "steptrace::record(\"" + name + "\") before the first TRACE_STEP; dropped");
      return;
    }
    if (open_.record.scalars.size() >= kMaxScalarsPerStep) {
      ++open_.record.scalars_dropped;
      return;
    }
    open_.record.scalars.emplace_back(std::move(name), value);
  }

  /// Hands over a way to reach the other ranks (steptrace/nccl.hpp). Training thread, while running.
  bool set_exchange(std::unique_ptr<CrossRankExchange> exchange, int every) {
    if (!running_flag().load()) {
      warn_once("cross_rank.not_running", "enable_cross_rank() before steptrace::start(): ignored");
      return false;
    }
    std::lock_guard<std::mutex> lock(exchange_mutex_);
    if (exchange_) {
      warn_once("cross_rank.twice", "enable_cross_rank() called twice: the second call is ignored");
      return false;
    }
    exchange_every_ = every > 0 ? every : cfg_.cross_rank_every;
    exchange_ = std::move(exchange);
    has_exchange_.store(true, std::memory_order_release);
    exchange_posted_.clear();
    exchange_null_reason_.clear();
    return true;
  }

  void set_allocator_hook(std::function<AllocatorStats()> hook) {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    allocator_hook_ = std::move(hook);
  }

 private:
  struct OpenStep {
    bool exists = false;      // a step has begun and its line is not yet queued
    bool scope_open = false;  // its TRACE_STEP scope has not ended yet
    StepRecord record;
  };
  struct Window {
    uint32_t steps = 0;
    double sum_ms = 0, min_ms = 0, max_ms = 0, tokens_sum = 0;
    uint32_t tokens_n = 0;
  };

  Session() = default;

  /// Training thread: every exchange_every_ steps, start gathering the closed step's summary.
  void post_summary(const StepRecord& r) {
    if (!has_exchange_.load(std::memory_order_acquire)) return;  // the common case: no lock on the training thread
    std::lock_guard<std::mutex> lock(exchange_mutex_);
    if (!exchange_ || r.index % static_cast<uint64_t>(exchange_every_) != 0) return;
    RankSummary sum;
    sum.rank = exchange_->rank();
    sum.step = static_cast<int64_t>(r.index);
    sum.step_ms = ns_to_ms(r.end_ns - r.begin_ns);
    for (const auto& sp : r.spans)
      if (sp.phase < kSummaryPhases && sp.on_step_thread && !sp.nested_in_same)
        sum.phase_ms[sp.phase] += ns_to_ms(sp.end_ns - sp.begin_ns);
    sum.valid = true;
    std::vector<float> wire(kSummaryFloats);
    to_floats(sum, wire.data());
    const std::string err = exchange_->post(wire);
    if (!err.empty()) {
      exchange_null_reason_ = "cross-rank exchange stopped: " + err;
      warn_once("cross_rank.post", exchange_null_reason_);
      exchange_.reset();
      has_exchange_.store(false, std::memory_order_release);
      return;
    }
    exchange_posted_.push_back(sum.step);
  }

  /// Background thread: collects a completed exchange and aggregates it (kept for the next line).
  void collect_exchange() {
    std::lock_guard<std::mutex> lock(exchange_mutex_);
    if (!exchange_) return;
    std::vector<float> all;
    while (!exchange_posted_.empty() && exchange_->poll(all)) {
      const int64_t step = exchange_posted_.front();
      exchange_posted_.pop_front();
      const int world = exchange_->world_size();
      std::vector<RankSummary> ranks(static_cast<std::size_t>(world));
      for (int k = 0; k < world && static_cast<std::size_t>((k + 1) * kSummaryFloats) <= all.size(); ++k)
        ranks[static_cast<std::size_t>(k)] = from_floats(all.data() + k * kSummaryFloats, step);
      views_.push_back(aggregate_ranks(ranks, step));
      // Lines carry one view each, oldest first, and wait for the line of the view's step: 64 views
      // cover lines lagging 64 exchanges behind (they lag ~20 steps while the first lines wait).
      if (views_.size() > 64) views_.pop_front();
    }
  }

  /// SM counts and occupancy limits of every visible device (kernels may run on any of them).
  static backend::cupti::DeviceTable device_table() {
    backend::cupti::DeviceTable t;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return t;
    }
    t.sm_count.assign(static_cast<std::size_t>(count), 0);
    t.occupancy.resize(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
      auto probe = backend::probe_device(i);
      if (!probe.device) continue;
      t.sm_count[i] = probe.device->sm_count;
      t.occupancy[i] = backend::cupti::occupancy_properties(*probe.device);
    }
    return t;
  }

  /// trace_every's schedule, the one place that says which steps are traced (the training thread
  /// also needs CUPTI to be working: tracing_failed_).
  bool scheduled_for_tracing(uint64_t index) const { return index % static_cast<uint64_t>(cfg_.trace_every) == 0; }

  void report_config_error(const ConfigError& e) {
    warn_once("config." + e.setting, "configuration error in " + e.setting + ": " + e.message);
  }

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

  void enqueue(StepRecord&& record) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      if (queue_.size() >= cfg_.max_pending_steps) {
        ++steps_dropped_;
        if (record.traced) traced_done_.fetch_add(1, std::memory_order_relaxed);
        warn_once("queue.full", "writer queue full (max_pending_steps); step lines are being dropped and counted");
        return;
      }
      queue_.push_back(std::move(record));
    }
    queue_cv_.notify_one();
  }

  // ---- background thread ----------------------------------------------------------------------

  void worker_loop() {
    bool sample_memory = run_.device.has_value();
    if (sample_memory) {
      const std::string err = backend::bind_thread_to_device(run_.device->index);
      if (!err.empty()) {
        memory_null_reason_ = err;
        sample_memory = false;
      }
    } else {
      memory_null_reason_ = run_.device_null_reason.empty() ? "no GPU" : run_.device_null_reason;
    }
    if (sample_memory) take_memory_sample(sample_memory);  // a first reading before any step ends
    open_device_state();
    const auto period = std::chrono::microseconds(static_cast<int64_t>(cfg_.memory_sample_ms * 1000));
    // While a line waits for its GPU records, look more often than the memory period.
    const auto waiting_period = std::min<std::chrono::microseconds>(period, std::chrono::microseconds(2000));
    for (;;) {
      std::deque<StepRecord> batch;
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait_for(lock, waiting_.empty() ? period : waiting_period,
                           [&] { return !queue_.empty() || stopping_; });
        batch.swap(queue_);
        stopping = stopping_;
      }
      refresh_clock_anchor();
      if (sample_memory) take_memory_sample(sample_memory);
      take_device_state();
      for (auto& record : batch) waiting_.push_back(std::move(record));
      if (attribution_) collect_gpu_records();
      if (counters_on_) collect_counter_samples();
      collect_exchange();
      emit_ready(stopping);
      if (detach_ && !stopping) {  // once per traced line: the collector ignores a request it cannot act on yet
        const uint64_t done = traced_done_.load(std::memory_order_relaxed);
        if (done != detach_asked_for_) backend::cupti::Collector::instance().request_detach(detach_asked_for_ = done);
      }
      if (stopping) {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        if (queue_.empty() && waiting_.empty()) break;
      }
    }
    nvml_.close();
  }

  /// start(): the first anchor of the tick clock, or why scopes read steady_clock ("" = ticks usable).
  std::string begin_clock_calibration() {
    scopes_read_ticks().store(false, std::memory_order_relaxed);
    std::string reason = cfg_.clock == "steady" ? "clock=steady" : ticks_unusable_reason();
    uint64_t t = 0;
    int64_t n = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    tick_clock_ = TickClock{};
    if (reason.empty()) {
      if (take_clock_anchor(t, n, 1.0, 20000)) tick_clock_.anchor(t, n);
      else reason = "the time-stamp counter could not be read next to steady_clock";
    }
    return reason;
  }

  /// start(), after the device probe: a second anchor at least TickClock::kMinBaselineNs after the
  /// first gives the slope; only then do scopes read ticks.
  void finish_clock_calibration(std::string reason) {
    if (reason.empty()) {
      uint64_t t = 0;
      int64_t n = 0;
      bool calibrated = false;
      for (int i = 0; i < 50 && !calibrated; ++i) {  // at most ~10 ms
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (!take_clock_anchor(t, n, 1.0, 20000)) continue;
        std::lock_guard<std::mutex> lock(mutex_);
        tick_clock_.anchor(t, n);
        calibrated = tick_clock_.calibrated();
      }
      if (!calibrated) reason = "the time-stamp counter could not be calibrated against steady_clock";
    }
    if (reason.empty()) {
      scopes_read_ticks().store(true, std::memory_order_relaxed);
      logger()->info("phase scopes read the CPU time-stamp counter ({:.4f} ns per tick)", tick_clock_.ns_per_tick());
    } else {
      logger()->info("phase scopes read steady_clock: {}", reason);
    }
  }

  /// Background thread: a fresh anchor keeps tick conversions within ~1 µs; a counter that no
  /// longer follows steady_clock sends new scopes back to steady_clock.
  void refresh_clock_anchor() {
    if (!scopes_read_ticks().load(std::memory_order_relaxed)) return;
    uint64_t t = 0;
    int64_t n = 0;
    // Read outside the lock the scopes take; only this thread changes the slope it reads here.
    if (!take_clock_anchor(t, n, tick_clock_.ns_per_tick())) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t error = tick_clock_.anchor(t, n);
    if (error > kMaxTickDriftNs || error < -kMaxTickDriftNs) {
      scopes_read_ticks().store(false, std::memory_order_relaxed);
      warn_once("clock.drift", "the CPU time-stamp counter drifted " + std::to_string(error / 1000) +
                                   " us from steady_clock; phase scopes read steady_clock from now on");
    }
  }

  /// NVML for power, clocks, temperature and clock-event reasons (background thread).
  void open_device_state() {
    nvml_on_ = false;
    if (!run_.device) {
      device_state_null_reason_ = "no GPU measured: " + run_.device_null_reason;
      return;
    }
    char bus[64] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, run_.device->index) != cudaSuccess) {
      (void)cudaGetLastError();
      device_state_null_reason_ = "cudaDeviceGetPCIBusId failed";
      return;
    }
    const std::string err = nvml_.open(bus);
    if (!err.empty()) {
      device_state_null_reason_ = "NVML unavailable: " + err;
      warn_once("nvml", device_state_null_reason_ + "; power, clocks and temperature are null");
      return;
    }
    nvml_on_ = true;
    device_state_null_reason_.clear();
    device_states_.push_back(nvml_.read(monotonic_ns()));  // a first reading before any step ends
  }

  void take_device_state() {
    if (!nvml_on_) return;
    const int64_t now = monotonic_ns();
    if (!device_states_.empty() && now - device_states_.back().time_ns < static_cast<int64_t>(cfg_.memory_sample_ms * 1e6)) return;
    device_states_.push_back(nvml_.read(now));
    if (device_states_.size() > kMaxMemorySamples) device_states_.pop_front();
  }

  /// Decodes the PM sampler's hardware buffer and keeps the samples (bounded). Also refreshes the
  /// offset between the host clock and the CUPTI clock the samples are stamped with.
  void collect_counter_samples() {
    uint64_t cupti_now = 0;
    const int64_t h0 = monotonic_ns();
    cuptiGetTimestamp(&cupti_now);
    const int64_t h1 = monotonic_ns();
    gpu_clock_offset_ns_ = static_cast<int64_t>(cupti_now) - (h0 + (h1 - h0) / 2);
    std::vector<CounterSample> fresh;
    const std::string err = pm_.poll(fresh);
    for (const auto& c : fresh) {
      // The attribution searches the samples by time: keep starts and ends in order and samples
      // non-empty. A sample that breaks the order (a bad timestamp) is dropped, with one warning.
      if (c.end_ns <= c.start_ns || (!counter_samples_.empty() && (c.start_ns < counter_samples_.back().start_ns ||
                                                                   c.end_ns < counter_samples_.back().end_ns))) {
        warn_once("counters.order", "hardware counters: a PM sample out of time order or empty was dropped");
        continue;
      }
      latest_counter_end_ns_ = std::max(latest_counter_end_ns_, c.end_ns);
      counter_samples_.push_back(c);
      if (counter_samples_.size() > kMaxCounterSamples) counter_samples_.pop_front();
    }
    if (!err.empty()) {
      // Usually the hardware buffer filled while this thread was held up for seconds (the decode then
      // says CUPTI_ERROR_OUT_OF_MEMORY). Start sampling again, a few times per run; the steps of the
      // gap show it in counters.coverage and counters.samples.
      if (counter_restarts_ < kMaxCounterRestarts) {
        ++counter_restarts_;
        const std::string again =
            pm_.start(run_.device->index, static_cast<uint64_t>(cfg_.counters_interval_us * 1000.0));
        warn_once("counters.restart", "hardware counters: " + err + "; PM sampling started again (" +
                                          (again.empty() ? std::string("ok") : again) +
                                          "), steps of the gap have fewer samples");
        if (again.empty()) return;
      }
      counters_on_ = false;  // the worker owns it from here on; stop() sees it off
      pm_.stop();
      counters_null_reason_ = "hardware counters stopped: " + err;
      warn_once("counters.poll", counters_null_reason_);
    }
  }

  /// Moves what CUPTI has handed over into the attributor (launch sites first: records join them).
  /// Asks CUPTI for its completed records when should_flush_records says so. Never a forced
  /// flush while the program runs: that returns records of kernels still running, with no end time.
  void collect_gpu_records() {
    auto& collector = backend::cupti::Collector::instance();
    const int64_t now = monotonic_ns();
    FlushInputs in;
    in.now = now;
    if (!waiting_.empty()) in.oldest_end = waiting_.front().end_ns;
    in.last_flush = last_flush_ns_;
    in.launches_since_flush = launches_since_flush_;
    in.detach_waits = detach_ && std::any_of(waiting_.begin(), waiting_.end(), [](const StepRecord& r) { return r.traced; });
    if (should_flush_records(in)) {
      collector.flush();
      last_flush_ns_ = now;
      launches_since_flush_ = 0;
    }
    auto d = collector.drain();
    if (d.correlations_restarted) attributor_.forget_correlations();  // before the new ids come in
    launches_since_flush_ += d.launches.size();
    for (const auto& l : d.launches) attributor_.add_launch(l);
    for (const auto& u : d.unsettled) attributor_.add_unsettled(u);
    for (const auto& k : d.kernels) attributor_.add_kernel(k);
    for (const auto& c : d.copies) attributor_.add_copy(c);
    gpu_dropped_records_ += d.dropped_records + d.dropped_launches;
  }

  /// Writes the lines whose GPU records are all in, in step order; a line whose records are late
  /// past max_lag_steps newer steps or max_lag_ms goes out marked incomplete.
  void emit_ready(bool stopping) {
    while (!waiting_.empty()) {
      const StepRecord& r = waiting_.front();
      std::optional<StepGpu> gpu;
      std::string untraced;
      if (attribution_ && !r.traced) {
        attributor_.skip(static_cast<int64_t>(r.index));
        untraced = !scheduled_for_tracing(r.index)
                       ? "step not traced: trace_every=" + std::to_string(cfg_.trace_every) +
                             " attributes the steps whose global_step is a multiple of it; host timings only" +
                             (detach_ ? " (CUPTI detached between traced steps: untraced_cupti=detach)" : "")
                       : "step not traced: CUPTI could not be switched back on (see the steptrace warning)";
      } else if (attribution_) {
        const bool complete = attributor_.is_complete(static_cast<int64_t>(r.index));
        // Overdue: max_lag_steps newer steps have closed and CUPTI has had kMinRecordLagMs to deliver,
        // or max_lag_ms has passed, or the queue bound is reached.
        const double waited_ms = ns_to_ms(monotonic_ns() - r.end_ns);
        const bool overdue =
            (waiting_.size() > static_cast<std::size_t>(cfg_.max_lag_steps) && waited_ms >= kMinRecordLagMs) ||
            waited_ms >= cfg_.max_lag_ms || waiting_.size() > cfg_.max_pending_steps;
        const bool counters_in = !counters_on_ || latest_counter_end_ns_ >= r.end_ns + gpu_clock_offset_ns_;
        if ((!complete || !counters_in) && !overdue && !stopping) return;
        gpu = attributor_.take(static_cast<int64_t>(r.index), /*drained=*/stopping);
        traced_done_.fetch_add(1, std::memory_order_relaxed);
        warn_excluded(*gpu, r.index);
        for (auto& [id, pg] : gpu->phases)
          for (auto& t : pg.top_kernels) t.name = demangle(t.name);
      }
      process(r, std::move(gpu), untraced);
      waiting_.pop_front();
    }
  }

  /// Impossible GPU records are left out of the line's sums and counted there; said once per reason.
  void warn_excluded(const StepGpu& g, uint64_t step) {
    for (int i = 0; i < kImplausibleKinds; ++i) {
      if (!g.excluded[i]) continue;
      const auto why = static_cast<Implausible>(i + 1);
      warn_once(std::string("gpu.excluded.") + implausible_name(why),
                std::to_string(g.excluded[i]) + " GPU record(s) of step " + std::to_string(step) +
                    " excluded from every sum: " + implausible_text(why) + " (counted in gpu.excluded." +
                    implausible_name(why) + ")");
    }
    if (g.implausible_phases)
      warn_once("gpu.implausible_phase", "a phase's GPU busy time exceeded the span or the sum of its records in step " +
                                             std::to_string(step) + "; its GPU fields are left out (gpu.implausible_phases)");
  }

  /// Readable kernel name (C++ demangled, cut at 200 characters), cached.
  std::string demangle(const std::string& mangled) {
    auto it = demangled_.find(mangled);
    if (it != demangled_.end()) return it->second;
    std::string out = mangled;
    int status = 0;
    char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    if (status == 0 && d) out = d;
    std::free(d);
    if (out.size() > 200) out = out.substr(0, 197) + "...";
    if (demangled_.size() < 4096) demangled_.emplace(mangled, out);
    return out;
  }

  void take_memory_sample(bool& enabled) {
    std::string err;
    auto s = backend::sample_device_memory(monotonic_ns(), &err);
    if (!s) {
      memory_null_reason_ = err;
      warn_once("memory", "device memory sampling stopped: " + err);
      enabled = false;
      return;
    }
    memory_samples_.push_back(*s);
    if (memory_samples_.size() > kMaxMemorySamples) memory_samples_.pop_front();
  }

  /// Hardware counters over the step's window (host times moved to the CUPTI clock) and over each
  /// phase's GPU busy intervals; drops samples that ended before this step.
  void attribute_counters(const StepRecord& r, StepLineInput& in) {
    const int64_t b = r.begin_ns + gpu_clock_offset_ns_, e = r.end_ns + gpu_clock_offset_ns_;
    in.counters = summarize_counters(counter_samples_, Interval{b, e});
    in.counters_interval_us = cfg_.counters_interval_us;
    if (in.gpu)
      for (const auto& [id, pg] : in.gpu->phases)
        if (!pg.busy.empty()) {
          std::vector<Interval> others;  // the other phases' GPU work: it may share this phase's samples
          for (const auto& [other_id, other] : in.gpu->phases)
            if (other_id != id) others.insert(others.end(), other.busy.begin(), other.busy.end());
          in.phase_counters[id] = summarize_phase_counters(counter_samples_, pg.busy, merge_intervals(std::move(others)));
        }
    while (!counter_samples_.empty() && counter_samples_.front().end_ns < b) counter_samples_.pop_front();
    // device_states_: keep the latest reading before this step (fallback for a short next step).
    while (device_states_.size() > 1 && device_states_[1].time_ns <= r.begin_ns) device_states_.pop_front();
  }

  MemoryObservation observe_memory(const StepRecord& r) {
    MemoryObservation m;
    std::optional<MemorySample> latest_before_end;
    for (const auto& s : memory_samples_) {
      if (s.time_ns <= r.end_ns) latest_before_end = s;
      if (s.time_ns < r.begin_ns || s.time_ns > r.end_ns) continue;
      ++m.samples;
      m.device_used_peak_bytes = std::max(m.device_used_peak_bytes.value_or(0), s.used_bytes);
      m.device_total_bytes = s.total_bytes;
    }
    // Steps shorter than the sampling period: report the latest earlier reading, marked by samples = 0.
    if (!m.samples && latest_before_end) {
      m.device_used_peak_bytes = latest_before_end->used_bytes;
      m.device_total_bytes = latest_before_end->total_bytes;
    }
    // Drop readings older than this step, but keep the latest of them: it is the fallback reading for
    // the next step if that one is shorter than the sampling period.
    while (memory_samples_.size() > 1 && memory_samples_[1].time_ns <= r.begin_ns) memory_samples_.pop_front();
    if (!m.device_used_peak_bytes)
      m.null_reason = memory_null_reason_.empty() ? "no device-memory sample yet" : memory_null_reason_;
    return m;
  }

  void process(const StepRecord& r, std::optional<StepGpu> gpu, const std::string& untraced = {}) {
    try {
      StepLineInput in;
      in.step = &r;
      in.run = &run_;
      in.host = compute_host_metrics(r);
      in.memory = observe_memory(r);
      in.flops_per_token = cfg_.flops_per_token;
      in.peak = peak_;
      in.mfu = compute_mfu(cfg_.flops_per_token, in.host.tokens_per_second, peak_);
      in.gpu = std::move(gpu);
      in.gpu_null_reason = untraced.empty() ? gpu_null_reason_ : untraced;
      in.counters_null_reason = counters_null_reason_;
      if (counters_on_ || !counter_samples_.empty()) attribute_counters(r, in);
      if (nvml_on_) in.device_state = summarize_device_state(device_states_, r.begin_ns, r.end_ns);
      in.device_state_null_reason = !nvml_on_ ? device_state_null_reason_
                                              : "no NVML reading within or before this step yet (NVML opens in the "
                                                "background after start())";
      // With log_every = N, a line is written for steps N-1, 2N-1, ... and for the last step.
      const bool last = !r.end_is_next_step;
      const bool written = last || (r.index + 1) % static_cast<uint64_t>(cfg_.log_every) == 0;
      if (written) {  // a line never written takes no view (it would be lost)
        std::lock_guard<std::mutex> lock(exchange_mutex_);
        in.cross_rank_every = exchange_every_;
        if (!exchange_ && exchange_null_reason_.empty())
          in.cross_rank_null_reason = "no communicator handed to steptrace (steptrace::enable_cross_rank, steptrace/nccl.hpp); "
                                      "aggregate the ranks' lines by rank in the dashboard instead";
        else if (!exchange_)
          in.cross_rank_null_reason = exchange_null_reason_;
        else if (run_.rank != 0)
          in.cross_rank_null_reason = "rank 0's line carries the cross-rank view";
        else if (views_.empty())
          in.cross_rank_null_reason = "no exchange completed since the previous line";
        else if (views_.front().step > static_cast<int64_t>(r.index))
          in.cross_rank_null_reason = "the next gathered view is of a later step (it waits for that step's line)";
        // A line carries the oldest view of its own step or an earlier one: lines may lag the exchange
        // (the first lines wait for their GPU records), and a view never lands on an earlier step's line.
        if (run_.rank == 0 && !views_.empty() && views_.front().step <= static_cast<int64_t>(r.index)) {
          in.cross_rank = std::move(views_.front());
          views_.pop_front();
        }
      }
      in.gpu_dropped_records = std::exchange(gpu_dropped_records_, 0);
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        in.steps_dropped_total = steps_dropped_;
      }
      if (in.mfu.above_one)
        warn_once("mfu.above_one", "estimated_mfu > 1 (" + std::to_string(*in.mfu.value) +
                                       "): flops_per_token or peak_flops is wrong");
      in.shares = compute_step_shares(in.host, in.gpu);
      in.diagnosis = diagnose(in.shares);
      summary_.add(in.host, in.mfu.value, in.diagnosis.label);

      const double ms = ns_to_ms(in.host.step_time_ns);
      window_.min_ms = window_.steps ? std::min(window_.min_ms, ms) : ms;
      window_.max_ms = window_.steps ? std::max(window_.max_ms, ms) : ms;
      window_.sum_ms += ms;
      ++window_.steps;
      if (in.host.tokens_per_second) {
        window_.tokens_sum += *in.host.tokens_per_second;
        ++window_.tokens_n;
      }
      if (!written) return;
      if (cfg_.log_every > 1) {
        WindowSummary w;
        w.steps = window_.steps;
        w.step_time_ms_mean = window_.sum_ms / window_.steps;
        w.step_time_ms_min = window_.min_ms;
        w.step_time_ms_max = window_.max_ms;
        if (window_.tokens_n) w.tokens_per_second_mean = window_.tokens_sum / window_.tokens_n;
        in.window = w;
      }
      window_ = Window{};
      if (!file_.is_open()) return;
      const std::string err = file_.write_line(make_step_line(in));
      if (err.empty()) {
        ++lines_written_;
      } else {
        ++lines_failed_;
        warn_once("write", "cannot write to '" + log_path_ + "': " + err + " (failures are counted; training continues)");
      }
    } catch (const std::exception& e) {
      warn_once("process", std::string("step line not produced: ") + e.what());
    }
  }

  std::mutex lifecycle_;  // start/stop

  // Shared with the training threads (guarded by mutex_).
  std::mutex mutex_;
  OpenStep open_;
  uint64_t next_index_ = 0;
  std::size_t spans_outside_step_ = 0;  // phase scopes that ended with no step open

  std::mutex hook_mutex_;
  std::function<AllocatorStats()> allocator_hook_;

  // Queue to the background thread (guarded by queue_mutex_).
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<StepRecord> queue_;
  bool stopping_ = false;
  uint64_t steps_dropped_ = 0;

  // Fixed at start(); read by both sides afterwards.
  Config cfg_;
  RunInfo run_;
  PeakFlops peak_;
  std::string gpu_null_reason_, counters_null_reason_;
  std::string log_path_;
  bool attribution_ = false;  // CUPTI collector running
  bool detach_ = false;       // untraced_cupti=detach in effect
  std::atomic<uint64_t> traced_done_{0};  // traced steps whose line was taken (or dropped): detach after
  uint64_t detach_asked_for_ = 0;         // traced_done_ when the worker last asked for a detach
  bool tracing_failed_ = false;

  // Owned by the background thread while running.
  std::thread worker_;
  sink::JsonlFile file_;
  std::deque<MemorySample> memory_samples_;
  std::string memory_null_reason_;
  SummaryBuilder summary_;
  Window window_;
  uint64_t lines_written_ = 0, lines_failed_ = 0;
  Attributor attributor_;
  std::deque<StepRecord> waiting_;  // host records whose lines wait for GPU records
  uint64_t gpu_dropped_records_ = 0;
  int64_t last_flush_ns_ = 0;
  uint64_t launches_since_flush_ = 0;
  TickClock tick_clock_;  // guarded by mutex_: anchored by the worker, read by add_span
  std::unordered_map<std::string, std::string> demangled_;

  // Cross-rank exchange (guarded by exchange_mutex_: posted on the training thread, polled by the worker).
  std::mutex exchange_mutex_;
  std::unique_ptr<CrossRankExchange> exchange_;
  std::atomic<bool> has_exchange_{false};  // exchange_ != nullptr, readable without the lock
  int exchange_every_ = 0;
  std::deque<int64_t> exchange_posted_;
  std::deque<CrossRankView> views_;  // gathered, not yet on a line
  std::string exchange_null_reason_;

  // Hardware counters (PM sampling) and device state (NVML); started by start(), then the worker's.
  backend::cupti::PmSampler pm_;
  bool counters_on_ = false;
  int counter_restarts_ = 0;
  std::deque<CounterSample> counter_samples_;
  int64_t latest_counter_end_ns_ = 0;
  int64_t gpu_clock_offset_ns_ = 0;  // CUPTI clock - monotonic_ns()
  backend::Nvml nvml_;
  bool nvml_on_ = false;
  std::deque<DeviceStateSample> device_states_;
  std::string device_state_null_reason_;
};

}  // namespace steptrace::details
