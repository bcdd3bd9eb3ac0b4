// steptrace/nccl.hpp - the cross-rank view through the job's own NCCL communicator. Include it where
// the communicator is made (it needs nccl.h and libnccl, like the program):
//
//   #include <steptrace/nccl.hpp>
//   steptrace::start(cfg);
//   steptrace::enable_cross_rank(comm);        // every cross_rank_every (10) steps; or (comm, k)
//
// Every k steps, at the TRACE_STEP boundary, each rank posts a fixed-size summary of the step that
// just closed (step time, built-in phase times: 40 bytes) with ncclAllGather on a stream of
// steptrace's own: a few async calls on the training thread, no synchronisation with the training
// stream, no waiting for the other ranks. The background thread collects the result when it has
// arrived; rank 0's next line carries the view (slowest rank, skew, culprit phase). All ranks must
// call enable_cross_rank with the same k (the gathers are collectives, issued at the same steps
// everywhere, in order with the job's own collectives from the training thread).
#pragma once
#include "steptrace.hpp"

#ifndef STEPTRACE_DISABLE
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace steptrace {
namespace details {

/// ncclAllGather of RankSummary floats on steptrace's own stream, a ring of pinned slots.
class NcclExchange final : public CrossRankExchange {
 public:
  static constexpr int kSlots = 8;

  /// "" or why the exchange cannot run.
  std::string init(ncclComm_t comm) {
    comm_ = comm;
    int n = 0, r = 0, dev = 0;
    if (ncclCommCount(comm, &n) != ncclSuccess || ncclCommUserRank(comm, &r) != ncclSuccess ||
        ncclCommCuDevice(comm, &dev) != ncclSuccess)
      return "ncclCommCount/UserRank/CuDevice failed on the communicator handed to steptrace";
    world_ = n, rank_ = r, device_ = dev;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    std::string err;
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) err = "cudaStreamCreate failed";
    const std::size_t per = kSummaryFloats * sizeof(float);
    for (auto& s : slots_) {
      if (!err.empty()) break;
      if (cudaMallocHost(&s.send, per) != cudaSuccess || cudaMallocHost(&s.recv, per * world_) != cudaSuccess ||
          cudaMalloc(&s.dev_send, per) != cudaSuccess || cudaMalloc(&s.dev_recv, per * world_) != cudaSuccess ||
          cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming) != cudaSuccess)
        err = "cannot allocate the exchange buffers";
    }
    cudaSetDevice(previous);
    (void)cudaGetLastError();
    return err;
  }

  ~NcclExchange() override {
    // Wait for our own stream only, and not forever: a rank that never arrives must not hang stop().
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bool idle = true;
    if (stream_) {
      while (cudaStreamQuery(stream_) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() > deadline) {
          idle = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    (void)cudaGetLastError();
    if (!idle) return;  // still waiting on a peer: leave the buffers to the process rather than free them under NCCL
    for (auto& s : slots_) {
      if (s.send) cudaFreeHost(s.send);
      if (s.recv) cudaFreeHost(s.recv);
      if (s.dev_send) cudaFree(s.dev_send);
      if (s.dev_recv) cudaFree(s.dev_recv);
      if (s.done) cudaEventDestroy(s.done);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  std::string post(const std::vector<float>& summary) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& s = slots_[posted_ % kSlots];
    // A slot is reused 8 exchanges later; its previous gather, stream-ordered before this one, has
    // long completed unless a rank is 8 exchanges behind (then the gathers are stuck anyway).
    std::memcpy(s.send, summary.data(), kSummaryFloats * sizeof(float));
    int previous = 0;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    const std::size_t per = kSummaryFloats * sizeof(float);
    std::string err;
    if (cudaMemcpyAsync(s.dev_send, s.send, per, cudaMemcpyHostToDevice, stream_) != cudaSuccess)
      err = "cudaMemcpyAsync failed";
    else if (ncclAllGather(s.dev_send, s.dev_recv, kSummaryFloats, ncclFloat, comm_, stream_) != ncclSuccess)
      err = std::string("ncclAllGather failed: ") + ncclGetLastError(comm_);
    else if (cudaMemcpyAsync(s.recv, s.dev_recv, per * world_, cudaMemcpyDeviceToHost, stream_) != cudaSuccess ||
             cudaEventRecord(s.done, stream_) != cudaSuccess)
      err = "cudaMemcpyAsync/cudaEventRecord failed";
    if (previous != device_) cudaSetDevice(previous);
    if (!err.empty()) {
      (void)cudaGetLastError();
      return err;
    }
    ++posted_;
    return {};
  }

  bool poll(std::vector<float>& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (returned_ == posted_) return false;
    Slot& s = slots_[returned_ % kSlots];
    const cudaError_t q = cudaEventQuery(s.done);
    if (q == cudaErrorNotReady) return false;
    (void)cudaGetLastError();
    out.assign(s.recv, s.recv + static_cast<std::size_t>(kSummaryFloats) * world_);
    ++returned_;
    return true;
  }

 private:
  struct Slot {
    float* send = nullptr;
    float* recv = nullptr;
    float* dev_send = nullptr;
    float* dev_recv = nullptr;
    cudaEvent_t done = nullptr;
  };
  ncclComm_t comm_ = nullptr;
  int world_ = 1, rank_ = 0, device_ = 0;
  cudaStream_t stream_ = nullptr;
  Slot slots_[kSlots];
  std::mutex mutex_;
  uint64_t posted_ = 0, returned_ = 0;
};

}  // namespace details

/// Gathers every rank's step summary every `every_k_steps` steps (0: the cross_rank_every setting)
/// through `comm`. Call on every rank after start(), from the thread that issues the job's
/// collectives. Returns false (with one warning) if steptrace is not running or the exchange cannot
/// be set up; training is never affected.
inline bool enable_cross_rank(ncclComm_t comm, int every_k_steps = 0) noexcept {
  try {
    auto ex = std::make_unique<details::NcclExchange>();
    const std::string err = ex->init(comm);
    if (!err.empty()) {
      details::warn_once("cross_rank.init", "cross-rank view off: " + err);
      return false;
    }
    return details::Session::current().set_exchange(std::move(ex), every_k_steps);
  } catch (const std::exception& e) {
    details::warn_once("cross_rank.init", std::string("cross-rank view off: ") + e.what());
    return false;
  }
}

}  // namespace steptrace

#else  // STEPTRACE_DISABLE

namespace steptrace {
template <class Comm>
inline bool enable_cross_rank(Comm, int = 0) noexcept {
  return false;
}
}  // namespace steptrace

#endif
