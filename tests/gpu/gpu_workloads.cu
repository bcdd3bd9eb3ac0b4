// gpu_workloads - ground-truth GPU work under steptrace, one scenario per step, for test_gpu_attribution.
// Writes the steptrace log and a small JSON of what the program knows independently (SM count,
// cudaEvent timings).   gpu_workloads LOG TRUTH
//                       gpu_workloads LOG TRUTH sampled    (trace_every = 2, no synchronization between steps)
//                       gpu_workloads LOG TRUTH detached   (trace_every = 3, untraced_cupti = detach)
//                       gpu_workloads LOG TRUTH budget_counters   (the defaults on a GPU-bound step)
//                       gpu_workloads LOG TRUTH budget_detach  (the defaults on a launch-bound step)
//                       gpu_workloads LOG TRUTH between  (evaluation between steps and after the last)
//                       gpu_workloads LOG TRUTH switch_keep|switch_detach  (a second thread launching
//                                                    across every switch of trace_every = 5)
//                       gpu_workloads LOG TRUTH markers_named  (stream markers on a stream the program names)
//                       gpu_workloads LOG TRUTH markers_capture  (a CUDA graph captured inside steps while
//                                                    the markers are armed on the legacy stream)
#include <steptrace/steptrace.hpp>
#include <steptrace/backend/cupti/collector.hpp>  // how many detaches the run made

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include "../../support/cuda_check.cuh"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>



__global__ void tiny(float* x) {
  if (x) x[threadIdx.x] += 1.f;
}

// Sampled attribution: 8 steps, every other one traced. Nothing synchronizes between steps, so each
// traced step's kernels are still queued or running when the next step switches CUPTI off.
int sampled(const char* log, const char* truth_path, int sms, long long ms, int* sink, float* buf) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 2;
  steptrace::start(cfg);
  for (int step = 0; step < 8; ++step) {
    TRACE_STEP();
    TRACE_PHASE_NAMED("work");
    spin<<<1, 64>>>(3 * ms, sink);
    for (int i = 0; i < 4; ++i) tiny<<<1, 32>>>(buf);
  }
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"kernels_per_step\": 5}\n", sms);
  std::fclose(truth);
  return 0;
}

// Sampled attribution with CUPTI detached between traced steps (untraced_cupti=detach): 12 steps,
// every third traced. The untraced steps wait 40 ms before launching, so the background thread has the
// traced step's line out and CUPTI detaches at their launches; each traced step then attaches CUPTI
// again, which numbers correlation ids from 1 again. A driver-API launch and a memset (a runtime call
// around a driver call), each in its own phase.
int detached(const char* log, const char* truth_path, int sms, long long ms, int* sink, float* buf) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 3;
  cfg.untraced_cupti = steptrace::UntracedCupti::detach;
  cudaFunction_t tiny_fn;
  CHECK_CUDA(cudaGetFuncBySymbol(&tiny_fn, reinterpret_cast<const void*>(&tiny)));
  steptrace::start(cfg);
  for (int step = 0; step < 12; ++step) {
    TRACE_STEP();
    if (step % 3 != 0) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    {
      TRACE_PHASE_NAMED("work");
      spin<<<1, 64>>>(3 * ms, sink);
      for (int i = 0; i < 4; ++i) tiny<<<1, 32>>>(buf);
    }
    {
      TRACE_PHASE_NAMED("driver");  // a driver-API launch, no runtime call around it
      void* args[] = {&buf};
      if (cuLaunchKernel(reinterpret_cast<CUfunction>(tiny_fn), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS)
        return 1;
    }
    TRACE_PHASE_NAMED("clear");
    CHECK_CUDA(cudaMemsetAsync(buf, 0, 1024 * sizeof(float)));
  }
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"kernels_per_step\": 5, \"detaches\": %llu}\n", sms,
               static_cast<unsigned long long>(steptrace::backend::cupti::Collector::instance().detaches()));
  std::fclose(truth);
  return 0;
}

