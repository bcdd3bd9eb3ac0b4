// steptrace/core/line_fields_events.hpp - the stall and resumed records' fields, a row per field in
// docs/schema.md's order (`{"event": "stall", ...}`, `{"event": "resumed", ...}`, schema
// "steptrace.stall/1"; core/stall.hpp writes them). Their identity (timestamp, rank ... job_id,
// device_uuid) is the end record's, written by the same function (core/end_line.hpp's
// write_event_identity) through each record's own rows.
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

// The identity both records carry (core/end_line.hpp's write_event_identity writes it), shown in `table`.
#define STEPTRACE_EVENT_IDENTITY_ROWS(table)                                 \
  row(table, "/timestamp", FieldType::string, "ISO 8601 UTC", Nulls::never), \
      row(table, "/rank", FieldType::integer, "—", Nulls::possible),          \
      same("/local_rank", FieldType::integer, "—"),                           \
      same("/world_size", FieldType::integer, "—"),                           \
      same("/hostname", FieldType::string, "—"),                              \
      same("/pid", FieldType::integer, "—"),                                  \
      same("/run_id", FieldType::string, "—"),                                \
      same("/job_id", FieldType::string, "—"),                                \
      same("/device_uuid", FieldType::string, "—")

// clang-format off
inline constexpr LineField kStallFields[] = {
    row("stall", "/event", FieldType::string, "—", Nulls::never),
    row("stall", "/schema", FieldType::string, "—", Nulls::never),
    STEPTRACE_EVENT_IDENTITY_ROWS("stall"),
    row("stall", "/open_step", FieldType::integer, "step", Nulls::never),
    row("stall", "/stalled_s", FieldType::number, "s", Nulls::possible),
    row("stall", "/threshold_s", FieldType::number, "s", Nulls::possible),
    row("stall", "/median_step_ms", FieldType::number, "ms", Nulls::possible),
    row("stall", "/report", FieldType::integer, "count", Nulls::never),
    same("/next_report_s", FieldType::number, "s"),
    row("stall", "/step_scope_open", FieldType::boolean, "—", Nulls::never),
    row("stall", "/step_scope_closed_s", FieldType::number, "s", Nulls::possible),
    row("stall", "/threads", FieldType::array, "array of `{tid, name, step_thread, open_phases}`", Nulls::never),
    member("/threads/*", FieldType::object, "—"),
    member("/threads/*/tid", FieldType::integer, "—"),
    member("/threads/*/name", FieldType::string, "—"),
    member("/threads/*/step_thread", FieldType::boolean, "—"),
    row("stall", "/threads/*/open_phases", FieldType::array, "array of `{phase, open_s}`", Nulls::never),
    member("/threads/*/open_phases/*", FieldType::object, "—"),
    member("/threads/*/open_phases/*/phase", FieldType::string, "—"),
    member("/threads/*/open_phases/*/open_s", FieldType::number, "s"),
    row("stall", "/threads_untracked", FieldType::integer, "count", Nulls::never),
    member("/gpu", FieldType::object, "—"),
    row("stall", "/gpu/last_activity_s", FieldType::number, "s", Nulls::possible),
    same("/gpu/last_activity", FieldType::string, "—"),
    row("stall", "/gpu/open_step_launches", FieldType::integer, "count", Nulls::possible),
    row("stall", "/gpu/open_step_outstanding", FieldType::integer, "count", Nulls::possible),
    row("stall", "/gpu/outstanding_by_phase", FieldType::names, "object: phase → count", Nulls::never),
    member("/gpu/outstanding_by_phase/*", FieldType::integer, "count"),
    row("stall", "/gpu/sm_active_recent", FieldType::number, "fraction 0–1", Nulls::possible),
    row("stall", "/gpu/sm_active_sample_age_s", FieldType::number, "s", Nulls::possible),
    row("stall", "/null_reasons", FieldType::names, "—", Nulls::never),
    member("/null_reasons/*", FieldType::string, "—"),
};

inline constexpr LineField kResumedFields[] = {
    row("resumed", "/event", FieldType::string, "—", Nulls::never),
    row("resumed", "/schema", FieldType::string, "—", Nulls::never),
    STEPTRACE_EVENT_IDENTITY_ROWS("resumed"),
    row("resumed", "/stalled_step", FieldType::integer, "step", Nulls::never),
    row("resumed", "/stalled_s", FieldType::number, "s", Nulls::possible),
    row("resumed", "/reports", FieldType::integer, "count", Nulls::never),
    row("resumed", "/open_step", FieldType::integer, "step", Nulls::never),
    row("resumed", "/null_reasons", FieldType::names, "—", Nulls::never),
    member("/null_reasons/*", FieldType::string, "—"),
};
// clang-format on
#undef STEPTRACE_EVENT_IDENTITY_ROWS

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
