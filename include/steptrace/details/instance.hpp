// steptrace/details/instance.hpp - the process's one Session, on the CUDA/CUPTI backend. The only
// place where the runtime meets the real backend; tests build Sessions on a fake one instead.
#pragma once
#include "../version.hpp"
#include <memory>

#include "../backend/cuda_backend.hpp"
#include "session.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline Session& Session::instance() {
  static Session* session = new Session(std::make_unique<backend::CudaBackend>());
  return *session;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
