// step_workloads - training-like steps for the overhead benchmark, one source built three ways:
//   step_workloads               instrumented (steptrace modes chosen at run time: STEPTRACE_ENABLED,
//                                STEPTRACE_CUPTI, STEPTRACE_TRACE_EVERY)
//   step_workloads_compiled_out  the same source with STEPTRACE_DISABLE (the macros compile to nothing)
//   step_workloads_baseline      the same source without steptrace at all (STEPTRACE_BENCH_BASELINE)
// In the instrumented build, BENCH_RAW_CUPTI=1 (with STEPTRACE_ENABLED=0) enables the same CUPTI
// activity kinds steptrace uses, with a handler that only walks the records: CUPTI's own cost, the
// floor under any record-based tool (other values of BENCH_RAW_CUPTI: see raw_cupti_start).
//
//   step_workloads --workload transformer|launch [--steps N] [--warmup W] [--layers L] [--batch B]
//                  [--seq S] [--dmodel D] [--kernels K] [--head-start-us U] [--alternate R [--lines-dir D]
//                  [--modes off,default,...] [--interleave G]]
//
// --alternate R (instrumented build, no STEPTRACE_* variable): R rounds, each running one block of
//   W + N steps per mode - off (steptrace not started), default (start() with no setting), full
//   (trace_every = 1), full_nocounters - in an order shuffled per round (seed: the round), steptrace
//   started and stopped around each block, so that the modes share the process: its placement,
//   memory layout, clocks and warm caches. The W steps let each block's start settle and are not
//   timed (--modes M,M: a subset, in that list's shuffled order; also nomarkers, nocupti (no CUPTI, so
//   no markers either), host (gpu=off) and nolog (no log: no line made), the defaults less a part;
//   fulllines, the defaults on full lines; markall and markoff, one trace in 10^6 steps (the interval
//   fixed: every step marked, none thinned) on full lines, with and without stream markers - their
//   in-run costs' difference is what a marked step costs, against the lines' charge).
//   One line per block: block round=R mode=M mean_ms=... median_ms=... lines=PATH|-
//   (benchmarks/alternate_summary.py pairs each mode's block with the off block of its round).
//   --interleave G: in each steptrace block the timed steps alternate G with steptrace's scopes and G
//   without (steptrace started throughout; the first group with them in even rounds): the in-run
//   comparison (benchmarks/interleave.py). Adds per block a line
//   interleave workload=.. round=R mode=M group=G on_steps=.. off_steps=.. on_mean_ms=.. off_mean_ms=..
//   cost_by_means=..% times=PATH.times.json, whose "on" list `python3 benchmarks/interleave.py` reads.
//
// --head-start-us U: each step starts with a one-block kernel that spins U µs, so the host queues the
//   step's launches while the GPU is busy: host launch costs then hide behind it and what remains of an
//   overhead is GPU time.
//
// transformer: a GPU-bound step shaped like a decoder-only transformer's (bf16 cuBLAS GEMMs with fp32
//   accumulation, batched attention GEMMs, softmax, layernorm, GELU, residual adds, an elementwise
//   optimizer), forward and backward, ~35 launches per layer. Values are not trained; shapes and
//   launch counts are what matter.
// launch: a launch-bound step of K tiny kernels (default 10 000) in forward/backward/optimizer.
// Every step ends by reading a scalar back (as loss.item() does), so steps do not overlap.
//
// Prints one line:  result workload=... build=... steps=... mean_ms=... median_ms=... p10_ms=... p90_ms=...
//   launches_per_step=... traced_mean_ms=... untraced_mean_ms=... enqueue_mean_ms=... rss_hwm_kib=... rss_kib=...
// (enqueue: from the step's start until its last launch returned, before the read-back waits.)
// (traced/untraced: with STEPTRACE_TRACE_EVERY=N, the steps N divides and the others.)
#ifdef STEPTRACE_BENCH_BASELINE
#define TRACE_STEP(...)
#define TRACE_PHASE(name)
#define BENCH_BUILD "baseline"
#else
#include <steptrace/steptrace.hpp>
#ifdef STEPTRACE_DISABLE
#define BENCH_BUILD "compiled_out"
#else
#define BENCH_BUILD "instrumented"
#endif
#endif

