// real_shapes - training-shaped GPU work under steptrace, for test_gpu_attribution: phases of hundreds
// of short back-to-back kernels, and a CUDA graph under sampled attribution.
//   real_shapes LOG TRUTH phases         18 steps: 0-5 a `gemm` phase (400 cuBLAS bf16 GEMMs) then an
//                                        `elementwise` phase (400 axpy kernels), back to back; 6-11 the
//                                        GEMMs alone; 12-17 the element-wise kernels alone. Pipelined
//                                        like a training loop: the host runs at most one step ahead of
//                                        the GPU, which never waits between steps
//   real_shapes LOG TRUTH graph_sampled  29 steps, trace_every = 4, untraced_cupti = keep: a forward
//                                        kernel, then a graph of 50 tiny kernels in `optimizer`
//   real_shapes LOG TRUTH graph_sampled_detach  the same, 41 steps, trace_every = 5, untraced_cupti =
//                                        detach, the host never waiting for the GPU
// Writes the steptrace log and a small JSON of what the program knows independently.
#include <steptrace/steptrace.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "../../support/cuda_check.cuh"

#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kGemms = 400, kElementwise = 400;
constexpr int kGraphKernels = 50;

__global__ void axpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}

__global__ void tiny(float* x) {
  if (x) x[threadIdx.x] += 1.f;
}

bool write_truth(const char* path, const std::string& json) {
  FILE* f = std::fopen(path, "w");
  if (!f) return false;
  std::fputs(json.c_str(), f);
  std::fclose(f);
  return true;
}

int phases(const char* log, const char* truth_path, int sms) {
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  const int n = 3072;              // one GEMM ~ 58 GFLOP: under 0.1 ms on an H100
  const int len = 16 << 20;        // one axpy reads 128 MiB and writes 64 MiB: tens of microseconds
  __nv_bfloat16 *A, *B, *C;
  float *x, *y;
  CHECK_CUDA(cudaMalloc(&A, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMalloc(&B, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMalloc(&C, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMalloc(&x, sizeof(float) * len));
  CHECK_CUDA(cudaMalloc(&y, sizeof(float) * len));
  CHECK_CUDA(cudaMemset(A, 0, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMemset(B, 0, sizeof(__nv_bfloat16) * n * n));
  CHECK_CUDA(cudaMemset(x, 0, sizeof(float) * len));
  CHECK_CUDA(cudaMemset(y, 0, sizeof(float) * len));
  const float one = 1.f, zero = 0.f;
  auto gemms = [&] {
    for (int i = 0; i < kGemms; ++i)
      if (cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                       CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        std::exit(1);
  };
  auto elementwise = [&] {
    for (int i = 0; i < kElementwise; ++i) axpy<<<sms * 4, 256>>>(len, 0.5f, x, y);
  };
  gemms();  // warm-up before start(): cuBLAS loads its kernels
  elementwise();
  CHECK_CUDA(cudaDeviceSynchronize());

  cudaEvent_t done[2];
  for (auto& e : done) CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 1;  // every step's phases checked (the default lets overhead_budget sample)
  steptrace::start(cfg);
  for (int step = 0; step < 18; ++step) {
    TRACE_STEP();
    if (step >= 2) CHECK_CUDA(cudaEventSynchronize(done[step % 2]));  // step - 2 has finished
    if (step < 12) {
      TRACE_PHASE_NAMED("gemm");
      gemms();
    }
    if (step < 6 || step >= 12) {
      TRACE_PHASE_NAMED("elementwise");
      elementwise();
    }
    CHECK_CUDA(cudaEventRecord(done[step % 2]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  for (auto& e : done) cudaEventDestroy(e);
  steptrace::stop();
  cublasDestroy(blas);
  char truth[256];
  std::snprintf(truth, sizeof truth, "{\"sm_count\": %d, \"gemms\": %d, \"elementwise\": %d}\n", sms, kGemms,
                kElementwise);
  return write_truth(truth_path, truth) ? 0 : 1;
}

int graph_sampled(const char* log, const char* truth_path, int sms, long long ms, int* sink, float* buf, bool detach) {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kGraphKernels; ++i) tiny<<<1, 32, 0, s>>>(buf);
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  // keep: 29 steps, every 4th traced, the host waits for each step's graph. detach: 41 steps, every
  // 5th traced, the host never waits (the GPU runs behind it, so an untraced replay can come before
  // CUPTI detaches) - the loop whose first traced steps after a re-attach published 680 ms.
  const int steps = detach ? 41 : 29, every = detach ? 5 : 4;
  std::vector<cudaEvent_t> ev(2 * steps);
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm-up
  CHECK_CUDA(cudaStreamSynchronize(s));

  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = every;
  cfg.untraced_cupti = detach ? steptrace::UntracedCupti::detach : steptrace::UntracedCupti::keep;
  steptrace::start(cfg);
  std::vector<float> graph_ms;
  for (int step = 0; step < steps; ++step) {  // the last step is traced: its graph is read out at stop()
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      spin<<<sms, 128, 0, s>>>(ms / 2, sink);
    }
    {
      TRACE_PHASE(optimizer);
      CHECK_CUDA(cudaEventRecord(ev[2 * step], s));
      CHECK_CUDA(cudaGraphLaunch(exec, s));
      CHECK_CUDA(cudaEventRecord(ev[2 * step + 1], s));
    }
    if (!detach) CHECK_CUDA(cudaEventSynchronize(ev[2 * step + 1]));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  steptrace::stop();
  for (int step = 0; step < steps; ++step) {
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, ev[2 * step], ev[2 * step + 1]));
    graph_ms.push_back(t);
  }
  std::string truth = "{\"sm_count\": " + std::to_string(sms) + ", \"graph_kernels\": " + std::to_string(kGraphKernels) +
                      ", \"steps\": " + std::to_string(steps) + ", \"every\": " + std::to_string(every) +
                      ", \"graph_event_ms\": [";
  for (std::size_t i = 0; i < graph_ms.size(); ++i) truth += (i ? ", " : "") + std::to_string(graph_ms[i]);
  truth += "]}\n";
  return write_truth(truth_path, truth) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 4 ? argv[3] : "";
  if (mode != "phases" && mode != "graph_sampled" && mode != "graph_sampled_detach") {
    std::fprintf(stderr, "usage: real_shapes LOG TRUTH phases|graph_sampled|graph_sampled_detach\n");
    return 2;
  }
  const TestDevice d = open_test_device();
  if (mode == "phases") return phases(argv[1], argv[2], d.sms);
  return graph_sampled(argv[1], argv[2], d.sms, d.cycles_per_ms, d.sink, d.buf, mode == "graph_sampled_detach");
}
