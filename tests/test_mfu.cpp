// The transformer FLOPs helper and MFU against hand-computed values.
#include <steptrace/steptrace.hpp>
#include <steptrace/core/step_metrics.hpp>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

TEST_CASE("transformer FLOPs per token: GPT-2 small by hand", "[mfu]") {
  // L=12, d=768, T=1024, V=50257, ffn=4d. N = 12*(4*768^2 + 2*768*3072) + 768*50257 = 123,532,032
  // 6N = 741,192,192; attention 12*L*d*T = 12*12*768*1024 = 113,246,208; total 854,438,400.
  TransformerShape s;
  s.n_layers = 12;
  s.d_model = 768;
  s.seq_len = 1024;
  s.vocab_size = 50257;
  CHECK(transformer_matmul_params(s) == 123532032.0);
  CHECK(transformer_flops_per_token(s) == 854438400.0);
  s.include_lm_head = false;
  CHECK(transformer_flops_per_token(s) == 854438400.0 - 6.0 * 768 * 50257);
}

TEST_CASE("transformer FLOPs per token: gated MLP (LLaMA-7B-like) by hand", "[mfu]") {
  // L=32, d=4096, ffn=11008 (SwiGLU: 3 matrices), V=32000, T=2048.
  // N = 32*(4*4096^2 + 3*4096*11008) + 4096*32000 = 6,607,077,376
  // 6N + 12*32*4096*2048 = 39,642,464,256 + 3,221,225,472 = 42,863,689,728
  TransformerShape s;
  s.n_layers = 32;
  s.d_model = 4096;
  s.seq_len = 2048;
  s.vocab_size = 32000;
  s.ffn_hidden = 11008;
  s.gated_mlp = true;
  CHECK(transformer_matmul_params(s) == 6607077376.0);
  CHECK(transformer_flops_per_token(s) == 42863689728.0);
}

TEST_CASE("transformer FLOPs per token is 0 for a missing dimension", "[mfu]") {
  TransformerShape s;
  s.n_layers = 2;
  s.d_model = 0;
  s.seq_len = 16;
  CHECK(transformer_flops_per_token(s) == 0.0);
}

TEST_CASE("MFU = flops_per_token * tokens/s / peak", "[mfu]") {
  const PeakFlops h100 = resolve_peak_flops(std::string_view("NVIDIA H100 80GB HBM3"), Dtype::bf16, 0);
  REQUIRE(h100.flops_per_second);
  CHECK(*h100.flops_per_second == 989.5e12);
  const auto r = compute_mfu(854438400.0, 5e5, h100);
  REQUIRE(r.value);
  CHECK(*r.value == Approx(854438400.0 * 5e5 / 989.5e12));
  CHECK(*r.value == Approx(0.43175).epsilon(1e-4));
  CHECK_FALSE(r.above_one);
}

TEST_CASE("MFU is null with the reason when an input is missing, and flagged above 1", "[mfu]") {
  const PeakFlops peak = resolve_peak_flops(std::nullopt, Dtype::bf16, 1e15);
  CHECK(peak.source == "config peak_flops");
  CHECK(compute_mfu(0, 1e5, peak).value.why() == "flops_per_token is not set");
  CHECK(compute_mfu(1e9, std::nullopt, peak).value.why().find("tokens per step unknown") == 0);
  const PeakFlops unknown = resolve_peak_flops(std::string_view("NVIDIA GeForce RTX 4090"), Dtype::bf16, 0);
  const auto r = compute_mfu(1e9, 1e5, unknown);
  CHECK_FALSE(r.value);
  CHECK(r.value.why().find("RTX 4090") != std::string::npos);
  const auto high = compute_mfu(1e10, 1e6, peak);  // 1e16 / 1e15
  REQUIRE(high.value);
  CHECK(*high.value == Approx(10.0));
  CHECK(high.above_one);
}

TEST_CASE("MFU under model parallelism: tokens per GPU are the replica's tokens over tensor x pipeline x context", "[mfu]") {
  // torchtitan's convention: tps = tokens / (time x tp x pp x cp); mfu = flops_per_token x tps / peak.
  // A replica of tp 4 x pp 2 x cp 2 = 16 GPUs in a world of 64 (data parallel 4) processes 65 536 tokens
  // per second; 6e9 FLOP per token; an H100-like peak of 989e12 FLOP/s:
  // per GPU 65536 / 16 = 4096 tokens/s; MFU = 6e9 x 4096 / 989e12 = 0.024849...
  PeakFlops peak;
  peak.flops_per_second = 989e12;
  ParallelSizes p;
  p.tensor = 4;
  p.pipeline = 2;
  p.context = 2;
  p.world_size = 64;
  const MfuResult r = compute_mfu(6e9, 65536.0, peak, p);
  REQUIRE(r.value);
  CHECK(*r.tokens_per_second_per_gpu == 4096.0);
  CHECK(*r.data_parallel_size == 4);
  CHECK(*r.value == Approx(6e9 * 4096 / 989e12));
  CHECK(*r.value == Approx(0.02484934).epsilon(1e-6));

  // Data parallelism alone: the factor is 1, the value PaLM's formula gives for the rank.
  const MfuResult dp = compute_mfu(6e9, 65536.0, peak, ParallelSizes{1, 1, 1, 64});
  CHECK(*dp.value == Approx(6e9 * 65536 / 989e12));
  CHECK(*dp.data_parallel_size == 64);

  // Sizes that do not divide the world: no MFU, and why.
  const MfuResult bad = compute_mfu(6e9, 65536.0, peak, ParallelSizes{3, 1, 1, 64});
  CHECK_FALSE(bad.value);
  CHECK_FALSE(bad.data_parallel_size);
  CHECK(bad.value.why().find("does not divide world_size 64") != std::string::npos);
  CHECK(*bad.tokens_per_second_per_gpu == Approx(65536.0 / 3));
}

TEST_CASE("model_parallel from the environment reaches the line's mfu_inputs", "[mfu]") {
  const auto log = steptrace_test::fresh_log("mfu_model_parallel");
  auto cfg = steptrace_test::host_config(log);
  cfg.flops_per_token = 6e6;  // with ~4e6 tokens/s per rank: an MFU well below 1
  cfg.peak_flops = 1e15;
  cfg.tokens_per_step = 8192;
  ::setenv("STEPTRACE_TENSOR_PARALLEL", "2", 1);
  ::setenv("STEPTRACE_PIPELINE_PARALLEL", "2", 1);
  ::setenv("STEPTRACE_WORLD_SIZE", "8", 1);
  REQUIRE(start(cfg));
  ::unsetenv("STEPTRACE_TENSOR_PARALLEL");
  ::unsetenv("STEPTRACE_PIPELINE_PARALLEL");
  ::unsetenv("STEPTRACE_WORLD_SIZE");
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
    steptrace_test::spin_for_us(2000);
  }
  stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 3);
  for (const auto& l : lines) {
    INFO(l["mfu_inputs"].dump());
    const auto& m = l["mfu_inputs"];
    CHECK(m["model_parallel"]["tensor"] == 2);
    CHECK(m["model_parallel"]["pipeline"] == 2);
    CHECK(m["model_parallel"]["context"] == 1);
    CHECK(m["model_parallel_size"] == 4);
    CHECK(m["data_parallel_size"] == 2);
    const double tps = l["tokens_per_second"];
    CHECK(m["tokens_per_second_per_gpu"].get<double>() == Approx(tps / 4));
    CHECK(l["estimated_mfu"].get<double>() == Approx(6e6 * tps / 4 / 1e15));
  }
}
