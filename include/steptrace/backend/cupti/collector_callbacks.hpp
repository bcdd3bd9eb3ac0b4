// steptrace/backend/cupti/collector_callbacks.hpp - what CUPTI calls: the launch callback (each
// launch staged with the step, phase and thread the runtime's launch context names) and the activity
// buffers' request and completion (Collector's members; collector.hpp includes them).
#pragma once
#include "collector_decl.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

inline void CUPTIAPI Collector::on_api(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  auto* self = static_cast<Collector*>(userdata);
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  const auto& sites = runtime ? self->runtime_sites_ : self->driver_sites_;
  if (cb->callbackSite == CUPTI_API_ENTER && cbid < sites.size() && sites[cbid] == kStreamDestroy) {
    // cudaStreamDestroy*_params and cuStreamDestroy*_params hold the stream alone (CUPTI's
    // generated_cuda_runtime_api_meta.h, generated_cuda_meta.h): the markers leave it before it goes.
    if (auto hook = self->stream_destroy_hook_.load(std::memory_order_acquire); hook && cb->functionParams)
      hook(reinterpret_cast<std::uintptr_t>(*static_cast<void* const*>(cb->functionParams)));
    return;
  }
  const bool switching = self->switching_.load(std::memory_order_acquire);  // see set_tracing
  if (!switching && !self->tracing_.load(std::memory_order_acquire)) {  // between traced steps (either mode)
    if (cb->callbackSite == CUPTI_API_EXIT && self->detach_requested_.load(std::memory_order_relaxed)) self->try_detach();
    return;
  }
  if (!runtime && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (cbid >= sites.size() || sites[cbid] == kNone || sites[cbid] == kStreamDestroy) return;
  LaunchTls& tls = self->thread_launch_state();
  LaunchRecord l;
  l.correlation = cb->correlationId;
  l.step = self->launch_context_.step_key();
  l.phase = self->launch_context_.phase();
  l.graph = sites[cbid] == kGraphLaunch;
  l.discard = self->settling_.load(std::memory_order_relaxed);
  l.tid = self->launch_context_.thread_id();  // a trace draws the launch on its thread (flight recorder)
  l.window = switching;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (runtime) {
      tls.runtime_correlation = cb->correlationId;
      tls.runtime_kind = sites[cbid];
    } else if (tls.runtime_correlation != 0) {
      // Inside a runtime call. Kernel records carry the runtime call's id and memcpy records carry
      // it as runtimeCorrelationId; only memset records carry the driver call's id alone, so only
      // then is the nested id worth an alias.
      if (tls.runtime_kind != kMemset) return;
      l.outer_correlation = tls.runtime_correlation;
    }
    if (l.outer_correlation == 0) {  // the record cannot start before this (core/plausibility.hpp)
      uint64_t now = 0;
      if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) l.enter_ns = static_cast<int64_t>(now);
    }
    // cudaGraphLaunch{,_ptsz}_v10000_params and cuGraphLaunch{,_ptsz}_params both begin with the
    // executable graph's handle (CUPTI's generated_cuda_runtime_api_meta.h, generated_cuda_meta.h).
    const void* exec = l.graph && cb->functionParams ? *static_cast<void* const*>(cb->functionParams) : nullptr;
    const auto& streams = runtime ? self->runtime_streams_ : self->driver_streams_;
    const std::optional<std::uintptr_t> stream =
        l.outer_correlation == 0 && cbid < streams.size() && cb->functionParams
            ? launch_stream(streams[cbid], cb->functionParams) : std::nullopt;
    if (self->stage(l, exec, stream)) tls.staged = l.correlation;
    return;
  }
  // API exit: a failed call produces no GPU record; say so, so its step does not wait for one.
  bool failed = false;
  if (cb->functionReturnValue) {
    failed = runtime ? *static_cast<const cudaError_t*>(cb->functionReturnValue) != cudaSuccess
                     : *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS;
  }
  const bool outermost = runtime || tls.runtime_correlation == 0;
  if (runtime) tls.runtime_correlation = 0, tls.runtime_kind = kNone;
  l.failed = failed && outermost;
  const bool staged = tls.staged == cb->correlationId;
  if (staged) tls.staged = 0;
  if (staged || l.failed) self->returned(l, staged);
}

/// The stream a kernel launch names, from its parameters (the structs of CUPTI's
/// generated_cuda_runtime_api_meta.h; the driver's, of generated_cuda_meta.h, mirrored below as that
/// header needs the driver's legacy types). nullopt: not a kernel launch read here. The default streams
/// come back as given (0, CU_STREAM_LEGACY 1, CU_STREAM_PER_THREAD 2; a _ptsz call's 0 is its thread's
/// default stream): MarkerRing::learn_stream never takes them, the records decide there.
inline std::optional<std::uintptr_t> Collector::launch_stream(StreamParam kind, const void* params) {
  struct DriverLaunch {  // cuLaunchKernel_params, cuLaunchKernel_ptsz_params
    CUfunction f;
    unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    CUstream stream;
  };
  const void* stream = nullptr;
  switch (kind) {
    case StreamParam::runtime_launch:
      stream = static_cast<const cudaLaunchKernel_v7000_params*>(params)->stream;
      break;
    case StreamParam::runtime_launch_ex: {
      const cudaLaunchConfig_t* c = static_cast<const cudaLaunchKernelExC_v11060_params*>(params)->config;
      if (!c) return std::nullopt;
      stream = c->stream;
      break;
    }
    case StreamParam::driver_launch:
      stream = static_cast<const DriverLaunch*>(params)->stream;
      break;
    case StreamParam::driver_launch_ex: {  // cuLaunchKernelEx_params: the config first
      const CUlaunchConfig* c = *static_cast<const CUlaunchConfig* const*>(params);
      if (!c) return std::nullopt;
      stream = c->hStream;
      break;
    }
    case StreamParam::none:
      return std::nullopt;
  }
  return reinterpret_cast<std::uintptr_t>(stream);
}

