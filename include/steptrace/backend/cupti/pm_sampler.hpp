// steptrace/backend/cupti/pm_sampler.hpp - hardware counters read in-process with CUPTI's PM sampling
// (cupti_pmsampling.h + the profiler host API, CUDA 12.6+): the GPU samples its performance monitors
// every `interval` ns into a hardware buffer; the background thread decodes that buffer and evaluates
// each sample's metrics. Nothing here runs on the training thread after start().
//
// Metrics, each a fraction 0-1 of the sample's elapsed time (metric names are Nsight Compute's / the
// CUPTI profiler's, see `ncu --query-metrics`):
//   sm_active      sm__cycles_active.avg.pct_of_peak_sustained_elapsed  (cycles with >= 1 warp resident,
//                  averaged over SMs; what DCGM calls SM_ACTIVE, DCGM_FI_PROF_SM_ACTIVE)
//   tensor_active  the first available of sm__pipe_tensor_cycles_active / ..._op_gmma_ / ..._op_hmma_
//                  (.avg.pct_of_peak_sustained_elapsed): the tensor pipe's active cycles (DCGM PIPE_TENSOR_ACTIVE)
//   dram           dram__throughput.avg.pct_of_peak_sustained_elapsed (DCGM DRAM_ACTIVE)
//   occupancy      sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy)
// A metric the chip or the sampler does not offer stays unavailable (NaN) and its field null.
#pragma once
#include "../../version.hpp"
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include "../../core/counters.hpp"
#include "result.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

/// A zeroed CUPTI parameter struct with its size set (the API's convention).
template <class T>
T params(std::size_t struct_size) {
  T p;
  std::memset(&p, 0, sizeof p);
  p.structSize = struct_size;
  return p;
}



class PmSampler {
 public:
  static constexpr std::size_t kHardwareBufferBytes = std::size_t{64} << 20;  // Config::counters_buffer_mib's default; CUPTI's
  // Samples decoded per call. The decode image costs ~34 KiB per sample on GH100 (2048 took 68 MiB);
  // poll() loops, and the background thread looks every few ms, when ~10 samples are new at 1 ms.
  static constexpr uint32_t kMaxDecodedSamples = 128;

  PmSampler() = default;
  PmSampler(const PmSampler&) = delete;
  PmSampler& operator=(const PmSampler&) = delete;
  ~PmSampler() { stop(); }

