// steptrace/core/run_info.hpp - the process and the GPU it measures, fixed at start(): what the
// backends fill in and the line reports. Pure C++17.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <optional>
#include <string>

STEPTRACE_BEGIN_NAMESPACE

/// The GPU this process measures.
struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t total_memory_bytes = 0;
  std::string uuid;        // "GPU-xxxxxxxx-...", as nvidia-smi and dcgm-exporter's UUID label write it
  std::string pci_bus_id;  // "00000000:3B:00.0", NVML's form (dcgm-exporter's pci_bus_id label)
  // Limits the occupancy estimate needs (cudaDeviceProp's names).
  int max_threads_per_block = 0, max_threads_per_sm = 0, regs_per_block = 0, regs_per_sm = 0, warp_size = 32;
  int64_t smem_per_block = 0, smem_per_sm = 0, smem_per_block_optin = 0, reserved_smem_per_block = 0;
};

/// Identity of the process, fixed at start().
struct RunInfo {
  int rank = 0, local_rank = 0, world_size = 1;
  std::string hostname;
  int64_t pid = 0;
  std::string job_id;              // the scheduler's job ("" = none known)
  std::string job_id_source;       // where job_id came from, or why there is none
  std::string run_id;              // one per start()
  std::optional<DeviceInfo> device;
  std::string device_null_reason;  // why there is no device
};

STEPTRACE_END_NAMESPACE  // steptrace
