// pm_capacity - how many PM samples CUPTI's hardware buffer holds, and what decoding them costs.
//
//   pm_capacity [buffer_mib] [seconds] [interval_us] [decoded_samples]
// Starts steptrace's PM sampler with a hardware buffer of `buffer_mib`, keeps the GPU busy for
// `seconds` without decoding, then decodes everything once. The buffer keeps the oldest samples, so
// when it overflowed the decoded count is its capacity. A failed decode is followed by a restart of
// sampling (as steptrace's background thread does) and a second, short measurement. Prints JSON.
#include <steptrace/backend/cupti/pm_sampler.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

namespace {
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3;
  const double interval_us = argc > 3 ? std::atof(argv[3]) : 1000;
  const uint32_t decoded = argc > 4 ? static_cast<uint32_t>(std::atoi(argv[4]))
                                    : steptrace::backend::cupti::PmSampler::kMaxDecodedSamples;
  cudaFree(nullptr);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long before = rss_kib();
  steptrace::backend::cupti::PmSampler pm;
  const std::string err = pm.start(0, static_cast<uint64_t>(interval_us * 1000), mib << 20, decoded);
  if (!err.empty()) {
    std::printf("{\"buffer_mib\":%zu,\"error\":\"%s\"}\n", mib, err.c_str());
    return 3;
  }
  const long started = rss_kib();
  spin_kernel<<<1, 1>>>(static_cast<long long>(seconds * clock_khz * 1000.0));
  cudaDeviceSynchronize();
  std::vector<steptrace::CounterSample> samples;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string poll_err = pm.poll(samples);
  const double poll_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  double covered_ms = 0;
  if (!samples.empty()) covered_ms = (samples.back().end_ns - samples.front().start_ns) / 1e6;
  std::printf(
      "{\"buffer_mib\":%zu,\"decoded_samples_per_call\":%u,\"seconds\":%.2f,\"interval_us\":%.0f,\"expected_samples\":%.0f,\"decoded\":%zu,"
      "\"covered_ms\":%.1f,\"overflows\":%llu,\"poll_ms\":%.1f,\"rss_start_kib\":%ld,\"rss_after_poll_kib\":%ld,"
      "\"error\":\"%s\",\"sampler\":\"%s\"}\n",
      mib, decoded, seconds, interval_us, seconds * 1000.0 / (interval_us / 1000.0), samples.size(), covered_ms,
      static_cast<unsigned long long>(pm.overflows()), poll_ms, started - before, rss_kib() - before,
      poll_err.c_str(), pm.describe().c_str());
  if (!poll_err.empty()) {  // what steptrace does after a failed decode: start sampling again
    const std::string again = pm.start(0, static_cast<uint64_t>(interval_us * 1000), mib << 20, decoded);
    spin_kernel<<<1, 1>>>(static_cast<long long>(0.3 * clock_khz * 1000.0));
    cudaDeviceSynchronize();
    std::vector<steptrace::CounterSample> after;
    const std::string err2 = again.empty() ? pm.poll(after) : again;
    std::printf("{\"restarted\":%s,\"decoded_after_restart\":%zu,\"expected_after_restart\":%.0f,\"error\":\"%s\"}\n",
                again.empty() ? "true" : "false", after.size(), 300.0 / (interval_us / 1000.0), err2.c_str());
  }
  pm.stop();
  return 0;
}
