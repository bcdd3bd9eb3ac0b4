// mlp_train - a small, fully instrumented training program for steptrace.
//
// A two-layer MLP classifier (x -> relu(W1 x + b1) -> W2 h + b2 -> softmax cross-entropy) trained with
// SGD on synthetic data whose labels come from a hidden linear teacher, so the loss really falls.
// With a GPU: cuBLAS GEMMs, a deliberately naive softmax kernel (one block, one thread per sample),
// small elementwise kernels. Without one (or with --cpu): the same model in plain C++ loops.
//
//   mlp_train [--cpu] [--steps N] [--batch B] [--hidden H] [--slow-loader-ms MS] [--log PATH]
#include <steptrace/steptrace.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  bool cpu = false;
  int steps = 50;
  int batch = 0, input = 0, hidden = 0, classes = 0;  // 0 = default for the backend
  int slow_loader_ms = 0;
  float lr = 0.1f;
  std::string log;
};

const char kHelp[] =
    "mlp_train - a two-layer MLP trainer instrumented with steptrace: one JSON line per step.\n"
    "usage: mlp_train [options]\n"
    "  --cpu                 train on the CPU (the default is the GPU when there is one)\n"
    "  --steps N             training steps (default 50)\n"
    "  --batch B             samples per step (default 512 on the GPU, 64 on the CPU)\n"
    "  --hidden H            hidden layer width (default 4096 on the GPU, 256 on the CPU)\n"
    "  --slow-loader-ms MS   make the data loader sleep MS ms per batch (an input-bound run)\n"
    "  --lr LR               learning rate (default 0.1)\n"
    "  --log PATH            JSON lines file (default: steptrace's log_path, STEPTRACE_LOG wins)\n"
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
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mlp_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--cpu") o.cpu = true;
    else if (a == "--steps") o.steps = std::atoi(next());
    else if (a == "--batch") o.batch = std::atoi(next());
    else if (a == "--hidden") o.hidden = std::atoi(next());
    else if (a == "--slow-loader-ms") o.slow_loader_ms = std::atoi(next());
    else if (a == "--lr") o.lr = static_cast<float>(std::atof(next()));
    else if (a == "--log") o.log = next();
    else {
      std::fprintf(stderr, "mlp_train: unknown option '%s'\n%s", a.c_str(), kHelp);
      std::exit(2);
    }
  }
  return o;
}

// ---- data: a Gaussian mixture, one well-separated prototype per class ---------------------------

struct Loader {
  int input, classes, batch, slow_ms;
  std::vector<float> prototypes;  // classes x input
  std::vector<float> noise;       // a pool of N(0, 1) values; each sample reads a random window of it
  std::mt19937 rng{1234};

  Loader(int in, int c, int b, int slow)
      : input(in), classes(c), batch(b), slow_ms(slow), prototypes(size_t(c) * in), noise(size_t(1) << 22) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : prototypes) v = normal(rng);
    for (auto& v : noise) v = normal(rng);
  }
  // x: input x batch, column-major (one column per sample); x = prototype[label] + noise
  void next(std::vector<float>& x, std::vector<int>& labels) {
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));  // a slow disk / decoder
    x.resize(size_t(input) * batch);
    labels.resize(batch);
    std::uniform_int_distribution<int> label(0, classes - 1);
    std::uniform_int_distribution<size_t> offset(0, noise.size() - size_t(input));
    for (int s = 0; s < batch; ++s) {
      labels[s] = label(rng);
      const float* proto = &prototypes[size_t(labels[s]) * input];
      const float* n = &noise[offset(rng)];
      float* col = &x[size_t(s) * input];
      for (int k = 0; k < input; ++k) col[k] = proto[k] + n[k];
    }
  }
};

void init_weights(std::vector<float>& w, int fan_in, std::mt19937& rng) {
  std::normal_distribution<float> n(0.f, 1.f / std::sqrt(static_cast<float>(fan_in)));
  for (auto& v : w) v = n(rng);
}

