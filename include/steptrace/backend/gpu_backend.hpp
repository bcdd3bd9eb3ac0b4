// steptrace/backend/gpu_backend.hpp - everything the runtime asks of a GPU, behind one interface.
//
// The runtime (details/session.hpp) is handed a GpuBackend: the real one (backend/cuda_backend.hpp:
// CUDA runtime, CUPTI activity records and callbacks, CUPTI PM sampling, NVML) in a program, a fake in
// the CPU tests (tests/fake_backend.hpp), so the runtime's rules - sampled tracing, detach, overdue
// lines, flushes, null reasons - are tested without a GPU. No vendor header here: only core types.
// Every call reports failure as a reason string ("" = done) and never throws.
#pragma once
#include "../version.hpp"
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/clock.hpp"
#include "../core/counters.hpp"
#include "../core/phase.hpp"
#include "../core/device_state.hpp"
#include "../core/gpu_records.hpp"
#include "../core/records.hpp"
#include "../core/run_info.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend {

/// The device to measure, or why there is none.
struct DeviceProbe {
  std::optional<DeviceInfo> device;
  std::string null_reason;
};

/// Where a launch belongs, as the runtime knows it (details/launch_context.hpp): the session hands
/// this to start_attribution; the backend's launch callback calls it on the launching thread.
struct LaunchContextSource {
  int64_t (*step_key)() = nullptr;   // the launch key now (core/step_keys.hpp): a step, or between steps
  PhaseId (*phase)() = nullptr;      // the phase a launch on the calling thread belongs to
  int32_t (*thread_id)() = nullptr;  // the calling thread's id (gettid)
};

/// Stream markers (core/markers.hpp): CUDA events on the program's stream at step and phase
/// boundaries. Slots are the runtime's (details/marker_ring.hpp): the step's thread records a slot,
/// the background thread reads it, and a slot is recorded again only after it was read.
class MarkerEvents {
 public:
  virtual ~MarkerEvents() = default;
  /// Step's thread: events made in its current CUDA context, to be recorded on `stream` (a CUstream;
  /// 0: the legacy default stream). "" or why not; `transient`: worth asking again later (no context yet).
  virtual std::string open(uint32_t slots, std::uintptr_t stream, bool* transient) = 0;
  /// Step's thread: event `slot` recorded now (`host_ns`: when); false with `why` when it was not.
  /// `recalibrate`: the host-clock calibration is taken again first.
  virtual bool record(uint32_t slot, bool recalibrate, int64_t* host_ns, std::string* why) = 0;
  /// Step's thread: the host clock `record` gives its `host_ns` on (a boundary close after the last one
  /// shares its event: details/marker_ring.hpp).
  virtual int64_t now_ns() const { return monotonic_ns(); }
  enum class Read { pending, done, failed };
  /// Background thread: when the GPU reached `slot`, on the host clock (monotonic_ns()).
  virtual Read read(uint32_t slot, int64_t* gpu_ns) = 0;
  /// A stream's id in the GPU records (0: the legacy default stream), in the calling thread's
  /// context; asked on the step's thread while records are on.
  virtual std::optional<uint32_t> stream_record_id(std::uintptr_t stream) = 0;
  /// Step's thread, between steps, once open: the events are recorded on `stream` from now on.
  virtual void set_stream(std::uintptr_t stream) = 0;
  virtual void close() = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // ---- device (start(), training thread) ----
  /// `requested`, or the calling thread's current device if -1. Creates no CUDA context.
  virtual DeviceProbe probe(int requested) = 0;
  /// Waits for the device's work to finish (stop(): the last steps' kernels may still run).
  virtual void synchronize(int device) = 0;

  // ---- attribution: launch callbacks and GPU records ----
  /// Starts collecting. `detach_between_traces`: untraced_cupti=detach. `launches`: every function set.
  virtual std::string start_attribution(bool detach_between_traces, const LaunchContextSource& launches) = 0;
  /// Sampled attribution, training thread at a step boundary: records on for traced steps.
  virtual std::string set_tracing(bool on) = 0;
  /// Detach mode, training thread, between a step's end and the next step's begin when that step is to
  /// be traced: attach now, so that the traced step does not pay for it. "" or what failed.
  virtual std::string attach_ahead() { return {}; }
  /// Training thread, between steps: the stream most kernel launches went to while records were on
  /// since the last call (the stream markers learn the program's stream from it); the tally starts over.
  virtual LaunchStreams take_launch_streams() { return {}; }
  /// Before start_attribution: called (any thread) when the program destroys a stream while CUPTI watches.
  virtual void on_stream_destroy(void (*)(std::uintptr_t)) {}
  /// Detach mode, background thread: the first `traced` traced steps (set_tracing(true) calls since
  /// start) have their lines; CUPTI may detach until the next one. false: records are still on (the
  /// switch-off has not happened yet), ask again.
  virtual bool request_detach(uint64_t traced) = 0;
  /// Keep mode -> detach mode from the next switch-off after a traced step (overhead_budget, background
  /// thread; counters stopped first).
  virtual void switch_to_detach() = 0;
  /// The first step run in detach mode (0 when it was asked at start), or nullopt while in keep mode.
  virtual std::optional<uint64_t> detach_since() = 0;
  /// How kernel records are timed ("hardware_events", or "instrumented" and why), after start_attribution.
  virtual std::string kernel_timestamps() = 0;
  /// Asks for partly filled record buffers. `forced` also returns records of unfinished work
  /// (stop() only, after synchronize()).
  virtual void flush_records(bool forced) = 0;
  /// What has been handed over since the last call.
  virtual GpuDrain drain_records() = 0;
  virtual void stop_attribution() = 0;

  // ---- hardware counters (PM sampling; background thread after start) ----
  virtual std::string start_counters(int device, uint64_t interval_ns, std::size_t hardware_buffer_bytes) = 0;
  /// Chip and metrics chosen, for the start-up log line.
  virtual std::string counters_description() = 0;
  virtual std::string poll_counters(std::vector<CounterSample>& out) = 0;
  /// Counters around traced steps only (overhead_budget): sampling paused, its configuration kept;
  /// what the hardware buffer holds can still be polled. Both return "" or why not.
  virtual std::string pause_counters() = 0;
  virtual std::string resume_counters() = 0;
  virtual void stop_counters() = 0;
  /// What polling the counters cost so far, in words for the log at stop(); "" if never polled.
  virtual std::string counters_cost() { return {}; }
  /// The GPU records' clock minus monotonic_ns(), read now.
  virtual int64_t gpu_clock_offset_ns() = 0;

  // ---- memory and device state (background thread) ----
  virtual std::string bind_thread(int device) = 0;
  virtual std::optional<MemorySample> sample_memory(int64_t now_ns, std::string* error) = 0;
  /// Power, clocks, temperature, clock-event reasons (NVML).
  virtual std::string open_device_state(int device) = 0;
  virtual DeviceStateSample read_device_state(int64_t now_ns) = 0;
  virtual void close_device_state() = 0;

  // ---- stream markers ----
  /// The markers, or nullptr where there are none (a backend without them).
  virtual MarkerEvents* markers() { return nullptr; }
};

} STEPTRACE_END_NAMESPACE  // steptrace::backend
