// steptrace/core/line_overhead.hpp - the line's `overhead` section: what steptrace estimates it costs the
// program (core/overhead.hpp), by which method, and the trace interval in force and who chose it.
#pragma once
#include "../version.hpp"
#include <optional>
#include <utility>
#include <string>

#include "line_rows.hpp"
#include "line_sections.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// `overhead.estimated_fraction_high` and `overhead.parts` (core/overhead_parts.hpp).
inline void write_overhead_parts(LineOut& out, const OverheadParts& p, const std::string& why) {
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction_high"), p.high, p.high_reason.empty() ? why : p.high_reason);
  if (!p.present) {
    out.null(STEPTRACE_ROW("/overhead/parts"), why);
    return;
  }
  out.begin_object(STEPTRACE_ROW("/overhead/parts"));
  // A part's object: its fraction and basis, then what `more` writes into it.
  const auto part = [&out](auto object, auto fraction, auto basis, const OverheadPart& values, auto&& more) {
    out.begin_object(object).field(fraction, values.fraction).field(basis, std::string(basis_name(values.basis)));
    more();
    out.end_object();
  };
  const auto nothing = [] {};
  part(STEPTRACE_ROW("/overhead/parts/tracing"), STEPTRACE_ROW("/overhead/parts/tracing/fraction"),
       STEPTRACE_ROW("/overhead/parts/tracing/basis"), p.tracing, nothing);
  part(STEPTRACE_ROW("/overhead/parts/attached"), STEPTRACE_ROW("/overhead/parts/attached/fraction"),
       STEPTRACE_ROW("/overhead/parts/attached/basis"), p.attached, nothing);
  part(STEPTRACE_ROW("/overhead/parts/counters"), STEPTRACE_ROW("/overhead/parts/counters/fraction"),
       STEPTRACE_ROW("/overhead/parts/counters/basis"), p.counters, nothing);
  part(STEPTRACE_ROW("/overhead/parts/host_api"), STEPTRACE_ROW("/overhead/parts/host_api/fraction"),
       STEPTRACE_ROW("/overhead/parts/host_api/basis"), p.host_api,
       [&] { out.field(STEPTRACE_ROW("/overhead/parts/host_api/fraction_high"), p.host_api_high); });
  part(STEPTRACE_ROW("/overhead/parts/background"), STEPTRACE_ROW("/overhead/parts/background/fraction"),
       STEPTRACE_ROW("/overhead/parts/background/basis"), p.background, [&] {
         const char* warm_up = reason_text(Reason::warm_up_uncounted);  // by reading, since the warm-up
         out.field(STEPTRACE_ROW("/overhead/parts/background/memory"), p.background_memory, warm_up)
             .field(STEPTRACE_ROW("/overhead/parts/background/device_state"), p.background_device_state, warm_up)
             .field(STEPTRACE_ROW("/overhead/parts/background/counters"), p.background_counters, warm_up);
       });
  part(STEPTRACE_ROW("/overhead/parts/captures"), STEPTRACE_ROW("/overhead/parts/captures/fraction"),
       STEPTRACE_ROW("/overhead/parts/captures/basis"), p.captures, nothing);
  out.end_object();
}

inline void write_overhead(LineOut& out, const StepLineInput& in) {
  const OverheadLine& o = in.overhead;
  const OverheadEstimate& e = o.estimate;
  const std::string why = o.null_reason.empty() ? std::string(reason_text(Reason::no_traced_step_yet)) : o.null_reason;
  out.begin_object(STEPTRACE_ROW("/overhead"));
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction"), e.fraction, why);
  out.optional_text(STEPTRACE_ROW("/overhead/method"), e.fraction ? std::string(method_name(e.method)) : std::string(), why);
  out.field(STEPTRACE_ROW("/overhead/trace_every"), o.trace_every);
  out.field(STEPTRACE_ROW("/overhead/decided_by"), o.budget ? "overhead_budget" : "trace_every");
  out.field(STEPTRACE_ROW("/overhead/markers_every"), o.markers_every);
  out.field(STEPTRACE_ROW("/overhead/budget"), o.budget, o.no_budget_reason);
  // The estimate a lower end only (a framework's callbacks' steps): over the budget it proves the line
  // over it; under it, it proves nothing (null, said why).
  const bool unknown_under = o.budget && e.fraction && e.within_budget && o.parts.lower_end_only;
  const std::string verdict_why = unknown_under ? std::string(reason_text(Reason::framework_within_unknown))
                                  : o.budget    ? why
                                                : o.no_budget_reason;
  out.field(STEPTRACE_ROW("/overhead/within_budget"),
            o.budget && e.fraction && !unknown_under ? std::optional<bool>(e.within_budget) : std::nullopt, verdict_why);
  const char* over_by = o.budget && !unknown_under ? over_budget_by(e, *o.budget) : nullptr;
  out.field(STEPTRACE_ROW("/overhead/over_budget_by"), over_by ? std::optional<std::string>(over_by) : std::nullopt,
            verdict_why);
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction_floor"), o.budget ? e.floor_fraction : std::nullopt, o.budget ? why : o.no_budget_reason);
  const char* no_range = reason_text(Reason::no_estimate_yet);
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction_ci_low"), e.fraction_low, e.fraction ? no_range : why);
  out.field(STEPTRACE_ROW("/overhead/estimated_fraction_ci_high"), e.fraction_high, e.fraction ? no_range : why);
  out.field(STEPTRACE_ROW("/overhead/traced_step_extra_ms"), e.traced_extra_ms, why);
  out.field(STEPTRACE_ROW("/overhead/traced_step_extra_se_ms"), e.traced_extra_se_ms,
            e.fraction ? std::string(reason_text(Reason::modelled_no_spread)) : why);
  out.field(STEPTRACE_ROW("/overhead/polluted_steps"), e.fraction ? std::optional<uint64_t>(e.polluted_steps) : std::nullopt, why);
  out.field(STEPTRACE_ROW("/overhead/clean_step_ms"), e.clean_step_ms, why);
  out.field(STEPTRACE_ROW("/overhead/untraced_residual_ms"), e.residual_ms, why);
  out.field(STEPTRACE_ROW("/overhead/untraced_residual_low_ms"), e.residual_low_ms, why);
  out.field(STEPTRACE_ROW("/overhead/launches_per_step"), e.launches_per_step, why);
  out.optional_text(STEPTRACE_ROW("/overhead/untraced_cupti"), o.untraced_cupti, why);
  out.optional_text(STEPTRACE_ROW("/overhead/kernel_timestamps"), o.kernel_timestamps, why);
  write_overhead_parts(out, o.parts, why);
  out.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
