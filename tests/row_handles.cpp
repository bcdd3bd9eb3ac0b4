// Compiled (not run) by CTest: a writer names the row it writes (core/line_rows.hpp), so a path no row
// declares, a value the row's type does not take and a null where the row is never null do not compile;
// the control (`good`) must.
#include <steptrace/core/line_out.hpp>

#include <optional>
#include <string>

std::string written() {
  steptrace::LineOut out;
  out.begin();
  out.begin_object(STEPTRACE_ROW("/overhead"));
#if defined(STEPTRACE_TEST_VARIANT_path)
  out.field(STEPTRACE_ROW("/overhead/traces_every"), 4);  // misspelt: no row
#elif defined(STEPTRACE_TEST_VARIANT_type)
  out.field(STEPTRACE_ROW("/overhead/trace_every"), 4.5);  // an integer row
#elif defined(STEPTRACE_TEST_VARIANT_null)
  out.null(STEPTRACE_ROW("/overhead/trace_every"), "why");  // never null
#else
  out.field(STEPTRACE_ROW("/overhead/trace_every"), 4);
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction"), std::optional<double>(), "why");
  out.field(STEPTRACE_ROW("/overhead/decided_by"), "overhead_budget");
  out.field(STEPTRACE_ROW("/overhead/within_budget"), std::optional<bool>(true), "why");
  out.field(STEPTRACE_END_ROW("/lines_written"), uint64_t{3});  // compiles: where it is written is checked at run time
#endif
  out.end_object();
  return out.finish();
}