// ---- CPU backend ------------------------------------------------------------------------------------

struct CpuModel {
  int in, hid, cls, batch;
  std::vector<float> w1, b1, w2, b2, h, p, dw1, db1, dw2, db2, dh;

  CpuModel(int in_, int hid_, int cls_, int batch_)
      : in(in_), hid(hid_), cls(cls_), batch(batch_), w1(size_t(hid) * in), b1(hid), w2(size_t(cls) * hid), b2(cls) {
    std::mt19937 rng(42);
    init_weights(w1, in, rng);
    init_weights(w2, hid, rng);
  }

  // Returns the mean cross-entropy; leaves gradients in d*.
  double step(const std::vector<float>& x, const std::vector<int>& labels, float lr, double& grad_norm) {
    h.assign(size_t(hid) * batch, 0.f);
    p.assign(size_t(cls) * batch, 0.f);
    {
      TRACE_PHASE(forward);
      for (int s = 0; s < batch; ++s)
        for (int j = 0; j < hid; ++j) {
          float v = b1[j];
          for (int k = 0; k < in; ++k) v += w1[size_t(j) * in + k] * x[size_t(s) * in + k];
          h[size_t(s) * hid + j] = v > 0 ? v : 0;
        }
      for (int s = 0; s < batch; ++s)
        for (int c = 0; c < cls; ++c) {
          float v = b2[c];
          for (int j = 0; j < hid; ++j) v += w2[size_t(c) * hid + j] * h[size_t(s) * hid + j];
          p[size_t(s) * cls + c] = v;
        }
      TRACE_PHASE_NAMED("softmax");
      for (int s = 0; s < batch; ++s) {
        float* row = &p[size_t(s) * cls];
        float m = row[0];
        for (int c = 1; c < cls; ++c) m = std::max(m, row[c]);
        float sum = 0;
        for (int c = 0; c < cls; ++c) sum += (row[c] = std::exp(row[c] - m));
        for (int c = 0; c < cls; ++c) row[c] /= sum;
      }
    }
    double loss = 0;
    for (int s = 0; s < batch; ++s) loss -= std::log(std::max(p[size_t(s) * cls + labels[s]], 1e-12f));
    loss /= batch;
    {
      TRACE_PHASE(backward);
      dw1.assign(w1.size(), 0.f);
      db1.assign(b1.size(), 0.f);
      dw2.assign(w2.size(), 0.f);
      db2.assign(b2.size(), 0.f);
      dh.assign(h.size(), 0.f);
      for (int s = 0; s < batch; ++s) {
        for (int c = 0; c < cls; ++c) {
          const float g = (p[size_t(s) * cls + c] - (labels[s] == c ? 1.f : 0.f)) / batch;
          db2[c] += g;
          for (int j = 0; j < hid; ++j) {
            dw2[size_t(c) * hid + j] += g * h[size_t(s) * hid + j];
            dh[size_t(s) * hid + j] += g * w2[size_t(c) * hid + j];
          }
        }
        for (int j = 0; j < hid; ++j) {
          const float g = h[size_t(s) * hid + j] > 0 ? dh[size_t(s) * hid + j] : 0.f;
          db1[j] += g;
          for (int k = 0; k < in; ++k) dw1[size_t(j) * in + k] += g * x[size_t(s) * in + k];
        }
      }
    }
    {
      TRACE_PHASE(optimizer);
      double sq = 0;
      auto sgd = [&](std::vector<float>& w, const std::vector<float>& g) {
        for (size_t i = 0; i < w.size(); ++i) {
          sq += double(g[i]) * g[i];
          w[i] -= lr * g[i];
        }
      };
      sgd(w1, dw1), sgd(b1, db1), sgd(w2, dw2), sgd(b2, db2);
      grad_norm = std::sqrt(sq);
    }
    return loss;
  }
};

// ---- GPU backend ------------------------------------------------------------------------------------