#ifndef STEPTRACE_BENCH_BASELINE
#include <cupti.h>
#include "raw_cupti.hpp"
#endif
#include <optional>

// The steps' and phases' scopes. In the instrumented build a step may run without them (--interleave's
// off steps: g_scopes_on false), steptrace still started; the other builds' are TRACE_*'s.
bool g_scopes_on = true;
#if defined(STEPTRACE_BENCH_BASELINE) || defined(STEPTRACE_DISABLE)
#define BENCH_STEP() TRACE_STEP()
#define BENCH_PHASE(name) TRACE_PHASE(name)
#else
struct BenchStep {
  std::optional<steptrace::StepScope> scope;
  BenchStep() noexcept {
    if (g_scopes_on) scope.emplace();
  }
};
struct BenchPhase {
  std::optional<steptrace::PhaseScope> scope;
  explicit BenchPhase(steptrace::PhaseId id) noexcept {
    if (g_scopes_on) scope.emplace(id);
  }
};
#define BENCH_STEP() BenchStep STEPTRACE_UNIQUE_(bench_step_)
#define BENCH_PHASE(name) BenchPhase STEPTRACE_UNIQUE_(bench_phase_){::steptrace::phase_tag::name}
#endif
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "../support/cuda_check.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <unistd.h>  // environ
#include <string>
#include <thread>
#include <vector>

#define CHECK_BLAS(call)                                                          \
  do {                                                                            \
    cublasStatus_t s_ = (call);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #call, int(s_), __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

using bf16 = __nv_bfloat16;

namespace {

// ---- kernels ---------------------------------------------------------------------------------

__global__ void fill(bf16* x, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(scale * float((i * 2654435761u) % 1000) / 1000.f - scale / 2);
}

// One block per row: mean/variance normalisation.
__global__ void layernorm(const bf16* x, bf16* y, int cols) {
  const bf16* row = x + size_t(blockIdx.x) * cols;
  bf16* out = y + size_t(blockIdx.x) * cols;
  __shared__ float s_sum[32], s_sq[32];
  float sum = 0, sq = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(row[c]);
    sum += v;
    sq += v * v;
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffff, sum, o), sq += __shfl_down_sync(0xffffffff, sq, o);
  if (threadIdx.x % 32 == 0) s_sum[threadIdx.x / 32] = sum, s_sq[threadIdx.x / 32] = sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w) s_sum[0] += s_sum[w], s_sq[0] += s_sq[w];
  }
  __syncthreads();
  const float mean = s_sum[0] / cols, inv = rsqrtf(fmaxf(s_sq[0] / cols - mean * mean, 0.f) + 1e-5f);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __float2bfloat16((__bfloat162float(row[c]) - mean) * inv);
}

// One block per row: max, exp, sum, normalise (in place).
__global__ void softmax_rows(bf16* x, int cols) {
  bf16* row = x + size_t(blockIdx.x) * cols;
  __shared__ float s[32];
  float m = -1e30f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, __bfloat162float(row[c]));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffff, m, o));
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x / 32); ++w) s[0] = fmaxf(s[0], s[w]);
  __syncthreads();
  m = s[0];
  __syncthreads();
  float sum = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += __expf(__bfloat162float(row[c]) - m);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffff, sum, o);
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x / 32); ++w) s[0] += s[w];
  __syncthreads();
  const float inv = 1.f / s[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] = __float2bfloat16(__expf(__bfloat162float(row[c]) - m) * inv);
}

// Elementwise: y = op(a, b).  0: a + b   1: gelu(a)   2: gelu'(b) * a   3: softmax backward-like a * (b - a)
__global__ void elementwise(int op, const bf16* a, const bf16* b, bf16* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]);
    const float z = b ? __bfloat162float(b[i]) : 0.f;
    float r;
    switch (op) {
      case 0: r = x + z; break;
      case 1: r = 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); break;
      case 2: r = x * (z > 0 ? 1.f : 0.1f); break;
      default: r = x * (z - x); break;
    }
    y[i] = __float2bfloat16(r);
  }
}