  /// Configures and starts sampling on `device` every `interval_ns`. Returns "" or why not (the
  /// reason goes into the lines' null_reasons verbatim).
  std::string start(int device, uint64_t interval_ns, std::size_t hardware_buffer_bytes = kHardwareBufferBytes,
                    uint32_t decoded_samples = kMaxDecodedSamples) {
    stop();
    hardware_buffer_bytes_ = hardware_buffer_bytes;
    auto init = params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
    if (auto r = cuptiProfilerInitialize(&init); r != CUPTI_SUCCESS) return fail("cuptiProfilerInitialize", r);
    profiler_initialized_ = true;

    auto chip = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
    chip.deviceIndex = static_cast<size_t>(device);
    if (auto r = cuptiDeviceGetChipName(&chip); r != CUPTI_SUCCESS) return fail("cuptiDeviceGetChipName", r);
    chip_ = chip.pChipName ? chip.pChipName : "";

    auto avail = params<CUpti_PmSampling_GetCounterAvailability_Params>(CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE);
    avail.deviceIndex = static_cast<size_t>(device);
    if (auto r = cuptiPmSamplingGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
      return fail("cuptiPmSamplingGetCounterAvailability", r);
    availability_.assign(avail.counterAvailabilityImageSize, 0);
    avail.pCounterAvailabilityImage = availability_.data();
    if (auto r = cuptiPmSamplingGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
      return fail("cuptiPmSamplingGetCounterAvailability", r);

    auto host = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    host.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    host.pChipName = chip_.c_str();
    host.pCounterAvailabilityImage = availability_.data();
    if (auto r = cuptiProfilerHostInitialize(&host); r != CUPTI_SUCCESS) return fail("cuptiProfilerHostInitialize", r);
    host_ = host.pHostObject;

    choose_metrics();
    if (metrics_.empty()) return fail_text("none of steptrace's PM sampling metrics exists on chip " + chip_);
    std::string err = build_config();
    if (!err.empty()) return fail_text(err);

    auto enable = params<CUpti_PmSampling_Enable_Params>(CUpti_PmSampling_Enable_Params_STRUCT_SIZE);
    enable.deviceIndex = static_cast<size_t>(device);
    if (auto r = cuptiPmSamplingEnable(&enable); r != CUPTI_SUCCESS) return fail("cuptiPmSamplingEnable", r);
    sampler_ = enable.pPmSamplingObject;

    auto set = params<CUpti_PmSampling_SetConfig_Params>(CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE);
    set.pPmSamplingObject = sampler_;
    set.configSize = config_.size();
    set.pConfig = config_.data();
    set.hardwareBufferSize = hardware_buffer_bytes_;
    set.samplingInterval = interval_ns;
    set.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    set.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
    if (auto r = cuptiPmSamplingSetConfig(&set); r != CUPTI_SUCCESS) return fail("cuptiPmSamplingSetConfig", r);

    std::vector<const char*> names = metric_cstrs();
    auto size = params<CUpti_PmSampling_GetCounterDataSize_Params>(CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE);
    size.pPmSamplingObject = sampler_;
    size.pMetricNames = names.data();
    size.numMetrics = names.size();
    size.maxSamples = decoded_samples;
    if (auto r = cuptiPmSamplingGetCounterDataSize(&size); r != CUPTI_SUCCESS)
      return fail("cuptiPmSamplingGetCounterDataSize", r);
    counter_data_.assign(size.counterDataSize, 0);
    if (!reset_counter_data()) return fail_text("cuptiPmSamplingCounterDataImageInitialize failed");

    auto go = params<CUpti_PmSampling_Start_Params>(CUpti_PmSampling_Start_Params_STRUCT_SIZE);
    go.pPmSamplingObject = sampler_;
    if (auto r = cuptiPmSamplingStart(&go); r != CUPTI_SUCCESS) return fail("cuptiPmSamplingStart", r);
    started_ = true;
    return {};
  }

  /// Decodes what the hardware buffer holds and appends the completed samples. Background thread
  /// only. Returns "" or the error (sampling is then stopped).
  std::string poll(std::vector<CounterSample>& out) {
    if (!started_) return "PM sampling not running";
    ++polls_;
    for (int round = 0; round < 256; ++round) {  // bounded: at most 256 x kMaxDecodedSamples per call
      const int64_t t0 = now_ns();
      auto decode = params<CUpti_PmSampling_DecodeData_Params>(CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE);
      decode.pPmSamplingObject = sampler_;
      decode.pCounterDataImage = counter_data_.data();
      decode.counterDataImageSize = counter_data_.size();
      if (auto r = cuptiPmSamplingDecodeData(&decode); r != CUPTI_SUCCESS) {
        const std::string e = result_text("cuptiPmSamplingDecodeData", r);
        stop();
        return e;
      }
      if (decode.overflow) ++overflows_;
      auto info = params<CUpti_PmSampling_GetCounterDataInfo_Params>(CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE);
      info.pCounterDataImage = counter_data_.data();
      info.counterDataImageSize = counter_data_.size();
      if (cuptiPmSamplingGetCounterDataInfo(&info) != CUPTI_SUCCESS) break;
      const int64_t t1 = now_ns();
      decode_ns_ += t1 - t0;
      std::vector<const char*> names = metric_cstrs();
      std::vector<double> values(names.size());
      for (size_t i = 0; i < info.numCompletedSamples; ++i) {
        auto si = params<CUpti_PmSampling_CounterData_GetSampleInfo_Params>(CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE);
        si.pPmSamplingObject = sampler_;
        si.pCounterDataImage = counter_data_.data();
        si.counterDataImageSize = counter_data_.size();
        si.sampleIndex = i;
        if (cuptiPmSamplingCounterDataGetSampleInfo(&si) != CUPTI_SUCCESS) continue;
        auto ev = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
        ev.pHostObject = host_;
        ev.pCounterDataImage = counter_data_.data();
        ev.counterDataImageSize = counter_data_.size();
        ev.rangeIndex = i;
        ev.ppMetricNames = names.data();
        ev.numMetrics = names.size();
        ev.pMetricValues = values.data();
        if (cuptiProfilerHostEvaluateToGpuValues(&ev) != CUPTI_SUCCESS) continue;
        CounterSample s;  // fractions; the GPU timestamps are on CUPTI's clock (cuptiGetTimestamp)
        s.start_ns = static_cast<int64_t>(si.startTimestamp);
        s.end_ns = static_cast<int64_t>(si.endTimestamp);
        for (size_t m = 0; m < metrics_.size(); ++m) {
          const double v = values[m] / 100.0;  // the metrics are percentages
          switch (metrics_[m].field) {
            case Field::sm_active: s.sm_active = v; break;
            case Field::tensor_active: s.tensor_active = v; break;
            case Field::dram: s.dram = v; break;
            case Field::occupancy: s.occupancy = v; break;
          }
        }
        out.push_back(s);
        ++samples_;
      }
      const bool more = decode.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL;
      const int64_t t2 = now_ns();
      evaluate_ns_ += t2 - t1;
      const bool reset = reset_counter_data();
      reset_ns_ += now_ns() - t2;
      if (!reset) {
        stop();
        return "cuptiPmSamplingCounterDataImageInitialize failed";
      }
      if (!more) break;
    }
    return {};
  }

  /// Sampling stopped, configuration kept (cuptiPmSamplingStop); poll() still decodes what the
  /// hardware buffer holds. Background thread only.
  std::string pause() {
    if (!started_ || paused_) return {};
    auto st = params<CUpti_PmSampling_Stop_Params>(CUpti_PmSampling_Stop_Params_STRUCT_SIZE);
    st.pPmSamplingObject = sampler_;
    if (auto r = cuptiPmSamplingStop(&st); r != CUPTI_SUCCESS) return result_text("cuptiPmSamplingStop", r);
    paused_ = true;
    return {};
  }
  /// Sampling again with the same configuration (cuptiPmSamplingStart).
  std::string resume() {
    if (!started_ || !paused_) return {};
    auto go = params<CUpti_PmSampling_Start_Params>(CUpti_PmSampling_Start_Params_STRUCT_SIZE);
    go.pPmSamplingObject = sampler_;
    if (auto r = cuptiPmSamplingStart(&go); r != CUPTI_SUCCESS) return result_text("cuptiPmSamplingStart", r);
    paused_ = false;
    return {};
  }

  void stop() {
    if (sampler_) {
      if (started_ && !paused_) {
        auto st = params<CUpti_PmSampling_Stop_Params>(CUpti_PmSampling_Stop_Params_STRUCT_SIZE);
        st.pPmSamplingObject = sampler_;
        cuptiPmSamplingStop(&st);
      }
      auto d = params<CUpti_PmSampling_Disable_Params>(CUpti_PmSampling_Disable_Params_STRUCT_SIZE);
      d.pPmSamplingObject = sampler_;
      cuptiPmSamplingDisable(&d);
      sampler_ = nullptr;
    }
    started_ = false;
    paused_ = false;
    if (host_) {
      auto d = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
      d.pHostObject = host_;
      cuptiProfilerHostDeinitialize(&d);
      host_ = nullptr;
    }
    if (profiler_initialized_) {
      auto d = params<CUpti_Profiler_DeInitialize_Params>(CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE);
      cuptiProfilerDeInitialize(&d);
      profiler_initialized_ = false;
    }
  }

  bool running() const { return started_; }
  uint64_t overflows() const { return overflows_; }
  /// What the decodes cost so far (wall time on the calling thread), for the log at the end.
  std::string cost() const {
    if (polls_ == 0) return {};
    char b[200];
    std::snprintf(b, sizeof b, "%llu samples in %llu polls: decode %.1f ms, evaluate %.1f ms, reset %.1f ms",
                  static_cast<unsigned long long>(samples_), static_cast<unsigned long long>(polls_), decode_ns_ / 1e6,
                  evaluate_ns_ / 1e6, reset_ns_ / 1e6);
    return b;
  }
  const std::string& chip() const { return chip_; }
  /// "field=metric" for each metric in use, for the log and the docs.
  std::string describe() const {
    std::string s;
    for (const auto& m : metrics_) s += (s.empty() ? "" : ", ") + std::string(field_name(m.field)) + "=" + m.name;
    return s + "; hardware buffer " + std::to_string(hardware_buffer_bytes_ >> 20) + " MiB, decode image " +
           std::to_string(counter_data_.size() >> 10) + " KiB, config image " + std::to_string(config_.size() >> 10) +
           " KiB";
  }

 private:
  enum class Field { sm_active, tensor_active, dram, occupancy };
  struct Metric {
    Field field;
    std::string name;
  };
  static const char* field_name(Field f) {
    switch (f) {
      case Field::sm_active: return "sm_active";
      case Field::tensor_active: return "tensor_active";
      case Field::dram: return "dram";
      default: return "occupancy";
    }
  }

  bool metric_exists(const char* name) {
    auto p = params<CUpti_Profiler_Host_GetMetricProperties_Params>(CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE);
    p.pHostObject = host_;
    p.pMetricName = name;
    return cuptiProfilerHostGetMetricProperties(&p) == CUPTI_SUCCESS;
  }

  void choose_metrics() {
    metrics_.clear();
    const std::vector<std::pair<Field, std::vector<const char*>>> candidates = {
        {Field::sm_active, {"sm__cycles_active.avg.pct_of_peak_sustained_elapsed"}},
        {Field::tensor_active,
         {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
          "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
          "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"}},
        {Field::dram, {"dram__throughput.avg.pct_of_peak_sustained_elapsed"}},
        {Field::occupancy, {"sm__warps_active.avg.pct_of_peak_sustained_active"}},
    };
    for (const auto& [field, names] : candidates)
      for (const char* n : names)
        if (metric_exists(n)) {
          metrics_.push_back({field, n});
          break;
        }
  }

  std::vector<const char*> metric_cstrs() const {
    std::vector<const char*> v;
    for (const auto& m : metrics_) v.push_back(m.name.c_str());
    return v;
  }

  /// A config image for the chosen metrics in one pass; metrics are dropped from the end (occupancy
  /// first) until one pass suffices, as PM sampling cannot replay.
  std::string build_config() {
    while (!metrics_.empty()) {
      // A fresh host object per attempt: metrics added to one cannot be removed.
      if (host_) {
        auto d = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
        d.pHostObject = host_;
        cuptiProfilerHostDeinitialize(&d);
        host_ = nullptr;
      }
      auto host = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
      host.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
      host.pChipName = chip_.c_str();
      host.pCounterAvailabilityImage = availability_.data();
      if (auto r = cuptiProfilerHostInitialize(&host); r != CUPTI_SUCCESS)
        return result_text("cuptiProfilerHostInitialize", r);
      host_ = host.pHostObject;
      std::vector<const char*> names = metric_cstrs();
      auto add = params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
      add.pHostObject = host_;
      add.ppMetricNames = names.data();
      add.numMetrics = names.size();
      if (cuptiProfilerHostConfigAddMetrics(&add) == CUPTI_SUCCESS) {
        auto sz = params<CUpti_Profiler_Host_GetConfigImageSize_Params>(CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
        sz.pHostObject = host_;
        if (cuptiProfilerHostGetConfigImageSize(&sz) == CUPTI_SUCCESS) {
          config_.assign(sz.configImageSize, 0);
          auto img = params<CUpti_Profiler_Host_GetConfigImage_Params>(CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
          img.pHostObject = host_;
          img.configImageSize = config_.size();
          img.pConfigImage = config_.data();
          auto passes = params<CUpti_Profiler_Host_GetNumOfPasses_Params>(CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
          passes.configImageSize = config_.size();
          passes.pConfigImage = config_.data();
          if (cuptiProfilerHostGetConfigImage(&img) == CUPTI_SUCCESS &&
              cuptiProfilerHostGetNumOfPasses(&passes) == CUPTI_SUCCESS && passes.numOfPasses == 1)
            return {};
        }
      }
      metrics_.pop_back();
    }
    return "no single-pass PM sampling configuration for steptrace's metrics on chip " + chip_;
  }

  bool reset_counter_data() {
    auto p = params<CUpti_PmSampling_CounterDataImage_Initialize_Params>(CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    p.pPmSamplingObject = sampler_;
    p.counterDataSize = counter_data_.size();
    p.pCounterData = counter_data_.data();
    return cuptiPmSamplingCounterDataImageInitialize(&p) == CUPTI_SUCCESS;
  }

  std::string fail(const char* call, CUptiResult r) {
    std::string why = result_text(call, r);
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
      why += " (GPU performance counters are restricted to admin users: NVreg_RestrictProfilingToAdminUsers)";
    return fail_text(why);
  }
  std::string fail_text(std::string why) {
    stop();
    return why;
  }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  bool profiler_initialized_ = false, started_ = false, paused_ = false;
  uint64_t polls_ = 0;
  int64_t decode_ns_ = 0, evaluate_ns_ = 0, reset_ns_ = 0;
  std::string chip_;
  std::vector<uint8_t> availability_, config_, counter_data_;
  CUpti_Profiler_Host_Object* host_ = nullptr;
  CUpti_PmSampling_Object* sampler_ = nullptr;
  std::vector<Metric> metrics_;
  uint64_t samples_ = 0, overflows_ = 0;
  std::size_t hardware_buffer_bytes_ = kHardwareBufferBytes;
};

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
