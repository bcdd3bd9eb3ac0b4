// trace_steps - what tracing does to the steps it traces, and the markers on a stream nobody named
// (issue #61), for test_trace_steps.   trace_steps LOG TRUTH MODE
//   own_stream   a C++ loop on its own cudaStreamCreate stream, on the defaults, no set_marker_stream:
//                the markers learn the stream; at step 120 the program destroys it and makes another
//   input_wait   40 steps of a 4 ms host input wait then ~8 ms of GPU work, trace_every=5,
//                untraced_cupti=detach: the program's own clock per step, for the traced steps' time
// TRUTH: the program's own per-step times (steady_clock around each step's scope) and what it did.
#include <steptrace/steptrace.hpp>
#include <steptrace/backend/cupti/collector.hpp>  // how many detaches the run made

#include <cuda_runtime.h>
#include "../../support/cuda_check.cuh"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;

long long cycles_per_ms() {
  int khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return static_cast<long long>(khz);
}

/// `kernels` launches of `ms` / `kernels` each on `stream`.
void work(cudaStream_t stream, int sms, long long per_ms, double ms, int kernels, int* sink) {
  for (int i = 0; i < kernels; ++i) spin<<<sms, 128, 0, stream>>>(static_cast<long long>(per_ms * ms / kernels), sink);
}

bool write_truth(const char* path, const std::vector<double>& step_ms, const std::string& extra) {
  FILE* f = std::fopen(path, "w");
  if (!f) return false;
  std::fprintf(f, "{\"steps\": %zu, \"step_ms\": [", step_ms.size());
  for (std::size_t i = 0; i < step_ms.size(); ++i) std::fprintf(f, "%s%.4f", i ? ", " : "", step_ms[i]);
  std::fprintf(f, "]%s}\n", extra.c_str());
  std::fclose(f);
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: trace_steps LOG TRUTH own_stream|input_wait\n");
    return 2;
  }
  const std::string mode = argv[3];
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long per_ms = cycles_per_ms();
  int* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(int)));
  cudaStream_t own;
  CHECK_CUDA(cudaStreamCreate(&own));  // blocking, as most C++ trainers make theirs
  steptrace::Config cfg;
  cfg.log_path = argv[1];
  cfg.summary = false;
  std::vector<double> step_ms;
  std::string extra;
  if (mode == "own_stream") {
    steptrace::start(cfg);  // the defaults: nothing names the stream
    constexpr int kSteps = 240, kRecreateAt = 120;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kRecreateAt) {  // between steps: the old stream goes, a new one takes the work
        CHECK_CUDA(cudaStreamDestroy(own));
        CHECK_CUDA(cudaStreamCreate(&own));
      }
      const auto t0 = Clock::now();
      {
        TRACE_STEP();
        {
          TRACE_PHASE(forward);
          work(own, sms, per_ms, 2.0, 8, sink);
        }
        {
          TRACE_PHASE(backward);
          work(own, sms, per_ms, 1.5, 8, sink);
        }
        CHECK_CUDA(cudaStreamSynchronize(own));
      }
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    extra = ", \"recreated_at\": " + std::to_string(kRecreateAt);
  } else if (mode == "input_wait") {
    cfg.trace_every = 5;
    cfg.untraced_cupti = steptrace::UntracedCupti::detach;
    steptrace::start(cfg);
    constexpr int kSteps = 40;
    for (int step = 0; step < kSteps; ++step) {
      const auto t0 = Clock::now();
      {
        TRACE_STEP();
        {
          TRACE_PHASE(input);
          std::this_thread::sleep_for(std::chrono::milliseconds(4));  // the loader's wait
        }
        {
          TRACE_PHASE(forward);
          work(own, sms, per_ms, 4.0, 10, sink);
        }
        {
          TRACE_PHASE(backward);
          work(own, sms, per_ms, 4.0, 10, sink);
        }
        CHECK_CUDA(cudaStreamSynchronize(own));
      }
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    extra = ", \"trace_every\": 5, \"kernels_per_step\": 20";
  } else {
    std::fprintf(stderr, "trace_steps: unknown mode %s\n", mode.c_str());
    return 2;
  }
  steptrace::stop();  // right after the last step: the last traced step's records must all be in
  // How often CUPTI was detached (between traced steps, untraced_cupti=detach): the attach ahead is
  // measured only if the traced steps had one.
  extra += ", \"detaches\": " + std::to_string(steptrace::backend::cupti::Collector::instance().detaches());
  CHECK_CUDA(cudaStreamDestroy(own));
  CHECK_CUDA(cudaFree(sink));
  return write_truth(argv[2], step_ms, extra) ? 0 : 1;
}
