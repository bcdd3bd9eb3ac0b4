// steptrace's runtime in header-only mode: the one translation unit of a program that compiles it.
// CMake's steptrace::steptrace adds this file to every target that links it; a program built without
// CMake compiles it once (or defines STEPTRACE_IMPLEMENTATION in one of its own files instead).
// A target built with STEPTRACE_DISABLE compiles it to nothing.
#ifndef STEPTRACE_DISABLE
#define STEPTRACE_IMPLEMENTATION
#include <steptrace/steptrace.hpp>
#endif
