// steptrace/backend/cupti/collector.hpp - the live CUPTI client.
//
// - Launch sites: CUPTI callbacks on the runtime and driver APIs that put work on the GPU (kernel
//   launches incl. cudaLaunchKernelEx and cuLaunchKernel from cuBLAS/NCCL, graph launches, memcpy,
//   memset). On API entry the callback stores (correlation id, current step, innermost phase of the
//   calling thread): a thread-local read and an append under an uncontended mutex.
// - GPU records: CUPTI activity kinds CONCURRENT_KERNEL, MEMCPY, MEMSET (never KERNEL, which
//   serializes kernels) into a bounded pool of buffers; CUPTI hands full buffers to its own thread,
//   where they are converted to core records and staged for steptrace's background thread.
// - Nothing here runs a flush on the training thread. stop() disables everything and detaches CUPTI.
// - Sampled attribution either switches records off between traced steps (keep mode), or (detach
//   mode) detaches CUPTI after a traced step's records are in and attaches it again for the next one.
//   The launch-site callbacks are never switched on or off while attached: CUPTI's callback dispatch
//   crashed (SIGSEGV inside libcupti, H200, CUDA 13.0) in a thread launching while another thread
//   called cuptiEnableCallback, and missed that thread's launches for a whole traced step. Between
//   traced steps the callback returns at once (tracing_ off).
//   Keep mode can turn into detach mode while running (switch_to_detach(), asked by overhead_budget);
//   never back.
// - Kernel timestamps come from the hardware event system where CUPTI offers it
//   (cuptiActivityEnableHWTrace: Blackwell; asked with CUDA 13 headers), else from CUPTI's instrumentation.
// - CUDA graphs under sampled attribution (keep mode): CUPTI reads a graph launch's kernel records out
//   when the same graph is launched again with records on, or at a flush; a replay with records off
//   in between overwrites their end times (measured: benchmarks/graph_records, H100, CUDA 13.0 - each
//   kernel then "lasts" until the last untraced replay). So after a traced step that launched graphs,
//   records stay on (settling) until each of those graphs has been launched again, at
//   most kMaxSettleSteps steps; those launches are marked discard. A graph not relaunched by then is
//   handed over as unsettled: its records delivered after the switch-off are excluded as impossible.
#pragma once
#include "../../version.hpp"
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include "../../core/gpu_records.hpp"
#include "../../core/step_keys.hpp"
#include "../gpu_backend.hpp"
#include "convert.hpp"
#include "result.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

/// What the background thread takes from the collector each time it looks.
using Drained = GpuDrain;

class Collector {
 public:
  static constexpr std::size_t kBufferBytes = 4u << 20;
  static constexpr std::size_t kMaxBuffers = 8;            // 32 MiB at most
  static constexpr std::size_t kMaxStagedLaunches = 1u << 20;
  static constexpr std::size_t kMaxInFlight = 4096;  // calls in flight at once (exits missed at a switch are cleared there)
  static constexpr std::size_t kMaxStagedRecords = 1u << 20;
  static constexpr int kMaxSettleSteps = 2;  // steps records stay on after a traced step, waiting for its graphs

  static Collector& instance() {
    static Collector* c = new Collector();  // CUPTI calls into it from C callbacks; never destroyed
    return *c;
  }

  /// Subscribes and enables collection. Returns "" on success, else why CUPTI is unavailable
  /// (another CUPTI client such as Nsight Systems, compute-sanitizer, ncu or Kineto; no driver...).
  /// `detach_between_traces`: sampled attribution detaches CUPTI (cuptiFinalize) between traced
  /// steps instead of only switching its records off (Config::untraced_cupti = detach).
  std::string start(const DeviceTable& devices, const LaunchContextSource& launches, bool detach_between_traces = false) {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    devices_ = devices;
    launch_context_ = launches;  // before the callbacks are subscribed below
    detach_since_ = detach_between_traces ? 0 : -1;
    detach_pending_ = false;
    traced_begun_ = 0;
    detaches_ = 0;
    detach_requested_ = false;
    {
      std::lock_guard<std::mutex> staging(mutex_);
      pending_graphs_.clear();
      settle_steps_ = 0;
      in_flight_.clear();
      windowed_.clear();
    }
    settling_ = false;
    periods_.fetch_add(1, std::memory_order_relaxed);
    tracing_.store(true, std::memory_order_release);  // before the callbacks are on: launches from here on are staged
    const std::string err = attach(/*records=*/true);
    if (!err.empty()) {
      tracing_ = false;
      return err;
    }
    active_ = true;
    return {};
  }

