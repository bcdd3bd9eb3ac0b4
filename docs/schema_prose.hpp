// docs/schema_prose.hpp - what each field of the step line and the event records (end, stall, resumed)
// means and when it is null: the prose of docs/schema.md's field tables, a row per field that the
// declaration shows in a table row of its own (include/steptrace/core/line_fields_*.hpp, `row(...)`),
// keyed by its JSON pointer. Kept out of the library: only tests/test_schema_doc.cpp (which renders
// docs/schema.md from the rows and this) and the schema checks include it, so a program carries none of
// this text and rewording a sentence recompiles nothing of the runtime. A null case beginning with
// "never" is the row's Nulls::never (test_schema_doc holds the two together). Adding a field: its row in
// the declaration, its prose here, in the same order.
#pragma once
#include <steptrace/core/line_fields.hpp>

#include <cstddef>
#include <cstring>
#include <iterator>

STEPTRACE_BEGIN_NAMESPACE
namespace line_prose {

struct FieldProse {
  const char* path;
  const char* meaning;    // where it comes from and what it says
  const char* null_when;  // when it is null ("never…": never); nullptr: its table has no such column
};

// clang-format off
inline constexpr FieldProse kStepProse[] = {
    {"/schema",
     "constant `\"steptrace.step/1\"`",
     "never"},
    {"/global_step",
     "steps begun since `start()`",
     "never"},
    {"/timestamp",
     "wall clock at the step's start",
     "never"},
    {"/start_unix_ms",
     "wall clock at the step's start",
     "never"},
    {"/rank",
     "`Config` / `STEPTRACE_RANK`…, else `RANK`/`LOCAL_RANK`/`WORLD_SIZE` (torchrun), "
     "`OMPI_COMM_WORLD_*`, `SLURM_*`; defaults 0, 0, 1",
     "never"},
    {"/hostname",
     "`gethostname`, `getpid`",
     "never"},
    {"/run_id",
     "new at every `start()` (random): tells a job's restarts and a second `start()` apart; with a "
     "communicator (`enable_cross_rank`; Python: `steptrace.cross_rank()`) every rank takes rank 0's (one "
     "broadcast, waited for at most 30 s; from Python as long as the ranks' group setup, torch.distributed's "
     "default timeout; lines written before that call keep the rank's own)",
     "never"},
    {"/job_id",
     "`job_id` / `STEPTRACE_JOB_ID`, else `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else the Kubernetes "
     "pod's name (`HOSTNAME` where `KUBERNETES_SERVICE_HOST` is set)",
     "none of these known"},
    {"/device",
     "`cudaGetDeviceProperties` at `start()`; `uuid` as nvidia-smi writes it (`GPU-…`), `pci_bus_id` in "
     "NVML's form (`00000000:3B:00.0`): the `UUID` and `pci_bus_id` labels dcgm-exporter puts on its "
     "series, to join them with the lines",
     "no GPU, no driver, `gpu=off`"},
    {"/step_time_ms",
     "this step's start → its own end: its `TRACE_STEP` scope's end when the scope ended before the next "
     "step began (what ran between is the next line's `between_steps`), else the next step's start (a "
     "scope still open then, e.g. `steptrace.loader()`, whose step ends where the next wait begins). "
     "`tokens_per_second`, `samples_per_second` and `estimated_mfu` divide by it. Python's `watch()` and "
     "the framework callbacks keep a step open after its optimizer step until the next step's work "
     "begins, or work that is no step's does (an evaluation, a phase opened between steps, validation, a "
     "checkpoint): the host returns from `optimizer.step()` before the GPU has run the step, and a "
     "throughput over a window that ends there is not one the GPU reached; an iteration's time is what the "
     "program's own per-iteration clock reads",
     "never"},
    {"/step_time_basis",
     "which end `step_time_ms` ran to",
     "never"},
    {"/step_scope_ms",
     "`TRACE_STEP` scope duration",
     "never"},
    {"/step_interval_ms",
     "this step's start → the next step's start (the last step: its scope's end): `step_time_ms` plus "
     "`between_steps.host_ms` of the next line",
     "never"},
    {"/between_steps",
     "what ran after the previous step's scope ended and before this step began: `host_ms` (that time), "
     "`phases` (`{<name>: {host_ms, count}}`: phase scopes that ended in it, e.g. "
     "`TRACE_PHASE_NAMED(\"eval\")`; those after the last step's scope count in the last line's "
     "`phase_scopes_outside_step`), `gpu` (the work launched in it: `{busy_ms, kernel_ms, kernels, "
     "copies, copy_bytes, complete, missing_launches, excluded_records, top_kernels: [{name, ms, "
     "calls}]}`; kernels 0 when records were on and nothing was launched)",
     "the first step (work before it: `gpu.before_first_step_ms`); `gpu`: the previous step was not "
     "traced (GPU records run from a traced step's begin to the next step's begin), attribution off"},
    {"/tokens",
     "`TRACE_STEP(tokens)`, `set_step_tokens()`, else `Config::tokens_per_step`",
     "none of these set"},
    {"/tokens_per_second",
     "`tokens / step_time`",
     "`tokens` null; the quotient not a finite number (tokens near 1e308)"},
    {"/samples",
     "`TRACE_STEP(tokens, samples)`, `set_step_tokens(t, s)`, else `Config::samples_per_step`",
     "none set"},
    {"/tokens_total",
     "the sum of `tokens` (`samples`) over every step since `start()`, this one included — also the steps "
     "whose line `log_every` does not write — so it only grows: Prometheus's `steptrace_tokens_total` and "
     "`rate()` read it. Steps whose line was dropped before the background thread saw it "
     "(`dropped.steps_total`) are not in it",
     "no step since `start()` had a count; the sum is not a finite number"},
    {"/dataloader_wait_ms",
     "sum of `input` scopes in the step",
     "no `input` scope in the step"},
    {"/h2d_time_ms",
     "sum of `h2d` scopes",
     "no `h2d` scope"},
    {"/forward_time_ms",
     "sum of `forward` scopes",
     "no `forward` scope"},
    {"/backward_time_ms",
     "sum of `backward` scopes",
     "no `backward` scope"},
    {"/optimizer_time_ms",
     "sum of `optimizer` scopes",
     "no `optimizer` scope"},
    {"/untracked_time_ms",
     "step time not covered by any outermost phase scope on the step's thread",
     "never"},
    {"/phases",
     "every phase, built-in and custom, that closed in the step; `self_ms`: the phase's exclusive time "
     "(below)",
     "never (may be `{}`); `self_ms` with `host_ms`"},
    {"/peak_memory_allocated",
     "the allocator hook's `peak_allocated_bytes` if registered, else the peak of device-wide used memory "
     "sampled in the step",
     "no hook and no GPU sample"},
    {"/peak_memory_source",
     "which of the two",
     "`peak_memory_allocated` null"},
    {"/memory/device_used_peak_bytes",
     "max of `cudaMemGetInfo` (total − free, all processes on the device) samples taken by the background "
     "thread every `memory_sample_ms` (paced by the budget as `device_state`) within the step; for a step "
     "shorter than the period, the latest earlier sample (`memory.samples` = 0)",
     "no GPU / sampling failed"},
    {"/memory/device_total_bytes",
     "`cudaMemGetInfo`",
     "same"},
    {"/memory/samples",
     "samples inside the step",
     "never"},
    {"/memory/allocator",
     "`set_allocator_stats_hook`, called when the `TRACE_STEP` scope ends; each member null if the hook "
     "did not report it",
     "no hook registered"},
    {"/estimated_mfu",
     "`flops_per_token × tokens_per_second_per_gpu / peak_flops` (PaLM, Chowdhery et al. 2022, App. B; "
     "under model parallelism torchtitan's convention, below)",
     "`flops_per_token` not set, tokens unknown, no trusted peak (unknown GPU, no GPU, dtype without a "
     "tensor path), or `model_parallel` does not divide `world_size`"},
    {"/mfu_inputs/flops_per_token",
     "`Config::flops_per_token` (e.g. `transformer_flops_per_token`)",
     "not set"},
    {"/mfu_inputs/peak_flops",
     "`Config::peak_flops` override, else the table in `core/metrics.hpp` by device name and `dtype`",
     "no override and no table entry"},
    {"/mfu_inputs/peak_source",
     "which table row and datasheet, or why there is none",
     "never"},
    {"/mfu_inputs/above_one",
     "`estimated_mfu > 1`: the FLOPs count or the peak is wrong (also in `warnings`)",
     "never"},
    {"/mfu_inputs/model_parallel",
     "`Config::model_parallel` / `STEPTRACE_TENSOR_PARALLEL`, `_PIPELINE_PARALLEL`, `_CONTEXT_PARALLEL` "
     "(default 1 each)",
     "never"},
    {"/mfu_inputs/model_parallel_size",
     "tensor × pipeline × context: the GPUs one model replica spans",
     "never"},
    {"/mfu_inputs/data_parallel_size",
     "`world_size / model_parallel_size`",
     "the sizes do not divide `world_size` (also warned once at `start()`, naming `model_parallel`)"},
    {"/mfu_inputs/tokens_per_second_per_gpu",
     "`tokens_per_second / model_parallel_size`: this GPU's share of its replica's tokens; summed over "
     "all ranks, the job's throughput",
     "tokens unknown"},
    {"/loss",
     "`steptrace::record(\"loss\", v)` … (last value in the step)",
     "not recorded in the step; or its last value was NaN or ±inf (the reason says which, and how many of "
     "the step's values were not finite; the first such value is also warned about once)"},
    {"/scalars",
     "every other `record(name, v)` (last value per name); a non-finite last value is `null` with "
     "`null_reasons.\"scalars.<name>\"` (a dot in the name escaped: `scalars.loss\\.train`)",
     "never (may be `{}`)"},
    {"/gpu_utilization",
     "`gpu.busy_ms / gpu.window_ms`: the union of the step's kernel, copy and memset intervals "
     "(concurrent streams counted once) over the step's time, or over the span of its work (first "
     "record's start → last record's end) where that is longer (a loop that does not wait for the GPU "
     "each step: work queued ahead runs on after the step's end); never capped (see \"Checked on every "
     "line\")",
     "no GPU, `cupti=off`, CUPTI held by another tool, step not traced (`trace_every`), busy time above "
     "the window (broken sums)"},
    {"/nccl_time_ms",
     "sum of NCCL kernels (`ncclKernel*` / `ncclDevKernel*`) launched in the step, whatever the phase",
     "same"},
    {"/sm_activity",
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
     "traced steps only\")"},
    {"/memory_bandwidth_utilization",
     "`dram__throughput.avg.pct_of_peak_sustained_elapsed` / 100 (DCGM's DRAM_ACTIVE)",
     "as `sm_activity`"},
    {"/tensor_core_or_pipe_utilization",
     "`sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed` / 100 (tensor pipe active cycles; "
     "DCGM's PIPE_TENSOR_ACTIVE); on chips without it the `…_op_gmma_…` or `…_op_hmma_…` variant",
     "as `sm_activity`; the chip offers none of the three"},
    {"/counters",
     "how the three values above were obtained: `source` (`cupti_pm_sampling`), `interval_us` (sampling "
     "period), `samples` (samples used), `sample_ms` (the window's time inside the samples used: the "
     "weight of its values), `coverage` (`sample_ms` / the window's time), `edge_only` (no whole sample "
     "inside the window: see the rule below the table), `occupancy` "
     "(`sm__warps_active.avg.pct_of_peak_sustained_active` / 100, achieved occupancy), `excluded_values` "
     "(PM sample values left out since the start because they lay outside [0, 1]: a ratio of a fully busy "
     "interval cannot; values up to 1.001 are the hardware's rounding of 1 and read as 1; every value "
     "published is in [0, 1])",
     "counters not running (reason in `null_reasons.counters`)"},
    {"/cross_rank",
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
     "later step"},
    {"/rank_wait",
     "every rank, with a communicator handed over (as `cross_rank`): this rank's own summary as it was "
     "exchanged, on its first line of the exchange's step or later (so each rank's log holds its series: "
     "the report's rank × step view and Prometheus read it). `step` (the exchange's step), `steps` (in the "
     "window, means per step), `step_time_ms` (the iteration), `wait_ms` (collective wait by this rank's "
     "best kind of evidence; null when no step of the window measured it), `work_ms` (own work = "
     "`step_time_ms` − `wait_ms`), `wait_basis` (that kind, named as `cross_rank.wait_basis`; the view may "
     "compare the ranks on another, one they all have) and `wait_steps` (steps the wait is the mean of; a window that no "
     "GPU measure reached, read in batches as lines come due, carries the median of this rank's latest of that "
     "kind, `every` of them and at least 5, that the window's iteration can hold, of steps at most 64 before the "
     "window's last: `wait_steps` then counts them), `untagged_ms` and "
     "`between_ms` (the parts `cross_rank.culprit_phase` names by those names)",
     "no communicator; no summary posted since the previous line; the next summary is of a later step"},
    {"/device_state",
     "NVML readings taken by the background thread every `memory_sample_ms` (under `overhead_budget`, "
     "less often when a reading's CPU time would spend more than a tenth of the budget: `overhead.parts`) "
     "within the step (`samples`; a step shorter than the period gets the latest earlier reading, "
     "`samples` = 0): `power_w_mean`, `power_w_max` (W), `sm_clock_mhz_mean`, `sm_clock_mhz_min` (MHz), "
     "`temperature_c_max` (°C), `clock_event_reasons` (NVML's clock-event/\"throttle\" reasons seen, OR "
     "over the readings: `gpu_idle`, `sw_power_cap`, `hw_slowdown`, `sw_thermal_slowdown`, "
     "`hw_thermal_slowdown`, `hw_power_brake_slowdown`, …); a field NVML refuses is null",
     "no GPU; built without `nvml.h`; `libnvidia-ml.so.1` missing; NVML gives no reading"},
    {"/traced",
     "true when CUPTI attributed this step's GPU work (the `gpu` object is present); false for the steps "
     "in between when an interval > 1 is in force (`trace_every`, or the one `overhead_budget` chose; "
     "their `null_reasons.gpu` says \"step not traced: trace_every=N …\", with \"(chosen by "
     "overhead_budget=B)\" when the budget chose it, with \"(CUPTI detached between traced steps: "
     "untraced_cupti=detach)\" in that mode, or \"(… chosen by overhead_budget, untraced_cupti=auto)\" "
     "once the budget detached it), and whenever attribution is unavailable",
     "never null"},
    {"/gpu",
     "attribution summary, below",
     "as `gpu_utilization`; steps not traced (`trace_every`)"},
    {"/gpu/complete",
     "every launch of the step produced its records before the line, launches made at a trace switch "
     "aside (see `gpu.launched_untraced_records`: attributed if their records come, never waited for)",
     "—"},
    {"/gpu/missing_launches",
     "launches whose records had not arrived at the deadline",
     "—"},
    {"/gpu/busy_ms",
     "busy union; the window it is read against (`step_time_ms`, or the span of the step's work where "
     "longer); `window_ms − busy_ms`",
     "`idle_ms`: busy time above the window"},
    {"/gpu/invariant_exclusions",
     "values of this line left out by the checks below (each null with its reason in `null_reasons`)",
     "—"},
    {"/gpu/kernel_ms",
     "sum of kernel durations (concurrent kernels both counted), number of kernels",
     "—"},
    {"/gpu/sm_efficiency",
     "estimated SM efficiency over busy time: per kernel `min(1, blocks / SMs)`; at each instant the sum "
     "over running kernels, capped at 1; time-weighted (Kineto's estimate)",
     "no kernel in the step (`null_reasons[\"gpu.sm_efficiency\"]`)"},
    {"/gpu/nccl_exposed_ms",
     "NCCL time not overlapped by the step's other kernels",
     "—"},
    {"/gpu/nccl_overlap",
     "`1 − exposed / nccl_time`",
     "no NCCL kernel in the step"},
    {"/gpu/nccl_collectives",
     "NCCL kernel time per collective, read from the kernel name (`AllReduce`, `AllGather`, "
     "`ReduceScatter`, `Broadcast`, `SendRecv`, …; `other` when the name carries none)",
     "— (empty object without NCCL)"},
    {"/gpu/late_records",
     "records that arrived after their step's line (since the previous line)",
     "—"},
    {"/gpu/unattributed_records",
     "records whose launch was never seen (since the previous line)",
     "—"},
    {"/gpu/launched_untraced_records",
     "records left out because their launch call was made while GPU records were off: their correlation "
     "id is below that of a launch seen since (CUPTI numbers calls in order), e.g. another thread's "
     "launch call that entered before tracing began to switch on at a traced step's begin; or a launch "
     "forgotten since (since the previous line). A launch made at a trace switch is attributed to its "
     "step and phase if its record comes, and its step never waits for it: another thread's launch whose "
     "callback ran while records were being switched on or off, or whose call had not returned when they "
     "went off (its work may reach the driver after). The launch callbacks stay on while CUPTI is "
     "attached, so no launch of another thread goes unseen during a traced step",
     "—"},
    {"/gpu/dropped_records",
     "records CUPTI could not store (buffer pool of 8 × 4 MiB full) or staging bounds exceeded, since the "
     "previous line",
     "—"},
    {"/gpu/excluded_records",
     "records excluded from every sum because they cannot be right (checks below the table), since the "
     "previous line; warned once per reason",
     "—"},
    {"/gpu/excluded",
     "`excluded_records` by reason; `stream_overcommitted`: the records a CUDA graph launch produced on a "
     "stream whose records in the step add up to more than twice the span from the first one's start to "
     "the last one's end (+ 5 µs each; work on one stream runs one item after another, two at a time at "
     "most with programmatic dependent launch) — what graph kernels whose end times an untraced replay "
     "overwrote look like; other records there are kept, and the line's invariants judge their phase",
     "—"},
    {"/gpu/implausible_phases",
     "phases left out of `phases` because their busy time exceeds the span of their records or the sum of "
     "their durations (never happens with sound records: a guard on the sums)",
     "—"},
    {"/gpu/before_first_step_ms",
     "work launched after `start()` but before the first step (first line only, present only if any)",
     "—"},
    {"/phases/*/gpu/kernel_ms",
     "as above, for the phase's launches",
     nullptr},
    {"/phases/*/gpu/sm_efficiency",
     "as above, for the phase's kernels; null without kernels",
     nullptr},
    {"/phases/*/gpu/occupancy",
     "estimated achieved occupancy, kernel-time weighted: theoretical occupancy from the CUDA occupancy "
     "calculator (block size, registers, shared memory) × `min(1, blocks / (SMs × resident blocks per "
     "SM))`; null without kernels",
     nullptr},
    {"/phases/*/gpu/h2d",
     "copies and memsets by direction (present when any)",
     nullptr},
    {"/phases/*/gpu/top_kernels",
     "the 5 kernels with the most time in the phase, names demangled (cut at 200 characters)",
     nullptr},
    {"/phases/*/gpu/counters",
     "hardware counters over the phase's GPU busy intervals by the rule above (`coverage` = `sample_ms` / "
     "`busy_ms`); `shared` = the other phases' GPU time inside the samples used / all the step's GPU time "
     "there: 0 when the phase had its samples to itself, large when its span interleaves with other "
     "phases' work (a phase nested in another, per-layer phases taking turns, concurrent streams), whose "
     "values it then reads too (present when counters run; `shared` null without samples)",
     nullptr},
    {"/gpu_markers",
     "the step's markers, below",
     "markers off or not armed (`stream_markers=false`; no GPU attribution; no traced step yet has shown "
     "where the program's work runs; a traced step's work was spread over streams none of which took 9 in "
     "10 of the step thread's kernel launches: name it with `set_marker_stream`; the program destroyed the "
     "marker stream, until a traced step shows the next; two traced steps in a row showed the step thread's "
     "launches off the learnt stream, until the records show the work on the default stream), the step "
     "left unmarked by overhead_budget (1 step in N where marking every step costs over their share of it, "
     "or 1 in 2 held until marked and unmarked steps compared in the run show that every step fits: "
     "`overhead.markers_every`; traced steps always marked), a marker of the step not recorded (a CUDA graph capture, another context "
     "current, no free slot) or unread, the GPU had not reached the step's last marker when its line was "
     "due, a marker's GPU time out of order or before its host time by more than 0.1 ms (reason)"},
    {"/gpu_markers/points",
     "markers of the step read back",
     "never"},
    {"/gpu_markers/pending_ms",
     "the union of the [*h*, *g*] intervals within the step's time, and that over `step_time_ms`: a lower "
     "bound of the time the GPU was busy with (or held by) the program's stream in the step. An upper "
     "bound cannot be had from markers (a marker on an idle stream is reached at once), so they show that "
     "the GPU held a step back, never that it did not",
     "`pending_share`: the step has no time"},
    {"/gpu_markers/span_ms",
     "GPU time from the step's begin marker to its end marker (idle gaps included)",
     "the step's begin or end not marked"},
    {"/gpu_markers/end_lag_ms",
     "how far the GPU was behind the host at the step's end marker",
     "the step's end was not marked: its markers were summarized without one (reason)"},
    {"/gpu_markers/max_lag_ms",
     "how far the GPU was behind the host at the worst of the step's markers",
     "never (a step without markers has no `gpu_markers`)"},
    {"/gpu_markers/agrees_with_records",
     "traced steps: whether the markers' pending time from the step's begin marker on is at most the "
     "records' `gpu.busy_ms` + max(0.5 ms, 3 % of the step). Markers decide untraced lines' diagnoses "
     "(`diagnosis.basis` `markers`) only while the last traced step (with complete records) was marked "
     "whole and agreed",
     "the step was not traced; its begin or end was not marked (markers armed in the middle of the step, "
     "a marker not recorded); or its records are incomplete"},
    {"/gpu_markers/phases",
     "per top-level phase of the step's thread: GPU time from its begin marker to its end marker summed "
     "over its scopes (idle gaps included: TraceML's per-phase GPU time), the GPU's lag at its last "
     "scope's end, and its scope count",
     "(empty without phases)"},
    {"/diagnosis/label",
     "what holds the step back (rules in docs/gpu.md, \"Diagnosis\")",
     nullptr},
    {"/diagnosis/reason",
     "the deciding number in words. The compact line carries it on `UNKNOWN` lines only, as the "
     "sentence's code (its sentence in `reason_text` the first time the run meets it, as a null's)",
     nullptr},
    {"/diagnosis/evidence",
     "shares of the step time; the GPU ones null without attribution",
     nullptr},
    {"/diagnosis/warnings",
     "shares past a warning level that did not decide the label (data wait ≥ 10 %)",
     nullptr},
    {"/diagnosis/basis",
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
     nullptr},
    {"/diagnosis/carried_from_step",
     "with basis `carried` or `carried_scaled`: the traced step whose GPU view was used; with `markers`: "
     "the traced step whose SM efficiency and NCCL time were used (null when none was recent) "
     "(`evidence`'s GPU shares stay null: they are this step's own); null with every other basis (reason)",
     nullptr},
    {"/overhead/estimated_fraction",
     "steptrace's cost in step time at the interval in force: tracing and attached CUPTI plus "
     "`parts.host_api`. `measured`: `traced_step_extra_ms / (trace_every × clean_step_ms) + "
     "untraced_residual_ms / clean_step_ms + host_api`, every time the step's own time (its scope: what "
     "runs between steps is never in it); `launch_model`: `(traced_step_extra_ms + (trace_every − 1) × "
     "untraced_residual_ms) / (trace_every × clean_step_ms) + host_api`. After the budget detaches CUPTI "
     "(`untraced_cupti` turns `detach`) the estimate starts over from the launch model",
     "CUPTI attribution off, tracing stopped after CUPTI could not be switched back on, no traced step "
     "observed yet (reason)"},
    {"/overhead/method",
     "`measured`: from the program's own step times (their scopes) over the last max(128, 8 × "
     "`trace_every`) steps after the first 8: the median of the traced steps, of the steps 1 and 2 after "
     "one and (detach mode) of the steps that paid for a detach (`cuptiFinalize`, which waits for the "
     "device; the gap before such a step counted with it), each against the median of untraced steps at "
     "least 3 steps from a trace (at least 3 and 5 steps; `polluted_steps` left out); `launch_model` "
     "otherwise (launches per step × 1.1 µs, plus 8.3 ms in detach mode; with an interval of 3 or less no "
     "step is 3 from a trace, and the budget then traces one step in 8 for a while to measure again)",
     "as `estimated_fraction`"},
    {"/overhead/trace_every",
     "the interval in force for this step: one step in N is traced; 1 for the first 8 steps and 8 from "
     "there until the budget's first decision (GPU attribution running); the budget asks for the shortest "
     "interval whose estimate (its `estimated_fraction_ci_high`) is at most 80 % of `budget` (where CUPTI kept "
     "attached costs that alone, the shortest within `budget`, else the longest), at least 4 "
     "once `measured` (shorter, no step is 3 from a trace), at most 4000 (headroom for the host side, "
     "which the estimate leaves out, and for its spread)",
     "never"},
    {"/overhead/decided_by",
     "who set the interval: the budget (`trace_every` 0 and `overhead_budget` > 0, the default) or "
     "`trace_every` (set explicitly, or `overhead_budget` 0: every step)",
     "never"},
    {"/overhead/markers_every",
     "the stream markers' pace from this line on (set as the line is made, before the estimate reads "
     "their cost): they mark 1 step in N (a power of two, at most 64; traced steps always), N = 1 unless "
     "marking every step costs over their share of `overhead_budget`: half of it, or what 80 % of it leaves "
     "beside CUPTI kept attached and steptrace's calls where that is less, a tenth of it at least "
     "(the median untraced marked "
     "step's measured event records against the mean step time; or, where the markers are thinned and it "
     "resolves more, the marked steps' time beyond the unmarked steps beside them in this run: a record "
     "also holds the GPU, ~3 us an event on an H200); N >= 2 from the warm-up's end until that comparison "
     "has measured (16 blocks of 32 steps) and its upper end (value plus two standard errors, at least the "
     "records' own time) is within 80 % of the markers' share (kept at 1 while within the share). The pace "
     "a step ran under: the steps "
     "left unmarked say so in `null_reasons.gpu_markers`",
     "the stream markers not armed (`stream_markers=false`, no GPU attribution, or no traced step has "
     "shown the stream yet: reason)"},
    {"/overhead/budget",
     "`overhead_budget`",
     "`trace_every` set explicitly, `overhead_budget` 0 (reason)"},
    {"/overhead/within_budget",
     "`estimated_fraction` ≤ `budget`; never true on a step a framework's callbacks opened "
     "(`steptrace.lightning`, `steptrace.transformers`): their estimate leaves out part of the cost, so such a "
     "line says false over the budget and null under it (reason `framework_within_unknown`)",
     "no budget, or no estimate; a framework callbacks' step whose estimate is within the budget (reason)"},
    {"/overhead/over_budget_by",
     "`none` within the budget; on a line over it (`within_budget` false), what keeps it there: `interval`, the interval in "
     "force is shorter than the one the estimate asks for and the budget is lengthening it (the warm-up's "
     "probe, a move not yet in force, lines that reach the controller late) - at or below "
     "`estimated_fraction_floor`'s reach, so the line comes within the budget; otherwise no interval can: "
     "the largest part of the floor names why, `host_api` (steptrace's calls on the training thread - its "
     "scopes, a framework callback's hooks, the stream markers at the pace in force: `parts.host_api`), "
     "`attached` (CUPTI kept attached between traced steps: `untraced_residual_ms`) or `tracing` (one "
     "trace costs more than the longest interval's share). What the budget gave up is in the same line "
     "(`trace_every`, `markers_every`, `untraced_cupti`)",
     "no budget, or no estimate; `within_budget` null (reason)"},
    {"/overhead/estimated_fraction_ci_low",
     "the low end of `estimated_fraction`'s 95 % range: with `measured`, max(0, `traced_step_extra_ms` − "
     "1.96 × `traced_step_extra_se_ms`) / (`trace_every` × `clean_step_ms`), plus "
     "`untraced_residual_low_ms / clean_step_ms`, plus `parts.host_api`; with `launch_model`, the point's "
     "tracing part (attach and detach included in detach mode) with the residual's low end",
     "as `estimated_fraction`"},
    {"/overhead/estimated_fraction_ci_high",
     "the high end: (`traced_step_extra_ms` + 1.96 × `traced_step_extra_se_ms`) / (`trace_every` × "
     "`clean_step_ms`) with the whole residual and `parts.host_api`; the budget chooses the interval on "
     "this end (a noisy \"0\" never makes it trace every step)",
     "as `estimated_fraction`"},
    {"/overhead/traced_step_extra_ms",
     "what one trace costs: the traced step (in detach mode the attach is in it), the steps 1 and 2 after "
     "it and, in detach mode, the step that paid for the detach (`method`). In detach mode `launch_model` "
     "charges an attach and a detach as this run timed them on the threads that made them from step 64 on "
     "(the means of the last 16 each; the model's 6.8 and 1.5 ms until then: an upper end, a detach waits "
     "for the device's queued work), and `measured` adds each class's mean excess over its median (the "
     "odd slow trace the medians leave out), each step's excess capped at the longest cycle timed",
     "as `estimated_fraction`"},
    {"/overhead/traced_step_extra_se_ms",
     "the standard error of `traced_step_extra_ms` (`measured`): each median's 1.2533 × σ / √n × t(0.975, "
     "n − 1) / 1.96 (σ = 1.4826 × the median absolute deviation of its steps, never less than the clean "
     "steps'), the clean median counted once per class it is subtracted from",
     "`launch_model` (reason), as `estimated_fraction`"},
    {"/overhead/polluted_steps",
     "steps left out of the comparison since the start because they followed a gap between steps longer "
     "than 3 × the median gap of the last 64 steps + 5 % of their median time (an evaluation, a "
     "checkpoint, logging or a recompilation between steps: the step after it may run slower for reasons "
     "of its own)",
     "as `estimated_fraction`"},
    {"/overhead/clean_step_ms",
     "median step time far from a trace (`measured`), or the median step time (`launch_model`)",
     "as `estimated_fraction`"},
    {"/overhead/untraced_residual_ms",
     "what CUPTI costs an untraced step while it stays attached (`untraced_cupti=keep`): launches × 0.79 "
     "µs (0.6 µs measured with records and callbacks off, plus CUPTI's dispatch of the callbacks, which "
     "stay on), charged whole: the launching thread pays it on every launch, and a step that waits for "
     "that thread pays all of it (a torch.compile GPT-2 step with the GPU 96 % busy did: issue #48). A "
     "model (every step pays it, no step time shows it); 0 with `untraced_cupti=detach`",
     "as `estimated_fraction`"},
    {"/overhead/untraced_residual_low_ms",
     "the residual's low end: `untraced_residual_ms` × the share of the recent traced steps' records "
     "(kernels, copies, memsets) that started within 50 µs of their launch call (a CUDA graph's first "
     "record only, at best), i.e. where the GPU waited for the host (median over steps; the whole "
     "residual until a traced step has timed its launches); 0 with `untraced_cupti=detach`",
     "as `estimated_fraction`"},
    {"/overhead/launches_per_step",
     "median kernels + copies + memsets of the recent traced steps",
     "as `estimated_fraction`"},
    {"/overhead/untraced_cupti",
     "what CUPTI did between traced steps while this step ran: `keep` (attached; records off between "
     "traced steps, when the interval leaves any; the launch callbacks stay on and return at once: "
     "switching them while another thread launches crashed CUPTI) or `detach` (`untraced_cupti=detach`, "
     "or chosen by the budget under `untraced_cupti=auto` when staying attached alone costs more than 80 "
     "% of the budget at any interval and detaching is modelled cheaper: launches × 1.1 µs + 8.3 ms for "
     "an attach and a detach, over 100 steps, or over 4000 (the longest interval) where the launches the GPU "
     "waited for (`untraced_residual_low_ms`) alone cost more than 80 % of the budget; the warning `overhead.detach` and "
     "the counters' null reason say when)",
     "CUPTI attribution off (reason)"},
    {"/overhead/estimated_fraction_floor",
     "`estimated_fraction` at the longest interval the budget picks (4000), CUPTI's mode and the other "
     "parts as they are: the least steptrace can cost this program by tracing less often. Above `budget`, "
     "no interval brings the line within it in this mode: CUPTI kept attached costs more alone "
     "(`untraced_residual_ms`; under `untraced_cupti=auto` the budget may still detach it, and the floor "
     "falls then), the markers and scopes do (`parts.host_api`), or one trace costs more than 4000 "
     "steps' share; at or below it, a `within_budget: false` line is on its way down (the interval is "
     "moving)",
     "no budget (the reason), as `estimated_fraction`"},
    {"/overhead/estimated_fraction_high",
     "the high end of the estimate's interval: `estimated_fraction` plus what the background thread spent "
     "in CPU time (`parts.background`, `parts.captures`), which costs the program's steps nothing on a "
     "free core and up to its whole time on a busy one, plus the stream markers at their upper end where "
     "`host_api` charges less (`parts.host_api.fraction_high` less `parts.host_api.fraction`); the "
     "program's cost lies in [`estimated_fraction`, "
     "`estimated_fraction_high`] (`parts.background` is over the steps' intervals, begin to the next "
     "step's begin, where the rest is over `step_time_ms`: the readings run by the clock, between steps "
     "too)",
     "as `estimated_fraction`; steps a framework's callbacks drive (Python's Lightning and HF Trainer ones): "
     "what their calls cost the framework's own code is in no measurement (reason, before the next); the "
     "stream markers mark steps, an untraced marked step has been counted and the in-run comparison has "
     "not measured what a marked step costs - up to ~512 steps after the markers arm, never while every "
     "step is marked (a fixed `trace_every`, or a budget that found marking every step fits, once the "
     "comparison's blocks age out), again after CUPTI detaches: their records' own time can read "
     "several times low (reason)"},
    {"/overhead/parts",
     "the estimate part by part (`core/overhead_parts.hpp`); `estimated_fraction` is the sum of the "
     "fractions of tracing, attached and host_api (the step time the budget holds: the tracing "
     "measurement holds what the counters and the background thread's work around traced steps cost the "
     "steps), `estimated_fraction_high` adds background and captures (CPU time of the background thread, "
     "each part paced by a governor of its own) and host_api's `fraction_high` less its `fraction`. `tracing`: the traced steps at the interval in force "
     "(`measured` from the step times, or `modelled` from the launch count); `attached`: CUPTI's "
     "callbacks on untraced steps while attached (`modelled`, = `untraced_residual_ms / clean_step_ms`); "
     "`counters`: PM sampling — `in_tracing` when the budget decides (sampling runs only around traced "
     "steps, so its cost is inside `tracing`'s; fraction null), `not_measured` when it runs on every step "
     "(fixed `trace_every`; null), `off` (0); `host_api`: steptrace's calls on the training thread (the "
     "step, each phase scope, each `record()`) × 120 ns (C++; 720 ns from Python), `modelled` "
     "(benchmarks/README.md, `scope_cost`), plus what the framework callbacks measured of their own "
     "bookkeeping per step beyond that (one step in 37 timed, the median of the last 9 once 5 are in, "
     "charged at its latest value on every step of the window, the step `stop()` closes keeping it: "
     "`steptrace._callback_steps`), plus the stream markers' CUDA event records as the training "
     "thread measures them, at the markers' pace in force: a marked step's typical (median) record time, "
     "or, where the markers are thinned and it resolves more, what marked steps took beyond the unmarked "
     "steps beside them in this run less two standard errors (core/marked_steps.hpp), "
     "× the share of steps marked now (1 in `markers_every`; a traced step's markers are in `tracing`), "
     "and `fraction_high`, the same with a marked step at the larger of its records' own time and the "
     "comparison's value plus two standard errors (`fraction` where no untraced marked step is counted; "
     "null with `fraction`'s reason where that is null, and with `estimated_fraction_high`'s markers' "
     "reason while the markers mark and the comparison has not measured: a marked step cost 2-4× its records' own "
     "time on a GPU-bound C++ transformer, up to 9×, docs/gpu.md; what a marked step's end delays in the "
     "next step the comparison counts against the unmarked steps, so both of its ends read low by about "
     "that, N/(N−1) times at 1 in N, none seen on that transformer), "
     "each over the steps' `step_time_ms` (a step's scope where it has one, as the estimate's: what ran "
     "after it and before the next step is not counted) "
     "(making the events once, when the markers are first armed, and that step's "
     "records, which pay the driver's first-use costs, are left out: a one-off of a few ms, said in the "
     "log at `stop()`); `background`: the background thread's CPU time "
     "in its device-memory, NVML and PM-sampling reads over the last 512 steps' time (each from its begin to the next step's: the reads are paced by the clock, between steps too), `measured` (CPU "
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
     "no estimate yet, attribution off (reason); a part's `fraction` null with its reason"},
    {"/overhead/kernel_timestamps",
     "how CUPTI times kernel records: `hardware_events` (`cuptiActivityEnableHWTrace`, Blackwell and "
     "later) or `instrumented (why the hardware path was refused)`",
     "CUPTI attribution off (reason)"},
    {"/trace",
     "the step was captured: it is written to a trace file with its neighbours",
     "the step was not captured, or the recorder is off (`trace_keep_steps` 0) (reason)"},
    {"/trace/file",
     "the trace file (Trace Event Format JSON), as opened: `trace_dir`, else the log's directory, "
     "`/trace-<run_id[0:8]>-r<rank>-s<first captured step>.json`. Written by the background thread after "
     "the following step's line, so it may appear a step after the line",
     "a captured step over `trace_max_files` (`trace.not_written` says so)"},
    {"/trace/capture_first_step",
     "the first captured step of the file (consecutive captured steps share one); present only with a file",
     "—"},
    {"/trace/not_written",
     "present only when `trace.file` is `null`: why (also in `null_reasons`)",
     "—"},
    {"/trace/reasons",
     "why it was captured: `slow_step` (over the last 64 steps, once 20 were seen, with m their median, s "
     "= 1.4826 × their median absolute deviation and p90 their 90th percentile: step time > "
     "`trace_trigger` × m, and > m + max(5 s, 1 ms), and > p90 — a loop's habitual longer steps are not "
     "news; then at most one slow-step capture per gap: 100 steps, doubled (to 1 600) at each capture if "
     "slow steps came during the previous gap, back to 100 if none did; the slow steps within a gap are "
     "counted in the end record's `traces.slow_suppressed`), `diagnosis_changed` (the first step of a "
     "stretch whose `diagnosis.label` differs from the run's most frequent one so far; traced steps only, "
     "after 20 of them), `capture_steps` (the program called `steptrace::capture_steps(n)`), "
     "`capture_steps_env` (`capture_steps` / `STEPTRACE_CAPTURE_STEPS` names it)",
     "—"},
    {"/window",
     "only when `log_every` > 1: the steps since the previous line; `tokens_per_second_mean` is their "
     "tokens over their time (the steps that had a rate), not a mean of per-step rates",
     nullptr},
    {"/dropped/steps_total",
     "steps whose line was never written because the writer queue (`max_pending_steps`) was full, since "
     "`start()`",
     nullptr},
    {"/dropped/lines_unwritten_total",
     "lines the log could not take (a write error: disk full, file size limit, …; a FIFO or pipe whose "
     "reader stopped reading: a line waits at most 20 ms, then is dropped), since `start()`; a line that "
     "failed part way is cut off again, so the file holds whole lines only (a pipe cannot be cut: the "
     "rest of a line its reader took part of goes first, and `stop()` waits at most 0.5 s for it, then "
     "says in a warning how many bytes it abandoned)",
     nullptr},
    {"/dropped/phase_scopes",
     "phase scopes over `max_spans_per_step` in this step (their time is missing), and those over it "
     "among the scopes that ended before this step began (its `between_steps`, bounded by "
     "`max_spans_per_step` too); threads other than the step's may fill three quarters of it, the last "
     "quarter is the step thread's.",
     nullptr},
    {"/dropped/phase_names_total",
     "new phase names refused since the process began because the table of 64 names was full (their "
     "scopes are not recorded; warned once)",
     nullptr},
    {"/dropped/scalars",
     "`record()` values not kept in this step: past 256 calls, a new name is dropped (except `loss`, "
     "`grad_norm`, `overflow_count`, always kept) and a name already recorded takes the new value in "
     "place of its latest one (so every field shows the last value recorded)",
     nullptr},
    {"/ignored_step_scopes",
     "`TRACE_STEP`s opened while this step's scope was open (nested, or on another thread)",
     nullptr},
    {"/phase_scopes_outside_step",
     "phase scopes that ended while no step was open (before the first step or between two steps), "
     "counted on the next step's line",
     nullptr},
    {"/warnings",
     "e.g. MFU above 1",
     nullptr},
    {"/null_reasons",
     "one entry for every `null` field of the line; a field inside an object is named by its path "
     "(`gpu.sm_efficiency`), an array element by its index (`<array>.<index>.<field>`); a name holding "
     "`.` or `\\` has them escaped with `\\` so it stays one step of the path (phase `attn.qkv`: "
     "`phases.attn\\.qkv.gpu`, in the JSON text `\"phases.attn\\\\.qkv.gpu\"`); an object or array a "
     "check left out is itself `null` with the check's reason, nothing inside it written",
     nullptr},
};

inline constexpr FieldProse kEndProse[] = {
    {"/event",
     "`end`",
     nullptr},
    {"/schema",
     "`steptrace.end/1`",
     nullptr},
    {"/reason",
     "`stop`, `SIGTERM` or `exit`",
     nullptr},
    {"/timestamp",
     "when the record was written",
     nullptr},
    {"/rank",
     "as on the step lines",
     nullptr},
    {"/device_uuid",
     "`device.uuid` of the step lines; `null` without a GPU",
     nullptr},
    {"/last_global_step",
     "the last step whose line was produced (written or not); `null` if none",
     nullptr},
    {"/lines_written",
     "step lines the log took since `start()`",
     nullptr},
    {"/lines_incomplete",
     "of those, lines written before all their GPU records came (`gpu.complete: false`)",
     nullptr},
    {"/stall_records",
     "stall records the stall watchdog wrote since `start()` (each stall's first and its repeats, "
     "\"Stall and resumed records\" below); `null` when the watchdog is off (`stall_after_s` 0)",
     nullptr},
    {"/dropped/steps_total",
     "as on the step lines",
     nullptr},
    {"/dropped/lines_cut_at_end",
     "at SIGTERM or exit without `stop()`: waiting lines left unwritten because the ending's "
     "`end_wait_ms` (1 s) was running out (the waiting lines get 6/10 of it, so that this record always "
     "comes); 0 at `stop()`",
     nullptr},
    {"/dropped/steps_cut_at_end",
     "at SIGTERM or exit without `stop()`: steps begun before the ending whose line could not come before "
     "this record — a step the training thread had closed but not yet handed to the background thread "
     "when the signal stopped it, or the open step when the ending could not take the step recorder's "
     "lock in time (that thread held it); 0–2 in practice (2: the thread was stopped inside the step's "
     "begin, holding both), counted since `start()`, 0 at `stop()`. A step the program goes on to queue "
     "before the background thread takes the ending is not cut",
     nullptr},
    {"/traces",
     "the flight recorder's counts; `null` when it is off (`trace_keep_steps` 0)",
     nullptr},
    {"/traces/captures",
     "trace files begun (at most `trace_max_files`); at SIGTERM or exit without `stop()` the captures "
     "still waiting for their following step are not written (`end_wait_ms` is for the lines and this "
     "record): `captures − written − failed` of them",
     nullptr},
    {"/traces/written",
     "trace files written, and those that could not be (warned once, with the error)",
     nullptr},
    {"/traces/refused_max_files",
     "captures refused: `trace_max_files` reached",
     nullptr},
    {"/traces/refused_budget",
     "automatic captures refused: the capture budget (a quarter of `overhead_budget`) was spent",
     nullptr},
    {"/traces/slow_suppressed",
     "slow steps not captured because they came within the slow-step rule's rate-limit gap",
     nullptr},
    {"/traces/capture_cpu_ms",
     "the background thread's CPU time building and writing captures",
     nullptr},
    {"/traces/requests/read",
     "capture requests for this run read from the trace directory (`steptrace-ctl capture`; "
     "`remote_captures`)",
     nullptr},
    {"/traces/requests/refused",
     "request files refused (malformed, stale, more than 64 steps, not a regular file, another waiting), "
     "each answered with the reason",
     nullptr},
    {"/traces/requests/planned",
     "requests whose steps this rank captures (agreed through the exchange, or its own next steps)",
     nullptr},
    {"/traces/requests/late",
     "of those, plans that reached this rank after its first step had begun (the capture holds what the "
     "ring still had)",
     nullptr},
    {"/traces/ring/keep_steps",
     "the ring's bounds (`trace_keep_steps`, `trace_ring_mib`)",
     nullptr},
    {"/traces/ring/bytes",
     "what the ring holds now, and at most during the run (kept steps and the kernel-name table)",
     nullptr},
    {"/traces/ring/step_bytes_max",
     "the largest single kept step",
     nullptr},
    {"/traces/ring/steps_kept",
     "steps that went through the ring",
     nullptr},
    {"/traces/ring/steps_evicted_for_bytes",
     "steps dropped before `keep_steps` newer ones came, to stay within `bytes_max`",
     nullptr},
    {"/traces/ring/records_left_out",
     "GPU records of steps too large for `bytes_max` alone, left out of their traces (the step's "
     "`records_left_out` in the trace says which)",
     nullptr},
    {"/after_last_step",
     "what ran after the last step's scope ended (validation before `stop()`, a last checkpoint): "
     "`host_ms` from that scope's end to this record, `gpu` as `between_steps.gpu` of the step lines "
     "(null when the last step was not traced); `null` without a step or while the last step's scope was "
     "still open",
     nullptr},
    {"/null_reasons",
     "why a `null` above is null",
     nullptr},
};
inline constexpr FieldProse kStallProse[] = {
    {"/event",
     "`stall`",
     "never"},
    {"/schema",
     "`steptrace.stall/1` (the resumed record's too)",
     "never"},
    {"/timestamp",
     "when the record was written",
     "never"},
    {"/rank",
     "as on the end record",
     "as on the end record"},
    {"/open_step",
     "the step begun last (`global_step` of the line it will have)",
     "never"},
    {"/stalled_s",
     "since that step began",
     "not a finite number"},
    {"/threshold_s",
     "the threshold this stall was first reported at",
     "not a finite number"},
    {"/median_step_ms",
     "median of the last 64 closed steps",
     "no step has closed yet"},
    {"/report",
     "1, 2, 3 … for this stall; `stalled_s` at which the next is due (2× the last)",
     "never"},
    {"/step_scope_open",
     "the open step's `TRACE_STEP` scope has not ended (false: the program is between steps)",
     "never"},
    {"/step_scope_closed_s",
     "how long ago that scope ended",
     "while it is open"},
    {"/threads",
     "every thread with a phase open, and the step's thread; `name` from `/proc/self/task/<tid>/comm`",
     "never"},
    {"/threads/*/open_phases",
     "outermost first; `open_s`: how long the scope has been open; a phase the step's thread opened inside "
     "the open step says at most `stalled_s`",
     "never (`open_s`: when its clock reading cannot be converted)"},
    {"/threads_untracked",
     "threads that found the open-phase table full: their phases are missing",
     "never"},
    {"/gpu/last_activity_s",
     "the latest end of a kernel, copy or memset record collected, how long ago, and its (demangled) name or "
     "copy kind; only traced steps have records",
     "without attribution or before the first record (`last_activity` also when that record carried no name)"},
    {"/gpu/open_step_launches",
     "launches (kernels, copies, memsets, graphs) made in the open step",
     "without attribution"},
    {"/gpu/open_step_outstanding",
     "of those, launches without a record after asking CUPTI for every completed record: still queued or "
     "running, or held back: CUPTI hands over a record buffer only when every record in it is complete, so "
     "while one kernel runs for seconds, the finished records sharing its buffer wait too (measured on H100: "
     "all 26 launches of the stuck step counted, and the lines of the steps before it went out with "
     "`gpu.complete: false`)",
     "without attribution or when the open step is not traced"},
    {"/gpu/outstanding_by_phase",
     "the outstanding launches by the phase that launched them (`unphased`: none open)",
     "never (empty when none are known)"},
    {"/gpu/sm_active_recent",
     "mean SM activity (PM sampling, as `sm_activity`) over the last second of samples: above 0, the GPU "
     "is running something (a kernel that never ends); 0, it waits for the host",
     "counters off (the line's `counters` reasons), PM sampling paused between traced steps (the default: "
     "only traced steps are sampled), no GPU, no sample yet"},
    {"/gpu/sm_active_sample_age_s",
     "how old the newest PM sample is (a stuck decode shows here)",
     "as `sm_active_recent`"},
    {"/null_reasons",
     "why a `null` above is null",
     "never"},
};

inline constexpr FieldProse kResumedProse[] = {
    {"/event",
     "`resumed`",
     "never"},
    {"/schema",
     "`steptrace.stall/1`",
     "never"},
    {"/timestamp",
     "when the record was written",
     "never"},
    {"/rank",
     "as on the end record",
     "as on the end record"},
    {"/stalled_step",
     "the step that stalled",
     "never"},
    {"/stalled_s",
     "from its start to the next step's",
     "not a finite number"},
    {"/reports",
     "stall records written for it",
     "never"},
    {"/open_step",
     "the step that began",
     "never"},
    {"/null_reasons",
     "why a `null` above is null",
     "never"},
};
// clang-format on

/// A record's prose rows.
inline const FieldProse* prose_begin(Record r, std::size_t* n) {
  switch (r) {
    case Record::step: *n = std::size(kStepProse); return kStepProse;
    case Record::end: *n = std::size(kEndProse); return kEndProse;
    case Record::stall: *n = std::size(kStallProse); return kStallProse;
    case Record::resumed: break;
  }
  *n = std::size(kResumedProse);
  return kResumedProse;
}

/// The prose of a record's row at `path` (a row shown in a table row of its own); nullptr: none.
inline const FieldProse* prose_of(Record r, const char* path) {
  std::size_t n = 0;
  const FieldProse* rows = prose_begin(r, &n);
  for (std::size_t i = 0; i < n; ++i)
    if (std::strcmp(rows[i].path, path) == 0) return &rows[i];
  return nullptr;
}

}  // namespace line_prose
STEPTRACE_END_NAMESPACE  // steptrace
