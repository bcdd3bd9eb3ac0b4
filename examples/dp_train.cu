// dp_train - data-parallel training on every GPU of one host, one process per GPU, gradients
// all-reduced with NCCL, instrumented with steptrace (one log per rank) and the cross-rank view.
//
//   dp_train [--gpus N] [--steps S] [--log PATH{rank}] [--cross-rank-every K] [--no-cross-rank]
//            [--slow-rank R --slow-phase input|h2d|forward|backward|optimizer --slow-pct P]
//            [--hang-rank R --hang-step S --hang-s T --hang-where input|gpu]
//
// --slow-rank makes one rank slower in one phase: from step 10 on, it spends P % of the measured
// median step time (steps 3..9) more in that phase (a host-side delay, like a slow data loader).
// Rank 0's lines then name that rank and phase in "cross_rank". Prints each rank's steady step time.
// --hang-rank makes one rank stop for T seconds at step S: `input` sits in the loader (the others
// wait in the all-reduce), `gpu` launches a kernel that runs T seconds in `forward`. The stall
// watchdog (stall_after_s, STEPTRACE_STALL_AFTER_S) then names where each rank is.
//
// The parent process only forks: it never touches CUDA (a CUDA context does not survive fork).
// Rank 0 makes the NCCL unique id and hands it to the others through pipes.
#include <steptrace/nccl.hpp>
#include <steptrace/steptrace.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CHECK(call, what)                                              \
  do {                                                                 \
    if (!(call)) {                                                     \
      std::fprintf(stderr, "dp_train rank %d: %s failed\n", rank, what); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

namespace {

struct Options {
  int gpus = 2, steps = 60, cross_every = 5;
  bool cross_rank = true;
  int slow_rank = -1;
  std::string slow_phase = "input";
  double slow_pct = 0;
  int hang_rank = -1, hang_step = 20;
  double hang_s = 0;
  std::string hang_where = "input";
  std::string log = "dp_train-{rank}.jsonl";
  int dim = 4096, batch = 8192, layers = 4;
};

const char kHelp[] =
    "dp_train - data-parallel training on the GPUs of one host (one process per GPU, NCCL all-reduce),\n"
    "instrumented with steptrace: one log per rank and the cross-rank view on rank 0.\n"
    "usage: dp_train [options]\n"
    "  --gpus N              ranks, one GPU each (default 2)\n"
    "  --steps S             training steps (default 60)\n"
    "  --log PATH            each rank's JSON lines; {rank} is replaced (default dp_train-{rank}.jsonl)\n"
    "  --cross-rank-every K  steps between cross-rank gathers (default 5)\n"
    "  --no-cross-rank       no cross-rank view (no enable_cross_rank call)\n"
    "  --slow-rank R         make rank R slower from step 10 on (needs --slow-pct; where: --slow-phase)\n"
    "  --slow-phase PHASE    where the slow rank loses time: input|h2d|forward|backward|optimizer (default input)\n"
    "  --slow-pct P          how much: P % of the median step time of steps 3..9, spent in that phase\n"
    "  --hang-rank R         make rank R stop at step --hang-step for --hang-s seconds (the stall watchdog)\n"
    "  --hang-step S         the step it stops at (default 20)\n"
    "  --hang-s T            seconds it stops for (default 0: no hang)\n"
    "  --hang-where W        input (sleeps in the loader) or gpu (a kernel running T s in forward); default input\n"
    "  --dim D               the layers' width (default 4096)\n"
    "  --batch B             samples per rank per step (default 8192)\n"
    "  -h, --help            this text\n"
    "Every STEPTRACE_* variable applies (docs/configuration.md).\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dp_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--gpus") o.gpus = std::stoi(next());
    else if (a == "--steps") o.steps = std::stoi(next());
    else if (a == "--log") o.log = next();
    else if (a == "--cross-rank-every") o.cross_every = std::stoi(next());
    else if (a == "--no-cross-rank") o.cross_rank = false;
    else if (a == "--slow-rank") o.slow_rank = std::stoi(next());
    else if (a == "--slow-phase") o.slow_phase = next();
    else if (a == "--slow-pct") o.slow_pct = std::stod(next());
    else if (a == "--hang-rank") o.hang_rank = std::stoi(next());
    else if (a == "--hang-step") o.hang_step = std::stoi(next());
    else if (a == "--hang-s") o.hang_s = std::stod(next());
    else if (a == "--hang-where") o.hang_where = next();
    else if (a == "--dim") o.dim = std::stoi(next());
    else if (a == "--batch") o.batch = std::stoi(next());
    else {
      std::fprintf(stderr, "dp_train: unknown argument %s\n%s", a.c_str(), kHelp);
      std::exit(2);
    }
  }
  return o;
}

