// steptrace/details/demangle.hpp - readable kernel names for the line's top kernels.
#pragma once
#include "../version.hpp"
#include <cstdlib>
#include <string>
#include <unordered_map>

#include <cxxabi.h>

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// C++ names demangled (the Itanium ABI's __cxa_demangle), cut at 200 characters, cached (bounded).
class Demangler {
 public:
  std::string operator()(const std::string& mangled) {
    auto it = cache_.find(mangled);
    if (it != cache_.end()) return it->second;
    std::string out = mangled;
    int status = 0;
    char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    if (status == 0 && d) out = d;
    std::free(d);
    if (out.size() > 200) out = out.substr(0, 197) + "...";
    if (cache_.size() < 4096) cache_.emplace(mangled, out);
    return out;
  }

 private:
  std::unordered_map<std::string, std::string> cache_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
