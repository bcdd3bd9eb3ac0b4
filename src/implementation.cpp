// steptrace's runtime in header-only mode: the one translation unit of a program that compiles it.
// CMake's steptrace::steptrace builds it as a static library (steptrace_implementation) and links it; a
// program built without CMake compiles it once (or defines STEPTRACE_IMPLEMENTATION in one of its own
// files instead). Built with STEPTRACE_DISABLE it compiles to nothing.
#ifndef STEPTRACE_DISABLE
#define STEPTRACE_IMPLEMENTATION
#include <steptrace/steptrace.hpp>
#endif