__global__ void sgd(__nv_bfloat16* w, const __nv_bfloat16* g, size_t n, float lr, float inv_world) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w[i] = __float2bfloat16(__bfloat162float(w[i]) - lr * inv_world * __bfloat162float(g[i]));
}
/// Runs `ns` nanoseconds of GPU time (the global timer), on one thread: a kernel that seems stuck.
__global__ void spin(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
__global__ void fill(__nv_bfloat16* x, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(scale * (float((i * 2654435761u) % 1000) / 1000.f - 0.5f));
}

int run_rank(const Options& o, int rank, int read_fd, const std::vector<int>& write_fds) {
  CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    for (int fd : write_fds) CHECK(write(fd, &id, sizeof id) == sizeof id, "write(id)");
  } else {
    CHECK(read(read_fd, &id, sizeof id) == sizeof id, "read(id)");
  }

  steptrace::Config cfg;
  cfg.log_path = o.log;
  cfg.rank = rank;
  cfg.local_rank = rank;
  cfg.world_size = o.gpus;
  cfg.summary = rank == 0;
  cfg.tokens_per_step = o.batch;
  steptrace::start(cfg);

  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, o.gpus, id, rank) == ncclSuccess, "ncclCommInitRank");
  if (o.cross_rank) steptrace::enable_cross_rank(comm, o.cross_every);

  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  // The loop's work runs on its own stream: markers there give every step its GPU evidence, the nccl
  // phase's span among it (the wait the cross-rank view compares; docs/gpu.md, "Stream markers").
  steptrace::set_marker_stream(stream);
  cublasHandle_t blas;
  CHECK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  cublasSetStream(blas, stream);
  const size_t d = size_t(o.dim), b = size_t(o.batch), wsize = d * d;
  std::vector<__nv_bfloat16*> w(o.layers), g(o.layers), act(o.layers + 1);
  __nv_bfloat16 *grads = nullptr, *dact = nullptr;
  CHECK(cudaMalloc(&grads, sizeof(__nv_bfloat16) * wsize * o.layers) == cudaSuccess, "cudaMalloc");
  CHECK(cudaMalloc(&dact, sizeof(__nv_bfloat16) * b * d) == cudaSuccess, "cudaMalloc");
  for (int l = 0; l < o.layers; ++l) {
    CHECK(cudaMalloc(&w[l], sizeof(__nv_bfloat16) * wsize) == cudaSuccess, "cudaMalloc");
    fill<<<1024, 256, 0, stream>>>(w[l], wsize, 0.02f);
    g[l] = grads + wsize * l;
  }
  for (auto& a : act) CHECK(cudaMalloc(&a, sizeof(__nv_bfloat16) * b * d) == cudaSuccess, "cudaMalloc");
  fill<<<1024, 256, 0, stream>>>(dact, b * d, 0.01f);
  __nv_bfloat16* host_batch = nullptr;
  CHECK(cudaMallocHost(&host_batch, sizeof(__nv_bfloat16) * b * d) == cudaSuccess, "cudaMallocHost");
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "sync");

  const float one = 1.f, zero = 0.f;
  auto gemm = [&](bool ta, bool tb, int m, int n, int k, const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb,
                  __nv_bfloat16* C, int ldc) {
    cublasGemmEx(blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_16BF, lda,
                 B, CUDA_R_16BF, ldb, &zero, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const int D = o.dim, B = o.batch;
  std::vector<double> step_ms;
  double extra_ms = 0;
  auto delay = [&](const char* phase, int step) {
    if (rank == o.slow_rank && o.slow_phase == phase && step >= 10 && extra_ms > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(extra_ms * 1000)));
  };
  for (int step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      TRACE_STEP();
      {
        TRACE_PHASE(input);  // the loader: a little host work per batch
        for (size_t i = 0; i < b * d; i += 4096) host_batch[i] = __float2bfloat16(float(step % 7));
        delay("input", step);
        if (rank == o.hang_rank && step == o.hang_step && o.hang_where == "input")
          std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(o.hang_s * 1e6)));
      }
      {
        TRACE_PHASE(h2d);
        cudaMemcpyAsync(act[0], host_batch, sizeof(__nv_bfloat16) * b * d, cudaMemcpyHostToDevice, stream);
        delay("h2d", step);
      }
      {
        TRACE_PHASE(forward);
        for (int l = 0; l < o.layers; ++l) gemm(false, false, D, B, D, w[l], D, act[l], D, act[l + 1], D);
        if (rank == o.hang_rank && step == o.hang_step && o.hang_where == "gpu")
          spin<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(o.hang_s * 1e9));
        delay("forward", step);
      }
      {
        TRACE_PHASE(backward);
        for (int l = o.layers - 1; l >= 0; --l) {
          gemm(false, true, D, D, B, dact, D, act[l], D, g[l], D);  // dW = dY X^T
          gemm(true, false, D, B, D, w[l], D, dact, D, act[l + 1], D);  // dX = W^T dY (act[l+1] is free now)
        }
        delay("backward", step);
      }
      {
        TRACE_PHASE(nccl);  // gradients summed over ranks; the host waits here for the slowest rank
        ncclAllReduce(grads, grads, wsize * o.layers, ncclBfloat16, ncclSum, comm, stream);
        cudaStreamSynchronize(stream);
      }
      {
        TRACE_PHASE(optimizer);
        for (int l = 0; l < o.layers; ++l) sgd<<<1024, 256, 0, stream>>>(w[l], g[l], wsize, 1e-3f, 1.f / o.gpus);
        cudaStreamSynchronize(stream);
        delay("optimizer", step);
      }
    }
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (step == 9) {  // the slow rank's delay: a share of the median step of steps 3..9
      std::vector<double> warm(step_ms.begin() + 3, step_ms.end());
      std::sort(warm.begin(), warm.end());
      extra_ms = o.slow_pct / 100.0 * warm[warm.size() / 2];
    }
  }
  steptrace::stop();
  double sum = 0;
  for (size_t i = 10; i < step_ms.size(); ++i) sum += step_ms[i];
  if (step_ms.size() > 10) std::printf("rank %d steady_step_ms %.4f extra_ms %.3f\n", rank, sum / (step_ms.size() - 10), extra_ms);
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<int> rd(o.gpus, -1), wr(o.gpus, -1);
  for (int r = 1; r < o.gpus; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    rd[r] = fds[0];
    wr[r] = fds[1];
  }
  std::vector<pid_t> children;
  for (int r = 0; r < o.gpus; ++r) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      std::vector<int> writes;
      if (r == 0)
        for (int k = 1; k < o.gpus; ++k) writes.push_back(wr[k]);
      const int rc = run_rank(o, r, rd[r], writes);
      std::fflush(stdout);
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) std::fprintf(stderr, "dp_train: %d rank(s) failed\n", failed);
  return failed ? 1 : 0;
}
