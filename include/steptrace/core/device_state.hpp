// steptrace/core/device_state.hpp - power, SM clock, temperature and clock-event reasons of the GPU
// over a step, from readings taken by the background thread (NVML). Pure C++17.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

/// One reading. Each field is absent when it could not be read (unsupported GPU, VM policy).
struct DeviceStateSample {
  int64_t time_ns = 0;  // monotonic_ns()
  std::optional<double> power_w;
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
  std::optional<uint64_t> clock_event_reasons;  // NVML clock-event ("throttle") reason bit mask
};

/// Names of NVML's clock-event reason bits. Bit values from nvml.h (nvmlClocksEventReasonGpuIdle
/// 0x1 ... nvmlClocksEventReasonDisplayClockSetting 0x100).
inline std::vector<std::string> clock_event_reason_names(uint64_t mask) {
  static const std::pair<uint64_t, const char*> bits[] = {
      {0x1, "gpu_idle"},       {0x2, "applications_clocks_setting"}, {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},    {0x10, "sync_boost"},                 {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"}, {0x80, "hw_power_brake_slowdown"}, {0x100, "display_clock_setting"}};
  std::vector<std::string> out;
  for (const auto& [bit, name] : bits)
    if (mask & bit) out.emplace_back(name);
  return out;
}

struct DeviceStateSummary {
  uint32_t samples = 0;  // readings taken within the step
  std::optional<double> power_w_mean, power_w_max;
  std::optional<double> sm_clock_mhz_mean, sm_clock_mhz_min;
  std::optional<double> temperature_c_max;
  std::optional<uint64_t> clock_event_reasons;  // OR over the step's readings
};

/// Summarises the readings taken within [begin_ns, end_ns]; a step shorter than the reading period
/// gets the latest reading before its end (samples = 0 then says so); nullopt without any reading
/// within or before the step.
inline std::optional<DeviceStateSummary> summarize_device_state(const std::deque<DeviceStateSample>& readings,
                                                                int64_t begin_ns, int64_t end_ns) {
  DeviceStateSummary out;
  std::vector<const DeviceStateSample*> in;
  const DeviceStateSample* before = nullptr;
  for (const auto& r : readings) {
    if (r.time_ns <= end_ns) before = &r;
    if (r.time_ns >= begin_ns && r.time_ns <= end_ns) in.push_back(&r);
  }
  out.samples = static_cast<uint32_t>(in.size());
  if (in.empty() && before) in.push_back(before);
  if (in.empty()) return std::nullopt;
  double p_sum = 0, c_sum = 0;
  uint32_t p_n = 0, c_n = 0;
  for (const auto* r : in) {
    if (r->power_w) {
      p_sum += *r->power_w, ++p_n;
      out.power_w_max = std::max(out.power_w_max.value_or(*r->power_w), *r->power_w);
    }
    if (r->sm_clock_mhz) {
      c_sum += *r->sm_clock_mhz, ++c_n;
      out.sm_clock_mhz_min = std::min(out.sm_clock_mhz_min.value_or(*r->sm_clock_mhz), *r->sm_clock_mhz);
    }
    if (r->temperature_c) out.temperature_c_max = std::max(out.temperature_c_max.value_or(*r->temperature_c), *r->temperature_c);
    if (r->clock_event_reasons) out.clock_event_reasons = out.clock_event_reasons.value_or(0) | *r->clock_event_reasons;
  }
  if (p_n) out.power_w_mean = p_sum / p_n;
  if (c_n) out.sm_clock_mhz_mean = c_sum / c_n;
  return out;
}

STEPTRACE_END_NAMESPACE  // steptrace
