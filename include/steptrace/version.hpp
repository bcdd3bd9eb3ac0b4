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

#define STEPTRACE_ABI_NAMESPACE v0_1
#define STEPTRACE_BEGIN_NAMESPACE \
  namespace steptrace {           \
  inline namespace STEPTRACE_ABI_NAMESPACE {
#define STEPTRACE_END_NAMESPACE \
  }                             \
  }

// Header-only (the default): every function is inline and each program compiles the runtime into
// the translation units that include steptrace.hpp. Compiled (STEPTRACE_COMPILED_LIB, set by CMake's
// STEPTRACE_COMPILED_LIB=ON for everything that links steptrace::steptrace): the runtime is built
// once into the library (src/steptrace.cpp) and a program's translation units see the API's
// declarations, the configuration and plain value types only, no vendor header.
#if defined(STEPTRACE_COMPILED_LIB)
#define STEPTRACE_INLINE
#if defined(__GNUC__)
#define STEPTRACE_API __attribute__((visibility("default")))
#else
#define STEPTRACE_API
#endif
#else
#define STEPTRACE_INLINE inline
#define STEPTRACE_API
#endif
