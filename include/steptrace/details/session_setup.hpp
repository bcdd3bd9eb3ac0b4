// steptrace/details/session_setup.hpp - what start() sets up beside the training thread's state: the
// device probe, CUPTI attribution (handing the backend the launch context), PM-sampling counters, the
// Prometheus exporter, the flight recorder's settings; and the GPU's release at stop() (Session's
// members; session.hpp includes them).
#pragma once
#include "session_decl.hpp"
#include "../backend/nvtx.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline FlightRecorder::Settings Session::flight_settings(const Config& cfg, const LineContext& ctx) const {
  FlightRecorder::Settings f;
  f.keep_steps = cfg.trace_keep_steps;
  f.max_bytes = static_cast<std::size_t>(cfg.trace_ring_mib) << 20;
  f.max_files = cfg.trace_max_files;
  f.dir = expand_log_path(cfg.trace_dir, ctx.run.rank);
  if (f.dir.empty() && (log_path_.empty() || file_.is_stream()) && f.keep_steps > 0) {
    // No log file (off, unusable, or a stream such as /dev/stdout) and no trace_dir: trace files would
    // land in the working directory (or /dev), which nobody asked for. The recorder stays off, and says so.
    warn_once("trace_dir.none", std::string("no trace files: the log is ") +
                                    (cfg.log_path.empty() ? "off" : file_.is_stream() ? "not a file (a stream)" : "unusable") +
                                    " and trace_dir is not set (trace files go beside the log, or to trace_dir / "
                                    "STEPTRACE_TRACE_DIR); the flight recorder and remote captures are off");
    f.keep_steps = 0;
    f.off_reason = reason_text(Reason::recorder_no_file);
  } else if (f.dir.empty()) {
    const auto slash = log_path_.rfind('/');
    f.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : log_path_.substr(0, slash);
  }
  f.rank = ctx.run.rank;
  f.device = ctx.run.device ? ctx.run.device->index : 0;
  f.device_name = ctx.run.device ? ctx.run.device->name : std::string();
  f.trigger.trigger = cfg.trace_trigger;
  f.budget = budget_decides(cfg) ? cfg.overhead_budget : 0;  // as the line's overhead.budget
  parse_step_ranges(cfg.capture_steps, f.trigger.ranges);  // validated at start()
  return f;
}