// Momentum SGD on bf16 weights with an fp32 momentum buffer.
__global__ void sgd_momentum(bf16* w, const bf16* g, float* m, size_t n, float lr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float mi = 0.9f * m[i] + __bfloat162float(g[i]);
    m[i] = mi;
    w[i] = __float2bfloat16(__bfloat162float(w[i]) - lr * mi);
  }
}

__global__ void tiny(float* x, int i) {
  if (threadIdx.x == 0) x[i & 1023] += 1.f;
}

// ---- host side -------------------------------------------------------------------------------

struct Options {
  std::string workload = "transformer";
  int steps = 40, warmup = 10;
  int layers = 24, batch = 8, seq = 1024, dmodel = 1024, heads = 16;
  int kernels = 10000;
  int head_start_us = 0;
  int alternate = 0;          // rounds of in-process blocks (instrumented build), 0 = one plain run
  int interleave = 0;         // --alternate: each steptrace block's timed steps alternate this many with
                              // steptrace's scopes and as many without (0: all with)
  std::string lines_dir = ".";  // --alternate: where each steptrace block's lines go
  std::string modes = "off,default,full,full_nocounters";  // --alternate: the modes of each round
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (a == "--workload") {
      if (i + 1 >= argc) std::exit(2);
      o.workload = argv[++i];
    } else if (a == "--steps") o.steps = next();
    else if (a == "--warmup") o.warmup = next();
    else if (a == "--layers") o.layers = next();
    else if (a == "--batch") o.batch = next();
    else if (a == "--seq") o.seq = next();
    else if (a == "--dmodel") o.dmodel = next();
    else if (a == "--kernels") o.kernels = next();
    else if (a == "--head-start-us") o.head_start_us = next();
    else if (a == "--alternate") o.alternate = next();
    else if (a == "--interleave") o.interleave = next();
    else if (a == "--modes") {
      if (i + 1 >= argc) std::exit(2);
      o.modes = argv[++i];
    }
    else if (a == "--lines-dir") {
      if (i + 1 >= argc) std::exit(2);
      o.lines_dir = argv[++i];
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.interleave > 0 && o.alternate == 0) {
    std::fprintf(stderr, "--interleave needs --alternate R (its blocks)\n");
    std::exit(2);
  }
  if (o.workload != "transformer" && o.workload != "launch") {
    std::fprintf(stderr, "--workload must be transformer or launch\n");
    std::exit(2);
  }
  return o;
}

long launches = 0;  // launch calls made in the current step (cuBLAS calls counted once)
// When the step's last launch returned, just before its read-back: the host's enqueue time.
std::chrono::steady_clock::time_point enqueued;

bf16* alloc_bf16(size_t n) {
  bf16* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(bf16)));
  fill<<<1024, 256>>>(p, n, 0.1f);
  return p;
}

dim3 grid_for(size_t n) { return dim3(static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 132 * 16))); }

