// steptrace/backend/device.hpp - the GPU through the CUDA runtime: which device, its properties,
// and device-memory readings. Every call reports failure as a reason string, never throws.
#pragma once
#include "../version.hpp"
#include <optional>
#include <string>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "../core/reasons.hpp"
#include "../core/records.hpp"
#include "../core/run_info.hpp"
#include "gpu_backend.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend {

inline std::string cuda_error_text(const char* call, cudaError_t e) {
  return std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

/// Why cudaGetDeviceCount failed, in the words a user needs: the runtime says "CUDA driver version is
/// insufficient" (cudaErrorInsufficientDriver) also where no driver is installed at all, so the
/// driver's library is looked for first.
inline std::string no_gpu_reason(cudaError_t e) {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) {
    const char* why = dlerror();
    return reason_text(Reason::no_driver, std::string("libcuda.so.1 cannot be loaded") + (why ? std::string(": ") + why : "") + ")");
  }
  dlclose(driver);
  if (e == cudaErrorInsufficientDriver)
    return reason_text(Reason::driver_too_old, cuda_error_text("cudaGetDeviceCount", e));
  if (e == cudaErrorNoDevice) return reason_text(Reason::no_gpu_found, cuda_error_text("cudaGetDeviceCount", e));
  return reason_text(Reason::no_usable_gpu, cuda_error_text("cudaGetDeviceCount", e));
}

/// Finds the device to measure: `requested`, or the calling thread's current device if -1.
/// Does not create a CUDA context.
inline DeviceProbe probe_device(int requested) {
  DeviceProbe p;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    p.null_reason = no_gpu_reason(e);
    return p;
  }
  if (count == 0) {
    p.null_reason = reason_text(Reason::no_usable_gpu, "cudaGetDeviceCount returned 0");
    return p;
  }
  int dev = requested;
  if (dev < 0 && (e = cudaGetDevice(&dev)) != cudaSuccess) {
    (void)cudaGetLastError();
    p.null_reason = reason_text(Reason::no_usable_gpu, cuda_error_text("cudaGetDevice", e));
    return p;
  }
  if (dev >= count) {
    p.null_reason = reason_text(Reason::no_usable_gpu, "device " + std::to_string(dev) + " requested but only " +
                                                           std::to_string(count) + " present");
    return p;
  }
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
    (void)cudaGetLastError();
    p.null_reason = reason_text(Reason::no_usable_gpu, cuda_error_text("cudaGetDeviceProperties", e));
    return p;
  }
  DeviceInfo d;
  d.index = dev;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  char text[64];
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  // nvidia-smi's spelling of a GPU UUID: "GPU-" and the 16 bytes as 8-4-4-4-12 lower-case hex digits.
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.uuid = text;
  // nvml.h NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0" (domain:bus:device.function).
  std::snprintf(text, sizeof text, "%08X:%02X:%02X.0", static_cast<unsigned>(prop.pciDomainID),
                static_cast<unsigned>(prop.pciBusID), static_cast<unsigned>(prop.pciDeviceID));
  d.pci_bus_id = text;
  d.max_threads_per_block = prop.maxThreadsPerBlock;
  d.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  d.regs_per_block = prop.regsPerBlock;
  d.regs_per_sm = prop.regsPerMultiprocessor;
  d.warp_size = prop.warpSize;
  d.smem_per_block = static_cast<int64_t>(prop.sharedMemPerBlock);
  d.smem_per_sm = static_cast<int64_t>(prop.sharedMemPerMultiprocessor);
  d.smem_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  d.reserved_smem_per_block = static_cast<int64_t>(prop.reservedSharedMemPerBlock);
  p.device = d;
  return p;
}

/// Binds the calling (background) thread to `device`. Returns an error text or "".
inline std::string bind_thread_to_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error_text("cudaSetDevice", e);
  }
  return {};
}

/// Device-wide used/total memory now (cudaMemGetInfo: all processes on the device).
inline std::optional<MemorySample> sample_device_memory(int64_t now_ns, std::string* error) {
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (error) *error = cuda_error_text("cudaMemGetInfo", e);
    return std::nullopt;
  }
  return MemorySample{now_ns, static_cast<int64_t>(total_bytes - free_bytes), static_cast<int64_t>(total_bytes)};
}

} STEPTRACE_END_NAMESPACE  // steptrace::backend