inline void Session::open_prometheus(const Config& cfg, const RunInfo& run) {
  sink::PrometheusSink::Options o;
  o.textfile = expand_log_path(cfg.prometheus_textfile, run.rank);
  // Advice, under keys of their own (a failure to write is still said under the setting's).
  if (!o.textfile.empty() && (o.textfile.size() < 5 || o.textfile.compare(o.textfile.size() - 5, 5, ".prom") != 0))
    warn_once("config.prometheus_textfile.suffix", "configuration: prometheus_textfile '" + o.textfile +
                                                       "' does not end in .prom: node_exporter's textfile collector reads only "
                                                       "*.prom files (written anyway)");
  if (!o.textfile.empty() && run.local_rank > 0 && cfg.prometheus_textfile.find("{rank}") == std::string::npos)
    warn_once("config.prometheus_textfile.rank", "configuration: prometheus_textfile '" + o.textfile +
                                                     "' has no {rank} and this host runs several ranks (local_rank " +
                                                     std::to_string(run.local_rank) + "): they overwrite each other's file");
  o.listen = cfg.prometheus_listen;
  const auto colon = o.listen.rfind(':');
  const std::string port_text = colon == std::string::npos ? "" : o.listen.substr(colon + 1);
  long long port = -1;
  if (!o.listen.empty() && (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
                            !parse_int(port_text, port) || port + run.local_rank > 65535)) {
    report_config_error({"prometheus_listen", "'" + o.listen + "' is not host:port (port 0 - 65535 after adding the "
                                              "local rank); no scrape endpoint, training continues"});
    o.listen.clear();
  } else if (port > 0) {
    o.listen = o.listen.substr(0, colon + 1) + std::to_string(port + run.local_rank);  // one port per rank of a host
  }
  o.job = cfg.job_name;
  for (const char* var : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"})
    if (o.job.empty() && std::getenv(var)) o.job = std::string(std::getenv(var)).substr(0, 128);  // as the line's job_id
  if (o.job.empty()) o.job = program_invocation_short_name;
  o.every_ms = cfg.prometheus_every_ms;
  o.window_lines = cfg.prometheus_window_lines;
  o.labels = {{"rank", std::to_string(run.rank)}, {"local_rank", std::to_string(run.local_rank)},
              {"world_size", std::to_string(run.world_size)}, {"Hostname", run.hostname}};
  // dcgm-exporter's names for the GPU's identity, so its series join steptrace's (docs/prometheus.md).
  if (run.device) o.labels.emplace_back("cuda_device", std::to_string(run.device->index));
  if (run.device && !run.device->uuid.empty()) o.labels.emplace_back("UUID", run.device->uuid);
  if (run.device && !run.device->pci_bus_id.empty()) o.labels.emplace_back("pci_bus_id", run.device->pci_bus_id);
  auto p = std::make_unique<sink::PrometheusSink>();
  for (const auto& problem : p->open(std::move(o))) report_config_error({problem.setting, problem.message});
  if (p->both_ways())
    logger()->info("prometheus_textfile and prometheus_listen are both on: a Prometheus that scrapes both sees every "
                   "series twice, told apart by the `sink` label (textfile, endpoint); select one (docs/prometheus.md)");
  if (p->active()) {
    if (p->port()) logger()->info("Prometheus metrics at http://{}/metrics", cfg.prometheus_listen.substr(0, colon + 1) + std::to_string(p->port()));
    const std::string host = cfg.prometheus_listen.substr(0, colon == std::string::npos ? 0 : colon);
    if (p->port() && (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]"))
      warn_once("prometheus.every_interface",
                "prometheus_listen=" + cfg.prometheus_listen + " serves /metrics on every network interface: whoever can "
                "reach this host reads the run's metrics and identity (hostname, job id, run_id); 127.0.0.1:PORT keeps it "
                "local (the endpoint has no authentication: docs/prometheus.md)");
    prometheus_ = std::move(p);
  }
}

inline void Session::probe_device(LineContext& ctx) {
  if (ctx.cfg.gpu == Mode::off) {  // who switched it off: the environment, or the program's own setting
    const char* env = std::getenv("STEPTRACE_GPU");
    ctx.run.device_null_reason = env && std::string(env) == "off"
                                     ? reason_text(Reason::gpu_off_by_env)
                                     : reason_text(Reason::gpu_off_by_program);
    return;
  }
  if (forked_after_cuda().load(std::memory_order_relaxed)) {  // details/fork.hpp
    ctx.run.device_null_reason = reason_text(Reason::fork_child);
    warn_once("no_gpu.fork", ctx.run.device_null_reason + "; host timings only, GPU fields are null");
    return;
  }
  cuda_touched().store(true, std::memory_order_relaxed);
  auto probe = gpu_->probe(ctx.cfg.device);
  ctx.run.device = probe.device;
  ctx.run.device_null_reason = probe.null_reason;
  if (!probe.device) warn_once("no_gpu", probe.null_reason + "; host timings only, GPU fields are null");
}

inline void Session::start_attribution(LineContext& ctx) {
  attribution_ = detach_ = after_traced_ = false;
  const Config& cfg = ctx.cfg;
  // A traced step shows which stream to mark, and checks the markers.
  marker_ring().attach(nullptr, reason_text(Reason::markers_need_attribution));
  if (!ctx.run.device) {
    ctx.gpu_null_reason = reason_text(Reason::no_gpu_measured, ctx.run.device_null_reason);
    return;
  }
  if (cfg.cupti == Mode::off) {
    ctx.gpu_null_reason = reason_text(Reason::cupti_off);
    return;
  }
  // Detach from the start when asked and some steps may go untraced (an interval > 1, or the
  // budget's); untraced_cupti=auto starts attached and the budget may detach later (Worker).
  detach_ = cfg.untraced_cupti == UntracedCupti::detach && sampling_possible(cfg);
  if (cfg.untraced_cupti == UntracedCupti::detach && !detach_)
    warn_once("untraced_cupti", "untraced_cupti=detach applies when steps go untraced (trace_every > 1, or "
                                "trace_every 0 with overhead_budget > 0); every step is traced, CUPTI stays attached");
  backend::LaunchContextSource launches;  // the launch context this runtime owns (launch_context.hpp)
  launches.step_key = [] { return current_step().load(std::memory_order_relaxed); };
  launches.phase = [] { return launch_phase(); };
  launches.thread_id = [] { return this_thread_id(); };
  gpu_->on_stream_destroy([](std::uintptr_t stream) {
    if (marker_ring().forget_stream(stream)) Session::current().relearn_marker_stream();
  });
  const std::string err = gpu_->start_attribution(detach_, launches);
  if (!err.empty()) {
    ctx.gpu_null_reason = reason_text(Reason::cupti_unavailable, err);
    warn_once("cupti", ctx.gpu_null_reason + "; falling back to host timings");
    detach_ = false;
    return;
  }
  attribution_ = true;
  if (cfg.stream_markers) marker_ring().attach(gpu_->markers(), reason_text(Reason::markers_backend_none));
  else marker_ring().attach(nullptr, reason_text(Reason::markers_setting_off));
}

/// The program destroyed the stream the markers were recorded on (any thread, from CUPTI's callback as
/// it destroys it): the next step to begin is traced, whatever the interval, so that its launches show
/// the stream that took the work (the markers learn it after the traced step; the lines between say
/// why they have none). Without it, the markers would wait for the budget's next trace: up to
/// kMaxBudgetTraceEvery steps. Two steps: with CUPTI detached between traced steps the markers take a
/// new stream only when two traced steps in a row show it (learn_stream's `twice`). At most once every
/// kRelearnEverySteps steps: a program that makes a stream per step is not traced every step (and the
/// recorder's few forced windows stay for captures asked from outside).
inline void Session::relearn_marker_stream() {
  const uint64_t next = recorder_.steps_begun();  // the next step to begin (an open one is past)
  uint64_t last = relearned_at_.load(std::memory_order_relaxed);
  if (last != kNeverRelearned && next < last + kRelearnEverySteps) return;
  if (!relearned_at_.compare_exchange_strong(last, next, std::memory_order_relaxed)) return;
  recorder_.force_trace(next, next + 1);
}

inline void Session::start_counters(LineContext& ctx) {
  counters_on_ = false;
  const Config& cfg = ctx.cfg;
  std::string& why = ctx.counters_null_reason;
  if (!ctx.run.device) {
    why = reason_text(Reason::no_gpu_measured, ctx.run.device_null_reason);
  } else if (cfg.counters == Mode::off) {
    why = reason_text(Reason::counters_setting_off);
  } else if (cfg.cupti == Mode::off) {
    why = reason_text(Reason::counters_cupti_off);
  } else if (detach_) {
    why = reason_text(Reason::counters_detach);
  } else {
    const std::string err = gpu_->start_counters(ctx.run.device->index, counters_interval_ns(cfg),
                                                 counters_buffer_bytes(cfg));
    if (err.empty()) {
      counters_on_ = true;
      logger()->info("hardware counters: CUPTI PM sampling every {} us on {}", cfg.counters_interval_us,
                     gpu_->counters_description());
    } else {
      why = reason_text(Reason::counters_unavailable, err + "; gpu.sm_efficiency is the launch-geometry estimate");
      warn_once("counters", why);
    }
  }
  ctx.counters_on = counters_on_;
  // Under the budget the counters run around traced steps only, so that their cost is the traced
  // steps' and the budget sees it; with a fixed trace_every (or budget 0) they run on every step.
  ctx.counters_traced_only = counters_on_ && attribution_ && budget_decides(cfg);
}

/// The statics made on first use that the background thread, the scrape endpoint's thread, the exit
/// hook or any thread's first scope (the NVTX domain) read, made here, on the thread that calls
/// start(), before any of those threads runs. A static first made on another thread holds its guard
/// while it is made (the C++ ABI's __cxa_guard_acquire): a fork() from the training thread in that
/// window leaves the guard held in the child, whose next start() then waits for it for good (seen: the
/// compact line's tier patterns, now core/tier_leaves.hpp's RowTree, 1 fork in ~400). Made under the first lock fork() holds
/// (details/fork.hpp), so that a fork from another thread meanwhile waits for them.
inline void Session::make_lazy_statics() {
  std::lock_guard<std::mutex> forks_wait(end_install_mutex());
  (void)backend::nvtx::active_domain();
  for (const Record r : kRecords) {
    (void)record_fields(r);
    (void)details::record_field_segments(r);
    (void)RowTree::of(r);
  }
  (void)reason_of({});  // the reasons' table and its index (core/reasons.hpp)
  (void)peak_flops_table();
  (void)settings();
  (void)phase_name(kNoPhase);
  (void)sink::prom_step_time_buckets();
  (void)sink::prom_gauges();
  (void)sink::prom_counters();
  (void)logger();
}

inline void Session::release_gpu() {
  marker_ring().detach();
  if (counters_on_) gpu_->stop_counters();
  counters_on_ = false;
  if (attribution_) gpu_->stop_attribution();
  attribution_ = detach_ = false;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
