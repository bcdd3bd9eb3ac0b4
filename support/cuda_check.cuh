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
