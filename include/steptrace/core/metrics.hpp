// steptrace/core/metrics.hpp - the formulas: transformer FLOPs, peak-FLOPs table, MFU.
// Each fact taken from elsewhere names its source next to it.
#pragma once
#include "../version.hpp"
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtype.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

// ---------------------------------------------------------------------------------------------
// Transformer FLOPs per token
// ---------------------------------------------------------------------------------------------

/// Shape of a decoder-only transformer. `ffn_hidden` 0 means 4 * d_model.
struct TransformerShape {
  int64_t n_layers = 0;
  int64_t d_model = 0;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  int64_t ffn_hidden = 0;
  bool gated_mlp = false;       // SwiGLU-style MLP: three d_model x ffn_hidden matrices instead of two
  bool include_lm_head = true;  // the output projection d_model x vocab_size is a matmul; count it
};

/// Parameters that take part in matrix multiplies: per layer Q,K,V,O (4 d^2) and the MLP
/// (2 or 3 d*ffn), plus the LM head. The input-embedding lookup multiplies nothing, so it is left
/// out (as in PaLM's N; biases and norms are negligible and left out too).
inline double transformer_matmul_params(const TransformerShape& s) {
  const double d = static_cast<double>(s.d_model);
  const double ffn = static_cast<double>(s.ffn_hidden > 0 ? s.ffn_hidden : 4 * s.d_model);
  const double per_layer = 4.0 * d * d + (s.gated_mlp ? 3.0 : 2.0) * d * ffn;
  return static_cast<double>(s.n_layers) * per_layer +
         (s.include_lm_head ? d * static_cast<double>(s.vocab_size) : 0.0);
}

/// Training FLOPs per token (forward + backward), PaLM convention:
///   6 * N + 12 * L * H * Q * T   with H * Q = d_model
/// Source: Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways" (2022), Appendix B.
/// The attention term counts the full T x T score matrix (no causal halving), as PaLM and
/// torchtitan do; Megatron-LM's formula (Narayanan et al. 2021, eq. 3) additionally counts
/// activation recomputation (a factor 4 instead of 3), so its MFU-like numbers are higher
/// ("hardware FLOPs utilization"). Returns 0 when a dimension is missing.
inline double transformer_flops_per_token(const TransformerShape& s) {
  if (s.n_layers <= 0 || s.d_model <= 0 || s.seq_len <= 0) return 0.0;
  return 6.0 * transformer_matmul_params(s) +
         12.0 * static_cast<double>(s.n_layers) * static_cast<double>(s.d_model) *
             static_cast<double>(s.seq_len);
}

// ---------------------------------------------------------------------------------------------
// Peak dense FLOP/s per GPU
// ---------------------------------------------------------------------------------------------

// Dtype, the numeric format MFU is measured against: core/dtype.hpp.

/// One row of the table: dense (not 2:4-sparse) peak TFLOP/s per GPU; NAN where the GPU has no
/// such tensor-core path. fp32 is the non-tensor (CUDA core) rate.
struct PeakFlopsEntry {
  const char* model;    // the token matched in the device name
  const char* variant;  // "sxm", "pcie", "nvl" or "" (any)
  const char* label;    // what the line reports
  double fp32, tf32, bf16, fp16, fp8;
  const char* source;
};

/// Datasheets list tensor rates "with sparsity"; the dense rate is half of it.
inline const std::vector<PeakFlopsEntry>& peak_flops_table() {
  // Never destroyed (docs/architecture.md, "statics").
  static const std::vector<PeakFlopsEntry>* table = new std::vector<PeakFlopsEntry>{
      // NVIDIA H100 Tensor Core GPU datasheet (2023): SXM FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958*
      {"H100", "sxm", "H100 SXM", 67, 494.5, 989.5, 989.5, 1979, "NVIDIA H100 datasheet (dense = sparse/2)"},
      // same datasheet, PCIe column: FP32 51, TF32 756*, BF16/FP16 1513*, FP8 3026*
      {"H100", "pcie", "H100 PCIe", 51, 378, 756.5, 756.5, 1513, "NVIDIA H100 datasheet (dense = sparse/2)"},
      // same datasheet, H100 NVL column: FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341*
      {"H100", "nvl", "H100 NVL", 60, 417.5, 835.5, 835.5, 1670.5, "NVIDIA H100 datasheet (dense = sparse/2)"},
      // NVIDIA H200 datasheet (2024): SXM FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958*
      {"H200", "sxm", "H200 SXM", 67, 494.5, 989.5, 989.5, 1979, "NVIDIA H200 datasheet (dense = sparse/2)"},
      // same datasheet, H200 NVL column: FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341*
      {"H200", "nvl", "H200 NVL", 60, 417.5, 835.5, 835.5, 1670.5, "NVIDIA H200 datasheet (dense = sparse/2)"},
      // NVIDIA GH200 Grace Hopper Superchip datasheet: GPU BF16/FP16 1979*, FP8 3958*, TF32 989*, FP32 67
      {"GH200", "", "GH200", 67, 494.5, 989.5, 989.5, 1979, "NVIDIA GH200 datasheet (dense = sparse/2)"},
      // NVIDIA A100 datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312 (dense); no FP8 path.
      {"A100", "", "A100", 19.5, 156, 312, 312, NAN, "NVIDIA A100 datasheet"},
      // NVIDIA L40S datasheet (2023): FP32 91.6, TF32 366*, BF16/FP16 733*, FP8 1466*
      {"L40S", "", "L40S", 91.6, 183, 366.5, 366.5, 733, "NVIDIA L40S datasheet (dense = sparse/2)"},
      // NVIDIA DGX B200 datasheet, per GPU (8 GPUs): FP8 72 PF*, FP16/BF16 36 PF*, TF32 18 PF*, FP32 600 TF
      {"B200", "", "B200", 75, 1125, 2250, 2250, 4500, "NVIDIA DGX B200 datasheet / 8 GPUs (dense = sparse/2)"},
      // NVIDIA GB200 NVL72 datasheet, per GPU (72 GPUs): FP8 720 PF*, FP16/BF16 360 PF*, TF32 180 PF*, FP32 5760 TF
      {"GB200", "", "GB200", 80, 1250, 2500, 2500, 5000, "NVIDIA GB200 NVL72 datasheet / 72 GPUs (dense = sparse/2)"},
  };
  return *table;
}

