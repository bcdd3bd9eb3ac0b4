// steptrace/backend/cuda_backend.hpp - the GpuBackend of a real program: the CUDA runtime for the
// device and its memory, the CUPTI collector for launches and records, the CUPTI PM sampler for
// hardware counters, NVML for power and clocks. Each piece keeps its own file; this one only wires
// them behind the interface the runtime uses.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include "../core/clock.hpp"
#include "cupti/collector.hpp"
#include "cupti/pm_sampler.hpp"
#include "cuda_markers.hpp"
#include "device.hpp"
#include "gpu_backend.hpp"
#include "nvml.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend {

class CudaBackend final : public GpuBackend {
 public:
  DeviceProbe probe(int requested) override { return probe_device(requested); }

  void synchronize(int device) override {
    int previous = -1;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    if (cudaSetDevice(device) == cudaSuccess) (void)cudaDeviceSynchronize();
    if (restore) (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
  }

  std::string start_attribution(bool detach_between_traces, const LaunchContextSource& launches) override {
    return cupti::Collector::instance().start(device_table(), launches, detach_between_traces);
  }
  std::string set_tracing(bool on) override { return cupti::Collector::instance().set_tracing(on); }
  std::string attach_ahead() override { return cupti::Collector::instance().attach_ahead(); }
  LaunchStreams take_launch_streams() override { return cupti::Collector::instance().take_launch_streams(); }
  void on_stream_destroy(void (*hook)(std::uintptr_t)) override { cupti::Collector::instance().on_stream_destroy(hook); }
  bool request_detach(uint64_t traced) override { return cupti::Collector::instance().request_detach(traced); }
  void switch_to_detach() override { cupti::Collector::instance().switch_to_detach(); }
  std::optional<uint64_t> detach_since() override { return cupti::Collector::instance().detach_since(); }
  std::string kernel_timestamps() override { return cupti::Collector::instance().kernel_timestamps(); }
  void flush_records(bool forced) override { cupti::Collector::instance().flush(forced); }
  GpuDrain drain_records() override { return cupti::Collector::instance().drain(); }
  void stop_attribution() override { cupti::Collector::instance().stop(); }

  std::string start_counters(int device, uint64_t interval_ns, std::size_t hardware_buffer_bytes) override {
    return pm_.start(device, interval_ns, hardware_buffer_bytes);
  }
  std::string counters_description() override { return pm_.chip() + " (" + pm_.describe() + ")"; }
  std::string poll_counters(std::vector<CounterSample>& out) override { return pm_.poll(out); }
  std::string pause_counters() override { return pm_.pause(); }
  std::string resume_counters() override { return pm_.resume(); }
  void stop_counters() override { pm_.stop(); }
  std::string counters_cost() override { return pm_.cost(); }
  int64_t gpu_clock_offset_ns() override {
    uint64_t gpu_now = 0;
    const int64_t h0 = monotonic_ns();
    cuptiGetTimestamp(&gpu_now);
    const int64_t h1 = monotonic_ns();
    return static_cast<int64_t>(gpu_now) - (h0 + (h1 - h0) / 2);
  }

  std::string bind_thread(int device) override { return bind_thread_to_device(device); }
  std::optional<MemorySample> sample_memory(int64_t now_ns, std::string* error) override {
    return sample_device_memory(now_ns, error);
  }
  std::string open_device_state(int device) override {
    char bus[64] = {};
    const cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return cuda_error_text("cudaDeviceGetPCIBusId", e);
    }
    return nvml_.open(bus);
  }
  DeviceStateSample read_device_state(int64_t now_ns) override { return nvml_.read(now_ns); }
  void close_device_state() override { nvml_.close(); }

  MarkerEvents* markers() override { return &markers_; }

 private:
  /// SM counts and occupancy limits of every visible device (kernels may run on any of them). The
  /// occupancy calculator takes cudaDeviceProp as it comes.
  static cupti::DeviceTable device_table() {
    cupti::DeviceTable t;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return t;
    }
    t.sm_count.assign(static_cast<std::size_t>(count), 0);
    t.occupancy.resize(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      t.sm_count[static_cast<std::size_t>(i)] = prop.multiProcessorCount;
      t.occupancy[static_cast<std::size_t>(i)] = cudaOccDeviceProp(prop);
    }
    return t;
  }

  cupti::PmSampler pm_;
  Nvml nvml_;
  CudaMarkers markers_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::backend
