// steptrace/core/line_out.hpp - a step line being written: the JSON and the reason of every null
// written so far (LineOut), and the small helpers the section writers share.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "json_writer.hpp"
#include "line_input.hpp"

STEPTRACE_BEGIN_NAMESPACE

namespace details {

inline std::string iso8601_utc(int64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>((unix_ns / 1000000) % 1000));
  return buf;
}

}  // namespace details

/// A line being written: the JSON, and the reason for every null written so far. Every section
/// writes its nulls through here, so that a null never goes out without its reason.
struct LineOut {
  details::JsonWriter w;
  std::vector<std::pair<std::string, std::string>> nulls;

  void optional_field(const char* name, const std::optional<double>& v, const std::string& reason) {
    w.field(name, v);
    if (!v) nulls.emplace_back(name, reason);
  }
  void optional_text(const char* name, const std::string& v, const std::string& reason) {
    if (v.empty()) {
      w.key(name).null();
      nulls.emplace_back(name, reason);
    } else {
      w.field(name, v);
    }
  }
  /// A built-in phase that was never opened has no time: null, and say so.
  void phase_field(const StepLineInput& in, const char* name, PhaseId id) {
    auto it = in.host.phases.find(id);
    const auto v = it == in.host.phases.end() || in.excluded.count(name) ? std::nullopt
                                                                          : std::optional<double>(ns_to_ms(it->second.total_ns));
    w.field(name, v);
    if (!v)
      nulls.emplace_back(name, "no '" + phase_name(id) + "' phase scope in this step" +
                                   (in.step->spans_dropped ? " (" + std::to_string(in.step->spans_dropped) +
                                                                 " phase scopes were dropped: max_spans_per_step)"
                                                           : std::string()));
  }
};

/// The last value recorded under `name` in the step.
inline std::optional<double> scalar(const StepRecord& step, const std::string& name) {
  std::optional<double> v;
  for (const auto& [n, x] : step.scalars)
    if (n == name) v = x;  // last record wins
  return v;
}

STEPTRACE_END_NAMESPACE  // steptrace