/// Splits a device name into upper-case alphanumeric tokens: "NVIDIA A100-SXM4-80GB" ->
/// {NVIDIA, A100, SXM4, 80GB}. Matching whole tokens keeps "H20" from matching "H200".
inline std::vector<std::string> device_name_tokens(std::string_view name) {
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      tokens.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) tokens.push_back(cur);
  return tokens;
}

/// Finds the table row for a CUDA device name, or nullptr for a GPU we have no trusted number for.
/// H100/H200 without a PCIe/NVL token are the SXM parts ("NVIDIA H100 80GB HBM3", "NVIDIA H200").
inline const PeakFlopsEntry* match_peak_flops(std::string_view device_name) {
  const auto tokens = device_name_tokens(device_name);
  auto has = [&](std::string_view t) {
    for (const auto& tok : tokens)
      if (tok == t) return true;
    return false;
  };
  std::string variant = "sxm";
  if (has("PCIE")) variant = "pcie";
  if (has("NVL")) variant = "nvl";
  for (const auto& e : peak_flops_table()) {
    if (!has(e.model)) continue;
    if (e.variant[0] == '\0' || variant == e.variant) return &e;
  }
  return nullptr;
}

/// Peak dense FLOP/s (not TFLOP/s) of an entry for a dtype; nullopt where the path does not exist.
inline std::optional<double> peak_flops_per_second(const PeakFlopsEntry& e, Dtype d) {
  double tflops = NAN;
  switch (d) {
    case Dtype::bf16: tflops = e.bf16; break;
    case Dtype::fp16: tflops = e.fp16; break;
    case Dtype::tf32: tflops = e.tf32; break;
    case Dtype::fp8: tflops = e.fp8; break;
    case Dtype::fp32: tflops = e.fp32; break;
  }
  if (!std::isfinite(tflops)) return std::nullopt;
  return tflops * 1e12;
}

/// The peak the MFU divides by, with where it came from or why there is none.
struct PeakFlops {
  std::optional<double> flops_per_second;
  std::string source;  // "config", or the table label and datasheet
  std::string null_reason;
};

/// Resolves the peak: an override (> 0) wins; else the table by device name and dtype; else null.
inline PeakFlops resolve_peak_flops(std::optional<std::string_view> device_name, Dtype dtype, double override_flops) {
  PeakFlops p;
  if (override_flops > 0) {
    p.flops_per_second = override_flops;
    p.source = "config peak_flops";
    return p;
  }
  if (!device_name) {
    p.null_reason = reason_text(Reason::no_gpu_no_peak);
    return p;
  }
  const PeakFlopsEntry* e = match_peak_flops(*device_name);
  if (!e) {
    p.null_reason = reason_text(Reason::no_peak_entry, std::string(*device_name) +
                                                     "'; set peak_flops (STEPTRACE_PEAK_FLOPS) to the dense FLOP/s of one GPU");
    return p;
  }
  p.flops_per_second = peak_flops_per_second(*e, dtype);
  if (!p.flops_per_second) {
    p.null_reason = std::string(e->label) + " has no dense " + dtype_name(dtype) + " tensor path";
    return p;
  }
  p.source = std::string(e->label) + " " + dtype_name(dtype) + ", " + e->source;
  return p;
}

/// Model FLOPs utilization: achieved model FLOP/s over peak FLOP/s of one GPU.
/// MFU = flops_per_token * tokens_per_second / peak (PaLM, Appendix B). tokens_per_second is this
/// rank's throughput, so the peak is that of one GPU.
inline double model_flops_utilization(double flops_per_token, double tokens_per_second, double peak_flops_per_second) {
  return flops_per_token * tokens_per_second / peak_flops_per_second;
}

STEPTRACE_END_NAMESPACE  // steptrace
