// launch_cost - host cost per kernel launch of each way to attribute GPU work, measured in one binary.
//
//   launch_cost MODE [launches]
//   MODE: none                 plain launches
//         activity             raw CUPTI: CONCURRENT_KERNEL activity records only (the floor any
//                              record-based tool pays)
//         activity_api         raw CUPTI: + RUNTIME and DRIVER API activity records (what joining by
//                              external correlation ids needs)
//         activity_callbacks   raw CUPTI: activity records + a callback that returns at once on the API
//                              sites steptrace watches (CUPTI's callback dispatch without steptrace's handler)
//         steptrace_host       steptrace with cupti=off (step + phase scopes only)
//         steptrace            steptrace full attribution (activity + launch-site callbacks)
//         steptrace_untraced   steptrace with trace_every: the measured step is one not traced
//   What is left of CUPTI's cost once it is switched off (the warm-up step runs with it on):
//         activity_disabled    CONCURRENT_KERNEL enabled, then disabled
//         subscribed_disabled  a callback subscriber with the runtime and driver domains enabled, then disabled
//         finalized            both, then disabled, unsubscribed and cuptiFinalize()d
//         context_disabled     CONCURRENT_KERNEL enabled for the current context only, then disabled for it
// Prints one JSON object: host ns per launch (launch loop only) and wall ns per launch (with sync).
#include <steptrace/steptrace.hpp>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "raw_cupti.hpp"

__global__ void empty_kernel() {}

namespace {
double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "none";
  const int launches = argc > 2 ? std::atoi(argv[2]) : 50000;
  cudaFree(nullptr);
  empty_kernel<<<1, 32>>>();
  cudaDeviceSynchronize();
  const bool raw_activity = mode == "activity" || mode == "activity_api" || mode == "activity_callbacks" ||
                            mode == "activity_disabled" || mode == "finalized" || mode == "context_disabled";
  CUcontext ctx = nullptr;  // the runtime's context, through the driver entry point (no libcuda link)
  if (mode == "context_disabled") {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess || !fn)
      return 3;
    reinterpret_cast<CUresult (*)(CUcontext*)>(fn)(&ctx);
  }
  const bool subscribes = mode == "subscribed_disabled" || mode == "finalized";
  const bool uses_steptrace = mode == "steptrace" || mode == "steptrace_host" || mode == "steptrace_untraced";
  CUpti_SubscriberHandle subscriber = nullptr;
  if (raw_activity) {
    bench_buffer_bytes = 8u << 20;
    cuptiActivityRegisterCallbacks(bench_buffer_requested, bench_buffer_completed);
    if (mode == "context_disabled") {
      if (cuptiActivityEnableContext(ctx, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 3;
    } else {
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if (mode == "activity_api") {
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
    }
    if (mode == "activity_callbacks" && !subscribe_empty_launch_callbacks(subscriber)) {
      std::fprintf(stderr, "launch_cost: CUPTI refused the callback subscriber\n");
      return 3;
    }
  }
  if (subscribes) {
    cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(&bench_empty_callback), nullptr);
    cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  }
  if (uses_steptrace) {
    steptrace::Config cfg;
    cfg.log_path = "";
    cfg.summary = false;
    if (mode == "steptrace_host") cfg.cupti = steptrace::Mode::off;
    if (mode == "steptrace_untraced") cfg.trace_every = 1 << 30;  // step 0 traced, step 1 (measured) not
    steptrace::start(cfg);
  } else if (!raw_activity && !subscribes && mode != "none") {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  // After the warm-up step: switch CUPTI off in the ways being compared.
  auto switch_off = [&] {
    cudaDeviceSynchronize();
    if (mode == "activity_disabled" || mode == "finalized") {
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if (mode == "context_disabled") {
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      cuptiActivityDisableContext(ctx, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if (subscribes) cuptiEnableAllDomains(0, subscriber);
    if (mode == "finalized") {
      cuptiUnsubscribe(subscriber);
      cuptiFinalize();
    }
  };
  // warm-up step, then the measured one
  double host_ns = 0, wall_ns = 0;
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1) switch_off();
    TRACE_STEP();
    TRACE_PHASE(forward);
    const double t0 = now_ns();
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 32>>>();
    const double t1 = now_ns();
    cudaDeviceSynchronize();
    const double t2 = now_ns();
    host_ns = (t1 - t0) / launches;
    wall_ns = (t2 - t0) / launches;
  }
  if (uses_steptrace) steptrace::stop();
  if (mode == "activity" || mode == "activity_api" || mode == "activity_callbacks") cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const cudaError_t e = cudaGetLastError();
  std::printf("{\"mode\":\"%s\",\"launches\":%d,\"host_ns_per_launch\":%.1f,\"wall_ns_per_launch\":%.1f,\"cuda\":\"%s\"}\n",
              mode.c_str(), launches, host_ns, wall_ns, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
