// Device-name matching in the peak-FLOPs table: robust to spelling, never a fallback guess.
#include <steptrace/steptrace.hpp>

#include "support.hpp"

using namespace steptrace;

namespace {
std::string label_of(const char* name) {
  const PeakFlopsEntry* e = match_peak_flops(name);
  return e ? e->label : "null";
}
}  // namespace

TEST_CASE("CUDA device names map to the right part", "[peak]") {
  CHECK(label_of("NVIDIA H100 80GB HBM3") == "H100 SXM");
  CHECK(label_of("NVIDIA H100 SXM5 80GB") == "H100 SXM");
  CHECK(label_of("NVIDIA H100 PCIe") == "H100 PCIe");
  CHECK(label_of("NVIDIA H100 NVL") == "H100 NVL");
  CHECK(label_of("NVIDIA H200") == "H200 SXM");
  CHECK(label_of("NVIDIA H200 NVL") == "H200 NVL");
  CHECK(label_of("NVIDIA GH200 480GB") == "GH200");
  CHECK(label_of("NVIDIA A100-SXM4-80GB") == "A100");
  CHECK(label_of("NVIDIA A100-PCIE-40GB") == "A100");
  CHECK(label_of("NVIDIA A100 80GB PCIe") == "A100");
  CHECK(label_of("NVIDIA L40S") == "L40S");
  CHECK(label_of("NVIDIA B200") == "B200");
  CHECK(label_of("NVIDIA GB200") == "GB200");
  CHECK(label_of("nvidia h100 pcie") == "H100 PCIe");  // case does not matter
}

TEST_CASE("look-alike and unknown GPUs get no entry", "[peak]") {
  CHECK(label_of("NVIDIA H20") == "null");      // not an H200
  CHECK(label_of("NVIDIA H800") == "null");
  CHECK(label_of("NVIDIA L40") == "null");      // not an L40S
  CHECK(label_of("NVIDIA A10") == "null");      // not an A100
  CHECK(label_of("NVIDIA A1000") == "null");
  CHECK(label_of("Tesla V100-SXM2-16GB") == "null");
  CHECK(label_of("NVIDIA GeForce RTX 4090") == "null");
  CHECK(label_of("") == "null");
}

TEST_CASE("dense peaks per dtype; a missing path is null, not a guess", "[peak]") {
  const PeakFlopsEntry* h100 = match_peak_flops("NVIDIA H100 80GB HBM3");
  REQUIRE(h100);
  CHECK(*peak_flops_per_second(*h100, Dtype::bf16) == 989.5e12);
  CHECK(*peak_flops_per_second(*h100, Dtype::fp8) == 1979e12);
  CHECK(*peak_flops_per_second(*h100, Dtype::tf32) == 494.5e12);
  const PeakFlopsEntry* a100 = match_peak_flops("NVIDIA A100-SXM4-40GB");
  REQUIRE(a100);
  CHECK(*peak_flops_per_second(*a100, Dtype::bf16) == 312e12);
  CHECK_FALSE(peak_flops_per_second(*a100, Dtype::fp8));
  const auto p = resolve_peak_flops(std::string_view("NVIDIA A100-SXM4-40GB"), Dtype::fp8, 0);
  CHECK_FALSE(p.flops_per_second);
  CHECK(p.null_reason.find("no dense fp8") != std::string::npos);
}

TEST_CASE("every table row is plausible: dense bf16 between 100 and 3000 TFLOP/s, fp32 below bf16", "[peak]") {
  for (const auto& e : peak_flops_table()) {
    INFO(e.label);
    CHECK(e.bf16 >= 100);
    CHECK(e.bf16 <= 3000);
    CHECK(e.fp32 < e.bf16);
    CHECK(e.bf16 == e.fp16);
  }
}

TEST_CASE("an override wins over the table", "[peak]") {
  const auto p = resolve_peak_flops(std::string_view("NVIDIA H100 80GB HBM3"), Dtype::bf16, 7.5e14);
  CHECK(*p.flops_per_second == 7.5e14);
  CHECK(p.source == "config peak_flops");
}
