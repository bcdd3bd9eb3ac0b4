// steptrace/core/line_fields_verdicts.hpp - the step line's verdicts and bookkeeping: diagnosis, overhead,
// trace, window, drops, warnings and null reasons: a row per field, in docs/schema.md's order
// (core/line_field.hpp says what a row holds, core/line_fields.hpp what the rows drive).
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

using F = FieldType;

// clang-format off
inline constexpr LineField kVerdictFields[] = {
    row("diagnosis", "/diagnosis/label", F::string, "one of `INPUT-BOUND`, `H2D-BOUND`, `COMM-BOUND`, `HOST/LAUNCH-BOUND`, `LOW-SM-EFFICIENCY`, "
         "`COMPUTE-BOUND`, `UNKNOWN`",
        "what holds the step back (rules in docs/gpu.md, \"Diagnosis\")",
        nullptr).in(kCompact),
    row("diagnosis", "/diagnosis/reason", F::string, "—",
        "the deciding number in words. The compact line carries it on `UNKNOWN` lines only, as the "
        "sentence's code (its sentence in `reason_text` the first time the run meets it, as a null's)",
        nullptr).in(kCompact),
    row("diagnosis", "/diagnosis/evidence", F::object, "object `{input_share, h2d_share, comm_exposed_share, gpu_utilization, sm_efficiency}`",
        "shares of the step time; the GPU ones null without attribution",
        nullptr),
    member("/diagnosis/evidence/input_share", F::number, "fraction"),
    member("/diagnosis/evidence/h2d_share", F::number, "fraction"),
    member("/diagnosis/evidence/comm_exposed_share", F::number, "fraction"),
    member("/diagnosis/evidence/gpu_utilization", F::number, "fraction"),
    member("/diagnosis/evidence/sm_efficiency", F::number, "fraction"),
    row("diagnosis", "/diagnosis/warnings", F::array, "array of strings",
        "shares past a warning level that did not decide the label (data wait ≥ 10 %)",
        nullptr),
    member("/diagnosis/warnings/*", F::string, "—"),
    row("diagnosis", "/diagnosis/basis", F::string, "`traced` | `markers` | `carried` | `carried_scaled` | `host_only` | `none`",
        "what the label was decided from. `traced`: this step's own GPU attribution. `markers`: an untraced "
        "step's own stream markers showed the GPU with work pending for at least 70 % of the step "
        "(`gpu_markers.pending_share`, a lower bound of its busy share), so the GPU held the step back; the "
        "label is decided with that share, the SM efficiency of the last traced step's kernels and its "
        "exposed NCCL share when that step is at most 2 × `trace_every` (≥ 16) steps older; the reason "
        "starts \"stream markers:\"; used only while the last traced step's markers agreed with its records "
        "(`gpu_markers.agrees_with_records`). Below 70 % markers cannot tell and the carried view decides. "
        "`host_only`: a host-visible wait past its threshold (input, h2d) decided without any GPU view. "
        "`carried`: the step was not traced and its waits are below their thresholds, so its host shares "
        "were combined with the GPU shares (utilization, SM efficiency, exposed NCCL) of the last traced "
        "step — if that step is at most 2 × `trace_every` steps older (at least 16) and this step's time is "
        "within 1.5× of the untraced steps' median around it (the median of up to 31 untraced steps before "
        "it, or of the first ones after it when none came before; never the traced step's own time, which "
        "tracing lengthens: a much longer or shorter step did something else, an evaluation, a checkpoint); "
        "`diagnosis.reason` starts \"carried from traced step N\". `carried_scaled`: as `carried`, for a "
        "step whose time is 1.5–4× longer or shorter than that median: the traced step's GPU work is "
        "assumed: its GPU busy time and exposed NCCL time (its shares × its own time) over this step's time "
        "(SM efficiency is its kernels' own); where that work cannot fit this step, or the scaled view "
        "decides another label than the unscaled one, `none` (a host-launch-bound view keeps its label in a "
        "longer step and in a shorter one that still leaves the GPU waiting); the reason starts \"carried "
        "from traced step N, scaled by its GPU work\". `none`: nothing decided; the label is `UNKNOWN` and "
        "the reason says why (nothing traced yet, the last traced step too old or unlike)",
        nullptr).in(kCompact),
    row("diagnosis", "/diagnosis/carried_from_step", F::integer, "step",
        "with basis `carried` or `carried_scaled`: the traced step whose GPU view was used; with `markers`: "
        "the traced step whose SM efficiency and NCCL time were used (null when none was recent) "
        "(`evidence`'s GPU shares stay null: they are this step's own); null with every other basis (reason)",
        nullptr),
    member("/overhead", F::object, "—"),
    row("overhead", "/overhead/estimated_fraction", F::number, "fraction of step time",
        "steptrace's cost in step time at the interval in force: tracing and attached CUPTI plus "
        "`parts.host_api`. `measured`: `traced_step_extra_ms / (trace_every × clean_step_ms) + "
        "untraced_residual_ms / clean_step_ms + host_api`, every time the step's own time (its scope: what "
        "runs between steps is never in it); `launch_model`: `(traced_step_extra_ms + (trace_every − 1) × "
        "untraced_residual_ms) / (trace_every × clean_step_ms) + host_api`. After the budget detaches CUPTI "
        "(`untraced_cupti` turns `detach`) the estimate starts over from the launch model",
        "CUPTI attribution off, tracing stopped after CUPTI could not be switched back on, no traced step "
         "observed yet (reason)").in(kCompact),
    row("overhead", "/overhead/method", F::string, "`measured` | `launch_model`",
        "`measured`: from the program's own step times (their scopes) over the last max(128, 8 × "
        "`trace_every`) steps after the first 8: the median of the traced steps, of the steps 1 and 2 after "
        "one and (detach mode) of the steps that paid for a detach (`cuptiFinalize`, which waits for the "
        "device; the gap before such a step counted with it), each against the median of untraced steps at "
        "least 3 steps from a trace (at least 3 and 5 steps; `polluted_steps` left out); `launch_model` "
        "otherwise (launches per step × 1.1 µs, plus 8.3 ms in detach mode; with an interval of 3 or less no "
        "step is 3 from a trace, and the budget then traces one step in 8 for a while to measure again)",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/trace_every", F::integer, "steps",
        "the interval in force for this step: one step in N is traced; the budget asks for the shortest "
        "interval whose estimate (its `estimated_fraction_ci_high`) is at most 80 % of `budget`, at least 4 "
        "once `measured` (shorter, no step is 3 from a trace), at most 1000 (headroom for the host side, "
        "which the estimate leaves out, and for its spread)",
        "never"),
    row("overhead", "/overhead/decided_by", F::string, "`overhead_budget` | `trace_every`",
        "who set the interval: the budget (`trace_every` 0 and `overhead_budget` > 0, the default) or "
        "`trace_every` (set explicitly, or `overhead_budget` 0: every step)",
        "never"),
    row("overhead", "/overhead/budget", F::number, "fraction",
        "`overhead_budget`",
        "`trace_every` set explicitly, `overhead_budget` 0 (reason)"),
    row("overhead", "/overhead/within_budget", F::boolean, "—",
        "`estimated_fraction` ≤ `budget`",
        "no budget, or no estimate").in(kCompact),
    row("overhead", "/overhead/estimated_fraction_ci_low", F::number, "fraction",
        "the low end of `estimated_fraction`'s 95 % range: with `measured`, max(0, `traced_step_extra_ms` − "
        "1.96 × `traced_step_extra_se_ms`) / (`trace_every` × `clean_step_ms`), plus "
        "`untraced_residual_low_ms / clean_step_ms`, plus `parts.host_api`; with `launch_model`, the point's "
        "tracing part (attach and detach included in detach mode) with the residual's low end",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/estimated_fraction_ci_high", F::number, "fraction",
        "the high end: (`traced_step_extra_ms` + 1.96 × `traced_step_extra_se_ms`) / (`trace_every` × "
        "`clean_step_ms`) with the whole residual and `parts.host_api`; the budget chooses the interval on "
        "this end (a noisy \"0\" never makes it trace every step)",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/traced_step_extra_ms", F::number, "ms",
        "what one trace costs: the traced step (in detach mode the attach is in it), the steps 1 and 2 after "
        "it and, in detach mode, the step that paid for the detach (`method`)",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/traced_step_extra_se_ms", F::number, "ms",
        "the standard error of `traced_step_extra_ms` (`measured`): each median's 1.2533 × σ / √n × t(0.975, "
        "n − 1) / 1.96 (σ = 1.4826 × the median absolute deviation of its steps, never less than the clean "
        "steps'), the clean median counted once per class it is subtracted from",
        "`launch_model` (reason), as `estimated_fraction`"),
    row("overhead", "/overhead/polluted_steps", F::integer, "count",
        "steps left out of the comparison since the start because they followed a gap between steps longer "
        "than 3 × the median gap of the last 64 steps + 5 % of their median time (an evaluation, a "
        "checkpoint, logging or a recompilation between steps: the step after it may run slower for reasons "
        "of its own)",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/clean_step_ms", F::number, "ms",
        "median step time far from a trace (`measured`), or the median step time (`launch_model`)",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/untraced_residual_ms", F::number, "ms",
        "what CUPTI costs an untraced step while it stays attached (`untraced_cupti=keep`): launches × 0.79 "
        "µs (0.6 µs measured with records and callbacks off, plus CUPTI's dispatch of the callbacks, which "
        "stay on), charged whole: the launching thread pays it on every launch, and a step that waits for "
        "that thread pays all of it (a torch.compile GPT-2 step with the GPU 96 % busy did: issue #48). A "
        "model (every step pays it, no step time shows it); 0 with `untraced_cupti=detach`",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/untraced_residual_low_ms", F::number, "ms",
        "the residual's low end: `untraced_residual_ms` × the share of the recent traced steps' records "
        "(kernels, copies, memsets) that started within 50 µs of their launch call (a CUDA graph's first "
        "record only, at best), i.e. where the GPU waited for the host (median over steps; the whole "
        "residual until a traced step has timed its launches); 0 with `untraced_cupti=detach`",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/launches_per_step", F::number, "count",
        "median kernels + copies + memsets of the recent traced steps",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/untraced_cupti", F::string, "`keep` | `detach`",
        "what CUPTI did between traced steps while this step ran: `keep` (attached; records off between "
        "traced steps, when the interval leaves any; the launch callbacks stay on and return at once: "
        "switching them while another thread launches crashed CUPTI) or `detach` (`untraced_cupti=detach`, "
        "or chosen by the budget under `untraced_cupti=auto` when staying attached alone costs more than 80 "
        "% of the budget at any interval and detaching is modelled cheaper: launches × 1.1 µs + 8.3 ms for "
        "an attach and a detach, over 1000 steps (the longest interval); the warning `overhead.detach` and "
        "the counters' null reason say when)",
        "CUPTI attribution off (reason)"),
    row("overhead", "/overhead/estimated_fraction_high", F::number, "fraction",
        "the high end of the estimate's interval: `estimated_fraction` plus what the background thread spent "
        "in CPU time (`parts.background`, `parts.captures`), which costs the program's steps nothing on a "
        "free core and up to its whole time on a busy one; the program's cost lies in [`estimated_fraction`, "
        "`estimated_fraction_high`]",
        "as `estimated_fraction`"),
    row("overhead", "/overhead/parts", F::object, "object `{tracing, attached, counters, host_api, background, captures}`, each `{fraction, basis}`",
        "the estimate part by part (`core/overhead_parts.hpp`); `estimated_fraction` is the sum of the "
        "fractions of tracing, attached and host_api (the step time the budget holds: the tracing "
        "measurement holds what the counters and the background thread's work around traced steps cost the "
        "steps), `estimated_fraction_high` adds background and captures (CPU time of the background thread, "
        "each part paced by a governor of its own). `tracing`: the traced steps at the interval in force "
        "(`measured` from the step times, or `modelled` from the launch count); `attached`: CUPTI's "
        "callbacks on untraced steps while attached (`modelled`, = `untraced_residual_ms / clean_step_ms`); "
        "`counters`: PM sampling — `in_tracing` when the budget decides (sampling runs only around traced "
        "steps, so its cost is inside `tracing`'s; fraction null), `not_measured` when it runs on every step "
        "(fixed `trace_every`; null), `off` (0); `host_api`: steptrace's calls on the training thread (the "
        "step, each phase scope, each `record()`) × 120 ns (C++; 720 ns from Python), `modelled` "
        "(benchmarks/README.md, `scope_cost`), plus the stream markers' CUDA event records as the training "
        "thread measures them (making the events once, when the markers are first armed, and that step's "
        "records, which pay the driver's first-use costs, are left out: a one-off of a few ms, said in the "
        "log at `stop()`); `background`: the background thread's CPU time "
        "in its device-memory, NVML and PM-sampling reads over the last 512 steps' time, `measured` (CPU "
        "time, not wall time: a read that waits for a lock held by the training thread's CUDA call costs no "
        "core; the 8 warm-up steps are not counted), with `memory`, `device_state` and `counters`: each "
        "kind's share since the warm-up. Under the budget each of device memory and NVML is read every "
        "`memory_sample_ms` or, when one reading's CPU time (smoothed) would spend more than a tenth of the "
        "budget at that rate, as often as a tenth of the budget pays for; PM samples are decoded at every "
        "wake of the background thread while sampling runs, and once after each pause; a sample longer than "
        "1.5 × `counters_interval_us` (the first after a resume spans the pause) is dropped. PM decodes are "
        "CPU-heavy (measured on H100: ~8 % of a 46 ms transformer step's time in CPU while one step in 16 is "
        "traced, against no measurable step-time cost: benchmarks/README.md); `captures`: the background "
        "thread's CPU time writing flight-recorder captures over the run's step time, `measured` (`off` "
        "without the recorder)",
        "no estimate yet, attribution off (reason); a part's `fraction` null with its reason"),
    member("/overhead/parts/tracing", F::object, "—"),
    member("/overhead/parts/tracing/fraction", F::number, "fraction"),
    member("/overhead/parts/tracing/basis", F::string, "—"),
    member("/overhead/parts/attached", F::object, "—"),
    member("/overhead/parts/attached/fraction", F::number, "fraction"),
    member("/overhead/parts/attached/basis", F::string, "—"),
    member("/overhead/parts/counters", F::object, "—"),
    member("/overhead/parts/counters/fraction", F::number, "fraction"),
    member("/overhead/parts/counters/basis", F::string, "—"),
    member("/overhead/parts/host_api", F::object, "—"),
    member("/overhead/parts/host_api/fraction", F::number, "fraction"),
    member("/overhead/parts/host_api/basis", F::string, "—"),
    member("/overhead/parts/background", F::object, "—"),
    member("/overhead/parts/background/fraction", F::number, "fraction"),
    member("/overhead/parts/background/basis", F::string, "—"),
    member("/overhead/parts/background/memory", F::number, "fraction"),
    member("/overhead/parts/background/device_state", F::number, "fraction"),
    member("/overhead/parts/background/counters", F::number, "fraction"),
    member("/overhead/parts/captures", F::object, "—"),
    member("/overhead/parts/captures/fraction", F::number, "fraction"),
    member("/overhead/parts/captures/basis", F::string, "—"),
    row("overhead", "/overhead/kernel_timestamps", F::string, "text",
        "how CUPTI times kernel records: `hardware_events` (`cuptiActivityEnableHWTrace`, Blackwell and "
        "later) or `instrumented (why the hardware path was refused)`",
        "CUPTI attribution off (reason)"),
    row("trace", "/trace", F::object, "—",
        "the step was captured: it is written to a trace file with its neighbours",
        "the step was not captured, or the recorder is off (`trace_keep_steps` 0) (reason)"),
    row("trace", "/trace/file", F::string, "path",
        "the trace file (Trace Event Format JSON), as opened: `trace_dir`, else the log's directory, "
        "`/trace-<run_id[0:8]>-r<rank>-s<first captured step>.json`. Written by the background thread after "
        "the following step's line, so it may appear a step after the line",
        "a captured step over `trace_max_files` (`trace.not_written` says so)"),
    row("trace", "/trace/capture_first_step", F::integer, "step",
        "the first captured step of the file (consecutive captured steps share one); present only with a file",
        "—"),
    row("trace", "/trace/not_written", F::string, "text",
        "present only when `trace.file` is `null`: why (also in `null_reasons`)",
        "—"),
    row("trace", "/trace/reasons", F::array, "—",
        "why it was captured: `slow_step` (over the last 64 steps, once 20 were seen, with m their median, s "
        "= 1.4826 × their median absolute deviation and p90 their 90th percentile: step time > "
        "`trace_trigger` × m, and > m + max(5 s, 1 ms), and > p90 — a loop's habitual longer steps are not "
        "news; then at most one slow-step capture per gap: 100 steps, doubled (to 1 600) at each capture if "
        "slow steps came during the previous gap, back to 100 if none did; the slow steps within a gap are "
        "counted in the end record's `traces.slow_suppressed`), `diagnosis_changed` (the first step of a "
        "stretch whose `diagnosis.label` differs from the run's most frequent one so far; traced steps only, "
        "after 20 of them), `capture_steps` (the program called `steptrace::capture_steps(n)`), "
        "`capture_steps_env` (`capture_steps` / `STEPTRACE_CAPTURE_STEPS` names it)",
        "—"),
    member("/trace/reasons/*", F::string, "—"),
    row("bookkeeping", "/window", F::object, "object `{steps, step_time_ms_mean, step_time_ms_min, step_time_ms_max, tokens_per_second_mean}`",
        "only when `log_every` > 1: the steps since the previous line; `tokens_per_second_mean` is their "
        "tokens over their time (the steps that had a rate), not a mean of per-step rates",
        nullptr),
    member("/window/steps", F::integer, "steps").in(kCompact),
    member("/window/step_time_ms_mean", F::number, "ms").in(kCompact),
    member("/window/step_time_ms_min", F::number, "ms").in(kCompact),
    member("/window/step_time_ms_max", F::number, "ms").in(kCompact),
    member("/window/tokens_per_second_mean", F::number, "tokens/s").in(kCompact),
    member("/dropped", F::object, "—"),
    row("bookkeeping", "/dropped/steps_total", F::integer, "count",
        "steps whose line was never written because the writer queue (`max_pending_steps`) was full, since "
        "`start()`",
        nullptr).in(kCompact),
    row("bookkeeping", "/dropped/lines_unwritten_total", F::integer, "count",
        "lines the log could not take (a write error: disk full, file size limit, …; a FIFO or pipe whose "
        "reader stopped reading: a line waits at most 20 ms, then is dropped), since `start()`; a line that "
        "failed part way is cut off again, so the file holds whole lines only (a pipe cannot be cut: the "
        "rest of a line its reader took part of goes first, and `stop()` waits at most 0.5 s for it, then "
        "says in a warning how many bytes it abandoned)",
        nullptr).in(kCompact),
    row("bookkeeping", "/dropped/phase_scopes", F::integer, "count",
        "phase scopes over `max_spans_per_step` in this step (their time is missing), and those over it "
        "among the scopes that ended before this step began (its `between_steps`, bounded by "
        "`max_spans_per_step` too); threads other than the step's may fill three quarters of it, the last "
        "quarter is the step thread's.",
        nullptr),
    row("bookkeeping", "/dropped/phase_names_total", F::integer, "count",
        "new phase names refused since the process began because the table of 64 names was full (their "
        "scopes are not recorded; warned once)",
        nullptr),
    row("bookkeeping", "/dropped/scalars", F::integer, "count",
        "`record()` values not kept in this step: past 256 calls, a new name is dropped (except `loss`, "
        "`grad_norm`, `overflow_count`, always kept) and a name already recorded takes the new value in "
        "place of its latest one (so every field shows the last value recorded)",
        nullptr),
    row("bookkeeping", "/ignored_step_scopes", F::integer, "count",
        "`TRACE_STEP`s opened while this step's scope was open (nested, or on another thread)",
        nullptr),
    row("bookkeeping", "/phase_scopes_outside_step", F::integer, "count",
        "phase scopes that ended while no step was open (before the first step or between two steps), "
        "counted on the next step's line",
        nullptr),
    row("bookkeeping", "/warnings", F::array, "array of strings",
        "e.g. MFU above 1",
        nullptr),
    member("/warnings/*", F::string, "—"),
    row("bookkeeping", "/null_reasons", F::names, "object field → string",
        "one entry for every `null` field of the line; a field inside an object is named by its path "
        "(`gpu.sm_efficiency`), an array element by its index (`<array>.<index>.<field>`); a name holding "
        "`.` or `\\` has them escaped with `\\` so it stays one step of the path (phase `attn.qkv`: "
        "`phases.attn\\.qkv.gpu`, in the JSON text `\"phases.attn\\\\.qkv.gpu\"`); an object or array a "
        "check left out is itself `null` with the check's reason, nothing inside it written",
        nullptr),
    member("/null_reasons/*", F::string, "—"),
};
// clang-format on

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
