// steptrace/backend/cupti/convert.hpp - CUpti_Activity* records -> steptrace's core records, and the
// occupancy estimate. No CUPTI calls here: tested in CI with hand-filled structs.
#pragma once
#include "../../version.hpp"
#include <cstdint>
#include <vector>

#include <cuda_occupancy.h>
#include <cupti_activity.h>

#include "../../core/gpu_records.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

// The record versions of the CUPTI this is built with (CUDA 13).
using KernelActivity = CUpti_ActivityKernel10;
using MemcpyActivity = CUpti_ActivityMemcpy6;
using MemsetActivity = CUpti_ActivityMemset4;

/// Estimated achieved occupancy of a kernel: the theoretical occupancy from the CUDA occupancy
/// calculator (resident warps per SM / max warps per SM, limited by block size, registers and
/// shared memory), scaled down when the grid has fewer blocks than the SMs could hold at once
/// (blocks / (SMs x resident blocks per SM)). Kineto reports the same kind of estimate
/// ("est. achieved occupancy %"). Returns 0 when it cannot be computed.
inline double estimate_occupancy(const cudaOccDeviceProp& prop, int threads_per_block, int regs_per_thread,
                                 size_t static_smem, size_t dynamic_smem, uint64_t blocks) {
  if (threads_per_block <= 0 || prop.numSms <= 0 || prop.warpSize <= 0 || prop.maxThreadsPerMultiprocessor <= 0)
    return 0;
  cudaOccFuncAttributes attr;
  attr.maxThreadsPerBlock = prop.maxThreadsPerBlock;
  attr.numRegs = regs_per_thread;
  attr.sharedSizeBytes = static_smem;
  attr.maxDynamicSharedSizeBytes = prop.sharedMemPerBlockOptin > static_smem ? prop.sharedMemPerBlockOptin - static_smem : 0;
  attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attr.numBlockBarriers = 1;
  cudaOccDeviceState state;
  cudaOccResult result{};
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, threads_per_block, dynamic_smem) !=
          CUDA_OCC_SUCCESS ||
      result.activeBlocksPerMultiprocessor <= 0)
    return 0;
  const int warps_per_block = (threads_per_block + prop.warpSize - 1) / prop.warpSize;
  const double max_warps = static_cast<double>(prop.maxThreadsPerMultiprocessor / prop.warpSize);
  const double theoretical = std::min(1.0, result.activeBlocksPerMultiprocessor * warps_per_block / max_warps);
  const double slots = static_cast<double>(prop.numSms) * result.activeBlocksPerMultiprocessor;
  return theoretical * std::min(1.0, static_cast<double>(blocks) / slots);
}

/// SM counts and occupancy properties per CUDA device index (kernels may run on any device).
struct DeviceTable {
  std::vector<int> sm_count;
  std::vector<cudaOccDeviceProp> occupancy;
  bool has(uint32_t device) const { return device < sm_count.size() && sm_count[device] > 0; }
};

inline KernelRecord convert_kernel(const KernelActivity& k, const DeviceTable& devices) {
  KernelRecord r;
  r.correlation = k.correlationId;
  r.device = k.deviceId;
  r.stream = k.streamId;
  r.start_ns = static_cast<int64_t>(k.start);
  r.end_ns = static_cast<int64_t>(k.end);
  r.blocks = static_cast<uint64_t>(k.gridX) * static_cast<uint64_t>(k.gridY) * static_cast<uint64_t>(k.gridZ);
  r.threads_per_block = static_cast<uint32_t>(k.blockX * k.blockY * k.blockZ);
  r.name = k.name ? k.name : "";
  if (devices.has(k.deviceId)) {
    r.sm_efficiency = kernel_sm_efficiency(r.blocks, devices.sm_count[k.deviceId]);
    r.occupancy = estimate_occupancy(devices.occupancy[k.deviceId], static_cast<int>(r.threads_per_block),
                                     k.registersPerThread, static_cast<size_t>(k.staticSharedMemory),
                                     static_cast<size_t>(k.dynamicSharedMemory), r.blocks);
  }
  return r;
}

inline CopyKind copy_kind(uint8_t cupti_kind) {
  switch (cupti_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return CopyKind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return CopyKind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return CopyKind::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyKind::h2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return CopyKind::p2p;
    default: return CopyKind::other;
  }
}

/// A memcpy made by a runtime call carries the driver call's id and the runtime call's id; the
/// launch was recorded under the outermost (runtime) id when there is one.
inline CopyRecord convert_memcpy(const MemcpyActivity& m) {
  CopyRecord r;
  r.correlation = m.runtimeCorrelationId ? m.runtimeCorrelationId : m.correlationId;
  r.device = m.deviceId;
  r.stream = m.streamId;
  r.start_ns = static_cast<int64_t>(m.start);
  r.end_ns = static_cast<int64_t>(m.end);
  r.bytes = m.bytes;
  r.kind = copy_kind(m.copyKind);
  return r;
}

inline CopyRecord convert_memset(const MemsetActivity& m) {
  CopyRecord r;
  r.correlation = m.correlationId;
  r.device = m.deviceId;
  r.stream = m.streamId;
  r.start_ns = static_cast<int64_t>(m.start);
  r.end_ns = static_cast<int64_t>(m.end);
  r.bytes = m.bytes;
  r.kind = CopyKind::memset;
  return r;
}

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