inline bool Collector::stage(LaunchRecord l, const void* graph_exec, std::optional<std::uintptr_t> stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Which stream the step thread's kernels go to (take_launch_streams).
  if (stream && std::this_thread::get_id() == step_thread_.load(std::memory_order_relaxed)) {
    auto slot = std::find_if(stream_tally_.begin(), stream_tally_.end(),
                             [&](const auto& e) { return e.second > 0 && e.first == *stream; });
    if (slot == stream_tally_.end())
      slot = std::find_if(stream_tally_.begin(), stream_tally_.end(), [](const auto& e) { return e.second == 0; });
    if (slot == stream_tally_.end()) {
      ++stream_tally_other_;
    } else {
      slot->first = *stream;
      ++slot->second;
    }
  }
  // Read again under the lock that set_tracing() takes after raising the flag: a call is either in
  // flight when records go off (and becomes the switch's there) or sees the switch here. Flag
  // first: it is lowered only after tracing_ has its new value.
  if (switching_.load(std::memory_order_acquire) || !tracing_.load(std::memory_order_acquire)) l.window = true;
  // Followed: another thread's outermost calls (the thread that switches records is never inside
  // one when it does, so its calls - most of them - cost no second lock at their exit). Past the
  // bound a call is the switch's from the start: never waited for.
  bool followed = false;
  if (!l.window && l.outer_correlation == 0 && l.tid != switch_tid_.load(std::memory_order_relaxed)) {
    if (in_flight_.size() < kMaxInFlight) in_flight_.push_back(l.correlation), followed = true;
    else l.window = true;
  }
  if (graph_exec) {  // which graphs wait for a relaunch (settled())
    if (l.discard) pending_graphs_.erase(graph_exec);
    else pending_graphs_[graph_exec] = PendingGraph{l.correlation, boundaries_.load(std::memory_order_relaxed)};
  }
  if (launches_.size() >= kMaxStagedLaunches) {
    ++dropped_launches_;
    return followed;
  }
  launches_.push_back(l);
  return followed;
}

inline void Collector::returned(const LaunchRecord& l, bool staged) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = staged ? std::find(in_flight_.begin(), in_flight_.end(), l.correlation) : in_flight_.end();
  if (it != in_flight_.end()) {
    *it = in_flight_.back();
    in_flight_.pop_back();
  }
  if (!l.failed) return;
  if (launches_.size() >= kMaxStagedLaunches) {
    ++dropped_launches_;
    return;
  }
  launches_.push_back(l);
}

inline void CUPTIAPI Collector::buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  Collector& self = instance();
  *max_records = 0;
  std::lock_guard<std::mutex> lock(self.pool_mutex_);
  if (self.free_buffers_.empty() && self.buffers_allocated_ < kMaxBuffers) {
    void* p = std::aligned_alloc(8, kBufferBytes);
    if (p) {
      self.free_buffers_.push_back(static_cast<uint8_t*>(p));
      ++self.buffers_allocated_;
    }
  }
  if (self.free_buffers_.empty()) {  // bounded: CUPTI drops what does not fit, and counts it
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = self.free_buffers_.back();
  self.free_buffers_.pop_back();
  *size = kBufferBytes;
}

inline void CUPTIAPI Collector::buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Collector& self = instance();
  uint64_t handed = 0;  // no record in this buffer can end after this (core/plausibility.hpp)
  if (cuptiGetTimestamp(&handed) != CUPTI_SUCCESS) handed = 0;
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        kernels.push_back(convert_kernel(*reinterpret_cast<const KernelActivity*>(record), self.devices_));
        kernels.back().delivered_ns = static_cast<int64_t>(handed);
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        copies.push_back(convert_memcpy(*reinterpret_cast<const MemcpyActivity*>(record)));
        copies.back().delivered_ns = static_cast<int64_t>(handed);
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        copies.push_back(convert_memset(*reinterpret_cast<const MemsetActivity*>(record)));
        copies.back().delivered_ns = static_cast<int64_t>(handed);
        break;
      default:
        break;
    }
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.dropped_records_ += dropped;
    for (auto& k : kernels) {
      if (self.kernels_.size() < kMaxStagedRecords) self.kernels_.push_back(k);
      else ++self.dropped_records_;
    }
    for (auto& c : copies) {
      if (self.copies_.size() < kMaxStagedRecords) self.copies_.push_back(c);
      else ++self.dropped_records_;
    }
  }
  if (buffer) {
    std::lock_guard<std::mutex> lock(self.pool_mutex_);
    self.free_buffers_.push_back(buffer);
  }
}

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