// The defaults (trace_every 0, overhead_budget 0.5 %, untraced_cupti auto) on a launch-bound step:
// 3 000 one-block kernels in two phases, nothing synchronized. Kept attached, CUPTI's callbacks alone
// would cost several % of each step: the budget detaches CUPTI between traced steps.
int budget_detach(const char* log, const char* truth_path, int sms, float* buf) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  steptrace::start(cfg);
  constexpr int kSteps = 240, kPerPhase = 1500;
  for (int step = 0; step < kSteps; ++step) {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      for (int i = 0; i < kPerPhase; ++i) tiny<<<1, 32>>>(buf);
    }
    TRACE_PHASE(backward);
    for (int i = 0; i < kPerPhase; ++i) tiny<<<1, 32>>>(buf);
  }
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"kernels_per_phase\": %d, \"detaches\": %llu}\n", sms, kPerPhase,
               static_cast<unsigned long long>(steptrace::backend::cupti::Collector::instance().detaches()));
  std::fclose(truth);
  return 0;
}

// The defaults on a GPU-bound step: a 3 ms full-grid kernel in forward, a 2 ms one in backward. The
// budget traces one step in N and runs the hardware counters around the traced steps only. 480 steps at
// least, and on until two traced steps have begun and ended from step 80 on (the test wants sampling
// paused and resumed there): how many steps that takes is the budget's, i.e. the card's and the
// moment's - a trace measured at ~1 % of this 5 ms step asked for 1 in ~60 (session 65), with the
// markers' share of the budget 1 in ~1 900 (session 74, H200), where 480 steps held one. A traced step
// after an untraced one counts three boundaries (tracing_boundaries_so_far): the end of the step before
// it, which announces it (and attaches CUPTI ahead where detached), the switch into it and the switch
// out. At most 480 + 4 x the longest interval the budget picks (a block's trace may fall at its start, the
// next block's at its end: two traces after step 80 within 4 intervals).
int budget_counters(const char* log, const char* truth_path, int sms, long long ms, int* sink) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  steptrace::start(cfg);
  constexpr int kMinSteps = 480, kMaxSteps = kMinSteps + 4 * 4000;
  uint64_t boundaries_at_80 = 0;
  int steps = 0;
  for (; steps < kMaxSteps; ++steps) {
    if (steps == 80) boundaries_at_80 = steptrace::details::tracing_boundaries_so_far();
    if (steps >= kMinSteps && steptrace::details::tracing_boundaries_so_far() - boundaries_at_80 >= 6) break;
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      spin<<<sms, 128>>>(3 * ms, sink);
    }
    TRACE_PHASE(backward);
    spin<<<sms, 128>>>(2 * ms, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"steps\": %d}\n", sms, steps);
  std::fclose(truth);
  return 0;
}

// Work outside steps, as a trainer with evaluation does it: 6 steps of a 4 ms full-grid forward, a
// 1 ms optimizer phase and a 4 ms backward, every step traced; after step 2 an evaluation of 3 kernels
// (2 ms each) and after the last step a validation of 5, both outside every TRACE_STEP. Each step
// waits for its GPU work, as a loop that reads its loss does.
int between(const char* log, const char* truth_path, int sms, long long ms, int* sink) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 1;
  steptrace::start(cfg);
  constexpr int kSteps = 6;
  for (int step = 0; step < kSteps; ++step) {
    {
      TRACE_STEP();
      {
        TRACE_PHASE(forward);
        spin<<<sms, 128>>>(4 * ms, sink);
      }
      {
        TRACE_PHASE(optimizer);  // a short phase between two long ones
        spin<<<sms, 128>>>(ms, sink);
      }
      {
        TRACE_PHASE(backward);
        spin<<<sms, 128>>>(4 * ms, sink);
      }
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    if (step == 2) {
      TRACE_PHASE_NAMED("eval");
      for (int i = 0; i < 3; ++i) spin<<<sms, 128>>>(2 * ms, sink);
      CHECK_CUDA(cudaDeviceSynchronize());
    }
  }
  for (int i = 0; i < 5; ++i) spin<<<sms, 128>>>(2 * ms, sink);  // validation after the last step
  CHECK_CUDA(cudaDeviceSynchronize());
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"steps\": %d, \"eval_kernels\": 3, \"validation_kernels\": 5}\n", sms, kSteps);
  std::fclose(truth);
  return 0;
}