  /// Asks CUPTI for the buffers it has completed (non-blocking flush); call from the background thread.
  void flush(bool forced = false) {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    if (active_ && attached_) cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  }

  /// Disables every kind and callback, returns the last records to the staging area, detaches CUPTI.
  void stop() {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    if (attached_) {
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      for (CUpti_ActivityKind kind : kRecordKinds) cuptiActivityDisable(kind);
      cuptiEnableAllDomains(0, subscriber_);
      cuptiUnsubscribe(subscriber_);
      subscriber_ = nullptr;
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      cuptiFinalize();  // detach: the program runs without CUPTI's hooks afterwards
      attached_ = false;
    }
    active_ = false;
    tracing_ = false;
    settling_ = false;
    detach_requested_ = false;
    std::lock_guard<std::mutex> pool(pool_mutex_);
    for (uint8_t* b : free_buffers_) std::free(b);
    buffers_allocated_ -= free_buffers_.size();
    free_buffers_.clear();
  }

  bool active() const { return active_; }

  /// Sampled attribution: switches the GPU-record kinds on or off between steps, so that steps not
  /// traced run without CUPTI's records (the launch callbacks stay on and return at once: see the top
  /// of this file). Called on the training thread at a step boundary; no flush, no synchronization.
  /// Records of work launched while on are still delivered after it is switched off. Returns "" or
  /// what failed (then tracing stays off). Detach mode: off lets request_detach() have the next API
  /// exit detach CUPTI; on attaches it again first if it was detached (~7 ms on an H200).
  std::string set_tracing(bool on) {
    if (!active_) return {};
    if (on) traced_begun_.fetch_add(1, std::memory_order_relaxed);  // request_detach() counts against it
    if (on && settling_.load(std::memory_order_relaxed)) {  // records are still on: trace again
      settling_.store(false, std::memory_order_relaxed);
      std::lock_guard<std::mutex> staging(mutex_);
      settle_steps_ = 0;
      return {};
    }
    if (on == tracing_.load(std::memory_order_relaxed)) return {};
    if (!on && !detach_mode() && !settled()) return {};  // records stay on for this step
    // Keep mode turns into detach mode as records go off after a traced step (its graphs settled):
    // the callbacks then stay on, so that an API exit can detach once its line is out.
    if (!on && detach_pending_.exchange(false, std::memory_order_relaxed)) {
      detach_since_.store(std::max<int64_t>(0, last_step_of_key(launch_context_.step_key())),
                          std::memory_order_relaxed);
    }
    const bool detach_mode = this->detach_mode();
    std::unique_lock<std::mutex> lock(cupti_mutex_, std::defer_lock);
    if (detach_mode) lock.lock();
    // Another thread may launch while records go on or off: its launch is staged as a switch's
    // (LaunchRecord::window: attributed if its record comes, never waited for). The callbacks see
    // every launch while the flag is up, so every record produced has its launch seen.
    // On: a new period first, so that a call entering during the switch starts from a clean launch
    // state (not a runtime call left open in the previous period).
    if (on) periods_.fetch_add(1, std::memory_order_relaxed);
    switch_tid_.store(launch_context_.thread_id(), std::memory_order_relaxed);
    // The CUPTI calls below must not become visible before the flag: a read-modify-write (acquire as well
    // as release; a store alone orders only what precedes it, and ThreadSanitizer does not model a fence).
    // Best effort: what a launching thread sees of them is decided inside CUPTI.
    switching_.exchange(true, std::memory_order_seq_cst);
    {
      // Calls staged before the flag and not yet returned: another thread's launch whose work may
      // reach the driver after its record kind goes off. Off: they become the switch's (attributed if
      // their record comes, never waited for). On: what is left dates from before (an exit missed
      // while callbacks were off) and is forgotten. A call staged from here on reads the flag under
      // this lock (stage()).
      std::lock_guard<std::mutex> staging(mutex_);
      if (!on) windowed_.insert(windowed_.end(), in_flight_.begin(), in_flight_.end());
      in_flight_.clear();
    }
    std::string err;
    if (on && !attached_) {
      err = attach(/*records=*/false);
      if (err.empty()) {
        std::lock_guard<std::mutex> staging(mutex_);
        correlations_restarted_ = true;  // CUPTI numbers correlation ids from 1 again
        windowed_.clear();               // ids of the previous attach: they would name new launches
      }
    }
    if (err.empty()) {
      for (CUpti_ActivityKind kind : kRecordKinds) {
        const CUptiResult r = on ? cuptiActivityEnable(kind) : cuptiActivityDisable(kind);
        if (r != CUPTI_SUCCESS && err.empty()) err = result_text(on ? "cuptiActivityEnable" : "cuptiActivityDisable", r);
      }
    }
    if (on && err.empty()) detach_requested_.store(false, std::memory_order_relaxed);
    tracing_.store(on && err.empty(), std::memory_order_release);
    if (!err.empty() && on) set_tracing_off_quietly();
    switching_.store(false, std::memory_order_release);
    return err;
  }
  bool tracing() const { return tracing_.load(std::memory_order_relaxed); }
  /// Keep mode: records stay on after a traced step until its graphs have been launched again.

