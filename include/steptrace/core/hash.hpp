// steptrace/core/hash.hpp - the one integer hash the schedules use to pick a step in a block (the
// sampled traces' jitter, the stream markers' pace). Pure C++17.
#pragma once
#include "../version.hpp"
#include <cstdint>

STEPTRACE_BEGIN_NAMESPACE

/// splitmix64's finaliser (Steele, Lea, Flood: "Fast splittable PRNGs", OOPSLA 2014).
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

STEPTRACE_END_NAMESPACE