// Trace switches under a second launching thread, as autograd's thread launches backward while the step
// thread goes on: trace_every = 5 with CUPTI kept attached (`detach` false) or detached between traced
// steps. The helper launches 5 kernels at a time inside its own `backward` phase, without pause, across
// every step boundary and so across every switch into and out of tracing. The step thread launches 5
// kernels in `forward` per step (4 tiny, 1 one-block kernel of ~1 ms) and waits for them.
int switches(const char* log, const char* truth_path, int sms, long long ms, int* sink, float* buf, bool detach) {
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 5;
  cfg.untraced_cupti = detach ? steptrace::UntracedCupti::detach : steptrace::UntracedCupti::keep;
  cudaStream_t own, help;
  CHECK_CUDA(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&help, cudaStreamNonBlocking));
  float* hbuf = nullptr;
  CHECK_CUDA(cudaMalloc(&hbuf, 64 * sizeof(float)));
  steptrace::start(cfg);
  std::atomic<bool> done{false};
  std::atomic<long long> helper_kernels{0};
  std::thread helper([&] {
    const auto backward = steptrace::register_phase("backward");
    while (!done.load(std::memory_order_relaxed)) {
      {
        steptrace::PhaseScope phase(backward);
        for (int i = 0; i < 5; ++i) tiny<<<1, 32, 0, help>>>(hbuf);
      }
      helper_kernels += 5;
      CHECK_CUDA(cudaStreamSynchronize(help));
    }
  });
  // The first step too must meet the helper launching (on a loaded machine its thread may start late).
  while (helper_kernels.load() == 0) std::this_thread::yield();
  constexpr int kSteps = 40;
  for (int step = 0; step < kSteps; ++step) {
    TRACE_STEP();
    {
      // The wait after the phase: its markers' span is the spin's only on the stream it ran on.
      TRACE_PHASE(forward);
      for (int i = 0; i < 4; ++i) tiny<<<1, 32, 0, own>>>(buf);
      spin<<<1, 64, 0, own>>>(ms, sink);
    }
    CHECK_CUDA(cudaStreamSynchronize(own));
  }
  done = true;
  helper.join();
  CHECK_CUDA(cudaDeviceSynchronize());
  steptrace::stop();
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"steps\": %d, \"forward_kernels\": 5, \"helper_kernels\": %lld}\n", sms,
               kSteps, helper_kernels.load());
  std::fclose(truth);
  return 0;
}

// Stream markers on a stream the program names (set_marker_stream): 40 GPU-bound steps of a 3 ms
// forward and a 2 ms backward on a non-blocking stream, one traced in 4, each step waiting for its work.
int markers_named(const char* log, const char* truth_path, int sms, long long ms, int* sink) {
  cudaStream_t own;
  CHECK_CUDA(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  steptrace::set_marker_stream(own);
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 4;
  steptrace::start(cfg);
  constexpr int kSteps = 40;
  for (int step = 0; step < kSteps; ++step) {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      spin<<<sms, 128, 0, own>>>(3 * ms, sink);
    }
    {
      TRACE_PHASE(backward);
      spin<<<sms, 128, 0, own>>>(2 * ms, sink);
    }
    CHECK_CUDA(cudaStreamSynchronize(own));
  }
  steptrace::stop();
  CHECK_CUDA(cudaStreamDestroy(own));
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"steps\": %d}\n", sms, kSteps);
  std::fclose(truth);
  return 0;
}

