// steptrace/core/line_overhead.hpp - the line's `overhead` section: what steptrace estimates it costs the
// program (core/overhead.hpp), by which method, and the trace interval in force and who chose it.
#pragma once
#include "../version.hpp"
#include <optional>
#include <utility>
#include <string>

#include "line_sections.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// `overhead.estimated_fraction_high` and `overhead.parts` (core/overhead_parts.hpp).
inline void write_overhead_parts(LineOut& out, const OverheadParts& p, const std::string& why) {
  out.field("estimated_fraction_high", p.high, p.high_reason.empty() ? why : p.high_reason);
  if (!p.present) {
    out.null("parts", why);
    return;
  }
  out.begin_object("parts");
  const std::pair<const char*, const OverheadPart*> parts[] = {
      {"tracing", &p.tracing},     {"attached", &p.attached},     {"counters", &p.counters},
      {"host_api", &p.host_api},   {"background", &p.background}, {"captures", &p.captures}};
  for (const auto& [name, part] : parts) {
    out.begin_object(name);
    out.field("fraction", part->fraction);
    out.field("basis", std::string(basis_name(part->basis)));
    if (part == &p.background) {  // by reading, since the warm-up
      const char* warm_up = "no step counted yet (warm-up)";
      out.field("memory", p.background_memory, warm_up).field("device_state", p.background_device_state, warm_up);
      out.field("counters", p.background_counters, warm_up);
    }
    out.end_object();
  }
  out.end_object();
}

inline void write_overhead(LineOut& out, const StepLineInput& in) {
  const OverheadLine& o = in.overhead;
  const OverheadEstimate& e = o.estimate;
  const std::string why = o.null_reason.empty() ? "no traced step observed yet" : o.null_reason;
  out.begin_object("overhead");
  out.field("estimated_fraction", e.fraction, why);
  out.optional_text("method", e.fraction ? std::string(method_name(e.method)) : std::string(), why);
  out.field("trace_every", o.trace_every);
  out.field("decided_by", o.budget ? "overhead_budget" : "trace_every");
  out.field("markers_every", o.markers_every);
  out.field("budget", o.budget, o.no_budget_reason);
  out.field("within_budget", o.budget && e.fraction ? std::optional<bool>(e.within_budget) : std::nullopt,
            o.budget ? why : o.no_budget_reason);
  out.field("estimated_fraction_floor", o.budget ? e.floor_fraction : std::nullopt, o.budget ? why : o.no_budget_reason);
  const char* no_range = "no estimate yet";
  out.field("estimated_fraction_ci_low", e.fraction_low, e.fraction ? no_range : why);
  out.field("estimated_fraction_ci_high", e.fraction_high, e.fraction ? no_range : why);
  out.field("traced_step_extra_ms", e.traced_extra_ms, why);
  out.field("traced_step_extra_se_ms", e.traced_extra_se_ms,
            e.fraction ? "method launch_model: the extra is modelled, it has no spread" : why);
  out.field("polluted_steps", e.fraction ? std::optional<uint64_t>(e.polluted_steps) : std::nullopt, why);
  out.field("clean_step_ms", e.clean_step_ms, why);
  out.field("untraced_residual_ms", e.residual_ms, why);
  out.field("untraced_residual_low_ms", e.residual_low_ms, why);
  out.field("launches_per_step", e.launches_per_step, why);
  out.optional_text("untraced_cupti", o.untraced_cupti, why);
  out.optional_text("kernel_timestamps", o.kernel_timestamps, why);
  write_overhead_parts(out, o.parts, why);
  out.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
