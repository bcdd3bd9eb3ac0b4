// steptrace/core/dtype.hpp - the numeric format MFU is measured against (Config::dtype): its names
// and spellings. Apart from core/metrics.hpp so that config.hpp needs no formula or table.
#pragma once
#include "../version.hpp"
#include <optional>
#include <string_view>

STEPTRACE_BEGIN_NAMESPACE

/// Numeric format the MFU is measured against.
enum class Dtype { bf16, fp16, tf32, fp8, fp32 };

inline std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "bf16" || s == "bfloat16") return Dtype::bf16;
  if (s == "fp16" || s == "float16" || s == "half") return Dtype::fp16;
  if (s == "tf32") return Dtype::tf32;
  if (s == "fp8" || s == "e4m3" || s == "e5m2") return Dtype::fp8;
  if (s == "fp32" || s == "float32" || s == "float") return Dtype::fp32;
  return std::nullopt;
}

inline const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::tf32: return "tf32";
    case Dtype::fp8: return "fp8";
    case Dtype::fp32: return "fp32";
  }
  return "?";
}

STEPTRACE_END_NAMESPACE  // steptrace
