// steptrace/backend/nvml.hpp - power, SM clock, temperature and clock-event (throttle) reasons of the
// measured GPU, read through NVML by the background thread.
//
// Compiled only where nvml.h is available at build time (the CUDA toolkit's, or the driver
// development package's); elsewhere the fields are null with that reason. The library itself is
// opened at run time (dlopen "libnvidia-ml.so.1", the driver's), so programs never link against NVML.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/device_state.hpp"

#if defined(__has_include)
#if __has_include(<nvml.h>)
#define STEPTRACE_HAVE_NVML_H 1
#endif
#endif

#ifdef STEPTRACE_HAVE_NVML_H
#include <dlfcn.h>
#include <nvml.h>
#endif

STEPTRACE_BEGIN_NAMESPACE namespace backend {

#ifdef STEPTRACE_HAVE_NVML_H

class Nvml {
 public:
  /// Opens NVML and the device with this PCI bus id (as cudaDeviceGetPCIBusId gives it). "" or why not.
  std::string open(const std::string& pci_bus_id) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return "libnvidia-ml.so.1 not found (NVML is part of the NVIDIA driver)";
    init_ = reinterpret_cast<decltype(init_)>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<decltype(shutdown_)>(dlsym(lib_, "nvmlShutdown"));
    by_bus_ = reinterpret_cast<decltype(by_bus_)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    power_ = reinterpret_cast<decltype(power_)>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    clock_ = reinterpret_cast<decltype(clock_)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    temp_ = reinterpret_cast<decltype(temp_)>(dlsym(lib_, "nvmlDeviceGetTemperature"));
    reasons_ = reinterpret_cast<decltype(reasons_)>(dlsym(lib_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons_) reasons_ = reinterpret_cast<decltype(reasons_)>(dlsym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    if (!init_ || !shutdown_ || !by_bus_) return close_with("libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2");
    if (init_() != NVML_SUCCESS) return close_with("nvmlInit_v2 failed");
    initialized_ = true;
    if (by_bus_(pci_bus_id.c_str(), &device_) != NVML_SUCCESS) return close_with("NVML does not see the device " + pci_bus_id);
    return {};
  }

  DeviceStateSample read(int64_t now_ns) const {
    DeviceStateSample s;
    s.time_ns = now_ns;
    unsigned int v = 0;
    if (power_ && power_(device_, &v) == NVML_SUCCESS) s.power_w = v / 1000.0;  // milliwatts
    if (clock_ && clock_(device_, NVML_CLOCK_SM, &v) == NVML_SUCCESS) s.sm_clock_mhz = v;
    if (temp_ && temp_(device_, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) s.temperature_c = v;
    unsigned long long r = 0;
    if (reasons_ && reasons_(device_, &r) == NVML_SUCCESS) s.clock_event_reasons = r;
    return s;
  }

  void close() { close_with(""); }
  ~Nvml() { close(); }

 private:
  std::string close_with(std::string why) {
    if (initialized_ && shutdown_) shutdown_();
    initialized_ = false;
    if (lib_) dlclose(lib_);
    lib_ = nullptr;
    return why;
  }

  void* lib_ = nullptr;
  bool initialized_ = false;
  nvmlDevice_t device_{};
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*by_bus_)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*clock_)(nvmlDevice_t, nvmlClockType_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temp_)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*) = nullptr;
  nvmlReturn_t (*reasons_)(nvmlDevice_t, unsigned long long*) = nullptr;
};

#else  // no nvml.h at build time

class Nvml {
 public:
  std::string open(const std::string&) {
    return "built without nvml.h (install the CUDA toolkit's NVML headers and rebuild)";
  }
  DeviceStateSample read(int64_t now_ns) const {
    DeviceStateSample s;
    s.time_ns = now_ns;
    return s;
  }
  void close() {}
};

#endif

} STEPTRACE_END_NAMESPACE  // steptrace::backend
