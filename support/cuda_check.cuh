// support/cuda_check.cuh - shared by the repository's CUDA test programs, benchmarks and examples
// (not part of the library): exit with the failing call's name on a CUDA error, and a kernel that
// keeps its blocks busy for a known number of cycles.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s failed: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// Spins for about `cycles` SM clock cycles in every thread of the grid.
static __global__ void spin(long long cycles, int* sink) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0 && sink) *sink = 1;
}

// Device 0's SM count and clock, and the small buffers the test programs' kernels write to.
struct TestDevice {
  int sms = 0;
  long long cycles_per_ms = 0;  // at the base clock
  int* sink = nullptr;
  float* buf = nullptr;  // 1024 floats
};

inline TestDevice open_test_device() {
  TestDevice d;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  d.sms = prop.multiProcessorCount;
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  d.cycles_per_ms = static_cast<long long>(clock_khz);
  CHECK_CUDA(cudaMalloc(&d.sink, sizeof(int)));
  CHECK_CUDA(cudaMalloc(&d.buf, 1024 * sizeof(float)));
  return d;
}