// A CUDA graph captured inside steps (global mode, on a blocking stream, with a top-level phase scope
// opened and closed during the capture) while the stream markers are armed on the legacy stream: the
// captures must succeed and replay; the steps that held a capture have no markers, and say why.
int markers_capture(const char* log, const char* truth_path, int sms, long long ms, int* sink) {
  cudaStream_t cap;
  CHECK_CUDA(cudaStreamCreate(&cap));  // blocking: the legacy stream waits for it, and cannot be used while it captures
  steptrace::set_marker_stream(nullptr);  // the legacy stream, named: marked from the first step
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 4;
  steptrace::start(cfg);
  constexpr int kSteps = 24;
  int captures = 0;
  for (int step = 0; step < kSteps; ++step) {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      spin<<<sms, 128>>>(2 * ms, sink);
    }
    if (step % 6 == 5) {  // never a traced step (trace_every 4 from step 0): the markers are armed by then
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CHECK_CUDA(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
      {
        TRACE_PHASE(backward);  // marked at its begin and end if the markers did not check for the capture
        for (int i = 0; i < 4; ++i) spin<<<sms, 128, 0, cap>>>(ms / 4, sink);
      }
      CHECK_CUDA(cudaStreamEndCapture(cap, &graph));  // fails (invalidated) if the legacy stream was used
      CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      CHECK_CUDA(cudaGraphLaunch(exec, cap));
      CHECK_CUDA(cudaStreamSynchronize(cap));
      CHECK_CUDA(cudaGraphExecDestroy(exec));
      CHECK_CUDA(cudaGraphDestroy(graph));
      ++captures;
    } else {
      TRACE_PHASE(backward);
      spin<<<sms, 128>>>(ms, sink);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  steptrace::stop();
  CHECK_CUDA(cudaStreamDestroy(cap));
  FILE* truth = std::fopen(truth_path, "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"steps\": %d, \"captures\": %d}\n", sms, kSteps, captures);
  std::fclose(truth);
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc == 4 ? argv[3] : "";
  const bool sampled_mode = mode == "sampled", detached_mode = mode == "detached", budget_mode = mode == "budget_detach";
  const bool counters_mode = mode == "budget_counters", between_mode = mode == "between";
  const bool switch_mode = mode == "switch_keep" || mode == "switch_detach";
  const bool markers_mode = mode == "markers_named" || mode == "markers_capture";
  if (argc != 3 && !sampled_mode && !detached_mode && !budget_mode && !counters_mode && !between_mode && !switch_mode &&
      !markers_mode) {
    std::fprintf(stderr,
                 "usage: gpu_workloads LOG TRUTH [sampled|detached|budget_detach|budget_counters|between|"
                 "switch_keep|switch_detach|markers_named|markers_capture]\n");
    return 2;
  }
  const TestDevice d = open_test_device();
  const int sms = d.sms;
  const long long ms = d.cycles_per_ms;  // cycles per millisecond (at base clock)
  int* sink = d.sink;
  float* buf = d.buf;
  if (sampled_mode) return sampled(argv[1], argv[2], sms, ms, sink, buf);
  if (detached_mode) return detached(argv[1], argv[2], sms, ms, sink, buf);
  if (budget_mode) return budget_detach(argv[1], argv[2], sms, buf);
  if (counters_mode) return budget_counters(argv[1], argv[2], sms, ms, sink);
  if (between_mode) return between(argv[1], argv[2], sms, ms, sink);
  if (switch_mode) return switches(argv[1], argv[2], sms, ms, sink, buf, mode == "switch_detach");
  if (mode == "markers_named") return markers_named(argv[1], argv[2], sms, ms, sink);
  if (mode == "markers_capture") return markers_capture(argv[1], argv[2], sms, ms, sink);
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  const int n = 2048;
  float *A, *B, *C;
  CHECK_CUDA(cudaMalloc(&A, sizeof(float) * n * n));
  CHECK_CUDA(cudaMalloc(&B, sizeof(float) * n * n));
  CHECK_CUDA(cudaMalloc(&C, sizeof(float) * n * n));
  CHECK_CUDA(cudaMemset(A, 0, sizeof(float) * n * n));  // before start(): not attributed to any step
  CHECK_CUDA(cudaMemset(B, 0, sizeof(float) * n * n));
  const size_t copy_bytes = 64u << 20;
  void *host, *dev;
  CHECK_CUDA(cudaMallocHost(&host, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dev, copy_bytes));
  // A graph of 6 kernels, captured before start().
  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  CHECK_CUDA(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 6; ++i) spin<<<sms, 128, 0, s1>>>(ms / 10, sink);
  CHECK_CUDA(cudaStreamEndCapture(s1, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&graph_exec, graph, 0));
  cudaEvent_t ev0, ev1;
  CHECK_CUDA(cudaEventCreate(&ev0));
  CHECK_CUDA(cudaEventCreate(&ev1));
  CHECK_CUDA(cudaDeviceSynchronize());

  steptrace::Config cfg;
  cfg.log_path = argv[1];
  cfg.summary = false;
  cfg.trace_every = 1;  // every step against its ground truth (the default lets overhead_budget sample)
  steptrace::start(cfg);
  {  // step 0: one block for ~2 ms
    TRACE_STEP();
    TRACE_PHASE_NAMED("one_block");
    spin<<<1, 128>>>(2 * ms, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 1: a full grid for ~3 ms (long enough to hold whole 1 ms counter samples)
    TRACE_STEP();
    TRACE_PHASE_NAMED("full_grid");
    spin<<<sms * 8, 256>>>(3 * ms, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 2: known kernel counts in two phases
    TRACE_STEP();
    {
      TRACE_PHASE_NAMED("three");
      for (int i = 0; i < 3; ++i) tiny<<<1, 32>>>(buf);
    }
    {
      TRACE_PHASE_NAMED("five");
      for (int i = 0; i < 5; ++i) tiny<<<1, 32>>>(buf);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 3: 64 MiB host-to-device in h2d
    TRACE_STEP();
    TRACE_PHASE(h2d);
    CHECK_CUDA(cudaMemcpyAsync(dev, host, copy_bytes, cudaMemcpyHostToDevice, s1));
    CHECK_CUDA(cudaMemsetAsync(dev, 0, 1 << 20, s1));
    CHECK_CUDA(cudaStreamSynchronize(s1));
  }
  {  // step 4: cuBLAS GEMMs in forward
    TRACE_STEP();
    TRACE_PHASE(forward);
    const float one = 1.f, zero = 0.f;
    for (int i = 0; i < 4; ++i)
      if (cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n) != CUBLAS_STATUS_SUCCESS)
        return 1;
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 5: a CUDA Graph replay
    TRACE_STEP();
    TRACE_PHASE_NAMED("graph");
    CHECK_CUDA(cudaGraphLaunch(graph_exec, s1));
    CHECK_CUDA(cudaStreamSynchronize(s1));
  }
  {  // step 6: two streams overlapping, ~3 ms each, half the SMs each
    TRACE_STEP();
    TRACE_PHASE_NAMED("streams");
    spin<<<sms / 2, 128, 0, s1>>>(3 * ms, sink);
    spin<<<sms / 2, 128, 0, s2>>>(3 * ms, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  float event_ms = 0;
  {  // step 7: GPU time against cudaEvent timing of the same work
    TRACE_STEP();
    TRACE_PHASE_NAMED("timed");
    CHECK_CUDA(cudaEventRecord(ev0, s1));
    for (int i = 0; i < 20; ++i) spin<<<sms, 128, 0, s1>>>(ms / 2, sink);
    CHECK_CUDA(cudaEventRecord(ev1, s1));
    CHECK_CUDA(cudaEventSynchronize(ev1));
    CHECK_CUDA(cudaEventElapsedTime(&event_ms, ev0, ev1));
  }
  {  // step 8: cudaLaunchKernelEx
    TRACE_STEP();
    TRACE_PHASE_NAMED("launch_ex");
    cudaLaunchConfig_t lc{};
    lc.gridDim = dim3(2);
    lc.blockDim = dim3(64);
    CHECK_CUDA(cudaLaunchKernelEx(&lc, spin, ms / 10, sink));
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 9: a driver-API launch (as cuBLAS/NCCL do), and a kernel outside every phase
    TRACE_STEP();
    {
      TRACE_PHASE_NAMED("driver");
      cudaFunction_t f;
      CHECK_CUDA(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(&tiny)));
      void* args[] = {&buf};
      if (cuLaunchKernel(reinterpret_cast<CUfunction>(f), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS)
        return 1;
    }
    tiny<<<1, 32>>>(buf);  // unphased
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  {  // step 10: two threads launching in their own phases at once
    TRACE_STEP();
    auto worker = [&](const char* which, int count, cudaStream_t s) {
      steptrace::PhaseScope phase(steptrace::register_phase(which));
      for (int i = 0; i < count; ++i) spin<<<4, 64, 0, s>>>(ms / 20, sink);
      CHECK_CUDA(cudaStreamSynchronize(s));
    };
    std::thread a(worker, "thread_a", 3, s1), b(worker, "thread_b", 2, s2);
    a.join();
    b.join();
  }
  {  // step 11: a helper thread with no phase of its own launches while the step thread waits in "parent"
    TRACE_STEP();
    TRACE_PHASE_NAMED("parent");
    std::thread helper([&] {
      for (int i = 0; i < 4; ++i) spin<<<4, 64, 0, s1>>>(ms / 20, sink);
      CHECK_CUDA(cudaStreamSynchronize(s1));
    });
    helper.join();
  }
  steptrace::stop();

  FILE* truth = std::fopen(argv[2], "w");
  if (!truth) return 1;
  std::fprintf(truth, "{\"sm_count\": %d, \"timed_event_ms\": %.6f, \"copy_bytes\": %zu}\n", sms, event_ms, copy_bytes);
  std::fclose(truth);
  cublasDestroy(blas);
  return 0;
}
