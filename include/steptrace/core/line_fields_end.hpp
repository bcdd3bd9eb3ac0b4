// steptrace/core/line_fields_end.hpp - the end record's fields (`{"event": "end", ...}`, schema
// "steptrace.end/1"): a row per field, in docs/schema.md's order. `after_last_step.gpu`'s members are
// the step line's `between_steps.gpu` rows (core/line_fields.hpp's record_field_at() reads them there,
// and the end record's RowTree links to them: core/tier_leaves.hpp).
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

using F = FieldType;

// clang-format off
inline constexpr LineField kEndFields[] = {
    row("end", "/event", F::string, "—", Nulls::possible),
    row("end", "/schema", F::string, "—", Nulls::possible),
    row("end", "/reason", F::string, "—", Nulls::possible),
    row("end", "/timestamp", F::string, "ISO 8601 UTC", Nulls::possible),
    row("end", "/rank", F::integer, "—", Nulls::possible),
    same("/local_rank", F::integer, "—"),
    same("/world_size", F::integer, "—"),
    same("/hostname", F::string, "—"),
    same("/pid", F::integer, "—"),
    same("/run_id", F::string, "—"),
    same("/job_id", F::string, "—"),
    row("end", "/device_uuid", F::string, "—", Nulls::possible),
    row("end", "/last_global_step", F::integer, "step", Nulls::possible),
    row("end", "/lines_written", F::integer, "count", Nulls::possible),
    row("end", "/lines_incomplete", F::integer, "count", Nulls::possible),
    row("end", "/stall_records", F::integer, "count", Nulls::possible),
    member("/dropped", F::object, "—"),
    row("end", "/dropped/steps_total", F::integer, "count", Nulls::possible),
    same("/dropped/lines_unwritten_total", F::integer, "count"),
    row("end", "/dropped/lines_cut_at_end", F::integer, "count", Nulls::possible),
    row("end", "/dropped/steps_cut_at_end", F::integer, "count", Nulls::possible),
    row("end", "/traces", F::object, "—", Nulls::possible),
    row("end", "/traces/captures", F::integer, "count", Nulls::possible),
    row("end", "/traces/written", F::integer, "count", Nulls::possible),
    same("/traces/failed", F::integer, "count"),
    row("end", "/traces/refused_max_files", F::integer, "count", Nulls::possible),
    row("end", "/traces/refused_budget", F::integer, "count", Nulls::possible),
    row("end", "/traces/slow_suppressed", F::integer, "count", Nulls::possible),
    row("end", "/traces/capture_cpu_ms", F::number, "ms", Nulls::possible),
    member("/traces/requests", F::object, "—"),
    row("end", "/traces/requests/read", F::integer, "count", Nulls::possible),
    row("end", "/traces/requests/refused", F::integer, "count", Nulls::possible),
    row("end", "/traces/requests/planned", F::integer, "count", Nulls::possible),
    row("end", "/traces/requests/late", F::integer, "count", Nulls::possible),
    member("/traces/ring", F::object, "—"),
    row("end", "/traces/ring/keep_steps", F::integer, "steps", Nulls::possible),
    same("/traces/ring/bytes_max", F::integer, "bytes"),
    row("end", "/traces/ring/bytes", F::integer, "bytes", Nulls::possible),
    same("/traces/ring/bytes_peak", F::integer, "bytes"),
    row("end", "/traces/ring/step_bytes_max", F::integer, "bytes", Nulls::possible),
    row("end", "/traces/ring/steps_kept", F::integer, "count", Nulls::possible),
    row("end", "/traces/ring/steps_evicted_for_bytes", F::integer, "count", Nulls::possible),
    row("end", "/traces/ring/records_left_out", F::integer, "count", Nulls::possible),
    row("end", "/after_last_step", F::object, "object `{host_ms, gpu}`", Nulls::possible),
    member("/after_last_step/host_ms", F::number, "ms"),
    member("/after_last_step/gpu", F::object, "—"),
    row("end", "/null_reasons", F::names, "—", Nulls::possible),
    member("/null_reasons/*", F::string, "—"),
};
// clang-format on

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