#define CHECK_CUDA(call)                                                                             \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "mlp_train: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
#define CHECK_CUBLAS(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t s_ = (call);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "mlp_train: %s failed: %d (%s:%d)\n", #call, int(s_), __FILE__, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

__global__ void bias_relu(float* h, const float* b, int rows, int cols) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) h[i] = fmaxf(h[i] + b[i % rows], 0.f);
}

__global__ void add_bias(float* z, const float* b, int rows, int cols) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) z[i] += b[i % rows];
}

// Deliberately naive: one block, one thread per sample walks its whole row three times. It keeps
// one SM busy while the others idle - what steptrace's SM-efficiency estimate is meant to expose.
// Writes the per-sample loss and, in place, the logits' gradient (p - onehot) / batch.
__global__ void naive_softmax_xent(float* z, const int* labels, float* loss, int classes, int batch) {
  for (int s = threadIdx.x; s < batch; s += blockDim.x) {
    float* col = z + size_t(s) * classes;
    float m = col[0];
    for (int c = 1; c < classes; ++c) m = fmaxf(m, col[c]);
    float sum = 0.f;
    for (int c = 0; c < classes; ++c) sum += __expf(col[c] - m);
    const int y = labels[s];
    loss[s] = -(col[y] - m - __logf(sum));
    for (int c = 0; c < classes; ++c) col[c] = (__expf(col[c] - m) / sum - (c == y ? 1.f : 0.f)) / batch;
  }
}

__global__ void relu_backward(float* dh, const float* h, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && h[i] <= 0.f) dh[i] = 0.f;
}

__global__ void row_sums(const float* g, float* out, int rows, int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.f;
  for (int c = 0; c < cols; ++c) s += g[size_t(c) * rows + r];
  out[r] = s;
}

__global__ void sgd_update(float* w, const float* g, float lr, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * g[i];
}

// Counts what this program allocates on the device, for steptrace's allocator hook.
struct DeviceArena {
  int64_t allocated = 0, peak = 0, allocations = 0;
  template <class T>
  T* alloc(size_t n) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
    allocated += int64_t(n * sizeof(T));
    peak = std::max(peak, allocated);
    ++allocations;
    return static_cast<T*>(p);
  }
};

inline int blocks_for(int n) { return (n + 255) / 256; }

struct GpuModel {
  int in, hid, cls, batch;
  DeviceArena arena;
  cublasHandle_t blas{};
  cudaStream_t stream{};
  float *w1, *b1, *w2, *b2, *x, *h, *z, *loss, *dw1, *db1, *dw2, *db2, *dh;
  int* labels;
  float* pinned_x;
  int* pinned_labels;
  std::vector<float> host_loss;

