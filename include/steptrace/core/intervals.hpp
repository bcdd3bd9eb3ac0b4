// steptrace/core/intervals.hpp - interval arithmetic shared by host and GPU accounting.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

using Interval = std::pair<int64_t, int64_t>;  // [first, second), nanoseconds

/// Length of the union of intervals (overlaps counted once). Takes a copy: it sorts.
inline int64_t union_length(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0, cur_begin = 0, cur_end = 0;
  bool open = false;
  for (const auto& [b, e] : intervals) {
    if (e <= b) continue;
    if (!open || b > cur_end) {
      if (open) total += cur_end - cur_begin;
      cur_begin = b;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += cur_end - cur_begin;
  return total;
}

/// Sorted, disjoint union of intervals.
inline std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> out;
  for (const auto& iv : intervals) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

/// Clips an interval to [lo, hi); an empty result has second <= first.
inline Interval clip(Interval iv, int64_t lo, int64_t hi) {
  return {std::max(iv.first, lo), std::min(iv.second, hi)};
}

STEPTRACE_END_NAMESPACE  // steptrace
