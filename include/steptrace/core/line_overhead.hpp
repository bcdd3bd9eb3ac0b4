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
  details::JsonWriter& w = out.w;
  w.field("estimated_fraction_high", p.high);
  if (!p.high) out.nulls.emplace_back("overhead.estimated_fraction_high", why);
  w.key("parts");
  if (!p.present) {
    w.null();
    out.nulls.emplace_back("overhead.parts", why);
    return;
  }
  w.begin_object();
  const std::pair<const char*, const OverheadPart*> parts[] = {
      {"tracing", &p.tracing},     {"attached", &p.attached},     {"counters", &p.counters},
      {"host_api", &p.host_api},   {"background", &p.background}, {"captures", &p.captures}};
  for (const auto& [name, part] : parts) {
    w.key(name).begin_object();
    w.field("fraction", part->fraction);
    if (!part->fraction)
      out.nulls.emplace_back(std::string("overhead.parts.") + name + ".fraction",
                             part->null_reason.empty() ? why : part->null_reason);
    w.field("basis", part->basis);
    if (part == &p.background) {  // by reading, since the warm-up
      w.field("memory", p.background_memory).field("device_state", p.background_device_state);
      w.field("counters", p.background_counters);
      for (const auto& [field, v] : {std::pair<const char*, const std::optional<double>*>{"memory", &p.background_memory},
                                     {"device_state", &p.background_device_state},
                                     {"counters", &p.background_counters}})
        if (!*v) out.nulls.emplace_back(std::string("overhead.parts.background.") + field, "no step counted yet (warm-up)");
    }
    w.end_object();
  }
  w.end_object();
}

inline void write_overhead(LineOut& out, const StepLineInput& in) {
  details::JsonWriter& w = out.w;
  const OverheadLine& o = in.overhead;
  const OverheadEstimate& e = o.estimate;
  const std::string why = o.null_reason.empty() ? "no traced step observed yet" : o.null_reason;
  w.key("overhead").begin_object();
  const auto field = [&](const char* name, const std::optional<double>& v) {
    w.field(name, v);
    if (!v) out.nulls.emplace_back(std::string("overhead.") + name, why);
  };
  field("estimated_fraction", e.fraction);
  w.key("method");
  if (e.fraction) w.value(e.method);
  else {
    w.null();
    out.nulls.emplace_back("overhead.method", why);
  }
  w.field("trace_every", o.trace_every);
  w.field("decided_by", o.budget ? "overhead_budget" : "trace_every");
  w.field("budget", o.budget);
  if (!o.budget) out.nulls.emplace_back("overhead.budget", o.no_budget_reason);
  w.key("within_budget");
  if (o.budget && e.fraction) w.value(e.within_budget);
  else {
    w.null();
    out.nulls.emplace_back("overhead.within_budget", o.budget ? why : o.no_budget_reason);
  }
  field("traced_step_extra_ms", e.traced_extra_ms);
  field("clean_step_ms", e.clean_step_ms);
  field("untraced_residual_ms", e.residual_ms);
  field("launches_per_step", e.launches_per_step);
  const auto text = [&](const char* name, const std::string& v) {
    w.key(name);
    if (!v.empty()) {
      w.value(v);
      return;
    }
    w.null();
    out.nulls.emplace_back(std::string("overhead.") + name, why);
  };
  text("untraced_cupti", o.untraced_cupti);
  text("kernel_timestamps", o.kernel_timestamps);
  write_overhead_parts(out, o.parts, why);
  w.end_object();
}

STEPTRACE_END_NAMESPACE  // steptrace
