// steptrace/core/step_ranges.hpp - lists of global_step numbers and ranges, as STEPTRACE_CAPTURE_STEPS
// spells them ("100-105,200").
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

/// Step ranges "a-b[,c-d][,e]" (inclusive, global_step numbers). Returns "" or what is wrong (and
/// leaves `out` empty).
inline std::string parse_step_ranges(const std::string& text, std::vector<std::pair<uint64_t, uint64_t>>& out) {
  out.clear();
  if (text.empty()) return {};
  auto number = [](const std::string& t, std::size_t& at, uint64_t& v) {
    const std::size_t from = at;
    v = 0;
    while (at < t.size() && t[at] >= '0' && t[at] <= '9' && at - from < 18) v = v * 10 + static_cast<uint64_t>(t[at++] - '0');
    return at > from;
  };
  std::size_t at = 0;
  for (;;) {
    const std::size_t item_at = at;
    uint64_t a = 0, b = 0;
    if (!number(text, at, a)) break;
    b = a;
    if (at < text.size() && text[at] == '-') {
      ++at;
      if (!number(text, at, b)) break;
    }
    if (b < a) {
      out.clear();
      return "range '" + text.substr(item_at, at - item_at) + "' ends before it begins";
    }
    out.emplace_back(a, b);
    if (out.size() > 64) {
      out.clear();
      return "more than 64 ranges";
    }
    if (at == text.size()) return {};
    if (text[at] != ',') break;
    ++at;
  }
  out.clear();
  return "'" + text + "' is not a list of steps and ranges such as 100-105,200";
}

STEPTRACE_END_NAMESPACE  // steptrace
