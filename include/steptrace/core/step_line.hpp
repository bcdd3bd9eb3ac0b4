// steptrace/core/step_line.hpp - one step's fields -> one JSON line (schema "steptrace.step/1").
// core/line_fields.hpp declares every field (type, unit, meaning, when null); tests/test_schema.cpp
// checks that every value a line carries is declared there, of its type.
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
  const StepTrace& t = in.trace;
  if (!t.captured) {
    out.null(STEPTRACE_ROW("/trace"), t.null_reason.empty() ? "step not captured" : t.null_reason);
    return;
  }
  out.begin_object(STEPTRACE_ROW("/trace"));
  if (t.file.empty()) {
    out.null(STEPTRACE_ROW("/trace/file"), t.not_written).field(STEPTRACE_ROW("/trace/not_written"), t.not_written);
  } else {
    out.field(STEPTRACE_ROW("/trace/file"), t.file)
        .field(STEPTRACE_ROW("/trace/capture_first_step"), t.capture_first);
  }
  out.begin_array(STEPTRACE_ROW("/trace/reasons"));
  for (const std::string& r : t.reasons) out.element(r);
  out.end_array().end_object();
}

/// Renders one step as a single JSON object without a trailing newline. `fields` (optional): every
/// leaf of it by JSON pointer, as reading the text back would give them (a sink's typed view). `tiers`
/// (optional): the values of the compact line's and the run record's rows, written in the same pass
/// (core/line_tiers.hpp makes them from it). Every value is checked against its row as it is written
/// (details::line_out_undeclared()).
inline std::string make_step_line(const StepLineInput& in, FlatJson* fields = nullptr, TierLeaves* tiers = nullptr) {
  LineOut out(&in.excluded, fields, &details::RowTree::step(), tiers);
  out.begin();
  write_identity(out, in);
  write_time(out, in);
  write_gpu_summary(out, in);
  write_counters(out, in);
  write_cross_rank(out, in);
  write_rank_wait(out, in);
  write_device_state(out, in);
  write_gpu(out, in);
  write_markers(out, in);
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
  return out.finish();
}

STEPTRACE_END_NAMESPACE  // steptrace
