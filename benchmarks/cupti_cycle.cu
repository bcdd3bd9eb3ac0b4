// cupti_cycle - what attaching CUPTI for one step and detaching it afterwards costs.
//
//   cupti_cycle [cycles] [launches] [busy_us]
// Each cycle: attach (subscribe a callback on the launch sites, register buffers, enable
// CONCURRENT_KERNEL), launch `launches` empty kernels (timed: host ns per launch while attached),
// synchronize, flush, then ask the next API exit callback to call cuptiFinalize() (the detach CUPTI
// documents), with `busy_us` of GPU work queued first to see whether the detach waits for it. Then
// the same launches detached (host ns per launch), and whether records and correlation ids after a
// re-attach are still right. Prints one JSON object per cycle and a summary.
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "raw_cupti.hpp"

__global__ void empty_kernel() {}
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

namespace {
double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::atomic<bool> g_detach{false};
std::atomic<bool> g_detached{false};
double g_finalize_us = 0;
uint32_t g_min_corr = ~0u, g_max_corr = 0;
long g_kernel_records = 0;
uint32_t g_min_record_corr = ~0u, g_max_record_corr = 0;

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    g_min_corr = std::min(g_min_corr, cb->correlationId);
    g_max_corr = std::max(g_max_corr, cb->correlationId);
    return;
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && g_detach.exchange(false)) {
    const double t0 = now_us();
    cuptiFinalize();
    g_finalize_us = now_us() - t0;
    g_detached = true;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel9*>(r);
    ++g_kernel_records;
    g_min_record_corr = std::min(g_min_record_corr, k->correlationId);
    g_max_record_corr = std::max(g_max_record_corr, k->correlationId);
  }
  std::free(buffer);
}

double launch_loop(int n) {
  const double t0 = now_us();
  for (int i = 0; i < n; ++i) empty_kernel<<<1, 32>>>();
  return (now_us() - t0) * 1000.0 / n;
}
}  // namespace

int main(int argc, char** argv) {
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 10;
  const int launches = argc > 2 ? std::atoi(argv[2]) : 10000;
  const double busy_us = argc > 3 ? std::atof(argv[3]) : 0;
  cudaFree(nullptr);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  empty_kernel<<<1, 32>>>();
  cudaDeviceSynchronize();
  const double base_ns = launch_loop(launches);
  cudaDeviceSynchronize();
  std::vector<double> attach, attached, finalize, detached, request_to_detached;
  for (int c = 0; c < cycles; ++c) {
    g_min_corr = ~0u, g_max_corr = 0, g_kernel_records = 0, g_min_record_corr = ~0u, g_max_record_corr = 0;
    double t0 = now_us();
    CUpti_SubscriberHandle sub = nullptr;
    bool ok = cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(&on_api), nullptr) == CUPTI_SUCCESS;
    ok = ok && bench_enable_launch_sites(sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, "cuda") &&
         bench_enable_launch_sites(sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, "cu");
    ok = ok && cuptiActivityRegisterCallbacks(bench_buffer_requested, buffer_completed) == CUPTI_SUCCESS;
    ok = ok && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS;
    attach.push_back(now_us() - t0);
    if (!ok) {
      std::printf("{\"cycle\":%d,\"error\":\"attach failed\"}\n", c);
      return 1;
    }
    attached.push_back(launch_loop(launches));
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    const long records = g_kernel_records;
    if (busy_us > 0) spin_kernel<<<1, 1>>>(static_cast<long long>(busy_us * clock_khz / 1000.0));
    t0 = now_us();
    g_detach = true;
    empty_kernel<<<1, 32>>>();  // its runtime exit callback detaches
    request_to_detached.push_back(now_us() - t0);
    finalize.push_back(g_finalize_us);
    detached.push_back(launch_loop(launches));
    cudaDeviceSynchronize();
    std::printf(
        "{\"cycle\":%d,\"attach_us\":%.1f,\"attached_ns_per_launch\":%.1f,\"finalize_us\":%.1f,"
        "\"request_to_detached_us\":%.1f,\"detached_ns_per_launch\":%.1f,\"detached\":%s,\"callback_corr\":[%u,%u],"
        "\"kernel_records\":%ld,\"record_corr\":[%u,%u]}\n",
        c, attach.back(), attached.back(), finalize.back(), request_to_detached.back(), detached.back(),
        g_detached ? "true" : "false", g_min_corr, g_max_corr, records, g_min_record_corr, g_max_record_corr);
    g_detached = false;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::printf(
      "{\"summary\":true,\"cycles\":%d,\"launches\":%d,\"busy_us\":%.0f,\"baseline_ns_per_launch\":%.1f,"
      "\"attach_us\":%.1f,\"attached_ns_per_launch\":%.1f,\"finalize_us\":%.1f,\"request_to_detached_us\":%.1f,"
      "\"detached_ns_per_launch\":%.1f,\"cuda\":\"%s\"}\n",
      cycles, launches, busy_us, base_ns, median(attach), median(attached), median(finalize), median(request_to_detached),
      median(detached), cudaGetErrorString(cudaGetLastError()));
  return 0;
}