struct Gemm {
  cublasHandle_t h;
  // Column-major C(m x n) = op(A) op(B), bf16 in/out, fp32 accumulation.
  void operator()(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, const bf16* B, int ldb, bf16* C, int ldc) {
    const float one = 1.f, zero = 0.f;
    CHECK_BLAS(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_16BF,
                            lda, B, CUDA_R_16BF, ldb, &zero, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    ++launches;
  }
  void batched(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sa, const bf16* B, int ldb,
               long long sb, bf16* C, int ldc, long long sc, int count) {
    const float one = 1.f, zero = 0.f;
    CHECK_BLAS(cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, A,
                                          CUDA_R_16BF, lda, sa, B, CUDA_R_16BF, ldb, sb, &zero, C, CUDA_R_16BF, ldc, sc,
                                          count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    ++launches;
  }
};

struct Layer {
  bf16 *wqkv, *wo, *w1, *w2;      // weights
  bf16 *gqkv, *go, *g1, *g2;      // gradients
  float *mqkv, *mo, *m1, *m2;     // momentum
};

class Transformer {
 public:
  explicit Transformer(const Options& o) : o_(o) {
    T_ = size_t(o.batch) * o.seq;
    d_ = o.dmodel;
    ff_ = 4 * d_;
    hd_ = d_ / o.heads;
    bh_ = o.batch * o.heads;
    CHECK_BLAS(cublasCreate(&gemm_.h));
    for (int l = 0; l < o.layers; ++l) {
      Layer L;
      L.wqkv = alloc_bf16(d_ * 3 * d_), L.gqkv = alloc_bf16(d_ * 3 * d_), L.mqkv = alloc_f32(d_ * 3 * d_);
      L.wo = alloc_bf16(d_ * d_), L.go = alloc_bf16(d_ * d_), L.mo = alloc_f32(d_ * d_);
      L.w1 = alloc_bf16(d_ * ff_), L.g1 = alloc_bf16(d_ * ff_), L.m1 = alloc_f32(d_ * ff_);
      L.w2 = alloc_bf16(ff_ * d_), L.g2 = alloc_bf16(ff_ * d_), L.m2 = alloc_f32(ff_ * d_);
      layers_.push_back(L);
    }
    x_ = alloc_bf16(T_ * d_), ln_ = alloc_bf16(T_ * d_), qkv_ = alloc_bf16(T_ * 3 * d_);
    att_ = alloc_bf16(T_ * d_), proj_ = alloc_bf16(T_ * d_), h1_ = alloc_bf16(T_ * ff_), h1a_ = alloc_bf16(T_ * ff_);
    scores_ = alloc_bf16(size_t(bh_) * o.seq * o.seq);
    dx_ = alloc_bf16(T_ * d_), dh_ = alloc_bf16(T_ * ff_), dqkv_ = alloc_bf16(T_ * 3 * d_), dscores_ = alloc_bf16(size_t(bh_) * o.seq * o.seq);
    CHECK_CUDA(cudaMallocHost(&host_tokens_, T_ * sizeof(int)));
    CHECK_CUDA(cudaMalloc(&tokens_, T_ * sizeof(int)));
    CHECK_CUDA(cudaDeviceSynchronize());
  }

  void step(int s) {
    {
      BENCH_PHASE(input);
      for (size_t i = 0; i < T_; ++i) host_tokens_[i] = int((i * 31 + s) % 50257);
    }
    {
      BENCH_PHASE(h2d);
      CHECK_CUDA(cudaMemcpyAsync(tokens_, host_tokens_, T_ * sizeof(int), cudaMemcpyHostToDevice));
      ++launches;
    }
    {
      BENCH_PHASE(forward);
      for (auto& L : layers_) forward_layer(L);
    }
    {
      BENCH_PHASE(backward);
      for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) backward_layer(*it);
    }
    {
      BENCH_PHASE(optimizer);
      for (auto& L : layers_) {
        update(L.wqkv, L.gqkv, L.mqkv, d_ * 3 * d_);
        update(L.wo, L.go, L.mo, d_ * d_);
        update(L.w1, L.g1, L.m1, d_ * ff_);
        update(L.w2, L.g2, L.m2, ff_ * d_);
      }
    }
    bf16 loss;
    enqueued = std::chrono::steady_clock::now();
    CHECK_CUDA(cudaMemcpy(&loss, x_, sizeof(bf16), cudaMemcpyDeviceToHost));  // the step's synchronization
    ++launches;
  }

 private:
  float* alloc_f32(size_t n) {
    float* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof(float)));
    CHECK_CUDA(cudaMemset(p, 0, n * sizeof(float)));
    return p;
  }
  void ew(int op, const bf16* a, const bf16* b, bf16* y, size_t n) {
    elementwise<<<grid_for(n), 256>>>(op, a, b, y, n);
    ++launches;
  }
  void update(bf16* w, const bf16* g, float* m, size_t n) {
    sgd_momentum<<<grid_for(n), 256>>>(w, g, m, n, 1e-4f);
    ++launches;
  }
  // Row-major Y[T, n] = X[T, k] W[k, n]  ==  column-major Y^T = W^T X^T.
  void linear(const bf16* X, const bf16* W, bf16* Y, int k, int n) { gemm_(false, false, n, int(T_), k, W, n, X, k, Y, n); }
  // dX[T, k] = dY[T, n] W^T ;  dW[k, n] = X^T dY.
  void linear_backward(const bf16* X, const bf16* W, const bf16* dY, bf16* dX, bf16* dW, int k, int n) {
    gemm_(true, false, k, int(T_), n, W, n, dY, n, dX, k);
    gemm_(false, true, n, k, int(T_), dY, n, X, k, dW, n);
  }
  // Per (batch, head): S = Q K^T (seq x seq), then O = P V.
  void attention_scores(const bf16* q, const bf16* k, bf16* s) {
    const int S = o_.seq;
    gemm_.batched(true, false, S, S, int(hd_), k, int(hd_), (long long)S * hd_, q, int(hd_), (long long)S * hd_, s, S,
                  (long long)S * S, bh_);
  }
  void attention_values(const bf16* p, const bf16* v, bf16* out) {
    const int S = o_.seq;
    gemm_.batched(false, false, int(hd_), S, S, v, int(hd_), (long long)S * hd_, p, S, (long long)S * S, out, int(hd_),
                  (long long)S * hd_, bh_);
  }
  void forward_layer(Layer& L) {
    const size_t td = T_ * d_;
    layernorm<<<unsigned(T_), 256>>>(x_, ln_, int(d_));
    ++launches;
    linear(ln_, L.wqkv, qkv_, int(d_), int(3 * d_));
    attention_scores(qkv_, qkv_ + td, scores_);
    softmax_rows<<<unsigned(size_t(bh_) * o_.seq), 256>>>(scores_, o_.seq);
    ++launches;
    attention_values(scores_, qkv_ + 2 * td, att_);
    linear(att_, L.wo, proj_, int(d_), int(d_));
    ew(0, x_, proj_, x_, td);
    layernorm<<<unsigned(T_), 256>>>(x_, ln_, int(d_));
    ++launches;
    linear(ln_, L.w1, h1_, int(d_), int(ff_));
    ew(1, h1_, nullptr, h1a_, T_ * ff_);
    linear(h1a_, L.w2, proj_, int(ff_), int(d_));
    ew(0, x_, proj_, x_, td);
  }
  void backward_layer(Layer& L) {
    const size_t td = T_ * d_;
    linear_backward(h1a_, L.w2, dx_, dh_, L.g2, int(ff_), int(d_));
    ew(2, dh_, h1_, dh_, T_ * ff_);
    linear_backward(ln_, L.w1, dh_, proj_, L.g1, int(d_), int(ff_));
    ew(0, dx_, proj_, dx_, td);  // through the second layernorm (approximated) and the residual
    linear_backward(att_, L.wo, dx_, proj_, L.go, int(d_), int(d_));
    // attention backward: dP = dO V^T, dV = P^T dO, softmax backward, dQ = dS K, dK = dS^T Q
    attention_scores(proj_, qkv_ + 2 * td, dscores_);
    attention_values(scores_, proj_, dqkv_ + 2 * td);
    ew(3, scores_, dscores_, dscores_, size_t(bh_) * o_.seq * o_.seq);
    attention_values(dscores_, qkv_ + td, dqkv_);
    attention_values(dscores_, qkv_, dqkv_ + td);
    linear_backward(ln_, L.wqkv, dqkv_, proj_, L.gqkv, int(d_), int(3 * d_));
    ew(0, dx_, proj_, dx_, td);
  }

  Options o_;
  size_t T_, d_, ff_, hd_;
  int bh_;
  Gemm gemm_;
  std::vector<Layer> layers_;
  bf16 *x_, *ln_, *qkv_, *att_, *proj_, *h1_, *h1a_, *scores_, *dx_, *dh_, *dqkv_, *dscores_;
  int *host_tokens_, *tokens_;
};

