// raw_cupti.hpp - for the benchmarks' raw-CUPTI floors: activity buffer callbacks that only walk the
// records, and a subscriber whose callback returns at once, enabled on the API sites steptrace's
// collector watches (runtime and driver calls that launch kernels or graphs, copy or set memory; host
// functions excluded). What CUPTI costs by itself, without steptrace's handlers.
#pragma once
#include <cupti.h>

#include <cstdint>
#include <cstdlib>
#include <string>

inline std::size_t bench_buffer_bytes = 4u << 20;  // each activity buffer handed to CUPTI
inline long bench_records_walked = 0;

inline void CUPTIAPI bench_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = bench_buffer_bytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

inline void CUPTIAPI bench_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) ++bench_records_walked;
  std::free(buffer);
}

inline void CUPTIAPI bench_empty_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

inline bool bench_enable_launch_sites(CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain, uint32_t count,
                                      const std::string& prefix) {
  for (uint32_t cbid = 1; cbid < count; ++cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) continue;
    const std::string n(name);
    const bool site = n.find("HostFunc") == std::string::npos &&
                      (n.rfind(prefix + "Launch", 0) == 0 || n.rfind(prefix + "GraphLaunch", 0) == 0 ||
                       n.rfind(prefix + "Memcpy", 0) == 0 || n.rfind(prefix + "Memset", 0) == 0);
    if (site && cuptiEnableCallback(1, subscriber, domain, cbid) != CUPTI_SUCCESS) return false;
  }
  return true;
}

/// Subscribes the empty callback on every launch, copy and memset site; false on any CUPTI error.
inline bool subscribe_empty_launch_callbacks(CUpti_SubscriberHandle& subscriber) {
  if (cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(&bench_empty_callback), nullptr) != CUPTI_SUCCESS)
    return false;
  return bench_enable_launch_sites(subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, "cuda") &&
         bench_enable_launch_sites(subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, "cu");
}