  /// Detach mode, background thread: once the first `traced` traced steps (set_tracing(true) calls)
  /// have their lines, the next API exit on any thread detaches CUPTI (cuptiFinalize, from a callback
  /// as CUPTI documents). Ignored if a newer traced step began (its line will ask). Returns false
  /// only while records are still on, so that the caller asks again.
  bool request_detach(uint64_t traced) {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    if (!detach_mode() || !attached_ || traced != traced_begun_.load(std::memory_order_relaxed))
      return true;
    if (tracing_.load(std::memory_order_relaxed)) return false;
    detach_requested_.store(true, std::memory_order_relaxed);
    return true;
  }
  /// Keep mode -> detach mode, from the next switch-off after a traced step on (any thread). The PM
  /// sampler must be stopped first: detaching ends it.
  void switch_to_detach() {
    if (active_ && !detach_mode()) detach_pending_.store(true, std::memory_order_relaxed);
  }
  /// The first step run in detach mode, or nullopt in keep mode.
  std::optional<uint64_t> detach_since() const {
    const int64_t s = detach_since_.load(std::memory_order_relaxed);
    if (s < 0) return std::nullopt;
    return static_cast<uint64_t>(s);
  }
  /// How kernel records are timed: "hardware_events" or "instrumented" (with why, when HW trace was refused).
  std::string kernel_timestamps() const {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    return kernel_timestamps_;
  }
  /// How many times CUPTI was detached between traced steps.
  uint64_t detaches() const { return detaches_.load(std::memory_order_relaxed); }

  Drained drain() {
    Drained d;
    std::lock_guard<std::mutex> lock(mutex_);
    d.launches.swap(launches_);
    d.kernels.swap(kernels_);
    d.copies.swap(copies_);
    d.dropped_records = std::exchange(dropped_records_, 0);
    d.dropped_launches = std::exchange(dropped_launches_, 0);
    d.correlations_restarted = std::exchange(correlations_restarted_, false);
    d.unsettled.swap(unsettled_);
    d.windowed.swap(windowed_);
    return d;
  }

  std::size_t buffers_allocated() const { return buffers_allocated_; }

