// steptrace/core/line_fields_gpu.hpp - the step line's GPU fields: attribution, hardware counters, the
// cross-rank view, device state, per-phase GPU work and the stream markers: a row per field, in
// docs/schema.md's order (core/line_field.hpp says what a row holds, core/line_fields.hpp what the rows drive).
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

using F = FieldType;

// clang-format off
inline constexpr LineField kGpuFields[] = {
    row("gpu", "/gpu_utilization", F::number, "fraction 0–1",
        "`gpu.busy_ms / gpu.window_ms`: the union of the step's kernel, copy and memset intervals "
        "(concurrent streams counted once) over the step's time, or over the span of its work (first "
        "record's start → last record's end) where that is longer (a loop that does not wait for the GPU "
        "each step: work queued ahead runs on after the step's end); never capped (see \"Checked on every "
        "line\")",
        "no GPU, `cupti=off`, CUPTI held by another tool, step not traced (`trace_every`), busy time above "
         "the window (broken sums)").in(kCompact),
    row("gpu", "/nccl_time_ms", F::number, "ms",
        "sum of NCCL kernels (`ncclKernel*` / `ncclDevKernel*`) launched in the step, whatever the phase",
        "same").in(kCompact),
    row("gpu", "/sm_activity", F::number, "fraction 0–1",
        "hardware counter `sm__cycles_active.avg.pct_of_peak_sustained_elapsed` / 100 (cycles with ≥ 1 warp "
        "resident, mean over SMs; DCGM's SM_ACTIVE), CUPTI PM sampling, over the step's window (see "
        "`counters`)",
        "no GPU, `counters=off`, `cupti=off`, detach mode (`untraced_cupti=detach` with an interval > 1, or "
         "`auto` once the budget detached CUPTI: reason), counters unavailable (held by DCGM/ncu/Nsight, "
         "insufficient privileges, unsupported GPU), counters stopped (e.g. the hardware buffer filled while "
         "steptrace's thread was held up for seconds: `CUPTI_ERROR_OUT_OF_MEMORY` from the decode), no sample "
         "covered the step; an untraced step while `overhead_budget` decides the interval (the default): PM "
         "sampling then runs only from the step before a traced one until that step's samples are in, so that "
         "its cost falls on the traced steps, which the budget measures (reason \"hardware counters run on "
         "traced steps only\")").in(kCompact),
    row("gpu", "/memory_bandwidth_utilization", F::number, "fraction 0–1",
        "`dram__throughput.avg.pct_of_peak_sustained_elapsed` / 100 (DCGM's DRAM_ACTIVE)",
        "as `sm_activity`").in(kCompact),
    row("gpu", "/tensor_core_or_pipe_utilization", F::number, "fraction 0–1",
        "`sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed` / 100 (tensor pipe active cycles; "
        "DCGM's PIPE_TENSOR_ACTIVE); on chips without it the `…_op_gmma_…` or `…_op_hmma_…` variant",
        "as `sm_activity`; the chip offers none of the three").in(kCompact),
    row("gpu", "/counters", F::object, "—",
        "how the three values above were obtained: `source` (`cupti_pm_sampling`), `interval_us` (sampling "
        "period), `samples` (samples used), `sample_ms` (the window's time inside the samples used: the "
        "weight of its values), `coverage` (`sample_ms` / the window's time), `edge_only` (no whole sample "
        "inside the window: see the rule below the table), `occupancy` "
        "(`sm__warps_active.avg.pct_of_peak_sustained_active` / 100, achieved occupancy), `excluded_values` "
        "(PM sample values left out since the start because they lay outside [0, 1]: a ratio of a fully busy "
        "interval cannot; values up to 1.001 are the hardware's rounding of 1 and read as 1; every value "
        "published is in [0, 1])",
        "counters not running (reason in `null_reasons.counters`)"),
    member("/counters/source", F::string, "—"),
    member("/counters/interval_us", F::number, "µs"),
    member("/counters/samples", F::integer, "count"),
    member("/counters/sample_ms", F::number, "ms"),
    member("/counters/coverage", F::number, "fraction"),
    member("/counters/edge_only", F::boolean, "—"),
    member("/counters/occupancy", F::number, "fraction"),
    member("/counters/excluded_values", F::integer, "count"),
    row("gpu", "/cross_rank", F::object, "—",
        "rank 0 only, with a communicator handed over (C++: `steptrace/nccl.hpp`; Python: "
        "`steptrace.cross_rank()`): who holds the step back under synchronous data parallelism. Every "
        "`cross_rank_every` steps each rank's summary of the steps since its previous one (means per step) "
        "is gathered (`ncclAllGather` on steptrace's own stream; Python: an asynchronous `all_gather` of CPU "
        "tensors on a gloo group of steptrace's own): its iteration (the step to its scope's end, or, in "
        "Python's `watch()` and callbacks, to where `opt.step()` returned; built-in phases tagged between "
        "steps, outermost; and the time after that until the next step), its built-in phases' host time, and "
        "its **collective wait** per step, as each kind of evidence measured it (`wait_basis`, the first kind "
        "every rank measured, so that no rank is read against another kind: `backward_end`, Python: the GPU "
        "time from the end of backward's kernels to the end of the collectives the framework waits for at "
        "the end of backward, DDP's all-reduce or FSDP's reduce-scatter, from two CUDA events a step, with "
        "FSDP's all-gather waits in forward where `watch()` brackets them — not its all-gathers in backward; "
        "`markers`, the `nccl` phase's span on the GPU (a collective on the marked stream); `trace`, a "
        "traced step's NCCL kernel time not overlapped by its other kernels; `host_nccl`, the `nccl` "
        "phase's host time, last: it holds whatever the sync there waited for, the rank's own GPU work "
        "included; `none`). A rank's **own work** = its iteration − its wait: the fast ranks "
        "wait inside the collective for the slow one, so step times agree and waits do not. Each line "
        "carries at most one gathered view: the newest of its own step or an earlier one (a view waits "
        "for its step's line, up to 64; older ones that no written line took, with `log_every`, are "
        "dropped). A kind of wait that reads more than a rank's iteration is not taken for that rank. `step` (the exchange's step), `every`, `world_size`, "
        "`reporting`, `missing_count`, `missing_ranks` (≤ 8, ranks whose summary was absent, invalid or of "
        "another step), `step_time_ms`, `work_ms` (own work) and `wait_ms` `{median, min, max}`, "
        "`slowest_rank` (most own work: the rank the others wait for), `gap_ms` = its own work − the "
        "median's (what the median rank waits for it per step), **`step_skew`** = `gap_ms` / median "
        "step time, **`wait_share`** = (largest wait − smallest wait) / median step time, at most 1 (the share of its "
        "step the rank that waits most spends waiting for another), **`balanced`** = `wait_share` < 0.05 "
        "(null when a rank is missing, fewer than two reported, or no kind of wait was measured on every "
        "rank: then own work falls back on the step less the `nccl` phase's host time, and the view names a "
        "culprit from host times only), `skew` = `gap_ms` / median own work, `culprit` and `median_rank` `{rank, "
        "work_ms, wait_ms, step_time_ms, wait_basis}`, `culprit_phase` (the part of the slowest rank's "
        "iteration that exceeds the other ranks' median by the most: a built-in phase but `nccl`, "
        "`untagged` — step time in no built-in phase — or `between_steps` — after the step's work until "
        "the next step, a batch fetch `watch()` does not see, a host read; a rank's wait beyond the "
        "smallest is taken out of its `between_steps` first, where a read waits for it) and "
        "`culprit_gap_ms`, `lowest_scores` (≤ 8 `{rank, score, work_ms, wait_ms}`, score = best own work / "
        "this rank's; nvidia-resiliency-ext's relative score). docs/multi-gpu-validation.md has the runs "
        "that set the 0.05",
        "no communicator; ranks ≠ 0; no exchange completed since the previous line; the next view is of a "
         "later step"),
    member("/cross_rank/step", F::integer, "step").in(kCompact),
    member("/cross_rank/every", F::integer, "steps"),
    member("/cross_rank/world_size", F::integer, "ranks"),
    member("/cross_rank/reporting", F::integer, "ranks"),
    member("/cross_rank/missing_count", F::integer, "count"),
    member("/cross_rank/missing_ranks", F::array, "—"),
    member("/cross_rank/missing_ranks/*", F::integer, "rank"),
    member("/cross_rank/step_time_ms", F::object, "—"),
    member("/cross_rank/step_time_ms/median", F::number, "ms"),
    member("/cross_rank/step_time_ms/min", F::number, "ms"),
    member("/cross_rank/step_time_ms/max", F::number, "ms"),
    member("/cross_rank/work_ms", F::object, "—"),
    member("/cross_rank/work_ms/median", F::number, "ms"),
    member("/cross_rank/work_ms/min", F::number, "ms"),
    member("/cross_rank/work_ms/max", F::number, "ms"),
    member("/cross_rank/wait_ms", F::object, "—"),
    member("/cross_rank/wait_ms/median", F::number, "ms"),
    member("/cross_rank/wait_ms/min", F::number, "ms"),
    member("/cross_rank/wait_ms/max", F::number, "ms"),
    member("/cross_rank/wait_basis", F::string, "—").in(kCompact),
    member("/cross_rank/slowest_rank", F::integer, "rank").in(kCompact),
    member("/cross_rank/step_skew", F::number, "fraction").in(kCompact),
    member("/cross_rank/wait_share", F::number, "fraction").in(kCompact),
    member("/cross_rank/balanced", F::boolean, "—").in(kCompact),
    member("/cross_rank/gap_ms", F::number, "ms"),
    member("/cross_rank/skew", F::number, "fraction"),
    member("/cross_rank/culprit", F::object, "—"),
    member("/cross_rank/culprit/rank", F::integer, "rank"),
    member("/cross_rank/culprit/work_ms", F::number, "ms").in(kCompact),
    member("/cross_rank/culprit/wait_ms", F::number, "ms").in(kCompact),
    member("/cross_rank/culprit/step_time_ms", F::number, "ms"),
    member("/cross_rank/culprit/wait_basis", F::string, "—"),
    member("/cross_rank/median_rank", F::object, "—"),
    member("/cross_rank/median_rank/rank", F::integer, "rank"),
    member("/cross_rank/median_rank/work_ms", F::number, "ms").in(kCompact),
    member("/cross_rank/median_rank/wait_ms", F::number, "ms").in(kCompact),
    member("/cross_rank/median_rank/step_time_ms", F::number, "ms"),
    member("/cross_rank/median_rank/wait_basis", F::string, "—"),
    member("/cross_rank/culprit_phase", F::string, "—").in(kCompact),
    member("/cross_rank/culprit_gap_ms", F::number, "ms").in(kCompact),
    member("/cross_rank/lowest_scores", F::array, "—"),
    member("/cross_rank/lowest_scores/*", F::object, "—"),
    member("/cross_rank/lowest_scores/*/rank", F::integer, "rank"),
    member("/cross_rank/lowest_scores/*/score", F::number, "fraction"),
    member("/cross_rank/lowest_scores/*/work_ms", F::number, "ms"),
    member("/cross_rank/lowest_scores/*/wait_ms", F::number, "ms"),
    row("gpu", "/rank_wait", F::object, "—",
        "every rank, with a communicator handed over (as `cross_rank`): this rank's own summary as it was "
        "exchanged, on its first line of the exchange's step or later (so each rank's log holds its series: "
        "the report's rank × step view and Prometheus read it). `step` (the exchange's step), `steps` (in the "
        "window, means per step), `step_time_ms` (the iteration), `wait_ms` (collective wait by this rank's "
        "best kind of evidence; null when no step of the window measured it), `work_ms` (own work = "
        "`step_time_ms` − `wait_ms`), `wait_basis` (that kind, named as `cross_rank.wait_basis`; the view may "
        "compare the ranks on another, one they all have) and `wait_steps` (steps the wait is the mean of; a window that no "
        "GPU measure reached, read in batches as lines come due, carries this rank's latest `every` of that kind "
        "that the window's iteration can hold, of steps at most 64 before the window's last), `untagged_ms` and "
        "`between_ms` (the parts `cross_rank.culprit_phase` names by those names)",
        "no communicator; no summary posted since the previous line; the next summary is of a later step"),
    member("/rank_wait/step", F::integer, "step").in(kCompact),
    member("/rank_wait/steps", F::integer, "steps"),
    member("/rank_wait/step_time_ms", F::number, "ms").in(kCompact),
    member("/rank_wait/wait_ms", F::number, "ms").in(kCompact),
    member("/rank_wait/work_ms", F::number, "ms").in(kCompact),
    member("/rank_wait/wait_basis", F::string, "—").in(kCompact),
    member("/rank_wait/wait_steps", F::integer, "steps"),
    member("/rank_wait/untagged_ms", F::number, "ms"),
    member("/rank_wait/between_ms", F::number, "ms"),
    row("gpu", "/device_state", F::object, "—",
        "NVML readings taken by the background thread every `memory_sample_ms` (under `overhead_budget`, "
        "less often when a reading's CPU time would spend more than a tenth of the budget: `overhead.parts`) "
        "within the step (`samples`; a step shorter than the period gets the latest earlier reading, "
        "`samples` = 0): `power_w_mean`, `power_w_max` (W), `sm_clock_mhz_mean`, `sm_clock_mhz_min` (MHz), "
        "`temperature_c_max` (°C), `clock_event_reasons` (NVML's clock-event/\"throttle\" reasons seen, OR "
        "over the readings: `gpu_idle`, `sw_power_cap`, `hw_slowdown`, `sw_thermal_slowdown`, "
        "`hw_thermal_slowdown`, `hw_power_brake_slowdown`, …); a field NVML refuses is null",
        "no GPU; built without `nvml.h`; `libnvidia-ml.so.1` missing; NVML gives no reading"),
    member("/device_state/samples", F::integer, "count"),
    member("/device_state/power_w_mean", F::number, "W"),
    member("/device_state/power_w_max", F::number, "W"),
    member("/device_state/sm_clock_mhz_mean", F::number, "MHz"),
    member("/device_state/sm_clock_mhz_min", F::number, "MHz"),
    member("/device_state/temperature_c_max", F::number, "°C"),
    member("/device_state/clock_event_reasons", F::array, "—"),
    member("/device_state/clock_event_reasons/*", F::string, "—"),
    row("gpu", "/traced", F::boolean, "—",
        "true when CUPTI attributed this step's GPU work (the `gpu` object is present); false for the steps "
        "in between when an interval > 1 is in force (`trace_every`, or the one `overhead_budget` chose; "
        "their `null_reasons.gpu` says \"step not traced: trace_every=N …\", with \"(chosen by "
        "overhead_budget=B)\" when the budget chose it, with \"(CUPTI detached between traced steps: "
        "untraced_cupti=detach)\" in that mode, or \"(… chosen by overhead_budget, untraced_cupti=auto)\" "
        "once the budget detached it), and whenever attribution is unavailable",
        "never null").in(kCompact),
    row("gpu", "/gpu", F::object, "—",
        "attribution summary, below",
        "as `gpu_utilization`; steps not traced (`trace_every`)"),
    row("gpu", "/gpu/complete", F::boolean, "—",
        "every launch of the step produced its records before the line, launches made at a trace switch "
        "aside (see `gpu.launched_untraced_records`: attributed if their records come, never waited for)",
        "—"),
    row("gpu", "/gpu/missing_launches", F::integer, "count",
        "launches whose records had not arrived at the deadline",
        "—"),
    row("gpu", "/gpu/busy_ms", F::number, "ms",
        "busy union; the window it is read against (`step_time_ms`, or the span of the step's work where "
        "longer); `window_ms − busy_ms`",
        "`idle_ms`: busy time above the window").in(kCompact),
    same("/gpu/window_ms", F::number, "ms"),
    same("/gpu/idle_ms", F::number, "ms"),
    row("gpu", "/gpu/invariant_exclusions", F::integer, "count",
        "values of this line left out by the checks below (each null with its reason in `null_reasons`)",
        "—"),
    row("gpu", "/gpu/kernel_ms", F::number, "ms",
        "sum of kernel durations (concurrent kernels both counted), number of kernels",
        "—"),
    same("/gpu/kernels", F::integer, "count"),
    row("gpu", "/gpu/sm_efficiency", F::number, "fraction 0–1",
        "estimated SM efficiency over busy time: per kernel `min(1, blocks / SMs)`; at each instant the sum "
        "over running kernels, capped at 1; time-weighted (Kineto's estimate)",
        "no kernel in the step (`null_reasons[\"gpu.sm_efficiency\"]`)").in(kCompact),
    row("gpu", "/gpu/nccl_exposed_ms", F::number, "ms",
        "NCCL time not overlapped by the step's other kernels",
        "—").in(kCompact),
    row("gpu", "/gpu/nccl_overlap", F::number, "fraction",
        "`1 − exposed / nccl_time`",
        "no NCCL kernel in the step"),
    row("gpu", "/gpu/nccl_collectives", F::names, "object `{<collective>: {ms, kernels}}`",
        "NCCL kernel time per collective, read from the kernel name (`AllReduce`, `AllGather`, "
        "`ReduceScatter`, `Broadcast`, `SendRecv`, …; `other` when the name carries none)",
        "— (empty object without NCCL)"),
    member("/gpu/nccl_collectives/*", F::object, "—"),
    member("/gpu/nccl_collectives/*/ms", F::number, "ms"),
    member("/gpu/nccl_collectives/*/kernels", F::integer, "count"),
    row("gpu", "/gpu/late_records", F::integer, "count",
        "records that arrived after their step's line (since the previous line)",
        "—"),
    row("gpu", "/gpu/unattributed_records", F::integer, "count",
        "records whose launch was never seen (since the previous line)",
        "—"),
    row("gpu", "/gpu/launched_untraced_records", F::integer, "count",
        "records left out because their launch call was made while GPU records were off: their correlation "
        "id is below that of a launch seen since (CUPTI numbers calls in order), e.g. another thread's "
        "launch call that entered before tracing began to switch on at a traced step's begin; or a launch "
        "forgotten since (since the previous line). A launch made at a trace switch is attributed to its "
        "step and phase if its record comes, and its step never waits for it: another thread's launch whose "
        "callback ran while records were being switched on or off, or whose call had not returned when they "
        "went off (its work may reach the driver after). The launch callbacks stay on while CUPTI is "
        "attached, so no launch of another thread goes unseen during a traced step",
        "—"),
    row("gpu", "/gpu/dropped_records", F::integer, "count",
        "records CUPTI could not store (buffer pool of 8 × 4 MiB full) or staging bounds exceeded, since the "
        "previous line",
        "—"),
    row("gpu", "/gpu/excluded_records", F::integer, "count",
        "records excluded from every sum because they cannot be right (checks below the table), since the "
        "previous line; warned once per reason",
        "—"),
    row("gpu", "/gpu/excluded", F::object, "object `{no_timestamps, ends_before_start, starts_before_launch, ends_after_delivery, "
         "graph_replayed_untraced, stream_overcommitted}`",
        "`excluded_records` by reason; `stream_overcommitted`: the records a CUDA graph launch produced on a "
        "stream whose records in the step add up to more than twice the span from the first one's start to "
        "the last one's end (+ 5 µs each; work on one stream runs one item after another, two at a time at "
        "most with programmatic dependent launch) — what graph kernels whose end times an untraced replay "
        "overwrote look like; other records there are kept, and the line's invariants judge their phase",
        "—"),
    member("/gpu/excluded/no_timestamps", F::integer, "count"),
    member("/gpu/excluded/ends_before_start", F::integer, "count"),
    member("/gpu/excluded/starts_before_launch", F::integer, "count"),
    member("/gpu/excluded/ends_after_delivery", F::integer, "count"),
    member("/gpu/excluded/graph_replayed_untraced", F::integer, "count"),
    member("/gpu/excluded/stream_overcommitted", F::integer, "count"),
    row("gpu", "/gpu/implausible_phases", F::integer, "count",
        "phases left out of `phases` because their busy time exceeds the span of their records or the sum of "
        "their durations (never happens with sound records: a guard on the sums)",
        "—"),
    row("gpu", "/gpu/before_first_step_ms", F::number, "ms",
        "work launched after `start()` but before the first step (first line only, present only if any)",
        "—"),
    same("/gpu/before_first_step_records", F::integer, "count"),
    row("phase_gpu", "/phases/*/gpu/kernel_ms", F::number, "ms",
        "as above, for the phase's launches",
        nullptr),
    same("/phases/*/gpu/busy_ms", F::number, "ms").in(kCompact),
    same("/phases/*/gpu/kernels", F::integer, "count"),
    row("phase_gpu", "/phases/*/gpu/sm_efficiency", F::number, "fraction",
        "as above, for the phase's kernels; null without kernels",
        nullptr),
    row("phase_gpu", "/phases/*/gpu/occupancy", F::number, "fraction",
        "estimated achieved occupancy, kernel-time weighted: theoretical occupancy from the CUDA occupancy "
        "calculator (block size, registers, shared memory) × `min(1, blocks / (SMs × resident blocks per "
        "SM))`; null without kernels",
        nullptr),
    row("phase_gpu", "/phases/*/gpu/h2d", F::object, "object `{bytes, ms, count, gb_per_second}`",
        "copies and memsets by direction (present when any)",
        nullptr),
    same("/phases/*/gpu/d2h", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    same("/phases/*/gpu/d2d", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    same("/phases/*/gpu/h2h", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    same("/phases/*/gpu/p2p", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    same("/phases/*/gpu/other", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    same("/phases/*/gpu/memset", F::object, "object `{bytes, ms, count, gb_per_second}`"),
    member("/phases/*/gpu/h2d/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/h2d/ms", F::number, "ms"),
    member("/phases/*/gpu/h2d/count", F::integer, "count"),
    member("/phases/*/gpu/h2d/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/d2h/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/d2h/ms", F::number, "ms"),
    member("/phases/*/gpu/d2h/count", F::integer, "count"),
    member("/phases/*/gpu/d2h/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/d2d/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/d2d/ms", F::number, "ms"),
    member("/phases/*/gpu/d2d/count", F::integer, "count"),
    member("/phases/*/gpu/d2d/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/h2h/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/h2h/ms", F::number, "ms"),
    member("/phases/*/gpu/h2h/count", F::integer, "count"),
    member("/phases/*/gpu/h2h/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/p2p/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/p2p/ms", F::number, "ms"),
    member("/phases/*/gpu/p2p/count", F::integer, "count"),
    member("/phases/*/gpu/p2p/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/other/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/other/ms", F::number, "ms"),
    member("/phases/*/gpu/other/count", F::integer, "count"),
    member("/phases/*/gpu/other/gb_per_second", F::number, "GB/s"),
    member("/phases/*/gpu/memset/bytes", F::integer, "bytes"),
    member("/phases/*/gpu/memset/ms", F::number, "ms"),
    member("/phases/*/gpu/memset/count", F::integer, "count"),
    member("/phases/*/gpu/memset/gb_per_second", F::number, "GB/s"),
    row("phase_gpu", "/phases/*/gpu/top_kernels", F::array, "array of `{name, ms, calls, sm_efficiency}`",
        "the 5 kernels with the most time in the phase, names demangled (cut at 200 characters)",
        nullptr),
    member("/phases/*/gpu/top_kernels/*", F::object, "—"),
    member("/phases/*/gpu/top_kernels/*/name", F::string, "—"),
    member("/phases/*/gpu/top_kernels/*/ms", F::number, "ms"),
    member("/phases/*/gpu/top_kernels/*/calls", F::integer, "count"),
    member("/phases/*/gpu/top_kernels/*/sm_efficiency", F::number, "fraction"),
    row("phase_gpu", "/phases/*/gpu/counters", F::object, "object `{sm_activity, tensor_core_or_pipe_utilization, memory_bandwidth_utilization, occupancy, "
         "samples, sample_ms, coverage, edge_only, shared}`",
        "hardware counters over the phase's GPU busy intervals by the rule above (`coverage` = `sample_ms` / "
        "`busy_ms`); `shared` = the other phases' GPU time inside the samples used / all the step's GPU time "
        "there: 0 when the phase had its samples to itself, large when its span interleaves with other "
        "phases' work (a phase nested in another, per-layer phases taking turns, concurrent streams), whose "
        "values it then reads too (present when counters run; `shared` null without samples)",
        nullptr),
    member("/phases/*/gpu/counters/sm_activity", F::number, "fraction"),
    member("/phases/*/gpu/counters/tensor_core_or_pipe_utilization", F::number, "fraction"),
    member("/phases/*/gpu/counters/memory_bandwidth_utilization", F::number, "fraction"),
    member("/phases/*/gpu/counters/occupancy", F::number, "fraction"),
    member("/phases/*/gpu/counters/samples", F::integer, "count"),
    member("/phases/*/gpu/counters/sample_ms", F::number, "ms"),
    member("/phases/*/gpu/counters/coverage", F::number, "fraction"),
    member("/phases/*/gpu/counters/edge_only", F::boolean, "—"),
    member("/phases/*/gpu/counters/shared", F::number, "fraction"),
    row("markers", "/gpu_markers", F::object, "—",
        "the step's markers, below",
        "markers off or not armed (`stream_markers=false`; no GPU attribution; no traced step yet has shown "
         "where the program's work runs; a traced step's work was spread over streams none of which took 9 in "
         "10 of the step thread's kernel launches: name it with `set_marker_stream`; the program destroyed the "
         "marker stream, until a traced step shows the next; two traced steps in a row showed the step thread's "
         "launches off the learnt stream, until the records show the work on the default stream), the step "
         "left unmarked by overhead_budget (1 step in N where marking every step costs over half of it; traced "
         "steps always marked), a marker of the step not recorded (a CUDA graph capture, another context "
         "current, no free slot) or unread, the GPU had not reached the step's last marker when its line was "
         "due, a marker's GPU time out of order or before its host time by more than 0.1 ms (reason)"),
    row("markers", "/gpu_markers/points", F::integer, "count",
        "markers of the step read back",
        "never"),
    row("markers", "/gpu_markers/pending_ms", F::number, "ms",
        "the union of the [*h*, *g*] intervals within the step's time, and that over `step_time_ms`: a lower "
        "bound of the time the GPU was busy with (or held by) the program's stream in the step. An upper "
        "bound cannot be had from markers (a marker on an idle stream is reached at once), so they show that "
        "the GPU held a step back, never that it did not",
        "`pending_share`: the step has no time").in(kCompact),
    same("/gpu_markers/pending_share", F::number, "fraction").in(kCompact),
    row("markers", "/gpu_markers/span_ms", F::number, "ms",
        "GPU time from the step's begin marker to its end marker (idle gaps included)",
        "the step's begin or end not marked").in(kCompact),
    row("markers", "/gpu_markers/end_lag_ms", F::number, "ms",
        "how far the GPU was behind the host at the step's end marker, and at the worst of its markers",
        "never (a step whose end is not marked has no `gpu_markers`)"),
    same("/gpu_markers/max_lag_ms", F::number, "ms"),
    row("markers", "/gpu_markers/agrees_with_records", F::boolean, "—",
        "traced steps: whether the markers' pending time from the step's begin marker on is at most the "
        "records' `gpu.busy_ms` + max(0.5 ms, 3 % of the step). Markers decide untraced lines' diagnoses "
        "(`diagnosis.basis` `markers`) only while the last traced step (with complete records) was marked "
        "whole and agreed",
        "the step was not traced; its begin or end was not marked (markers armed in the middle of the step, "
         "a marker not recorded); or its records are incomplete"),
    row("markers", "/gpu_markers/phases", F::names, "object `{<name>: {span_ms, end_lag_ms, scopes}}`",
        "per top-level phase of the step's thread: GPU time from its begin marker to its end marker summed "
        "over its scopes (idle gaps included: TraceML's per-phase GPU time), the GPU's lag at its last "
        "scope's end, and its scope count",
        "(empty without phases)"),
    member("/gpu_markers/phases/*", F::object, "—"),
    member("/gpu_markers/phases/*/span_ms", F::number, "ms").in(kCompact),
    member("/gpu_markers/phases/*/end_lag_ms", F::number, "ms"),
    member("/gpu_markers/phases/*/scopes", F::integer, "count"),
};
// clang-format on

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
