// steptrace/core/nccl_names.hpp - NCCL kernels told apart by their names, and the collective each
// runs. Pure.
#pragma once
#include "../version.hpp"
#include <string>
#include <string_view>

STEPTRACE_BEGIN_NAMESPACE

inline bool is_nccl_kernel(std::string_view mangled_or_plain) {
  // NCCL's kernels are "ncclKernel_*" / "ncclDevKernel_*" (mangled: "_Z..ncclDevKernel...").
  return mangled_or_plain.find("nccl") != std::string_view::npos &&
         (mangled_or_plain.find("ncclKernel") != std::string_view::npos ||
          mangled_or_plain.find("ncclDevKernel") != std::string_view::npos);
}

/// The collective an NCCL kernel runs ("AllReduce", "AllGather", "ReduceScatter", "Broadcast",
/// "SendRecv", ...), read from its name ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)"); "other" when
/// the name carries none (ncclDevKernel_Generic...).
inline std::string nccl_collective(std::string_view name) {
  for (std::string_view prefix : {"ncclDevKernel_", "ncclKernel_"}) {
    const auto at = name.find(prefix);
    if (at == std::string_view::npos) continue;
    std::string_view rest = name.substr(at + prefix.size());
    const auto end = rest.find_first_of("_(<");
    std::string_view op = rest.substr(0, end);
    if (op.empty() || op == "Generic") return "other";
    return std::string(op);
  }
  return "other";
}

STEPTRACE_END_NAMESPACE