class LaunchBound {
 public:
  explicit LaunchBound(const Options& o) : o_(o) {
    CHECK_CUDA(cudaMalloc(&buf_, 1024 * sizeof(float)));
    CHECK_CUDA(cudaMemset(buf_, 0, 1024 * sizeof(float)));
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  void step(int) {
    const int opt = std::max(1, o_.kernels / 20), fwd = (o_.kernels - opt) / 2, bwd = o_.kernels - opt - fwd;
    {
      BENCH_PHASE(forward);
      for (int i = 0; i < fwd; ++i) tiny<<<1, 32>>>(buf_, i);
    }
    {
      BENCH_PHASE(backward);
      for (int i = 0; i < bwd; ++i) tiny<<<1, 32>>>(buf_, i);
    }
    {
      BENCH_PHASE(optimizer);
      for (int i = 0; i < opt; ++i) tiny<<<1, 32>>>(buf_, i);
    }
    launches += o_.kernels;
    enqueued = std::chrono::steady_clock::now();
    float v = 0;
    CHECK_CUDA(cudaMemcpy(&v, buf_, sizeof(float), cudaMemcpyDeviceToHost));
    ++launches;
  }

 private:
  Options o_;
  float* buf_;
};

#ifndef STEPTRACE_BENCH_BASELINE
const CUpti_ActivityKind raw_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
// BENCH_RAW_FLUSH_MS=N (with a records mode): a thread asks CUPTI for completed buffers every N ms
// (cuptiActivityFlushAll(0)), as steptrace's background thread does while a line waits for records.
std::atomic<bool> raw_flushing{false};
std::thread raw_flusher;
void raw_flush_start() {
  const char* v = std::getenv("BENCH_RAW_FLUSH_MS");
  const int ms = v ? std::atoi(v) : 0;
  if (ms <= 0) return;
  raw_flushing = true;
  raw_flusher = std::thread([ms] {
    while (raw_flushing) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      cuptiActivityFlushAll(0);
    }
  });
}
// BENCH_RAW_CUPTI: 1 or "records" - the record kinds only; "records+callbacks" - plus a subscriber whose
// callback returns at once, on the same API sites steptrace's collector watches (runtime and driver
// launch, memcpy and memset calls); "callbacks" - that subscriber alone. Separates CUPTI's own cost
// from what steptrace's handlers add.
CUpti_SubscriberHandle raw_subscriber = nullptr;
bool raw_cupti_start() {
  const char* v = std::getenv("BENCH_RAW_CUPTI");
  if (!v || !*v || std::string(v) == "0") return false;
  const std::string mode(v);
  const bool records = mode == "1" || mode == "records" || mode == "records+callbacks";
  const bool callbacks = mode == "callbacks" || mode == "records+callbacks";
  if (!records && !callbacks) {
    std::fprintf(stderr, "BENCH_RAW_CUPTI must be 1, records, records+callbacks or callbacks\n");
    std::exit(2);
  }
  if (callbacks) {
    if (!subscribe_empty_launch_callbacks(raw_subscriber)) std::exit(3);
  }
  if (records) {
    if (cuptiActivityRegisterCallbacks(bench_buffer_requested, bench_buffer_completed) != CUPTI_SUCCESS) std::exit(3);
    for (auto k : raw_kinds)
      if (cuptiActivityEnable(k) != CUPTI_SUCCESS) std::exit(3);
    const char* period = std::getenv("BENCH_RAW_FLUSH_PERIOD_MS");  // CUPTI's own periodic flush; 0: none
    cuptiActivityFlushPeriod(period ? static_cast<uint32_t>(std::atoi(period)) : 100);
    raw_flush_start();
  }
  return true;
}
void raw_cupti_stop() {
  raw_flushing = false;
  if (raw_flusher.joinable()) raw_flusher.join();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (auto k : raw_kinds) cuptiActivityDisable(k);
  if (raw_subscriber) cuptiUnsubscribe(raw_subscriber);
}
#endif

