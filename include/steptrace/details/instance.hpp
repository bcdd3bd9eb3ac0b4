// steptrace/details/instance.hpp - the process's one Session, on the CUDA/CUPTI backend. The only
// place where the runtime meets the real backend; tests build Sessions on a fake one instead.
#pragma once
#include <memory>

#include "../backend/cuda_backend.hpp"
#include "session.hpp"

namespace steptrace::details {

inline Session& Session::instance() {
  static Session* session = new Session(std::make_unique<backend::CudaBackend>());
  return *session;
}

}  // namespace steptrace::details
