// steptrace/backend/cupti/collector_decl.hpp - the live CUPTI client's class (collector.hpp includes it
// whole).
//
// - Launch sites: CUPTI callbacks on the runtime and driver APIs that put work on the GPU (kernel
//   launches incl. cudaLaunchKernelEx and cuLaunchKernel from cuBLAS/NCCL, graph launches, memcpy,
//   memset). On API entry the callback stores (correlation id, current step, innermost phase of the
//   calling thread, read through the runtime's LaunchContextSource) and appends it under an
//   uncontended mutex.
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
// - CUDA graphs under sampled attribution (keep and detach modes): CUPTI reads a graph launch's kernel records out
//   when the same graph is launched again with records on, or at a flush; a replay with records off
//   in between overwrites their end times (measured: benchmarks/graph_records, H100, CUDA 13.0 - each
//   kernel then "lasts" until the last untraced replay). So after a traced step that launched graphs,
//   records stay on (settling) until each of those graphs has been launched again, at
//   most kMaxSettleSteps steps; those launches are marked discard. A graph not relaunched by then is
//   handed over as unsettled: its records delivered after the switch-off are excluded as impossible.
// The class and its training/background-thread calls are here; attaching and detaching in
// collector_attach.hpp, what CUPTI calls (launch callback, activity buffers) in collector_callbacks.hpp.
#pragma once
#include "../../version.hpp"
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>  // with the runtime calls' parameter structs (generated_cuda_runtime_api_meta.h)

