// graph_records - what CUPTI returns for the kernels of a CUDA graph when kernel records are switched
// off and on between launches (sampled attribution, untraced_cupti=keep), next to plain launches.
//
//   graph_records MODE [steps] [every]
// A graph of 50 tiny kernels (instantiated before CUPTI attaches, as a program does at start-up) and 4
// plain kernels are launched every step, with no synchronization between steps; records are on for
// steps that are multiples of `every`. Every record is checked against what it cannot contradict: its
// start cannot precede its launch call's entry (CUPTI timestamps and cuptiGetTimestamp share a time
// base) and its end cannot follow the moment its buffer was handed over. MODE:
//   always     records on for every step (the control)
//   toggle     cuptiActivityEnable/Disable(CONCURRENT_KERNEL) at step boundaries (what keep mode does)
//   toggle_ctx cuptiActivityEnableContext/DisableContext instead
//   sync       toggle, after cudaDeviceSynchronize (the graph is idle when records switch)
//   late       toggle, with the graph instantiated after CUPTI attached and records on
//   flush      toggle, after cudaDeviceSynchronize and cuptiActivityFlushAll (records read out first)
//   extra      records switched off one step late (the traced step's graph launched again while on)
// Prints one JSON object.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "raw_cupti.hpp"

__global__ void tiny_kernel(float* x) {
  if (x) x[threadIdx.x] += 1.f;
}
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

namespace {
std::mutex g_mutex;
std::unordered_map<uint32_t, uint64_t> g_enter;  // correlation id -> launch call entry (CUPTI clock)
std::unordered_map<uint32_t, bool> g_is_graph;
std::unordered_map<uint32_t, int> g_launch_step;
int g_step = 0, g_every = 4;
struct Seen {
  long records = 0, zero = 0, before_launch = 0, after_buffer = 0, unknown_launch = 0;
  std::vector<double> durations_us;
};
Seen g_graph, g_graph_other, g_plain;  // graph kernels of steps that are multiples of `every`, of others

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || cb->callbackSite != CUPTI_API_ENTER) return;
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_enter[cb->correlationId] = t;
  g_is_graph[cb->correlationId] = cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
  g_launch_step[cb->correlationId] = g_step;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  uint64_t handed = 0;
  cuptiGetTimestamp(&handed);
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    auto it = g_enter.find(k->correlationId);
    const bool graph = g_is_graph.count(k->correlationId) && g_is_graph[k->correlationId];
    const bool primary = g_launch_step.count(k->correlationId) && g_launch_step[k->correlationId] % g_every == 0;
    Seen& s = !graph ? g_plain : primary ? g_graph : g_graph_other;
    ++s.records;
    if (it == g_enter.end()) {
      ++s.unknown_launch;
      continue;
    }
    if (k->start == 0 && k->end == 0) {
      ++s.zero;
      continue;
    }
    if (k->start < it->second) ++s.before_launch;
    if (k->end > handed) ++s.after_buffer;
    s.durations_us.push_back((static_cast<double>(k->end) - static_cast<double>(k->start)) / 1e3);
  }
  std::free(buffer);
}

void print_seen(const char* name, Seen& s) {
  std::sort(s.durations_us.begin(), s.durations_us.end());
  auto q = [&](double f) { return s.durations_us.empty() ? 0.0 : s.durations_us[static_cast<size_t>(f * (s.durations_us.size() - 1))]; };
  std::printf("\"%s\": {\"records\": %ld, \"zero_timestamps\": %ld, \"start_before_launch\": %ld, \"end_after_buffer\": %ld, "
              "\"unknown_launch\": %ld, \"duration_us_median\": %.3f, \"duration_us_max\": %.3f}",
              name, s.records, s.zero, s.before_launch, s.after_buffer, s.unknown_launch, q(0.5), q(1.0));
}

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::printf("{\"error\": \"%s: %s\"}\n", what, text ? text : "?");
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "toggle";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 32;
  const int every = argc > 3 ? std::atoi(argv[3]) : 4;
  g_every = every;
  float* buf = nullptr;
  if (cudaMalloc(&buf, 1024 * sizeof(float)) != cudaSuccess) {
    std::printf("{\"error\": \"no CUDA device\"}\n");
    return 1;
  }
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGraphExec_t exec = nullptr;
  auto instantiate = [&] {
    cudaGraph_t graph;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 50; ++i) tiny_kernel<<<1, 32, 0, s>>>(buf);
    cudaStreamEndCapture(s, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
  };
  if (mode != "late") instantiate();
  cudaDeviceSynchronize();

  CUpti_SubscriberHandle sub;
  if (!check(cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(&on_api), nullptr), "cuptiSubscribe")) return 1;
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  cuptiActivityRegisterCallbacks(&bench_buffer_requested, &buffer_completed);
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  const bool by_context = mode == "toggle_ctx";
  auto records = [&](bool on) {
    if (by_context) return on ? cuptiActivityEnableContext(ctx, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                              : cuptiActivityDisableContext(ctx, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    return on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  };
  if (!check(records(true), "enable")) return 1;
  if (mode == "late") instantiate();
  bool on = true;
  for (int step = 0; step < steps; ++step) {
    g_step = step;
    const bool want = mode == "always" || step % every == 0 || (mode == "extra" && step % every == 1);
    if (want != on) {
      if (mode == "sync" || mode == "flush") cudaDeviceSynchronize();
      if (mode == "flush") cuptiActivityFlushAll(0);
      if (!check(records(want), "toggle")) return 1;
      on = want;
    }
    spin_kernel<<<1, 32, 0, s>>>(clock_khz);  // ~1 ms: the queue stays ahead of the host
    for (int i = 0; i < 4; ++i) tiny_kernel<<<1, 32, 0, s>>>(buf);
    cudaGraphLaunch(exec, s);
  }
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::printf("{\"mode\": \"%s\", \"steps\": %d, \"every\": %d, ", mode.c_str(), steps, every);
  print_seen("graph_kernels", g_graph);
  std::printf(", ");
  print_seen("graph_kernels_other_steps", g_graph_other);
  std::printf(", ");
  print_seen("plain_kernels", g_plain);
  std::printf("}\n");
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiUnsubscribe(sub);
  cuptiFinalize();
  return 0;
}
