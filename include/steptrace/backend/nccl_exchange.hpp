// steptrace/backend/nccl_exchange.hpp - the cross-rank exchange over the job's own NCCL communicator
// (steptrace/exchange.hpp is the interface). Compiled in the program's translation unit that includes
// steptrace/nccl.hpp, which has nccl.h and links libnccl anyway; the library itself never needs NCCL.
#pragma once
#include "../version.hpp"
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../core/cross_rank.hpp"
#include "../exchange.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend {

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

  static constexpr int kRunIdBytes = 16;   // 16 hex digits (details/environment.hpp new_run_id)
  static constexpr int kAgreeWaitS = 30;   // as long as a late rank may take to reach enable_cross_rank

  /// ncclBroadcast of rank 0's run_id on steptrace's stream, waited for at most kAgreeWaitS: every rank
  /// calls enable_cross_rank at the same point, as it made the communicator. If a rank is later than
  /// that, the broadcast stays queued (in order with the gathers) and this rank keeps its own id.
  std::string agree_run_id(const std::string& mine, std::string& agreed) override {
    std::lock_guard<std::mutex> lock(mutex_);
    agreed = mine;
    if (mine.size() != kRunIdBytes) return "run_id is not " + std::to_string(kRunIdBytes) + " characters";
    Slot& s = slots_[0];  // before any post: free
    std::memcpy(s.send, mine.data(), kRunIdBytes);
    int previous = 0;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    std::string err;
    if (cudaMemcpyAsync(s.dev_send, s.send, kRunIdBytes, cudaMemcpyHostToDevice, stream_) != cudaSuccess)
      err = "cudaMemcpyAsync failed";
    else if (ncclBroadcast(s.dev_send, s.dev_recv, kRunIdBytes, ncclChar, 0, comm_, stream_) != ncclSuccess)
      err = std::string("ncclBroadcast failed: ") + ncclGetLastError(comm_);
    else if (cudaMemcpyAsync(s.recv, s.dev_recv, kRunIdBytes, cudaMemcpyDeviceToHost, stream_) != cudaSuccess ||
             cudaEventRecord(s.done, stream_) != cudaSuccess)
      err = "cudaMemcpyAsync/cudaEventRecord failed";
    if (previous != device_) cudaSetDevice(previous);
    if (!err.empty()) {
      (void)cudaGetLastError();
      return err;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kAgreeWaitS);
    cudaError_t q = cudaErrorNotReady;
    while ((q = cudaEventQuery(s.done)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    (void)cudaGetLastError();
    if (q == cudaErrorNotReady)
      return "rank 0's run_id did not arrive within " + std::to_string(kAgreeWaitS) + " s (a rank is late)";
    if (q != cudaSuccess) return "the run_id broadcast failed";
    agreed.assign(reinterpret_cast<const char*>(s.recv), kRunIdBytes);
    return {};
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

} STEPTRACE_END_NAMESPACE  // steptrace::backend
