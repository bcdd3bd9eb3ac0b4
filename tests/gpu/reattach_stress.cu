// reattach_stress LOG TRUTH [CYCLES] - steptrace attaching and detaching CUPTI CYCLES times (trace_every=4,
// untraced_cupti=detach: one attach and one detach per four steps of ~6 ms) while the program creates and
// destroys NCCL communicators between steps and inside them, for test_trace_steps (issue #61, item 4: the re-attach hazards
// PyTorch met - background flushes overlapping NCCL's set-up, kernel timestamps wrong after a
// re-registration). Each step's kernel is bracketed by CUDA events on its stream: TRUTH holds the
// events' time per step, to check each traced line's kernel time against it.
#include <steptrace/steptrace.hpp>
#include <steptrace/backend/cupti/collector.hpp>  // how many detaches the run made

#include <cuda_runtime.h>
#include <nccl.h>
#include "../../support/cuda_check.cuh"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {
bool comm_cycle(int step, int* comms) {
  ncclComm_t comm;
  int device = 0;
  if (ncclCommInitAll(&comm, 1, &device) != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitAll failed at step %d\n", step);
    return false;
  }
  if (ncclCommDestroy(comm) != ncclSuccess) return false;
  ++*comms;
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: reattach_stress LOG TRUTH [CYCLES]\n");
    return 2;
  }
  const int cycles = argc == 4 ? std::atoi(argv[3]) : 1000;
  constexpr int kCommEvery = 100;  // steps between two communicators made and destroyed
  int sms = 0, khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  int* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(int)));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t before, after;
  CHECK_CUDA(cudaEventCreate(&before));
  CHECK_CUDA(cudaEventCreate(&after));
  steptrace::set_marker_stream(stream);
  steptrace::Config cfg;
  cfg.log_path = argv[1];
  cfg.summary = false;
  cfg.trace_every = 4;
  cfg.untraced_cupti = steptrace::UntracedCupti::detach;
  steptrace::start(cfg);
  std::vector<float> event_ms;
  int comms = 0;
  for (int step = 0; step < 4 * cycles; ++step) {
    // A communicator made and destroyed between two steps, and (in a step of the other parity, so in
    // both traced and untraced ones) inside a step after its kernel.
    if (step % kCommEvery == kCommEvery - 1 && !comm_cycle(step, &comms)) return 1;
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      CHECK_CUDA(cudaEventRecord(before, stream));
      spin<<<sms, 128, 0, stream>>>(static_cast<long long>(khz) / 10, sink);  // ~0.1 ms
      CHECK_CUDA(cudaEventRecord(after, stream));
      CHECK_CUDA(cudaEventSynchronize(after));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, before, after));
      event_ms.push_back(ms);
    }
    // The host's own wait (an input): a traced step's line is out (records flushed at most every 20 ms)
    // within the three untraced steps after it, so CUPTI detaches in them and attaches again at the end
    // of the third, once per cycle.
    std::this_thread::sleep_for(std::chrono::milliseconds(6));
    if (step % kCommEvery == kCommEvery / 2 && !comm_cycle(step, &comms)) return 1;
  }
  steptrace::stop();
  const uint64_t detaches = steptrace::backend::cupti::Collector::instance().detaches();
  FILE* truth = std::fopen(argv[2], "w");
  if (!truth) return 1;
  // The spin's least time: its cycles at the device's highest clock (cudaDevAttrClockRate, kHz).
  const double spin_ms = static_cast<double>(static_cast<long long>(khz) / 10) / khz;
  std::fprintf(truth, "{\"steps\": %zu, \"comms\": %d, \"detaches\": %llu, \"spin_ms\": %.6f, \"event_ms\": [",
               event_ms.size(), comms, static_cast<unsigned long long>(detaches), spin_ms);
  for (std::size_t i = 0; i < event_ms.size(); ++i) std::fprintf(truth, "%s%.5f", i ? ", " : "", event_ms[i]);
  std::fprintf(truth, "]}\n");
  std::fclose(truth);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
