// steptrace/backend/cupti/result.hpp - CUPTI errors as text for warnings and null_reasons.
#pragma once
#include <string>

#include <cupti.h>

namespace steptrace::backend::cupti {

/// "call: CUPTI_ERROR_..." for a failed CUPTI call.
inline std::string result_text(const char* call, CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
  return std::string(call) + ": " + s;
}

}  // namespace steptrace::backend::cupti
