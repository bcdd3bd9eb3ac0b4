// steptrace/backend/cupti/collector_attach.hpp - the collector's hold on CUPTI: attaching (callbacks,
// activity records, hardware timestamps), switching records off quietly once a traced step's graphs
// settled, and detaching between traced steps (Collector's members; collector.hpp includes them).
#pragma once
#include "collector_decl.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

inline bool Collector::settled() {
  std::lock_guard<std::mutex> staging(mutex_);
  const uint64_t now_boundary = boundaries_.load(std::memory_order_relaxed);
  UnsettledGraphs u;
  for (auto it = pending_graphs_.begin(); it != pending_graphs_.end();) {
    if (now_boundary - it->second.boundary > static_cast<uint64_t>(kMaxSettleSteps)) {
      u.correlations.push_back(it->second.correlation);
      it = pending_graphs_.erase(it);
    } else {
      ++it;
    }
  }
  if (!u.correlations.empty()) {
    uint64_t now = 0;
    cuptiGetTimestamp(&now);
    u.after_ns = static_cast<int64_t>(now);
    unsettled_.push_back(std::move(u));
  }
  const bool done = pending_graphs_.empty();
  settling_.store(!done, std::memory_order_relaxed);  // records stay on for this step while not done
  return done;
}

inline void Collector::set_tracing_off_quietly() {
  if (attached_) {
    for (CUpti_ActivityKind kind : kRecordKinds) cuptiActivityDisable(kind);
    // Tracing never comes back after this: the next API exit detaches CUPTI (try_detach), so that
    // the callbacks, which stay on, cost nothing for the rest of the run.
    detach_requested_.store(true, std::memory_order_relaxed);
  }
  tracing_ = false;
}

inline std::string Collector::attach(bool records) {
  CUptiResult r = cuptiSubscribe(&subscriber_, reinterpret_cast<CUpti_CallbackFunc>(&Collector::on_api), this);
  if (r != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      return "CUPTI is held by another client in this process (Nsight Systems, compute-sanitizer, ncu or "
             "torch.profiler/Kineto): " + result_text("cuptiSubscribe", r);
    return result_text("cuptiSubscribe", r);
  }
  attached_ = true;
  std::string err;
  if (enabled_callbacks_.empty()) {  // the first time: find the sites by name
    err = enable_callbacks(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, "cuda");
    if (err.empty()) err = enable_callbacks(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, "cu");
    if (!err.empty()) enabled_callbacks_.clear();
  } else {
    for (const auto& [domain, cbid] : enabled_callbacks_) {
      if ((r = cuptiEnableCallback(1, subscriber_, domain, cbid)) != CUPTI_SUCCESS) {
        err = result_text("cuptiEnableCallback", r);
        break;
      }
    }
  }
  if (err.empty()) {
    if ((r = cuptiActivityRegisterCallbacks(&Collector::buffer_requested, &Collector::buffer_completed)) != CUPTI_SUCCESS)
      err = result_text("cuptiActivityRegisterCallbacks", r);
  }
  if (err.empty()) enable_hardware_timestamps();
  for (CUpti_ActivityKind kind : kRecordKinds) {
    if (!err.empty() || !records) break;
    if ((r = cuptiActivityEnable(kind)) != CUPTI_SUCCESS) err = result_text("cuptiActivityEnable", r);
  }
  if (err.empty()) cuptiActivityFlushPeriod(100);  // CUPTI's own thread hands over buffers every 100 ms
  if (!err.empty()) {
    for (CUpti_ActivityKind kind : kRecordKinds) cuptiActivityDisable(kind);
    cuptiEnableAllDomains(0, subscriber_);
    cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
    cuptiFinalize();
    attached_ = false;
  }
  return err;
}

/// Detach mode, attached again for a traced step: CUPTI numbers correlation ids from 1 again. Under cupti_mutex_.
inline std::string Collector::attach_again() {
  const int64_t t0 = monotonic_ns();
  const std::string err = attach(/*records=*/false);
  if (!err.empty()) return err;
  const int64_t took = monotonic_ns() - t0;
  std::lock_guard<std::mutex> staging(mutex_);
  if (attach_ms_.size() < 1024) attach_ms_.push_back(took * 1e-6);
  correlations_restarted_ = true;  // CUPTI numbers correlation ids from 1 again
  windowed_.clear();               // ids of the previous attach: they would name new launches
  pending_graphs_.clear();         // likewise (their records were read out at the detach)
  unsettled_.clear();
  return {};
}