  GpuModel(int in_, int hid_, int cls_, int batch_) : in(in_), hid(hid_), cls(cls_), batch(batch_), host_loss(batch_) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_CUBLAS(cublasCreate(&blas));
    CHECK_CUBLAS(cublasSetStream(blas, stream));
    w1 = arena.alloc<float>(size_t(hid) * in), b1 = arena.alloc<float>(hid);
    w2 = arena.alloc<float>(size_t(cls) * hid), b2 = arena.alloc<float>(cls);
    dw1 = arena.alloc<float>(size_t(hid) * in), db1 = arena.alloc<float>(hid);
    dw2 = arena.alloc<float>(size_t(cls) * hid), db2 = arena.alloc<float>(cls);
    x = arena.alloc<float>(size_t(in) * batch), labels = arena.alloc<int>(batch);
    h = arena.alloc<float>(size_t(hid) * batch), dh = arena.alloc<float>(size_t(hid) * batch);
    z = arena.alloc<float>(size_t(cls) * batch), loss = arena.alloc<float>(batch);
    CHECK_CUDA(cudaMallocHost(&pinned_x, size_t(in) * batch * sizeof(float)));
    CHECK_CUDA(cudaMallocHost(&pinned_labels, size_t(batch) * sizeof(int)));
    std::mt19937 rng(42);
    std::vector<float> hw1(size_t(hid) * in), hw2(size_t(cls) * hid);
    init_weights(hw1, in, rng);
    init_weights(hw2, hid, rng);
    CHECK_CUDA(cudaMemcpy(w1, hw1.data(), hw1.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(w2, hw2.data(), hw2.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(b1, 0, hid * sizeof(float)));
    CHECK_CUDA(cudaMemset(b2, 0, cls * sizeof(float)));
  }

  ~GpuModel() {
    cublasDestroy(blas);
    for (void* p : {(void*)w1, (void*)b1, (void*)w2, (void*)b2, (void*)dw1, (void*)db1, (void*)dw2, (void*)db2,
                    (void*)x, (void*)labels, (void*)h, (void*)dh, (void*)z, (void*)loss})
      cudaFree(p);
    cudaFreeHost(pinned_x);
    cudaFreeHost(pinned_labels);
    cudaStreamDestroy(stream);
  }

  void upload(const std::vector<float>& hx, const std::vector<int>& hl) {
    std::memcpy(pinned_x, hx.data(), hx.size() * sizeof(float));
    std::memcpy(pinned_labels, hl.data(), hl.size() * sizeof(int));
    CHECK_CUDA(cudaMemcpyAsync(x, pinned_x, hx.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaMemcpyAsync(labels, pinned_labels, hl.size() * sizeof(int), cudaMemcpyHostToDevice, stream));
  }

  double step(float lr, double& grad_norm) {
    const float one = 1.f, zero = 0.f;
    {
      TRACE_PHASE(forward);
      // h = W1 x (hid x batch), then bias + relu
      CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hid, batch, in, &one, w1, hid, x, in, &zero, h, hid));
      bias_relu<<<blocks_for(hid * batch), 256, 0, stream>>>(h, b1, hid, batch);
      // z = W2 h (cls x batch)
      CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, cls, batch, hid, &one, w2, cls, h, hid, &zero, z, cls));
      add_bias<<<blocks_for(cls * batch), 256, 0, stream>>>(z, b2, cls, batch);
      TRACE_PHASE_NAMED("softmax");
      naive_softmax_xent<<<1, 256, 0, stream>>>(z, labels, loss, cls, batch);
      CHECK_CUDA(cudaGetLastError());
    }
    {
      TRACE_PHASE(backward);  // z now holds dL/dz
      CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, cls, hid, batch, &one, z, cls, h, hid, &zero, dw2, cls));
      row_sums<<<blocks_for(cls), 256, 0, stream>>>(z, db2, cls, batch);
      CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, hid, batch, cls, &one, w2, cls, z, cls, &zero, dh, hid));
      relu_backward<<<blocks_for(hid * batch), 256, 0, stream>>>(dh, h, hid * batch);
      CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hid, in, batch, &one, dh, hid, x, in, &zero, dw1, hid));
      row_sums<<<blocks_for(hid), 256, 0, stream>>>(dh, db1, hid, batch);
      CHECK_CUDA(cudaGetLastError());
    }
    {
      TRACE_PHASE(optimizer);
      float n1 = 0, n2 = 0;
      CHECK_CUBLAS(cublasSnrm2(blas, hid * in, dw1, 1, &n1));  // synchronous: returns to the host
      CHECK_CUBLAS(cublasSnrm2(blas, cls * hid, dw2, 1, &n2));
      grad_norm = std::sqrt(double(n1) * n1 + double(n2) * n2);
      sgd_update<<<blocks_for(hid * in), 256, 0, stream>>>(w1, dw1, lr, hid * in);
      sgd_update<<<blocks_for(hid), 256, 0, stream>>>(b1, db1, lr, hid);
      sgd_update<<<blocks_for(cls * hid), 256, 0, stream>>>(w2, dw2, lr, cls * hid);
      sgd_update<<<blocks_for(cls), 256, 0, stream>>>(b2, db2, lr, cls);
      CHECK_CUDA(cudaGetLastError());
    }
    // loss.item(): the step's one synchronization, as in most training loops
    CHECK_CUDA(cudaMemcpyAsync(host_loss.data(), loss, batch * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    double sum = 0;
    for (float l : host_loss) sum += l;
    return sum / batch;
  }
};