#include "../../core/clock.hpp"
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
    attach_ahead_ = false;
    // The thread that starts is the steps' until a step says otherwise (set_tracing): a run that traces
    // every step never switches tracing, and still learns its stream.
    step_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> staging(mutex_);
      stream_tally_ = {};
      stream_tally_other_ = 0;
      pending_graphs_.clear();
      detached_at_ns_.clear();
      attached_ahead_at_ns_.clear();
      attach_ms_.clear();
      detach_ms_.clear();
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
    // Only this thread's launches tell the markers' stream (take_launch_streams): the markers are
    // recorded here, and another thread's stream (a helper's, a loader's) is not the step's.
    step_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    // A step begins: settling graphs age by one (one writer, the step's thread: no read-modify-write).
    boundaries_.store(boundaries_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (on) traced_begun_.fetch_add(1, std::memory_order_relaxed);  // request_detach() counts against it
    if (on && settling_.load(std::memory_order_relaxed)) {  // records are still on: trace again
      settling_.store(false, std::memory_order_relaxed);  // (graphs still waiting keep their age)
      return {};
    }
    // Attached ahead for a step the schedule then left untraced: nothing traced since, detach again.
    if (attach_ahead_.exchange(false, std::memory_order_relaxed) && !on && !tracing_.load(std::memory_order_relaxed))
      detach_requested_.store(true, std::memory_order_relaxed);
    if (on == tracing_.load(std::memory_order_relaxed)) return {};
    // Either mode: records stay on for this step. Detached, CUPTI leaves only at an API exit after the
    // traced step's line is out; a replay with records off before that overwrote the end times of the
    // traced launch's graph kernels (each then "lasted" until that replay: 680 ms of optimizer kernels
    // in a 13.7 ms step, H100, trace_every=5 untraced_cupti=detach).
    if (!on && !settled()) return {};
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
    if (on && !attached_) err = attach_again();  // not attached ahead (attach_ahead): paid inside the step
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

  /// Step's thread, between steps: the stream most of the step thread's kernel launches went to while
  /// records were on since the last call (other threads' launches are not counted) (LaunchStreams::stream, 0 with no launch or on the per-thread default stream), and
  /// the tally starts over.
  LaunchStreams take_launch_streams() {
    std::lock_guard<std::mutex> staging(mutex_);
    LaunchStreams out;
    for (const auto& [stream, count] : stream_tally_) {
      out.launches += count;
      if (count > out.on_stream) out.stream = stream, out.on_stream = count;
    }
    out.launches += stream_tally_other_;
    stream_tally_ = {};
    stream_tally_other_ = 0;
    return out;
  }
  /// Called (any thread, before the stream goes) when the program destroys a stream while CUPTI is
  /// attached: the stream markers stop using it. Set before start().
  void on_stream_destroy(void (*hook)(std::uintptr_t)) { stream_destroy_hook_.store(hook, std::memory_order_release); }

  /// Detach mode, step's thread, after a step's end when the next step is to be traced: attaches CUPTI
  /// now, records still off, so that the attach (~7-10 ms on an H200) is paid between the steps, not
  /// inside the traced one; set_tracing(true) at its begin then only switches the records on. No detach
  /// is asked until that step has begun. Returns "" or what failed (the traced step then tries again).
  std::string attach_ahead();

  /// Detach mode, background thread: once the first `traced` traced steps (set_tracing(true) calls)
  /// have their lines, the next API exit on any thread detaches CUPTI (cuptiFinalize, from a callback
  /// as CUPTI documents). Ignored if a newer traced step began (its line will ask). Returns false
  /// only while records are still on, so that the caller asks again.
  bool request_detach(uint64_t traced) {
    std::lock_guard<std::mutex> lock(cupti_mutex_);
    if (!detach_mode() || !attached_ || traced != traced_begun_.load(std::memory_order_relaxed) ||
        attach_ahead_.load(std::memory_order_relaxed))  // attached ahead for the next traced step
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
    d.detached_at_ns.swap(detached_at_ns_);
    d.attached_ahead_at_ns.swap(attached_ahead_at_ns_);
    d.attach_ms.swap(attach_ms_);
    d.detach_ms.swap(detach_ms_);
    return d;
  }

  std::size_t buffers_allocated() const { return buffers_allocated_; }

 private:
  enum SiteKind : uint8_t { kNone = 0, kLaunch = 1, kGraphLaunch = 2, kMemset = 3, kStreamDestroy = 4 };
  /// Where a kernel launch site's parameters name its stream (StreamParam::none: not read).
  enum class StreamParam : uint8_t { none, runtime_launch, runtime_launch_ex, driver_launch, driver_launch_ex };
  static std::optional<std::uintptr_t> launch_stream(StreamParam kind, const void* params);
  static constexpr CUpti_ActivityKind kRecordKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                        CUPTI_ACTIVITY_KIND_MEMSET};

  /// Switching off (either mode): whether the graphs launched while tracing have been launched again
  /// (their records are then read out whole). If not, records stay on for this step (settling); a
  /// graph still waiting kMaxSettleSteps step boundaries after its launch is handed over as unsettled,
  /// whatever traced steps came between (an interval of 2 or 3 would otherwise keep a graph that is
  /// not launched every step waiting, and records on, for ever).
  bool settled();

  void set_tracing_off_quietly();
  std::string attach_again();

  /// Subscribes, enables the launch-site callbacks and registers the buffers; `records`: also
  /// enables the record kinds. Caller holds cupti_mutex_. On failure nothing stays attached.
  std::string attach(bool records);

  /// Kernel timestamps from the GPU's hardware event system instead of CUPTI's instrumentation, where
  /// CUPTI supports it (cupti_activity.h, cuptiActivityEnableHWTrace: Blackwell only, after the driver
  /// is initialized; CUPTI_ERROR_NOT_SUPPORTED elsewhere). Asked at every attach (after cuptiFinalize
  /// nothing of the earlier session is assumed to hold); each line reads the latest answer.
  void enable_hardware_timestamps();

  /// Detach mode: on an API exit of any thread once requested. Never waits for the lock: if the
  /// background thread is flushing, a later API exit detaches.
  void try_detach();

  Collector() = default;

  /// Enables the callbacks whose API names put work on the GPU, found by name so that new versions
  /// of a call (…_v2, _ptsz, Ex) are covered without a list to maintain.
  std::string enable_callbacks(CUpti_CallbackDomain domain, uint32_t count, const char* prefix);

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

  static void CUPTIAPI on_api(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

  /// Returns whether the call is followed until it returns (returned()).
  bool stage(LaunchRecord l, const void* graph_exec = nullptr, std::optional<std::uintptr_t> stream = std::nullopt);

  /// A staged call returned (API exit): its work is with the driver, so its record comes even if
  /// records go off now. A failed call produces none: staged as failed, its step does not wait.
  void returned(const LaunchRecord& l, bool staged);

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);

  static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid);

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
  std::atomic<bool> attach_ahead_{false};  // attached ahead of a traced step that has not begun yet
  std::atomic<uint64_t> detaches_{0};
  std::atomic<uint64_t> periods_{0};  // tracing periods so far, all sessions (launch_tls() state is per period)
  bool correlations_restarted_ = false;  // guarded by mutex_
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled_callbacks_;
  DeviceTable devices_;
  LaunchContextSource launch_context_;  // the runtime's (start()): where a launch belongs
  std::vector<uint8_t> runtime_sites_, driver_sites_;
  std::vector<StreamParam> runtime_streams_, driver_streams_;  // by callback id: how a launch names its stream
  std::atomic<void (*)(std::uintptr_t)> stream_destroy_hook_{nullptr};

  std::mutex mutex_;  // staging, shared by the launching threads, CUPTI's thread and the background thread
  std::vector<LaunchRecord> launches_;
  std::vector<KernelRecord> kernels_;
  std::vector<CopyRecord> copies_;
  uint64_t dropped_records_ = 0, dropped_launches_ = 0;
  struct PendingGraph {
    uint32_t correlation = 0;  // its latest traced launch
    uint64_t boundary = 0;     // boundaries_ when it was launched
  };
  std::unordered_map<const void*, PendingGraph> pending_graphs_;  // graph exec -> its latest traced launch
  std::atomic<uint64_t> boundaries_{0};  // step boundaries seen (set_tracing calls): a pending graph's age
  std::vector<int64_t> detached_at_ns_;  // monotonic_ns() of each detach not yet drained (GpuDrain::detached_at_ns)
  std::vector<int64_t> attached_ahead_at_ns_;  // ... of each attach made ahead (GpuDrain::attached_ahead_at_ns)
  std::vector<double> attach_ms_, detach_ms_;   // how long each attach / detach took (GpuDrain::attach_ms)
  std::vector<UnsettledGraphs> unsettled_;
  std::vector<uint32_t> in_flight_;  // calls staged while tracing that have not returned (few: one per thread)
  std::vector<uint32_t> windowed_;   // calls in flight when records went off (GpuDrain::windowed)
  std::array<std::pair<std::uintptr_t, uint32_t>, 4> stream_tally_{};  // kernel launches by stream, while tracing
  uint32_t stream_tally_other_ = 0;  // ... on a fifth stream or more
  std::atomic<std::thread::id> step_thread_{};  // the thread that begins steps (set_tracing): the tally's
  std::atomic<int32_t> switch_tid_{0};  // the thread that last switched records (its calls are not followed)
  std::atomic<bool> settling_{false};

  std::mutex pool_mutex_;
  std::vector<uint8_t*> free_buffers_;
  std::size_t buffers_allocated_ = 0;
};

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
