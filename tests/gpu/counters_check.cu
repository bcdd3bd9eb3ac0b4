// counters_check - known kernels against steptrace's PM sampler (and, with --ncu, one launch of each
// kernel for Nsight Compute to measure the same metrics). Prints one JSON object.
//
//   counters_check [--interval-us N]   PM sampling over each workload's window (~100 ms each)
//   counters_check --ncu               no sampling; each kernel once, for
//       ncu --metrics sm__cycles_active.avg.pct_of_peak_sustained_elapsed,... counters_check --ncu
//
// Workloads: one block spinning (sm_active = 1/numSMs), a full grid of FMA loops (sm_active ~ 1,
// tensor ~ 0), cuBLAS bf16 GEMMs (tensor pipe busy), a device-to-device copy kernel (DRAM busy).
#include <steptrace/backend/cupti/pm_sampler.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "../../support/cuda_check.cuh"

#include <cmath>
#include <deque>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>


namespace {
__global__ void fma_loop(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);
    c = fmaf(c, b, a);
  }
  if (a == 12345.f) out[threadIdx.x] = a + c;
}
__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) out[i] = in[i];
}

uint64_t gpu_now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

struct Window {
  std::string name;
  uint64_t begin = 0, end = 0;
};

}  // namespace

int main(int argc, char** argv) {
  bool ncu = false;
  uint64_t interval_us = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ncu") ncu = true;
    else if (a == "--interval-us" && i + 1 < argc) interval_us = std::strtoull(argv[++i], nullptr, 10);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"error\":\"no CUDA device\"}\n");
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long ms = clock_khz;  // cycles per ms at the reported clock
  int* sink;
  float* out;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(int)));
  CHECK_CUDA(cudaMalloc(&out, 4096 * sizeof(float)));
  const int n = 8192;
  __nv_bfloat16 *A, *B, *C;
  CHECK_CUDA(cudaMalloc(&A, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMalloc(&B, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMalloc(&C, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMemset(A, 0, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMemset(B, 0, sizeof(__nv_bfloat16) * n * n));
  const size_t copy_bytes = size_t(1) << 30;
  float4 *src, *dst;
  CHECK_CUDA(cudaMalloc(&src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  CHECK_CUDA(cudaMemset(src, 0, copy_bytes));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  gemm();  // warm-up: cuBLAS picks its kernel
  CHECK_CUDA(cudaDeviceSynchronize());

  steptrace::backend::cupti::PmSampler sampler;
  std::string err;
  if (!ncu) err = sampler.start(0, interval_us * 1000);
  std::vector<Window> windows;
  std::vector<steptrace::CounterSample> samples;
  // Each workload runs ~100 ms (one launch each in --ncu mode), with a gap between them.
  auto run = [&](const char* name, auto&& body, int reps) {
    CHECK_CUDA(cudaDeviceSynchronize());
    Window w{name, gpu_now(), 0};
    for (int r = 0; r < (ncu ? 1 : reps); ++r) body();
    CHECK_CUDA(cudaDeviceSynchronize());
    w.end = gpu_now();
    windows.push_back(w);
    if (sampler.running()) {
      const std::string e = sampler.poll(samples);
      if (!e.empty() && err.empty()) err = e;
    }
  };
  run("one_block", [&] { spin<<<1, 128>>>(100 * ms, sink); }, 1);
  run("full_grid_fma", [&] { fma_loop<<<prop.multiProcessorCount * 8, 256>>>(out, 1 << 16); }, 20);
  run("gemm_bf16", gemm, 60);
  run("d2d_copy", [&] { copy_kernel<<<prop.multiProcessorCount * 4, 512>>>(src, dst, copy_bytes / sizeof(float4)); }, 40);
  if (sampler.running()) {
    const std::string e = sampler.poll(samples);
    if (!e.empty() && err.empty()) err = e;
  }

  std::printf("{\"device\":\"%s\",\"sm_count\":%d,\"mode\":\"%s\",\"interval_us\":%llu,", prop.name,
              prop.multiProcessorCount, ncu ? "ncu" : "pm_sampling", (unsigned long long)interval_us);
  if (!ncu) {
    std::printf("\"error\":\"%s\",\"chip\":\"%s\",\"metrics\":\"%s\",\"samples\":%zu,\"overflows\":%llu,",
                err.c_str(), sampler.chip().c_str(), sampler.describe().c_str(), samples.size(),
                (unsigned long long)sampler.overflows());
    if (!samples.empty())
      std::printf("\"first_sample\":[%llu,%llu],\"windows_span\":[%llu,%llu],",
                  (unsigned long long)samples.front().start_ns, (unsigned long long)samples.front().end_ns,
                  (unsigned long long)windows.front().begin, (unsigned long long)windows.back().end);
  }
  const std::deque<steptrace::CounterSample> all_samples(samples.begin(), samples.end());
  std::printf("\"workloads\":{");
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto& w = windows[i];
    // steptrace's own rule: the whole samples inside the window, weighted by duration.
    const auto c = steptrace::summarize_counters(all_samples, steptrace::Interval{int64_t(w.begin), int64_t(w.end)});
    auto num = [](const std::optional<double>& v) { return v ? std::to_string(*v) : std::string("null"); };
    std::printf("%s\"%s\":{\"ms\":%.3f,\"samples\":%u,\"edge_only\":%s,\"sm_active\":%s,\"tensor_active\":%s,"
                "\"dram\":%s,\"occupancy\":%s}",
                i ? "," : "", w.name.c_str(), double(w.end - w.begin) / 1e6, c.samples, c.edge_only ? "true" : "false",
                num(c.sm_active).c_str(), num(c.tensor_active).c_str(), num(c.dram).c_str(), num(c.occupancy).c_str());
  }
  std::printf("}}\n");
  sampler.stop();
  cublasDestroy(blas);
  return err.empty() || ncu ? 0 : 3;
}
