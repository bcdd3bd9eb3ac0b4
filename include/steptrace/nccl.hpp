// steptrace/nccl.hpp - the cross-rank view through the job's own NCCL communicator. Include it where
// the communicator is made (it needs nccl.h and libnccl, like the program):
//
//   #include <steptrace/nccl.hpp>
//   steptrace::start(cfg);
//   steptrace::enable_cross_rank(comm);        // every cross_rank_every (10) steps; or (comm, k)
//
// Every k steps, at the TRACE_STEP boundary, each rank posts a fixed-size summary of the step that
// just closed (its own time, built-in phase times: 14 floats) with ncclAllGather on a stream of
// steptrace's own: a few async calls on the training thread, no synchronisation with the training
// stream, no waiting for the other ranks. The background thread collects the result when it has
// arrived; rank 0's next line carries the view (slowest rank, skew, culprit phase). All ranks must
// call enable_cross_rank with the same k (the gathers are collectives, issued at the same steps
// everywhere, in order with the job's own collectives from the training thread).
#pragma once
#include "version.hpp"
#include "steptrace.hpp"

#ifndef STEPTRACE_DISABLE
#include <exception>
#include <memory>
#include <string>

#include "backend/nccl_exchange.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Gathers every rank's step summary every `every_k_steps` steps (0: the cross_rank_every setting)
/// through `comm`. Call on every rank after start(), from the thread that issues the job's
/// collectives. Returns false (with one warning) if steptrace is not running or the exchange cannot
/// be set up; training is never affected.
inline bool enable_cross_rank(ncclComm_t comm, int every_k_steps = 0) noexcept {
  std::unique_ptr<backend::NcclExchange> exchange;
  if (!is_running())  // no NCCL or CUDA call then (before start(), after stop(), in a fork's child)
    return details::use_cross_rank_exchange(std::move(exchange), "steptrace is not running", every_k_steps);
  std::string error;
  try {
    exchange = std::make_unique<backend::NcclExchange>();
    error = exchange->init(comm);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  if (!error.empty()) exchange.reset();
  return details::use_cross_rank_exchange(std::move(exchange), error, every_k_steps);
}

STEPTRACE_END_NAMESPACE  // steptrace

#else  // STEPTRACE_DISABLE

STEPTRACE_BEGIN_NAMESPACE
inline namespace disabled {
template <class Comm>
inline bool enable_cross_rank(Comm, int = 0) noexcept {
  return false;
}
}  // namespace disabled
STEPTRACE_END_NAMESPACE  // steptrace

#endif
