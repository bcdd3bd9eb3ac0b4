// steptrace/core/plausibility.hpp - checks that need no ground truth: what a GPU record, or a sum of
// records, cannot be. A record that fails is excluded from every sum and counted by reason in the
// line (gpu.excluded_records); the session warns once per reason. Pure C++17.
//
// The record checks rest on one fact: CUPTI's activity timestamps and cuptiGetTimestamp() share the
// host's time base (CUPTI normalizes GPU timestamps to it), so a record can be compared with the
// moment its launch call was entered and the moment its buffer was handed over.
#pragma once
#include "../version.hpp"
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

enum class Implausible : uint8_t {
  none = 0,
  no_timestamps,            // start = end = 0: CUPTI could not time it (CUPTI documents this value)
  ends_before_start,
  starts_before_launch,     // started before its own launch call was entered
  ends_after_delivery,      // ended after CUPTI handed over the buffer that carried it
  graph_replayed_untraced,  // a graph kernel read out after records were switched off: a replay with
                            // records off may have written its end time (sampled attribution)
  stream_overcommitted,     // the step's records on one stream add up to more than that stream's span
                            // can hold (stream_records_plausible): their times are broken
};
inline constexpr int kImplausibleKinds = 6;  // the reasons after `none`

inline const char* implausible_name(Implausible why) {
  static const char* names[] = {"none", "no_timestamps", "ends_before_start", "starts_before_launch",
                                "ends_after_delivery", "graph_replayed_untraced", "stream_overcommitted"};
  return names[static_cast<int>(why)];
}

inline const char* implausible_text(Implausible why) {
  switch (why) {
    case Implausible::no_timestamps: return "CUPTI gave no timestamps (start = end = 0)";
    case Implausible::ends_before_start: return "the record ends before it starts";
    case Implausible::starts_before_launch: return "the record starts before its launch call was entered";
    case Implausible::ends_after_delivery: return "the record ends after CUPTI handed over the buffer that carried it";
    case Implausible::graph_replayed_untraced:
      return "a CUDA graph's kernel record was read out after records were switched off between traced steps: "
             "a replay of the graph with records off may have written its end time";
    case Implausible::stream_overcommitted:
      return "the step's records on one CUDA stream add up to more than twice the time from the first one's start "
             "to the last one's end: work on one stream runs one item after another, so their times are broken";
    default: return "";
  }
}

/// Slack for the clocks: CUPTI's conversion of GPU timestamps to the host's time base is not exact to
/// the nanosecond. A kernel starts microseconds after its launch call at the earliest; the records
/// these checks exist for are off by milliseconds.
inline constexpr int64_t kRecordClockSlackNs = 5000;

/// What a record's times contradict, if anything. 0 for `launch_enter_ns`, `delivered_ns` or
/// `suspect_after_ns` means not known (that check is skipped).
inline Implausible check_record(int64_t start_ns, int64_t end_ns, int64_t launch_enter_ns, int64_t delivered_ns,
                                int64_t suspect_after_ns = 0) {
  if (start_ns == 0 && end_ns == 0) return Implausible::no_timestamps;
  if (end_ns < start_ns) return Implausible::ends_before_start;
  if (launch_enter_ns > 0 && start_ns + kRecordClockSlackNs < launch_enter_ns) return Implausible::starts_before_launch;
  if (delivered_ns > 0 && end_ns > delivered_ns + kRecordClockSlackNs) return Implausible::ends_after_delivery;
  if (suspect_after_ns > 0 && (delivered_ns == 0 || delivered_ns > suspect_after_ns))
    return Implausible::graph_replayed_untraced;
  return Implausible::none;
}

/// A phase's (or step's) GPU busy time is the union of its records' intervals: it cannot exceed the
/// span from its first record's start to its last record's end, nor the sum of its records'
/// durations. False means the sums are broken and must not be published.
inline bool busy_time_plausible(int64_t busy_ns, int64_t first_start_ns, int64_t last_end_ns, int64_t duration_sum_ns) {
  return busy_ns >= 0 && busy_ns <= last_end_ns - first_start_ns && busy_ns <= duration_sum_ns;
}

/// Work on one CUDA stream runs one item after another (CUDA programming guide, "Streams"), so the
/// durations of a step's records on one stream add up to at most the span from the first one's start
/// to the last one's end. Programmatic dependent launch (Hopper on) lets the next kernel start while the
/// previous one finishes, two at a time at most, hence the factor of two, and kRecordClockSlackNs per
/// record for the clocks. A broken record set - a CUDA graph's kernels whose end times an untraced replay
/// overwrote (each "lasting" until that replay) - sums to many times its span. False: the stream's
/// records must not be published.
inline constexpr double kStreamConcurrencyLimit = 2.0;
inline bool stream_records_plausible(int64_t duration_sum_ns, int64_t first_start_ns, int64_t last_end_ns, std::size_t records) {
  const double span = static_cast<double>(last_end_ns - first_start_ns);
  return static_cast<double>(duration_sum_ns) <=
         kStreamConcurrencyLimit * span + static_cast<double>(kRecordClockSlackNs) * static_cast<double>(records);
}

/// What to say once about a step's impossible records (left out of every sum, counted in the line):
/// (warning key, text) per reason seen.
inline std::vector<std::pair<std::string, std::string>> excluded_record_notes(const uint64_t (&excluded)[kImplausibleKinds],
                                                                              uint32_t implausible_phases, uint64_t step) {
  std::vector<std::pair<std::string, std::string>> notes;
  for (int i = 0; i < kImplausibleKinds; ++i) {
    if (!excluded[i]) continue;
    const auto why = static_cast<Implausible>(i + 1);
    notes.emplace_back(std::string("gpu.excluded.") + implausible_name(why),
                       std::to_string(excluded[i]) + " GPU record(s) of step " + std::to_string(step) +
                           " excluded from every sum: " + implausible_text(why) + " (counted in gpu.excluded." +
                           implausible_name(why) + ")");
  }
  if (implausible_phases)
    notes.emplace_back("gpu.implausible_phase", "a phase's GPU busy time exceeded the span or the sum of its records in step " +
                                                    std::to_string(step) + "; its GPU fields are left out (gpu.implausible_phases)");
  return notes;
}

STEPTRACE_END_NAMESPACE  // steptrace
