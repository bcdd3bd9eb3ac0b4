// steptrace/details/instance.hpp - the process's one Session, on the CUDA/CUPTI backend. The only
// place where the runtime meets the real backend; tests build Sessions on a fake one instead.
#pragma once
#include "../version.hpp"
#include <memory>

#include "../backend/cuda_backend.hpp"
#include "session.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline Session& Session::instance() {
  // Made at first use, and again in a fork's child (details/fork.hpp: the parent's is left behind).
  Session* s = instance_slot().load(std::memory_order_acquire);
  if (s) return *s;
  auto fresh = std::make_unique<Session>(std::make_unique<backend::CudaBackend>());
  if (instance_slot().compare_exchange_strong(s, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *s;  // another thread made it first
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
