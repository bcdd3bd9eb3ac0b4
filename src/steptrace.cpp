// The runtime, compiled once: the library that CMake's STEPTRACE_COMPILED_LIB=ON builds (and links
// into everything that links steptrace::steptrace). Programs built against it include
// steptrace.hpp as usual and see declarations only (steptrace/version.hpp).
#ifndef STEPTRACE_COMPILED_LIB
#error "src/steptrace.cpp is built with STEPTRACE_COMPILED_LIB defined (CMake option STEPTRACE_COMPILED_LIB=ON)"
#endif
// STEPTRACE_DISABLE set for a whole project switches the program's scopes off; the library itself is
// still the real one (a program built without it may link it too).
#undef STEPTRACE_DISABLE
#include <steptrace/details/api_impl.hpp>
