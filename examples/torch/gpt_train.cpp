// gpt_train - a small GPT trained with libtorch on synthetic tokens, instrumented with steptrace.
//
//   gpt_train [--steps N] [--batch B] [--seq T] [--layers L] [--dmodel D] [--heads H] [--vocab V]
//             [--attention sdpa|naive] [--loader-ms MS] [--pageable] [--log PATH]
//             [--kineto-steps K --kineto-trace PATH] [--torch-profiler]   (torch.profiler comparisons)
//
// Variants that reproduce the classic bottlenecks:
//   --loader-ms 30                      a slow CPU data loader            -> INPUT-BOUND
//   --extra-input-mb 512 --pageable     512 MB of pageable features a step -> H2D-BOUND (pinned: less)
//   --attention naive                   a one-block softmax in attention  -> LOW-SM-EFFICIENCY in "attention"
//   --batch 1 --seq 32 --layers 12 --dmodel 128   tiny kernels          -> HOST/LAUNCH-BOUND
#include <steptrace/steptrace.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

void naive_softmax_rows(const float* x, float* y, long rows, int cols, cudaStream_t stream);

// A steptrace phase that is also a torch.profiler user annotation ("phase:<name>"), so the two tools can
// be compared phase by phase (scripts/compare_kineto.py).
#define PHASE(name) \
  TRACE_PHASE(name); \
  RECORD_USER_SCOPE("phase:" #name)

namespace {

struct Options {
  int steps = 100, batch = 16, seq = 512, layers = 6, dmodel = 512, heads = 8, vocab = 8192, loader_ms = 0;
  int kineto_steps = 0;     // after steptrace's steps: this many more under torch.profiler (Kineto)
  bool torch_profiler = false;  // every step under torch.profiler (the overhead benchmark's comparison)
  std::string kineto_trace = "kineto_trace.json";
  int extra_input_mb = 0;  // a float "features" tensor per step beside the tokens (images, audio...)
  bool naive = false, pageable = false;
  std::string log;
};

const char kHelp[] =
    "gpt_train - a small GPT trained with libtorch on synthetic tokens, instrumented with steptrace.\n"
    "usage: gpt_train [options]\n"
    "  --steps N             training steps (default 100)\n"
    "  --batch B             sequences per step (default 16)\n"
    "  --seq T               tokens per sequence (default 512)\n"
    "  --layers L            transformer blocks (default 6)\n"
    "  --dmodel D            model width (default 512)\n"
    "  --heads H             attention heads (default 8)\n"
    "  --vocab V             vocabulary size (default 8192)\n"
    "  --attention A         sdpa (default) or naive (a one-block softmax: LOW-SM-EFFICIENCY)\n"
    "  --loader-ms MS        a data loader that sleeps MS ms per batch (INPUT-BOUND)\n"
    "  --extra-input-mb MB   MB of float features copied to the GPU each step (with --pageable: H2D-BOUND)\n"
    "  --pageable            copy the features from pageable memory (default: pinned)\n"
    "  --kineto-steps K      after steptrace's steps, K more under torch.profiler (the comparison)\n"
    "  --kineto-trace PATH   where those steps' Kineto trace goes (default kineto_trace.json)\n"
    "  --torch-profiler      every step under torch.profiler (the overhead benchmark's comparison)\n"
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
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpt_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--steps") o.steps = std::stoi(next());
    else if (a == "--batch") o.batch = std::stoi(next());
    else if (a == "--seq") o.seq = std::stoi(next());
    else if (a == "--layers") o.layers = std::stoi(next());
    else if (a == "--dmodel") o.dmodel = std::stoi(next());
    else if (a == "--heads") o.heads = std::stoi(next());
    else if (a == "--vocab") o.vocab = std::stoi(next());
    else if (a == "--loader-ms") o.loader_ms = std::stoi(next());
    else if (a == "--attention") o.naive = next() == "naive";
    else if (a == "--pageable") o.pageable = true;
    else if (a == "--extra-input-mb") o.extra_input_mb = std::stoi(next());
    else if (a == "--kineto-steps") o.kineto_steps = std::stoi(next());
    else if (a == "--kineto-trace") o.kineto_trace = next();
    else if (a == "--torch-profiler") o.torch_profiler = true;
    else if (a == "--log") o.log = next();
    else {
      std::fprintf(stderr, "gpt_train: unknown argument %s\n%s", a.c_str(), kHelp);
      std::exit(2);
    }
  }
  return o;
}

