// steptrace/backend/cupti/result.hpp - CUPTI errors as text for warnings and null_reasons.
#pragma once
#include "../../version.hpp"
#include <string>

#include <cupti.h>

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace cupti {

/// "call: CUPTI_ERROR_..." for a failed CUPTI call.
inline std::string result_text(const char* call, CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
  return std::string(call) + ": " + s;
}

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::cupti
