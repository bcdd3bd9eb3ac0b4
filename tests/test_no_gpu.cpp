// No GPU visible (CTest runs this with CUDA_VISIBLE_DEVICES=""): host timings are real, every GPU
// field is null with the CUDA runtime's reason, nothing aborts.
#include <dlfcn.h>
#include <steptrace/steptrace.hpp>

#include "support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

TEST_CASE("without a GPU: host timings, GPU fields null with the reason", "[nogpu]") {
  const auto log = fresh_log("no_gpu");
  steptrace::Config cfg;  // gpu = auto: steptrace looks for a device and finds none
  cfg.log_path = log;
  cfg.summary = false;
  cfg.tokens_per_step = 1000;
  cfg.flops_per_token = 1e9;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    spin_for_us(1000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);  // this machine: a driver or none
  const bool no_driver = driver == nullptr;
  if (driver) dlclose(driver);
  for (const auto& l : lines) {
    CHECK(double(l["forward_time_ms"]) >= 1.0 * 0.99);  // tick clock vs the spin's steady_clock: 1 % allowed
    CHECK(l["device"].is_null());
    const std::string reason = l["null_reasons"]["device"];
    INFO(reason);
    if (no_driver) {  // the runtime would say "CUDA driver version is insufficient": the reason says what is missing
      CHECK(reason.find("no NVIDIA driver found (libcuda.so.1 cannot be loaded") == 0);
      CHECK(reason.find("insufficient") == std::string::npos);
    } else {
      CHECK(reason.find("cudaGetDeviceCount") != std::string::npos);
    }
    CHECK(l["gpu_utilization"].is_null());
    CHECK(std::string(l["null_reasons"]["gpu_utilization"]).find("no GPU measured") == 0);
    CHECK(l["peak_memory_allocated"].is_null());
    // MFU: flops and tokens are known, but without a device there is no trusted peak.
    CHECK(l["estimated_mfu"].is_null());
    CHECK(std::string(l["null_reasons"]["estimated_mfu"]).find("peak_flops") != std::string::npos);
    steptrace_test::require_null_reasons(l);
  }
}

TEST_CASE("without a GPU, an explicit peak still gives an MFU", "[nogpu]") {
  const auto log = fresh_log("no_gpu_peak");
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.tokens_per_step = 1000;
  cfg.flops_per_token = 1e9;
  cfg.peak_flops = 1e15;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 2; ++i) {
    TRACE_STEP();
    spin_for_us(2000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  const double tps = lines[0]["tokens_per_second"];
  CHECK(double(lines[0]["estimated_mfu"]) == Approx(1e9 * tps / 1e15).epsilon(1e-4));
}