// softmax over the last dimension with the naive kernel forward, and the exact softmax gradient backward.
struct NaiveSoftmax : torch::autograd::Function<NaiveSoftmax> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x) {
    auto xf = x.to(torch::kFloat32).contiguous();
    auto yf = torch::empty_like(xf);
    const int cols = static_cast<int>(xf.size(-1));
    naive_softmax_rows(xf.data_ptr<float>(), yf.data_ptr<float>(), static_cast<long>(xf.numel() / cols), cols,
                       at::cuda::getCurrentCUDAStream());
    auto y = yf.to(x.scalar_type());
    ctx->save_for_backward({y});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    auto y = ctx->get_saved_variables()[0];
    auto g = grad[0];
    return {y * (g - (g * y).sum(-1, true))};
  }
};

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
  int64_t heads;
  bool naive;
  BlockImpl(int64_t d, int64_t h, bool naive_attention) : heads(h), naive(naive_attention) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    qkv = register_module("qkv", torch::nn::Linear(d, 3 * d));
    proj = register_module("proj", torch::nn::Linear(d, d));
    fc1 = register_module("fc1", torch::nn::Linear(d, 4 * d));
    fc2 = register_module("fc2", torch::nn::Linear(4 * d, d));
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto parts = qkv(ln1(x)).view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];
    torch::Tensor y;
    {
      TRACE_PHASE_NAMED("attention");
      RECORD_USER_SCOPE("phase:attention");
      if (naive) {
        auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(C / heads));
        auto mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
        att = att.masked_fill(mask, -1e4);
        y = torch::matmul(NaiveSoftmax::apply(att), v);
      } else {
        y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
      }
    }
    x = x + proj(y.transpose(1, 2).reshape({B, T, C}));
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
  GptImpl(const Options& o) {
    tok = register_module("tok", torch::nn::Embedding(o.vocab, o.dmodel));
    pos = register_module("pos", torch::nn::Embedding(o.seq, o.dmodel));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < o.layers; ++i) blocks->push_back(Block(o.dmodel, o.heads, o.naive));
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dmodel})));
    head = register_module("head", torch::nn::Linear(o.dmodel, o.vocab));
  }
  torch::Tensor forward(torch::Tensor idx) {
    auto positions = torch::arange(idx.size(1), idx.options());
    auto x = tok(idx) + pos(positions);
    for (auto& b : *blocks) x = b->as<Block>()->forward(x);
    return head(ln(x));
  }
};
TORCH_MODULE(Gpt);

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gpt_train: needs a CUDA GPU\n");
    return 1;
  }
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(0);
  Gpt model(o);
  model->to(device, torch::kBFloat16);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-4));

  steptrace::Config cfg;
  if (!o.log.empty()) cfg.log_path = o.log;
  cfg.tokens_per_step = double(o.batch) * o.seq;
  cfg.samples_per_step = o.batch;
  steptrace::TransformerShape shape;
  shape.n_layers = o.layers;
  shape.d_model = o.dmodel;
  shape.seq_len = o.seq;
  shape.vocab_size = o.vocab;
  cfg.flops_per_token = steptrace::transformer_flops_per_token(shape);
  cfg.dtype = steptrace::Dtype::bf16;
  if (o.torch_profiler) cfg.cupti = steptrace::Mode::off;  // one CUPTI client at a time: Kineto has it
  steptrace::start(cfg);
  // The caching allocator's own numbers, peaks reset every step.
  steptrace::set_allocator_stats_hook([] {
    using namespace c10::cuda::CUDACachingAllocator;
    const auto stats = getDeviceStats(0);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    steptrace::AllocatorStats s;
    s.allocated_bytes = stats.allocated_bytes[agg].current;
    s.peak_allocated_bytes = stats.allocated_bytes[agg].peak;
    s.reserved_bytes = stats.reserved_bytes[agg].current;
    s.peak_reserved_bytes = stats.reserved_bytes[agg].peak;
    s.alloc_retries = stats.num_alloc_retries;
    s.ooms = stats.num_ooms;
    resetPeakStats(0);
    return s;
  });

  // The loader's extra per-step input, allocated once (pinned unless --pageable).
  torch::Tensor host_features;
  if (o.extra_input_mb > 0) {
    host_features = torch::ones({int64_t(o.extra_input_mb) << 18}, torch::kFloat32);
    if (!o.pageable) host_features = host_features.pin_memory();
  }
  // Timed independently of steptrace (for the overhead benchmark): steps after the first 10.
  auto timed_from = std::chrono::steady_clock::now();
  auto train_step = [&](int step) {
    TRACE_STEP();
    torch::Tensor tokens, inputs, targets, features;
    {
      PHASE(input);  // a CPU data loader: synthetic tokens with a learnable pattern
      if (o.loader_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.loader_ms));
      auto start = torch::randint(o.vocab, {o.batch, 1}, torch::kLong);
      tokens = (start + torch::arange(o.seq + 1, torch::kLong)).remainder(o.vocab);
      if (o.extra_input_mb > 0) features = host_features;
      if (!o.pageable) tokens = tokens.pin_memory();
    }
    {
      PHASE(h2d);
      tokens = tokens.to(device, /*non_blocking=*/!o.pageable);
      if (features.defined()) features = features.to(device, /*non_blocking=*/!o.pageable);
      inputs = tokens.slice(1, 0, o.seq);
      targets = tokens.slice(1, 1, o.seq + 1);
    }
    torch::Tensor loss;
    {
      PHASE(forward);
      auto logits = model->forward(inputs);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, o.vocab}).to(torch::kFloat32), targets.reshape({-1}));
    }
    {
      PHASE(backward);
      opt.zero_grad();
      loss.backward();
    }
    {
      PHASE(optimizer);
      opt.step();
    }
    const double loss_value = loss.item<double>();  // the step's synchronization
    steptrace::record("loss", loss_value);
    if (step % 20 == 0 || step == o.steps - 1) std::printf("step %4d  loss %.4f\n", step, loss_value);
  };
  namespace prof = torch::autograd::profiler;
  const torch::profiler::impl::ProfilerConfig pcfg(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU,
                                                                 torch::profiler::impl::ActivityType::CUDA};
  if (o.torch_profiler) {  // torch.profiler records every step (CPU ops and CUDA kernels), as a user would
    prof::prepareProfiler(pcfg, activities);
    prof::enableProfiler(pcfg, activities);
  }
  for (int step = 0; step < o.steps; ++step) {
    if (step == 10) timed_from = std::chrono::steady_clock::now();
    train_step(step);
  }
  const double timed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - timed_from).count();
  if (o.steps > 10) std::printf("steady_step_ms %.4f\n", timed_ms / (o.steps - 10));
  if (o.torch_profiler) {  // outside the timed steps: collecting and writing the trace
    torch::cuda::synchronize();
    auto result = prof::disableProfiler();
    result->save(o.kineto_trace);
    std::printf("torch.profiler: %d steps written to %s\n", o.steps, o.kineto_trace.c_str());
  }
  steptrace::set_allocator_stats_hook(nullptr);
  const auto summary = steptrace::stop();
  std::printf("diagnosis: %s (%.0f %% of steps)\n", summary.diagnosis.c_str(), 100 * summary.diagnosis_fraction);
  if (o.kineto_steps > 0) {
    // The same training, more steps, under torch.profiler. steptrace has released CUPTI in stop():
    // only one CUPTI client can run at a time, so the two tools measure adjacent steps.
    prof::prepareProfiler(pcfg, activities);
    train_step(o.steps);  // warm-up under the profiler
    prof::enableProfiler(pcfg, activities);
    for (int k = 0; k < o.kineto_steps; ++k) train_step(o.steps + 1 + k);
    torch::cuda::synchronize();
    auto result = prof::disableProfiler();
    result->save(o.kineto_trace);
    std::printf("kineto: %d steps written to %s\n", o.kineto_steps, o.kineto_trace.c_str());
  }
  return 0;
}
