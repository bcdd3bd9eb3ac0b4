// steptrace/version.hpp - the version, the namespace every declaration lives in, and how the API's
// functions are linked.
//
// Everything is declared in steptrace::v0_1 (an inline namespace: code names steptrace::start and
// never the version). Two copies of different versions in one process (two shared objects built
// against different releases) then have different symbols and cannot mix one's Session with the
// other's scopes. A program built with STEPTRACE_DISABLE gets the no-op API in a namespace of its
// own, so a translation unit with it and one without it do not define the same functions twice.
#pragma once

#define STEPTRACE_VERSION_MAJOR 0
#define STEPTRACE_VERSION_MINOR 1
#define STEPTRACE_VERSION_PATCH 0
#define STEPTRACE_VERSION_STRING "0.1.0"

// The namespace also says how the code was built, so copies that must not share symbols never do: a
// header-only copy and the compiled library (v0_1 / v0_1_lib: a plugin built against the library and a
// program built header-only get one session each, not a mix of both), and libstdc++'s old std::string
// ABI (_abi0: a program built with _GLIBCXX_USE_CXX11_ABI=0, as old libtorch wheels are, fails to link
// against a library built with the new one instead of handing it a Config it reads as garbage).
#include <cstddef>  // defines _GLIBCXX_USE_CXX11_ABI under libstdc++
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI == 0
#if defined(STEPTRACE_COMPILED_LIB)
#define STEPTRACE_ABI_NAMESPACE v0_1_lib_abi0
#else
#define STEPTRACE_ABI_NAMESPACE v0_1_abi0
#endif
#elif defined(STEPTRACE_COMPILED_LIB)
#define STEPTRACE_ABI_NAMESPACE v0_1_lib
#else
#define STEPTRACE_ABI_NAMESPACE v0_1
#endif
#define STEPTRACE_BEGIN_NAMESPACE \
  namespace steptrace {           \
  inline namespace STEPTRACE_ABI_NAMESPACE {
#define STEPTRACE_END_NAMESPACE \
  }                             \
  }

// Either way a program's translation units see the API's declarations, the configuration and plain
// value types only, no vendor header; the runtime is compiled once. Header-only (the default): in the
// one translation unit that defines STEPTRACE_IMPLEMENTATION before including steptrace.hpp (CMake's
// steptrace::steptrace builds that file, src/implementation.cpp, as a static library and links it). Compiled
// (STEPTRACE_COMPILED_LIB, set by CMake's STEPTRACE_COMPILED_LIB=ON for everything that links
// steptrace::steptrace): into the library (src/steptrace.cpp), whose API is exported.
#if defined(STEPTRACE_COMPILED_LIB) && defined(__GNUC__)
#define STEPTRACE_API __attribute__((visibility("default")))
#else
#define STEPTRACE_API
#endif

// A function off a scope's hot path (a tool attached, a full ring): kept out of line, so that the hot
// path's caller needs no stack frame or saved registers for it.
#if defined(__GNUC__)
#define STEPTRACE_COLD __attribute__((noinline, cold))
#else
#define STEPTRACE_COLD
#endif