 private:
  enum SiteKind : uint8_t { kNone = 0, kLaunch = 1, kGraphLaunch = 2, kMemset = 3 };
  static constexpr CUpti_ActivityKind kRecordKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                        CUPTI_ACTIVITY_KIND_MEMSET};

  /// Keep mode, switching off: whether the graphs launched while tracing have been launched again
  /// (their records are then read out whole). If not, records stay on for this step (settling), up to
  /// kMaxSettleSteps; past that the graphs still waiting are handed over as unsettled.
  bool settled() {
    std::lock_guard<std::mutex> staging(mutex_);
    if (pending_graphs_.empty()) {
      settle_steps_ = 0;
      settling_.store(false, std::memory_order_relaxed);
      return true;
    }
    if (settle_steps_ < kMaxSettleSteps) {
      ++settle_steps_;
      settling_.store(true, std::memory_order_relaxed);
      return false;
    }
    UnsettledGraphs u;
    uint64_t now = 0;
    cuptiGetTimestamp(&now);
    u.after_ns = static_cast<int64_t>(now);
    for (const auto& [exec, corr] : pending_graphs_) u.correlations.push_back(corr);
    unsettled_.push_back(std::move(u));
    pending_graphs_.clear();
    settle_steps_ = 0;
    settling_.store(false, std::memory_order_relaxed);
    return true;
  }

  void set_tracing_off_quietly() {
    if (attached_) {
      for (CUpti_ActivityKind kind : kRecordKinds) cuptiActivityDisable(kind);
      // Tracing never comes back after this: the next API exit detaches CUPTI (try_detach), so that
      // the callbacks, which stay on, cost nothing for the rest of the run.
      detach_requested_.store(true, std::memory_order_relaxed);
    }
    tracing_ = false;
  }

  /// Subscribes, enables the launch-site callbacks and registers the buffers; `records`: also
  /// enables the record kinds. Caller holds cupti_mutex_. On failure nothing stays attached.
  std::string attach(bool records) {
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

  /// Kernel timestamps from the GPU's hardware event system instead of CUPTI's instrumentation, where
  /// CUPTI supports it (cupti_activity.h, cuptiActivityEnableHWTrace: Blackwell only, after the driver
  /// is initialized; CUPTI_ERROR_NOT_SUPPORTED elsewhere). Asked at every attach (after cuptiFinalize
  /// nothing of the earlier session is assumed to hold); each line reads the latest answer.
  void enable_hardware_timestamps() {
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
    const CUptiResult r = cuptiActivityEnableHWTrace(1);
    kernel_timestamps_ = r == CUPTI_SUCCESS ? "hardware_events" : "instrumented (" + result_text("cuptiActivityEnableHWTrace", r) + ")";
#else
    kernel_timestamps_ = "instrumented (built against CUPTI headers before CUDA 13.0: steptrace asks for hardware "
                         "timestamps with CUDA 13 only)";
#endif
  }

  /// Detach mode: on an API exit of any thread once requested. Never waits for the lock: if the
  /// background thread is flushing, a later API exit detaches.
  void try_detach() {
    std::unique_lock<std::mutex> lock(cupti_mutex_, std::try_to_lock);
    if (!lock || !attached_ || tracing_.load(std::memory_order_relaxed) ||
        !detach_requested_.load(std::memory_order_relaxed))
      return;
    detach_requested_.store(false, std::memory_order_relaxed);
    // Records are off and every traced step's records are in. cuptiFinalize waits for the device's
    // work to finish and removes CUPTI's hooks: launches cost what they cost without CUPTI.
    cuptiFinalize();
    subscriber_ = nullptr;
    attached_ = false;
    detaches_.fetch_add(1, std::memory_order_relaxed);
  }

  Collector() = default;

  /// Enables the callbacks whose API names put work on the GPU, found by name so that new versions
  /// of a call (…_v2, _ptsz, Ex) are covered without a list to maintain.
  std::string enable_callbacks(CUpti_CallbackDomain domain, uint32_t count, const char* prefix) {
    auto& kinds = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_sites_ : driver_sites_;
    kinds.assign(count, kNone);
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
      if (kind == kNone) continue;
      const CUptiResult r = cuptiEnableCallback(1, subscriber_, domain, cbid);
      if (r != CUPTI_SUCCESS) return result_text("cuptiEnableCallback", r);
      kinds[cbid] = kind;
      enabled_callbacks_.emplace_back(domain, cbid);
    }
    return {};
  }

  struct LaunchTls {
    uint32_t runtime_correlation = 0;  // the runtime call in progress on this thread, if any
    uint8_t runtime_kind = kNone;
    uint32_t staged = 0;  // the outermost call this thread staged, until it returns (Collector::returned)
    uint64_t period = 0;  // the tracing period this state belongs to: a call open while tracing was
                          // switched off (or CUPTI detached) never reached its exit callback
  };
  static LaunchTls& launch_tls() {
    thread_local LaunchTls tls;
    return tls;
  }
  /// This thread's launch state, cleared if it dates from an earlier tracing period.
  LaunchTls& thread_launch_state() {
    LaunchTls& tls = launch_tls();
    const uint64_t period = periods_.load(std::memory_order_relaxed);
    if (tls.period != period) tls = LaunchTls{0, kNone, 0, period};
    return tls;
  }

  static void CUPTIAPI on_api(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    auto* self = static_cast<Collector*>(userdata);
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
    const bool switching = self->switching_.load(std::memory_order_acquire);  // see set_tracing
    if (!switching && !self->tracing_.load(std::memory_order_acquire)) {  // between traced steps (either mode)
      if (cb->callbackSite == CUPTI_API_EXIT && self->detach_requested_.load(std::memory_order_relaxed)) self->try_detach();
      return;
    }
    if (!runtime && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const auto& sites = runtime ? self->runtime_sites_ : self->driver_sites_;
    if (cbid >= sites.size() || sites[cbid] == kNone) return;
    LaunchTls& tls = self->thread_launch_state();
    LaunchRecord l;
    l.correlation = cb->correlationId;
    l.step = self->launch_context_.step_key();
    l.phase = self->launch_context_.phase();
    l.graph = sites[cbid] == kGraphLaunch;
    l.discard = self->settling_.load(std::memory_order_relaxed);
    l.tid = self->launch_context_.thread_id();  // a trace draws the launch on its thread (flight recorder)
    l.window = switching;
    if (cb->callbackSite == CUPTI_API_ENTER) {
      if (runtime) {
        tls.runtime_correlation = cb->correlationId;
        tls.runtime_kind = sites[cbid];
      } else if (tls.runtime_correlation != 0) {
        // Inside a runtime call. Kernel records carry the runtime call's id and memcpy records carry
        // it as runtimeCorrelationId; only memset records carry the driver call's id alone, so only
        // then is the nested id worth an alias.
        if (tls.runtime_kind != kMemset) return;
        l.outer_correlation = tls.runtime_correlation;
      }
      if (l.outer_correlation == 0) {  // the record cannot start before this (core/plausibility.hpp)
        uint64_t now = 0;
        if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) l.enter_ns = static_cast<int64_t>(now);
      }
      // cudaGraphLaunch{,_ptsz}_v10000_params and cuGraphLaunch{,_ptsz}_params both begin with the
      // executable graph's handle (CUPTI's generated_cuda_runtime_api_meta.h, generated_cuda_meta.h).
      const void* exec = l.graph && cb->functionParams ? *static_cast<void* const*>(cb->functionParams) : nullptr;
      if (self->stage(l, exec)) tls.staged = l.correlation;
      return;
    }
    // API exit: a failed call produces no GPU record; say so, so its step does not wait for one.
    bool failed = false;
    if (cb->functionReturnValue) {
      failed = runtime ? *static_cast<const cudaError_t*>(cb->functionReturnValue) != cudaSuccess
                       : *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS;
    }
    const bool outermost = runtime || tls.runtime_correlation == 0;
    if (runtime) tls.runtime_correlation = 0, tls.runtime_kind = kNone;
    l.failed = failed && outermost;
    const bool staged = tls.staged == cb->correlationId;
    if (staged) tls.staged = 0;
    if (staged || l.failed) self->returned(l, staged);
  }

  /// Returns whether the call is followed until it returns (returned()).
  bool stage(LaunchRecord l, const void* graph_exec = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Read again under the lock that set_tracing() takes after raising the flag: a call is either in
    // flight when records go off (and becomes the switch's there) or sees the switch here. Flag
    // first: it is lowered only after tracing_ has its new value.
    if (switching_.load(std::memory_order_acquire) || !tracing_.load(std::memory_order_acquire)) l.window = true;
    // Followed: another thread's outermost calls (the thread that switches records is never inside
    // one when it does, so its calls - most of them - cost no second lock at their exit). Past the
    // bound a call is the switch's from the start: never waited for.
    bool followed = false;
    if (!l.window && l.outer_correlation == 0 && l.tid != switch_tid_.load(std::memory_order_relaxed)) {
      if (in_flight_.size() < kMaxInFlight) in_flight_.push_back(l.correlation), followed = true;
      else l.window = true;
    }
    if (graph_exec && !detach_mode()) {  // keep mode: which graphs wait for a relaunch (settled())
      if (l.discard) pending_graphs_.erase(graph_exec);
      else pending_graphs_[graph_exec] = l.correlation;
    }
    if (launches_.size() >= kMaxStagedLaunches) {
      ++dropped_launches_;
      return followed;
    }
    launches_.push_back(l);
    return followed;
  }

  /// A staged call returned (API exit): its work is with the driver, so its record comes even if
  /// records go off now. A failed call produces none: staged as failed, its step does not wait.
  void returned(const LaunchRecord& l, bool staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = staged ? std::find(in_flight_.begin(), in_flight_.end(), l.correlation) : in_flight_.end();
    if (it != in_flight_.end()) {
      *it = in_flight_.back();
      in_flight_.pop_back();
    }
    if (!l.failed) return;
    if (launches_.size() >= kMaxStagedLaunches) {
      ++dropped_launches_;
      return;
    }
    launches_.push_back(l);
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    Collector& self = instance();
    *max_records = 0;
    std::lock_guard<std::mutex> lock(self.pool_mutex_);
    if (self.free_buffers_.empty() && self.buffers_allocated_ < kMaxBuffers) {
      void* p = std::aligned_alloc(8, kBufferBytes);
      if (p) {
        self.free_buffers_.push_back(static_cast<uint8_t*>(p));
        ++self.buffers_allocated_;
      }
    }
    if (self.free_buffers_.empty()) {  // bounded: CUPTI drops what does not fit, and counts it
      *buffer = nullptr;
      *size = 0;
      return;
    }
    *buffer = self.free_buffers_.back();
    self.free_buffers_.pop_back();
    *size = kBufferBytes;
  }

  static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    Collector& self = instance();
    uint64_t handed = 0;  // no record in this buffer can end after this (core/plausibility.hpp)
    if (cuptiGetTimestamp(&handed) != CUPTI_SUCCESS) handed = 0;
    std::vector<KernelRecord> kernels;
    std::vector<CopyRecord> copies;
    CUpti_Activity* record = nullptr;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          kernels.push_back(convert_kernel(*reinterpret_cast<const KernelActivity*>(record), self.devices_));
          kernels.back().delivered_ns = static_cast<int64_t>(handed);
          break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
          copies.push_back(convert_memcpy(*reinterpret_cast<const MemcpyActivity*>(record)));
          copies.back().delivered_ns = static_cast<int64_t>(handed);
          break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
          copies.push_back(convert_memset(*reinterpret_cast<const MemsetActivity*>(record)));
          copies.back().delivered_ns = static_cast<int64_t>(handed);
          break;
        default:
          break;
      }
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      self.dropped_records_ += dropped;
      for (auto& k : kernels) {
        if (self.kernels_.size() < kMaxStagedRecords) self.kernels_.push_back(k);
        else ++self.dropped_records_;
      }
      for (auto& c : copies) {
        if (self.copies_.size() < kMaxStagedRecords) self.copies_.push_back(c);
        else ++self.dropped_records_;
      }
    }
    if (buffer) {
      std::lock_guard<std::mutex> lock(self.pool_mutex_);
      self.free_buffers_.push_back(buffer);
    }
  }

  // CUPTI calls that must not overlap a detach: attach, flush, detach, stop (never waited for in a callback).
  mutable std::mutex cupti_mutex_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool active_ = false;    // started and not stopped (attached or, in detach mode, between traced steps)
  bool attached_ = false;  // subscribed (guarded by cupti_mutex_)
  std::atomic<bool> tracing_{false};  // record kinds on and launches staged (set_tracing)
  std::atomic<bool> switching_{false};  // set_tracing is switching record kinds on or off
  std::atomic<bool> detach_pending_{false};   // switch_to_detach() asked, not yet in force
  std::atomic<int64_t> detach_since_{-1};     // the step that began in detach mode (-1: keep mode)
  bool detach_mode() const { return detach_since_.load(std::memory_order_relaxed) >= 0; }
  std::atomic<uint64_t> traced_begun_{0};    // set_tracing(true) calls since start()
  std::string kernel_timestamps_ = "instrumented";  // guarded by cupti_mutex_
  std::atomic<bool> detach_requested_{false};
  std::atomic<uint64_t> detaches_{0};
  std::atomic<uint64_t> periods_{0};  // tracing periods so far, all sessions (launch_tls() state is per period)
  bool correlations_restarted_ = false;  // guarded by mutex_
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled_callbacks_;
  DeviceTable devices_;
  LaunchContextSource launch_context_;  // the runtime's (start()): where a launch belongs
  std::vector<uint8_t> runtime_sites_, driver_sites_;

  std::mutex mutex_;  // staging, shared by the launching threads, CUPTI's thread and the background thread
  std::vector<LaunchRecord> launches_;
  std::vector<KernelRecord> kernels_;
  std::vector<CopyRecord> copies_;
  uint64_t dropped_records_ = 0, dropped_launches_ = 0;
  std::unordered_map<const void*, uint32_t> pending_graphs_;  // keep mode: graph exec -> its latest traced launch
  int settle_steps_ = 0;
  std::vector<UnsettledGraphs> unsettled_;
  std::vector<uint32_t> in_flight_;  // calls staged while tracing that have not returned (few: one per thread)
  std::vector<uint32_t> windowed_;   // calls in flight when records went off (GpuDrain::windowed)
  std::atomic<int32_t> switch_tid_{0};  // the thread that last switched records (its calls are not followed)
  std::atomic<bool> settling_{false};

  std::mutex pool_mutex_;
  std::vector<uint8_t*> free_buffers_;
  std::size_t buffers_allocated_ = 0;
};

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