long status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + std::strlen(key));
  return -1;
}

double at(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

#ifndef STEPTRACE_BENCH_BASELINE
// --alternate: blocks of each mode in one process (see the top of this file).
int alternate_blocks(const Options& o, Transformer* tf, LaunchBound* lb) {
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "STEPTRACE_", 10) == 0 || std::strncmp(*e, "BENCH_RAW_CUPTI=", 16) == 0) {
      std::fprintf(stderr, "step_workloads --alternate: %s is set; each mode sets what it measures itself\n", *e);
      return 2;
    }
  }
  if (o.head_start_us > 0) {
    std::fprintf(stderr, "step_workloads --alternate: --head-start-us is not supported with it\n");
    return 2;
  }
  std::vector<std::string> modes;
  for (std::size_t from = 0; from <= o.modes.size();) {
    const std::size_t comma = std::min(o.modes.find(',', from), o.modes.size());
    const std::string m = o.modes.substr(from, comma - from);
    if (m != "off" && m != "default" && m != "full" && m != "full_nocounters" && m != "nomarkers" && m != "nocupti" &&
        m != "host" && m != "nolog" && m != "fulllines" && m != "markall" && m != "markoff") {
      std::fprintf(stderr, "step_workloads --modes: off, default, full, full_nocounters, nomarkers, nocupti, host, nolog, "
                           "fulllines, markall, markoff "
                           "(got '%s')\n", m.c_str());
      return 2;
    }
    modes.push_back(m);
    from = comma + 1;
  }
  for (int round = 0; round < o.alternate; ++round) {
    std::vector<std::string> order = modes;
    std::mt19937 rng(static_cast<unsigned>(round) + 31u);
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::string& mode : order) {
      std::string lines = "-";
      if (mode != "off") {
        steptrace::Config cfg;
        lines = o.lines_dir + "/alternate_" + o.workload + "_" + std::to_string(round) + "_" + mode + ".jsonl";
        std::remove(lines.c_str());
        cfg.log_path = lines;
        cfg.summary = false;
        // The default block is the defaults (compact lines); the others name what they force: full and
        // full_nocounters trace every step on full lines; nomarkers, nocupti (no CUPTI: no markers either),
        // host (gpu off) and nolog (no log: no line made) are the defaults less a part.
        if (mode == "full" || mode == "full_nocounters") cfg.trace_every = 1, cfg.line_detail = steptrace::LineDetail::full;
        if (mode == "full_nocounters") cfg.counters = steptrace::Mode::off;
        if (mode == "nomarkers") cfg.stream_markers = false;
        if (mode == "nocupti") cfg.cupti = steptrace::Mode::off;
        if (mode == "host") cfg.gpu = steptrace::Mode::off;
        if (mode == "nolog") cfg.log_path.clear();
        if (mode == "fulllines" || mode == "markall" || mode == "markoff") cfg.line_detail = steptrace::LineDetail::full;
        if (mode == "markall" || mode == "markoff") cfg.trace_every = 1000000;
        if (mode == "markoff") cfg.stream_markers = false;
        if (!steptrace::start(cfg)) {
          std::fprintf(stderr, "step_workloads --alternate: start() failed in round %d (%s)\n", round, mode.c_str());
          return 3;
        }
      }
      std::vector<double> ms;
      std::vector<int> on;  // --interleave: per timed step, 1 with steptrace's scopes
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const int i = s - o.warmup;  // the timed step (the warm-up's all have their scopes)
        g_scopes_on = mode == "off" || o.interleave <= 0 || i < 0 || ((i / o.interleave) % 2 == 0) == (round % 2 == 0);
        launches = 0;
        const auto t0 = std::chrono::steady_clock::now();
        {
          BENCH_STEP();
          if (tf) tf->step(s);
          else lb->step(s);
        }
        if (s >= o.warmup) {
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          if (o.interleave > 0 && mode != "off") on.push_back(g_scopes_on ? 1 : 0);
        }
      }
      g_scopes_on = true;
      if (mode != "off") steptrace::stop();
      if (lines != "-") {  // the program's own clock per step beside its lines (step warmup + i)
        if (std::FILE* f = std::fopen((lines + ".times.json").c_str(), "w")) {
          std::fprintf(f, "{\"first_step\": %d, \"ms\": [", o.warmup);
          for (std::size_t i = 0; i < ms.size(); ++i) std::fprintf(f, "%s%.4f", i ? ", " : "", ms[i]);
          if (!on.empty()) {  // benchmarks/interleave.py reads it: python3 benchmarks/interleave.py PATH.times.json
            std::fprintf(f, "], \"group\": %d, \"on\": [", o.interleave);
            for (std::size_t i = 0; i < on.size(); ++i) std::fprintf(f, "%s%s", i ? ", " : "", on[i] ? "true" : "false");
          }
          std::fprintf(f, "]}\n");
          std::fclose(f);
        }
      }
      double sum = 0;
      for (double d : ms) sum += d;
      std::printf("block workload=%s round=%d mode=%s steps=%zu mean_ms=%.4f median_ms=%.4f launches_per_step=%ld lines=%s\n",
                  o.workload.c_str(), round, mode.c_str(), ms.size(), sum / ms.size(), at(ms, 0.5), launches, lines.c_str());
      if (!on.empty()) {  // the in-run comparison's means; its pairs: benchmarks/interleave.py on PATH.times.json
        double with = 0, without = 0;
        std::size_t n_with = 0;
        for (std::size_t i = 0; i < ms.size(); ++i) (on[i] ? with : without) += ms[i], n_with += on[i];
        const std::size_t n_without = ms.size() - n_with;
        if (n_with && n_without)
          std::printf("interleave workload=%s round=%d mode=%s group=%d on_steps=%zu off_steps=%zu on_mean_ms=%.4f "
                      "off_mean_ms=%.4f cost_by_means=%+.3f%% times=%s.times.json\n",
                      o.workload.c_str(), round, mode.c_str(), o.interleave, n_with, n_without, with / n_with,
                      without / n_without, 100 * ((with / n_with) / (without / n_without) - 1), lines.c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "step_workloads: needs a CUDA GPU\n");
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(0));
  Transformer* tf = o.workload == "transformer" ? new Transformer(o) : nullptr;
  LaunchBound* lb = o.workload == "launch" ? new LaunchBound(o) : nullptr;
