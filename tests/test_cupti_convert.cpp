// CUPTI record -> steptrace record conversion and the occupancy estimate, with hand-filled structs
// (no GPU needed).
#include <steptrace/backend/cupti/convert.hpp>

#include <cstring>

#include "support.hpp"

using namespace steptrace;
using namespace steptrace::backend::cupti;

namespace {
// H100 SXM limits as the occupancy calculator takes them (cudaDeviceProp on the device): 132 SMs, 2048
// threads/SM, 64K regs/SM and /block, 228 KiB shared memory/SM, 227 KiB opt-in per block, 1 KiB reserved
// per block. The runtime fills the same struct from cudaGetDeviceProperties (backend/cuda_backend.hpp).
cudaOccDeviceProp h100() {
  cudaOccDeviceProp p;
  p.computeMajor = 9;
  p.computeMinor = 0;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.numSms = 132;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.reservedSharedMemPerBlock = 1024;
  return p;
}
DeviceTable table() {
  DeviceTable t;
  t.sm_count = {132};
  t.occupancy = {h100()};
  return t;
}
}  // namespace

TEST_CASE("kernel record: grid, correlation, one-block SM efficiency = 1/SMs", "[convert]") {
  KernelActivity k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = 42;
  k.deviceId = 0;
  k.streamId = 13;
  k.start = 1000;
  k.end = 5000;
  k.gridX = 1;
  k.gridY = 1;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 32;
  k.name = "_Z6kernelv";
  const KernelRecord r = convert_kernel(k, table());
  CHECK(r.correlation == 42);
  CHECK(r.stream == 13);
  CHECK(r.end_ns - r.start_ns == 4000);
  CHECK(r.blocks == 1);
  CHECK(r.threads_per_block == 256);
  CHECK(r.sm_efficiency == 1.0 / 132);
  CHECK(std::string(r.name) == "_Z6kernelv");
  // 256 threads, 32 regs: 8 resident blocks = 64 warps = full; 1 block of 132*8 slots
  CHECK(r.occupancy == Approx(1.0 / (132 * 8)));

  k.gridX = 66;
  k.gridY = 4;  // 264 blocks: more than the SMs
  const KernelRecord full = convert_kernel(k, table());
  CHECK(full.sm_efficiency == 1.0);
  CHECK(full.occupancy == Approx(264.0 / (132 * 8)));
  k.deviceId = 3;  // a device we know nothing about: no estimate rather than a wrong one
  CHECK(convert_kernel(k, table()).sm_efficiency == 0);
}

TEST_CASE("occupancy estimate: registers and block size limit resident warps", "[convert]") {
  const auto prop = h100();
  // 1024 threads x 64 regs = 64K regs: one block per SM, 32 of 64 warps
  CHECK(estimate_occupancy(prop, 1024, 64, 0, 0, 132 * 100) == Approx(0.5));
  // 128 threads x 255 regs: 65536 / (256 regs x 128) = 2 blocks -> 8 of 64 warps
  CHECK(estimate_occupancy(prop, 128, 255, 0, 0, 132 * 100) == Approx(0.125));
  // 256 threads, 100 KiB dynamic shared memory: 2 blocks per SM -> 16 of 64 warps
  CHECK(estimate_occupancy(prop, 256, 32, 0, 100 * 1024, 132 * 100) == Approx(0.25));
  CHECK(estimate_occupancy(prop, 0, 32, 0, 0, 1) == 0);
}

TEST_CASE("memcpy and memset records: bytes, direction, runtime correlation", "[convert]") {
  MemcpyActivity m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = 64u << 20;
  m.start = 10;
  m.end = 110;
  m.correlationId = 7;
  m.runtimeCorrelationId = 6;
  CopyRecord c = convert_memcpy(m);
  CHECK(c.bytes == (64u << 20));
  CHECK(c.kind == CopyKind::h2d);
  CHECK(c.correlation == 6);  // the runtime call is the launch site
  m.runtimeCorrelationId = 0;  // a driver-API copy
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  c = convert_memcpy(m);
  CHECK(c.correlation == 7);
  CHECK(c.kind == CopyKind::d2h);
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  CHECK(convert_memcpy(m).kind == CopyKind::p2p);
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
  CHECK(convert_memcpy(m).kind == CopyKind::d2d);

  MemsetActivity s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  s.correlationId = 9;
  s.start = 0;
  s.end = 50;
  const CopyRecord r = convert_memset(s);
  CHECK(r.kind == CopyKind::memset);
  CHECK(r.bytes == 4096);
  CHECK(r.correlation == 9);
}
