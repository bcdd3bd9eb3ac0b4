// steptrace/backend/cuda_markers.hpp - stream markers (core/markers.hpp) through the CUDA driver API:
// events recorded on the program's stream at step and phase boundaries, read back by the background
// thread without a wait (cuEventQuery), their GPU times moved to the host clock by a calibration event
// recorded on a private, always idle, non-blocking stream.
//
// The driver is reached through dlopen("libcuda.so.1", RTLD_NOLOAD): steptrace never loads the driver
// itself, and the runtime's last-error state (which PyTorch checks after its own launches) is never
// touched. A marker is never recorded on a stream that is capturing a CUDA graph, nor on the legacy
// stream while a blocking stream captures (cuStreamIsCapturing then answers
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "the blocking stream capture is not invalidated": CUDA Driver
// API reference, cuStreamIsCapturing).
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include "../core/clock.hpp"
#include "gpu_backend.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend {

class CudaMarkers final : public MarkerEvents {
 public:
  ~CudaMarkers() override { close(); }

  std::string open(uint32_t slots, std::uintptr_t stream, bool* transient) override {
    *transient = false;
    if (opened_) return {};
    if (!resolve()) return why_;
    CUcontext ctx = nullptr;
    if (api_.ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx) {
      *transient = true;
      return "no CUDA context is current on the step's thread yet";
    }
    ctx_ = ctx;
    stream_ = reinterpret_cast<CUstream>(stream);
    if (api_.stream_create(&calib_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return "cuStreamCreate failed";
    events_.assign(slots, nullptr);
    slot_calib_.assign(slots, SlotCalib{});
    for (auto& e : events_)
      if (api_.event_create(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        e = nullptr;
        close();
        return "cuEventCreate failed";
      }
    for (auto& c : calib_)
      if (api_.event_create(&c.event, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        c.event = nullptr;
        close();
        return "cuEventCreate failed";
      }
    opened_ = true;
    // The first calibration here, with the one-off costs (the clock stream's first use), not in the
    // first marker's time; one that fails is tried again at the first record.
    std::string not_yet;
    calibrate(&not_yet);
    return {};
  }

  bool record(uint32_t slot, bool recalibrate, int64_t* host_ns, std::string* why) override {
    if (!opened_ || slot >= events_.size()) return *why = "markers not open", false;
    CUcontext current = nullptr;
    if (api_.ctx_get_current(&current) != CUDA_SUCCESS || current != ctx_)
      return *why = "the step's thread has another CUDA context current than the markers'", false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult captured = api_.stream_is_capturing(stream_, &status);
    if (captured == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || (captured == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE))
      return *why = "a CUDA graph capture was in progress", false;
    if (captured != CUDA_SUCCESS) return *why = "cuStreamIsCapturing failed: CUresult " + std::to_string(captured), false;
    const int64_t now = monotonic_ns();
    if (recalibrate || calibrated_ < 0 || now - calib_[calibrated_].host_ns.load(std::memory_order_relaxed) > kCalibrationPeriodNs)
      calibrate(why);
    if (calibrated_ < 0) return false;
    if (const CUresult e = api_.event_record(events_[slot], stream_); e != CUDA_SUCCESS)
      return *why = "cuEventRecord failed: CUresult " + std::to_string(e), false;
    *host_ns = now;
    slot_calib_[slot] = SlotCalib{calibrated_, calib_[calibrated_].generation.load(std::memory_order_relaxed)};
    return true;
  }

  Read read(uint32_t slot, int64_t* gpu_ns) override {
    if (!opened_ || slot >= events_.size()) return Read::failed;
    // A query from this thread while the step's thread captures a graph in global mode (torch.cuda.graph's
    // default) would invalidate that capture: this thread's calls are relaxed for the read (CUDA Driver
    // API, cuThreadExchangeStreamCaptureMode; PyTorch's NCCL watchdog does the same).
    RelaxedCaptureMode relaxed(api_.exchange_capture_mode);
    return read_relaxed(slot, gpu_ns);
  }

 private:
  /// cuThreadExchangeStreamCaptureMode around a scope: relaxed inside, the thread's own mode after.
  struct RelaxedCaptureMode {
    using Fn = CUresult (*)(CUstreamCaptureMode*);
    explicit RelaxedCaptureMode(Fn fn) : fn_(fn) {
      if (fn_ && fn_(&mode_) != CUDA_SUCCESS) fn_ = nullptr;
    }
    ~RelaxedCaptureMode() {
      if (fn_) fn_(&mode_);
    }
    Fn fn_;
    CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  };

  Read read_relaxed(uint32_t slot, int64_t* gpu_ns) {
    const CUresult q = api_.event_query(events_[slot]);
    if (q == CUDA_ERROR_NOT_READY) return Read::pending;
    if (q != CUDA_SUCCESS) return Read::failed;
    const SlotCalib sc = slot_calib_[slot];
    Calib& c = calib_[sc.index];
    // Recalibrated since the marker was recorded (generation odd while being rewritten): dropped.
    if (c.generation.load(std::memory_order_acquire) != sc.generation) return Read::failed;
    const int64_t base = c.host_ns.load(std::memory_order_relaxed);
    if (api_.event_query(c.event) == CUDA_ERROR_NOT_READY) return Read::pending;
    float ms = 0;
    if (api_.event_elapsed(&ms, c.event, events_[slot]) != CUDA_SUCCESS) return Read::failed;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.generation.load(std::memory_order_relaxed) != sc.generation) return Read::failed;
    *gpu_ns = base + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    return Read::done;
  }

 public:

  std::optional<uint32_t> stream_record_id(std::uintptr_t stream) override {
    if (!resolve()) return std::nullopt;
    CUcontext ctx = nullptr;
    if (api_.ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx) return std::nullopt;
    uint32_t id = 0;
    // The id GPU records carry for the stream (CUPTI API reference, cuptiGetStreamIdEx).
    if (cuptiGetStreamIdEx(ctx, reinterpret_cast<CUstream>(stream), 0, &id) != CUPTI_SUCCESS) return std::nullopt;
    return id;
  }

  void set_stream(std::uintptr_t stream) override { stream_ = reinterpret_cast<CUstream>(stream); }

  void close() override {
    if (!lib_) return;
    for (auto& e : events_)
      if (e) api_.event_destroy(e), e = nullptr;
    for (auto& c : calib_)
      if (c.event) api_.event_destroy(c.event), c.event = nullptr;
    if (calib_stream_) api_.stream_destroy(calib_stream_), calib_stream_ = nullptr;
    events_.clear();
    opened_ = false;
    calibrated_ = -1;
  }

 private:
  static constexpr int64_t kCalibrationPeriodNs = 1'000'000'000;  // the two clocks drift apart by microseconds per second
  static constexpr int kCalibrations = 8;

  struct Api {
    CUresult (*ctx_get_current)(CUcontext*) = nullptr;
    CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
    CUresult (*stream_destroy)(CUstream) = nullptr;
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
    CUresult (*event_create)(CUevent*, unsigned) = nullptr;
    CUresult (*event_destroy)(CUevent) = nullptr;
    CUresult (*event_record)(CUevent, CUstream) = nullptr;
    CUresult (*event_query)(CUevent) = nullptr;
    CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  };
  struct Calib {
    CUevent event = nullptr;
    std::atomic<int64_t> host_ns{0};
    std::atomic<uint64_t> generation{0};  // odd while the training thread rewrites it
  };
  struct SlotCalib {
    int index = 0;
    uint64_t generation = 0;
  };

  bool resolve() {
    if (lib_) return true;
    if (!why_.empty()) return false;
    // Never load the driver: a process that has not loaded it has no CUDA work to mark.
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!lib_) return why_ = "the CUDA driver (libcuda.so.1) is not loaded in this process", false;
    bool ok = true;
    auto sym = [&](auto& fn, const char* name, const char* fallback = nullptr) {
      void* p = dlsym(lib_, name);
      if (!p && fallback) p = dlsym(lib_, fallback);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      ok = ok && p;
    };
    sym(api_.ctx_get_current, "cuCtxGetCurrent");
    sym(api_.stream_create, "cuStreamCreate");
    sym(api_.stream_destroy, "cuStreamDestroy_v2", "cuStreamDestroy");
    sym(api_.stream_is_capturing, "cuStreamIsCapturing");
    sym(api_.event_create, "cuEventCreate");
    sym(api_.event_destroy, "cuEventDestroy_v2", "cuEventDestroy");
    sym(api_.event_record, "cuEventRecord");
    sym(api_.event_query, "cuEventQuery");
    sym(api_.event_elapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    sym(api_.exchange_capture_mode, "cuThreadExchangeStreamCaptureMode");
    if (!ok) {
      dlclose(lib_);
      lib_ = nullptr;
      why_ = "the CUDA driver lacks an event or stream function the markers need";
    }
    return ok;
  }

  /// An event on the private stream completes as soon as the GPU sees it: its GPU time is "now".
  void calibrate(std::string* why) {
    const int next = (calibrated_ + 1) % kCalibrations;
    Calib& c = calib_[next];
    c.generation.fetch_add(1, std::memory_order_acq_rel);  // readers holding the old one drop it
    std::atomic_thread_fence(std::memory_order_release);  // the odd generation before the new values
    const int64_t before = monotonic_ns();
    if (const CUresult e = api_.event_record(c.event, calib_stream_); e != CUDA_SUCCESS) {
      *why = "the clock calibration event could not be recorded: CUresult " + std::to_string(e);
      c.generation.fetch_add(1, std::memory_order_release);
      calibrated_ = -1;
      return;
    }
    const int64_t after = monotonic_ns();
    c.host_ns.store(before + (after - before) / 2, std::memory_order_relaxed);
    c.generation.fetch_add(1, std::memory_order_release);
    calibrated_ = next;
  }

  void* lib_ = nullptr;
  std::string why_;
  Api api_;
  bool opened_ = false;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream calib_stream_ = nullptr;
  std::vector<CUevent> events_;
  std::vector<SlotCalib> slot_calib_;
  Calib calib_[kCalibrations];
  int calibrated_ = -1;
};

} STEPTRACE_END_NAMESPACE  // steptrace::backend
