// steptrace/core/step_line.hpp - one step's fields -> one JSON line (schema "steptrace.step/1").
// docs/schema.md documents every field: name, unit, source, when null; tests/test_schema.cpp checks
// that every key path a line can carry is documented there.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <string>

#include "line_input.hpp"
#include "line_overhead.hpp"
#include "line_sections.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The flight recorder's capture of the step: the trace file it is written to, and why.
inline void write_trace(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const StepTrace& t = in.trace;
  w.key("trace");
  if (!t.captured) {
    w.null();
    out.nulls.emplace_back("trace", t.null_reason.empty() ? "step not captured" : t.null_reason);
    return;
  }
  w.begin_object();
  if (t.file.empty()) {
    w.key("file").null().field("not_written", t.not_written);
    out.nulls.emplace_back("trace.file", t.not_written);
  } else {
    w.field("file", t.file).field("capture_first_step", t.capture_first);
  }
  w.key("reasons").begin_array();
  for (const std::string& r : t.reasons) w.value(r);
  w.end_array().end_object();
}

/// Renders one step as a single JSON object without a trailing newline. `fields` (optional): every
/// leaf of it by JSON pointer, as reading the text back would give them (a sink's typed view).
inline std::string make_step_line(const StepLineInput& in, FlatJson* fields = nullptr) {
  LineOut out;
  out.w.record_leaves(fields);
  out.w.begin_object();
  write_identity(out, in);
  write_time(out, in);
  write_gpu_summary(out, in);
  write_counters(out, in);
  write_cross_rank(out, in);
  write_device_state(out, in);
  write_gpu(out, in);
  write_memory(out, in);
  write_mfu(out, in);
  write_scalars(out, in);
  write_phases(out, in);
  write_between_steps(out, in);
  write_diagnosis(out, in);
  write_window(out, in);
  write_overhead(out, in);
  write_trace(out, in);
  write_bookkeeping(out, in);
  // A value left out by a check (core/line_invariants.hpp) says why, in place of a section's reason.
  for (auto& [field, reason] : out.nulls) {
    auto it = in.excluded.find(field);
    if (it != in.excluded.end()) reason = it->second;
  }
  for (const auto& excluded : in.excluded) {  // (no structured binding captured: C++17)
    const auto& field = excluded.first;
    if (std::none_of(out.nulls.begin(), out.nulls.end(), [&](const auto& n) { return n.first == field; }))
      out.nulls.emplace_back(field, excluded.second);
  }
  out.w.key("null_reasons").begin_object();
  for (const auto& [field, reason] : out.nulls) out.w.field(field, reason);
  out.w.end_object();
  out.w.end_object();
  return out.w.str();
}

STEPTRACE_END_NAMESPACE  // steptrace