bool gpu_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess && n > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const bool gpu = !o.cpu && gpu_available();
  if (!o.cpu && !gpu) std::printf("mlp_train: no usable GPU, training on the CPU\n");
  // GPU sizes fill an H100 for ~1 ms of GEMMs a step; CPU sizes keep a step around 10 ms.
  const int batch = o.batch ? o.batch : (gpu ? 512 : 64);
  const int input = gpu ? 1024 : 128;
  const int hidden = o.hidden ? o.hidden : (gpu ? 4096 : 256);
  const int classes = gpu ? 512 : 32;

  steptrace::Config cfg;
  if (!o.log.empty()) cfg.log_path = o.log;
  cfg.samples_per_step = batch;
  cfg.tokens_per_step = batch;  // one sample = one "token" for this model
  // Training FLOPs per sample: 6 x (matmul parameters), the same convention as the transformer helper.
  cfg.flops_per_token = 6.0 * (double(hidden) * input + double(classes) * hidden);
  cfg.dtype = steptrace::Dtype::fp32;  // cuBLAS SGEMM without TF32: the FP32 peak applies
  // --cpu: the user's choice, said in the lines. Without a GPU, steptrace finds that out itself and
  // says why (no driver, no device) in the lines and one warning.
  if (o.cpu) cfg.gpu = steptrace::Mode::off;
  steptrace::start(cfg);

  Loader loader(input, classes, batch, o.slow_loader_ms);
  std::vector<float> hx;
  std::vector<int> hl;
  if (gpu) {
    GpuModel model(input, hidden, classes, batch);
    steptrace::set_allocator_stats_hook([&model] {
      steptrace::AllocatorStats s;
      s.allocated_bytes = model.arena.allocated;
      s.peak_allocated_bytes = model.arena.peak;
      return s;
    });
    auto timed_from = std::chrono::steady_clock::now();  // independent of steptrace, after 10 steps
    for (int i = 0; i < o.steps; ++i) {
      if (i == 10) timed_from = std::chrono::steady_clock::now();
      TRACE_STEP();
      { TRACE_PHASE(input); loader.next(hx, hl); }
      { TRACE_PHASE(h2d); model.upload(hx, hl); }
      double grad_norm = 0;
      const double loss = model.step(o.lr, grad_norm);
      steptrace::record("loss", loss);
      steptrace::record("grad_norm", grad_norm);
      steptrace::record("lr", o.lr);
      if (i % 10 == 0 || i == o.steps - 1) std::printf("step %4d  loss %.4f\n", i, loss);
    }
    const double timed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - timed_from).count();
    if (o.steps > 10) std::printf("steady_step_ms %.4f\n", timed_ms / (o.steps - 10));
    steptrace::set_allocator_stats_hook(nullptr);
    steptrace::stop();
  } else {
    CpuModel model(input, hidden, classes, batch);
    for (int i = 0; i < o.steps; ++i) {
      TRACE_STEP();
      { TRACE_PHASE(input); loader.next(hx, hl); }
      { TRACE_PHASE(h2d); }  // nothing to copy on the CPU: the phase is there, and ~0
      double grad_norm = 0;
      const double loss = model.step(hx, hl, o.lr, grad_norm);
      steptrace::record("loss", loss);
      steptrace::record("grad_norm", grad_norm);
      steptrace::record("lr", o.lr);
      if (i % 10 == 0 || i == o.steps - 1) std::printf("step %4d  loss %.4f\n", i, loss);
    }
    steptrace::stop();
  }
  return 0;
}