#ifndef STEPTRACE_BENCH_BASELINE
  if (o.alternate > 0) return alternate_blocks(o, tf, lb);
#else
  if (o.alternate > 0) {
    std::fprintf(stderr, "--alternate needs the instrumented build (step_workloads)\n");
    return 2;
  }
#endif

#ifndef STEPTRACE_BENCH_BASELINE
  steptrace::Config cfg;
  cfg.log_path = "";  // STEPTRACE_LOG may set one
  cfg.summary = false;
  steptrace::start(cfg);
  const bool raw = raw_cupti_start();
#endif
  // Which steps steptrace traces is known here only for an explicit STEPTRACE_TRACE_EVERY; unset or 0
  // (the overhead budget chooses), traced_mean_ms and untraced_mean_ms are 0 (not split).
  const char* every_env = std::getenv("STEPTRACE_TRACE_EVERY");
  const int every = every_env ? std::atoi(every_env) : 0;

  std::vector<double> ms, traced, untraced, enqueue;
  long launches_per_step = 0;
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long head_cycles = static_cast<long long>(o.head_start_us) * clock_khz / 1000;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    launches = 0;
    const auto t0 = std::chrono::steady_clock::now();
    {
      BENCH_STEP();
      if (head_cycles > 0) {  // the GPU spins while the host queues the step behind it
        spin<<<1, 32>>>(head_cycles, nullptr);
        ++launches;
      }
      if (tf) tf->step(s);
      else lb->step(s);
    }
    const double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    launches_per_step = launches;
    if (s < o.warmup) continue;
    ms.push_back(d);
    enqueue.push_back(std::chrono::duration<double, std::milli>(enqueued - t0).count());
    if (every >= 1) (s % every == 0 ? traced : untraced).push_back(d);
  }
#ifndef STEPTRACE_BENCH_BASELINE
  steptrace::stop();
  if (raw) raw_cupti_stop();
#endif
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double d : v) s += d;
    return v.empty() ? 0.0 : s / v.size();
  };
  std::printf(
      "result workload=%s build=%s steps=%zu mean_ms=%.4f median_ms=%.4f p10_ms=%.4f p90_ms=%.4f launches_per_step=%ld "
      "traced_mean_ms=%.4f untraced_mean_ms=%.4f enqueue_mean_ms=%.4f rss_hwm_kib=%ld rss_kib=%ld\n",
      o.workload.c_str(), BENCH_BUILD, ms.size(), mean(ms), at(ms, 0.5), at(ms, 0.1),
      at(ms, 0.9), launches_per_step, mean(traced), mean(untraced), mean(enqueue), status_kib("VmHWM:"), status_kib("VmRSS:"));
  return 0;
}