inline std::string Collector::attach_ahead() {
  if (!active_ || tracing_.load(std::memory_order_relaxed) || !detach_mode()) return {};
  std::lock_guard<std::mutex> lock(cupti_mutex_);
  detach_requested_.store(false, std::memory_order_relaxed);  // an exit that would detach it again
  attach_ahead_.store(true, std::memory_order_relaxed);
  if (attached_) return {};
  const std::string err = attach_again();
  if (!err.empty()) {
    attach_ahead_.store(false, std::memory_order_relaxed);
    return err;
  }
  std::lock_guard<std::mutex> staging(mutex_);
  if (attached_ahead_at_ns_.size() < 1024) attached_ahead_at_ns_.push_back(monotonic_ns());
  return {};
}

inline void Collector::enable_hardware_timestamps() {
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
  const CUptiResult r = cuptiActivityEnableHWTrace(1);
  kernel_timestamps_ = r == CUPTI_SUCCESS ? "hardware_events" : "instrumented (" + result_text("cuptiActivityEnableHWTrace", r) + ")";
#else
  kernel_timestamps_ = "instrumented (built against CUPTI headers before CUDA 13.0: steptrace asks for hardware "
                       "timestamps with CUDA 13 only)";
#endif
}

inline void Collector::try_detach() {
  std::unique_lock<std::mutex> lock(cupti_mutex_, std::try_to_lock);
  if (!lock || !attached_ || tracing_.load(std::memory_order_relaxed) ||
      !detach_requested_.load(std::memory_order_relaxed))
    return;
  detach_requested_.store(false, std::memory_order_relaxed);
  {
    // When: the step (or the gap between steps) that pays for the detach, measured by the overhead
    // estimate (core/overhead.hpp).
    std::lock_guard<std::mutex> staging(mutex_);
    if (detached_at_ns_.size() < 1024) detached_at_ns_.push_back(monotonic_ns());
  }
  // Records are off and every traced step's records are in. cuptiFinalize waits for the device's
  // work to finish and removes CUPTI's hooks: launches cost what they cost without CUPTI. Timed: the
  // thread that ran into it (the next API exit's) waits that long.
  const int64_t t0 = monotonic_ns();
  cuptiFinalize();
  const int64_t took = monotonic_ns() - t0;
  {
    std::lock_guard<std::mutex> staging(mutex_);
    if (detach_ms_.size() < 1024) detach_ms_.push_back(took * 1e-6);
  }
  subscriber_ = nullptr;
  attached_ = false;
  detaches_.fetch_add(1, std::memory_order_relaxed);
}

inline std::string Collector::enable_callbacks(CUpti_CallbackDomain domain, uint32_t count, const char* prefix) {
  auto& kinds = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_sites_ : driver_sites_;
  auto& streams = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_streams_ : driver_streams_;
  kinds.assign(count, kNone);
  streams.assign(count, StreamParam::none);
  const std::string p(prefix);
  for (uint32_t cbid = 1; cbid < count; ++cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) continue;
    const std::string n(name);
    if (n.find("HostFunc") != std::string::npos) continue;  // runs on the host: no GPU record
    SiteKind kind = kNone;
    if (n.rfind(p + "GraphLaunch", 0) == 0) kind = kGraphLaunch;
    else if (n.rfind(p + "Memset", 0) == 0) kind = kMemset;
    else if (n.rfind(p + "Launch", 0) == 0 || n.rfind(p + "Memcpy", 0) == 0) kind = kLaunch;
    else if (n.rfind(p + "StreamDestroy", 0) == 0) kind = kStreamDestroy;  // the stream markers leave it
    if (kind == kNone) continue;
    // Kernel launches whose parameters name the stream (launch_stream); the per-thread variants (_ptsz) too.
    const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
    if (n.rfind(p + "LaunchKernelEx", 0) == 0) streams[cbid] = runtime ? StreamParam::runtime_launch_ex : StreamParam::driver_launch_ex;
    else if (n.rfind(p + "LaunchKernel_", 0) == 0 || n == p + "LaunchKernel")
      streams[cbid] = runtime ? StreamParam::runtime_launch : StreamParam::driver_launch;
    const CUptiResult r = cuptiEnableCallback(1, subscriber_, domain, cbid);
    if (r != CUPTI_SUCCESS) return result_text("cuptiEnableCallback", r);
    kinds[cbid] = kind;
    enabled_callbacks_.emplace_back(domain, cbid);
  }
  return {};
}

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
