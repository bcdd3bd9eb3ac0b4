// steptrace/core/line_fields_end.hpp - the end record's fields (`{"event": "end", ...}`, schema
// "steptrace.end/1"): a row per field, in docs/schema.md's order. `after_last_step.gpu`'s members are
// the step line's `between_steps.gpu` rows (core/line_fields.hpp's end_field_at() reads them there).
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

using F = FieldType;

// clang-format off
inline constexpr LineField kEndFields[] = {
    row("end", "/event", F::string, "—",
        "`end`",
        nullptr),
    row("end", "/schema", F::string, "—",
        "`steptrace.end/1`",
        nullptr),
    row("end", "/reason", F::string, "—",
        "`stop`, `SIGTERM` or `exit`",
        nullptr),
    row("end", "/timestamp", F::string, "ISO 8601 UTC",
        "when the record was written",
        nullptr),
    row("end", "/rank", F::integer, "—",
        "as on the step lines",
        nullptr),
    same("/local_rank", F::integer, "—"),
    same("/world_size", F::integer, "—"),
    same("/hostname", F::string, "—"),
    same("/pid", F::integer, "—"),
    same("/run_id", F::string, "—"),
    same("/job_id", F::string, "—"),
    row("end", "/device_uuid", F::string, "—",
        "`device.uuid` of the step lines; `null` without a GPU",
        nullptr),
    row("end", "/last_global_step", F::integer, "step",
        "the last step whose line was produced (written or not); `null` if none",
        nullptr),
    row("end", "/lines_written", F::integer, "count",
        "step lines the log took since `start()`",
        nullptr),
    row("end", "/lines_incomplete", F::integer, "count",
        "of those, lines written before all their GPU records came (`gpu.complete: false`)",
        nullptr),
    member("/dropped", F::object, "—"),
    row("end", "/dropped/steps_total", F::integer, "count",
        "as on the step lines",
        nullptr),
    same("/dropped/lines_unwritten_total", F::integer, "count"),
    row("end", "/dropped/lines_cut_at_end", F::integer, "count",
        "at SIGTERM or exit without `stop()`: waiting lines left unwritten because the ending's "
        "`end_wait_ms` (1 s) was running out (the waiting lines get 6/10 of it, so that this record always "
        "comes); 0 at `stop()`",
        nullptr),
    row("end", "/dropped/steps_cut_at_end", F::integer, "count",
        "at SIGTERM or exit without `stop()`: steps begun before the ending whose line could not come before "
        "this record — a step the training thread had closed but not yet handed to the background thread "
        "when the signal stopped it, or the open step when the ending could not take the step recorder's "
        "lock in time (that thread held it); 0–2 in practice (2: the thread was stopped inside the step's "
        "begin, holding both), counted since `start()`, 0 at `stop()`. A step the program goes on to queue "
        "before the background thread takes the ending is not cut",
        nullptr),
    row("end", "/traces", F::object, "—",
        "the flight recorder's counts; `null` when it is off (`trace_keep_steps` 0)",
        nullptr),
    row("end", "/traces/captures", F::integer, "count",
        "trace files begun (at most `trace_max_files`); at SIGTERM or exit without `stop()` the captures "
        "still waiting for their following step are not written (`end_wait_ms` is for the lines and this "
        "record): `captures − written − failed` of them",
        nullptr),
    row("end", "/traces/written", F::integer, "count",
        "trace files written, and those that could not be (warned once, with the error)",
        nullptr),
    same("/traces/failed", F::integer, "count"),
    row("end", "/traces/refused_max_files", F::integer, "count",
        "captures refused: `trace_max_files` reached",
        nullptr),
    row("end", "/traces/refused_budget", F::integer, "count",
        "automatic captures refused: the capture budget (a quarter of `overhead_budget`) was spent",
        nullptr),
    row("end", "/traces/slow_suppressed", F::integer, "count",
        "slow steps not captured because they came within the slow-step rule's rate-limit gap",
        nullptr),
    row("end", "/traces/capture_cpu_ms", F::number, "ms",
        "the background thread's CPU time building and writing captures",
        nullptr),
    member("/traces/requests", F::object, "—"),
    row("end", "/traces/requests/read", F::integer, "count",
        "capture requests for this run read from the trace directory (`steptrace-ctl capture`; "
        "`remote_captures`)",
        nullptr),
    row("end", "/traces/requests/refused", F::integer, "count",
        "request files refused (malformed, stale, more than 64 steps, not a regular file, another waiting), "
        "each answered with the reason",
        nullptr),
    row("end", "/traces/requests/planned", F::integer, "count",
        "requests whose steps this rank captures (agreed through the exchange, or its own next steps)",
        nullptr),
    row("end", "/traces/requests/late", F::integer, "count",
        "of those, plans that reached this rank after its first step had begun (the capture holds what the "
        "ring still had)",
        nullptr),
    member("/traces/ring", F::object, "—"),
    row("end", "/traces/ring/keep_steps", F::integer, "steps",
        "the ring's bounds (`trace_keep_steps`, `trace_ring_mib`)",
        nullptr),
    same("/traces/ring/bytes_max", F::integer, "bytes"),
    row("end", "/traces/ring/bytes", F::integer, "bytes",
        "what the ring holds now, and at most during the run (kept steps and the kernel-name table)",
        nullptr),
    same("/traces/ring/bytes_peak", F::integer, "bytes"),
    row("end", "/traces/ring/step_bytes_max", F::integer, "bytes",
        "the largest single kept step",
        nullptr),
    row("end", "/traces/ring/steps_kept", F::integer, "count",
        "steps that went through the ring",
        nullptr),
    row("end", "/traces/ring/steps_evicted_for_bytes", F::integer, "count",
        "steps dropped before `keep_steps` newer ones came, to stay within `bytes_max`",
        nullptr),
    row("end", "/traces/ring/records_left_out", F::integer, "count",
        "GPU records of steps too large for `bytes_max` alone, left out of their traces (the step's "
        "`records_left_out` in the trace says which)",
        nullptr),
    row("end", "/after_last_step", F::object, "object `{host_ms, gpu}`",
        "what ran after the last step's scope ended (validation before `stop()`, a last checkpoint): "
        "`host_ms` from that scope's end to this record, `gpu` as `between_steps.gpu` of the step lines "
        "(null when the last step was not traced); `null` without a step or while the last step's scope was "
        "still open",
        nullptr),
    member("/after_last_step/host_ms", F::number, "ms"),
    member("/after_last_step/gpu", F::object, "—"),
    row("end", "/null_reasons", F::names, "—",
        "why a `null` above is null",
        nullptr),
    member("/null_reasons/*", F::string, "—"),
};
// clang-format on

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
