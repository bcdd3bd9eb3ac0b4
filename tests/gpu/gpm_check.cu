// gpm_check - NVML GPM (GPU performance monitoring, Hopper+) on the same known kernels as
// counters_check, to compare it with CUPTI PM sampling: does it return numbers on this machine, and
// what does one reading cost. Built on request only (needs nvml.h):  cmake --build B --target gpm_check
#include <nvml.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace {
__global__ void spin(long long cycles, int* sink) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && sink) *sink = 1;
}
__global__ void copy_kernel(const float4* in, float4* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) out[i] = in[i];
}
}  // namespace

int main() {
  if (nvmlInit_v2() != NVML_SUCCESS) {
    std::printf("{\"error\":\"nvmlInit failed\"}\n");
    return 1;
  }
  nvmlDevice_t dev;
  nvmlDeviceGetHandleByIndex_v2(0, &dev);
  nvmlGpmSupport_t support{};
  support.version = NVML_GPM_SUPPORT_VERSION;
  const nvmlReturn_t sr = nvmlGpmQueryDeviceSupport(dev, &support);
  std::printf("{\"gpm_query\":\"%s\",\"supported\":%d,", nvmlErrorString(sr), int(support.isSupportedDevice));
  cudaSetDevice(0);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  int* sink;
  cudaMalloc(&sink, sizeof(int));
  const size_t bytes = size_t(1) << 30;
  float4 *a, *b;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaDeviceSynchronize();
  nvmlGpmSample_t s1, s2;
  nvmlGpmSampleAlloc(&s1);
  nvmlGpmSampleAlloc(&s2);
  const unsigned ids[] = {NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY, NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                          NVML_GPM_METRIC_DRAM_BW_UTIL};
  const char* names[] = {"sm_util", "sm_occupancy", "any_tensor_util", "dram_bw_util"};
  auto measure = [&](const char* what, auto&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    const nvmlReturn_t g1 = nvmlGpmSampleGet(dev, s1);
    const double get_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    body();
    cudaDeviceSynchronize();
    const nvmlReturn_t g2 = nvmlGpmSampleGet(dev, s2);
    nvmlGpmMetricsGet_t mg{};
    mg.version = NVML_GPM_METRICS_GET_VERSION;
    mg.numMetrics = 4;
    mg.sample1 = s1;
    mg.sample2 = s2;
    for (int i = 0; i < 4; ++i) mg.metrics[i].metricId = ids[i];
    const nvmlReturn_t mr = nvmlGpmMetricsGet(&mg);
    std::printf("\"%s\":{\"sample_get\":\"%s/%s\",\"metrics_get\":\"%s\",\"sample_get_us\":%.1f", what, nvmlErrorString(g1),
                nvmlErrorString(g2), nvmlErrorString(mr), get_us);
    for (int i = 0; i < 4; ++i)
      std::printf(",\"%s\":%.3f(%s)", names[i], mg.metrics[i].value, nvmlErrorString(mg.metrics[i].nvmlReturn));
    std::printf("},");
  };
  measure("one_block", [&] { spin<<<1, 128>>>(100LL * khz, sink); });
  measure("full_grid", [&] { spin<<<prop.multiProcessorCount * 8, 256>>>(100LL * khz, sink); });
  measure("d2d_copy", [&] {
    for (int i = 0; i < 40; ++i) copy_kernel<<<prop.multiProcessorCount * 4, 512>>>(a, b, bytes / sizeof(float4));
  });
  std::printf("\"done\":true}\n");
  nvmlGpmSampleFree(s1);
  nvmlGpmSampleFree(s2);
  nvmlShutdown();
  return 0;
}
