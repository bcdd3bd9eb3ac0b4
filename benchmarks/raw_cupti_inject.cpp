// raw_cupti_inject.cpp - the raw-CUPTI floor for programs we do not compile (benchmarks/python_gpt.py):
// a CUDA injection library. The CUDA driver loads the file named by CUDA_INJECTION64_PATH at cuInit and
// calls its InitializeInjection (CUPTI's documented way to attach to an unmodified program; NVIDIA's
// sample cupti_trace_injection does the same). Here it does what step_workloads' BENCH_RAW_CUPTI=
// records+callbacks does (raw_cupti.hpp), i.e. what CUPTI costs by itself, without steptrace's handlers:
// - the activity kinds steptrace's collector enables (backend/cupti/collector.hpp, kRecordKinds):
//   CONCURRENT_KERNEL, MEMCPY, MEMSET; never KERNEL, which serializes kernels;
// - an empty callback on the API sites the collector watches (runtime and driver launch, graph launch,
//   memcpy and memset calls, host functions excluded: raw_cupti.hpp's subscribe_empty_launch_callbacks
//   selects them by name exactly as Collector::enable_callbacks does);
// - CUPTI's own periodic buffer flush every 100 ms, as the collector asks;
// - hardware kernel timestamps where CUPTI offers them (Blackwell, CUDA 13 headers), as the collector
//   asks; refused elsewhere (H100, H200), where this changes nothing.
// Records are walked and discarded. Two C functions let the program check that the floor was on:
// raw_cupti_inject_active() and raw_cupti_inject_records() (python_gpt.py calls them through ctypes).
#include <cupti.h>

#include "raw_cupti.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<long> records_walked{0};
std::atomic<int> active{0};

// Counts per buffer and adds once: one atomic operation per 4 MiB buffer, not per record.
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  long n = 0;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) ++n;
  records_walked.fetch_add(n, std::memory_order_relaxed);
  std::free(buffer);
}

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET};

bool fail(const char* what, CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "raw_cupti_inject: %s failed: %s\n", what, text ? text : "?");
  return false;
}

bool attach() {
  CUpti_SubscriberHandle subscriber = nullptr;
  if (!subscribe_empty_launch_callbacks(subscriber)) {
    std::fprintf(stderr, "raw_cupti_inject: cuptiSubscribe or cuptiEnableCallback failed (no CUDA driver, or another CUPTI client)\n");
    return false;
  }
  CUptiResult r = cuptiActivityRegisterCallbacks(bench_buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks", r);
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
  cuptiActivityEnableHWTrace(1);  // CUPTI_ERROR_NOT_SUPPORTED before Blackwell: ignored, as steptrace does
#endif
  for (CUpti_ActivityKind kind : kKinds) {
    if ((r = cuptiActivityEnable(kind)) != CUPTI_SUCCESS) return fail("cuptiActivityEnable", r);
  }
  cuptiActivityFlushPeriod(100);
  return true;
}

}  // namespace

extern "C" {

/// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this file; 1: attached.
__attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return active.load() ? 1 : 0;
  const bool ok = attach();
  active.store(ok ? 1 : 0);
  std::fprintf(stderr, "raw_cupti_inject: %s\n", ok ? "CUPTI records + empty launch-site callbacks on" : "not attached");
  return ok ? 1 : 0;
}

/// 1 when InitializeInjection attached CUPTI in this process.
__attribute__((visibility("default"))) int raw_cupti_inject_active(void) { return active.load(); }

/// Hands over every buffer CUPTI holds (a forced flush: call after the measured work) and returns the
/// records walked so far; -1 when the floor was never attached.
__attribute__((visibility("default"))) long raw_cupti_inject_records(void) {
  if (!active.load()) return -1;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  return records_walked.load(std::memory_order_relaxed);
}

}  // extern "C"
