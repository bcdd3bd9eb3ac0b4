// steptrace/core/line_fields_step.hpp - the step line's identity, step time and throughput, host phases,
// memory, MFU and training scalars: a row per field, in docs/schema.md's order (core/line_field.hpp
// says what a row holds, core/line_fields.hpp what the rows drive).
#pragma once
#include "line_field.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {

using F = FieldType;

// clang-format off
inline constexpr LineField kStepFields[] = {
    row("identity", "/schema", F::string, "—",
        "constant `\"steptrace.step/1\"`",
        "never").in(kCompact),
    row("identity", "/global_step", F::integer, "count, 0-based",
        "steps begun since `start()`",
        "never").in(kCompact),
    row("identity", "/timestamp", F::string, "ISO-8601 UTC, ms",
        "wall clock at the step's start",
        "never"),
    row("identity", "/start_unix_ms", F::number, "ms since Unix epoch",
        "wall clock at the step's start",
        "never").in(kCompact, Digits::integer),
    row("identity", "/rank", F::integer, "—",
        "`Config` / `STEPTRACE_RANK`…, else `RANK`/`LOCAL_RANK`/`WORLD_SIZE` (torchrun), "
        "`OMPI_COMM_WORLD_*`, `SLURM_*`; defaults 0, 0, 1",
        "never").in(kCompact).in(kRun),
    same("/local_rank", F::integer, "—").in(kRun),
    same("/world_size", F::integer, "—").in(kRun),
    row("identity", "/hostname", F::string, "—",
        "`gethostname`, `getpid`",
        "never").in(kRun),
    same("/pid", F::integer, "—").in(kRun),
    row("identity", "/run_id", F::string, "16 hex digits",
        "new at every `start()` (random): tells a job's restarts and a second `start()` apart; with a "
        "communicator (`enable_cross_rank`; Python: `steptrace.cross_rank()`) every rank takes rank 0's (one "
        "broadcast, waited for at most 30 s; from Python as long as the ranks' group setup, torch.distributed's "
        "default timeout; lines written before that call keep the rank's own)",
        "never").in(kCompact).in(kRun),
    row("identity", "/job_id", F::string, "—",
        "`job_id` / `STEPTRACE_JOB_ID`, else `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else the Kubernetes "
        "pod's name (`HOSTNAME` where `KUBERNETES_SERVICE_HOST` is set)",
        "none of these known").in(kRun),
    row("identity", "/device", F::object, "object `{index, name, sm_count, compute_capability, uuid, pci_bus_id}`",
        "`cudaGetDeviceProperties` at `start()`; `uuid` as nvidia-smi writes it (`GPU-…`), `pci_bus_id` in "
        "NVML's form (`00000000:3B:00.0`): the `UUID` and `pci_bus_id` labels dcgm-exporter puts on its "
        "series, to join them with the lines",
        "no GPU, no driver, `gpu=off`"),
    member("/device/index", F::integer, "—").in(kRun),
    member("/device/name", F::string, "—").in(kRun),
    member("/device/sm_count", F::integer, "count").in(kRun),
    member("/device/compute_capability", F::string, "—").in(kRun),
    member("/device/uuid", F::string, "—").in(kRun),
    member("/device/pci_bus_id", F::string, "—").in(kRun),
    row("throughput", "/step_time_ms", F::number, "ms",
        "this step's start → its own end: its `TRACE_STEP` scope's end when the scope ended before the next "
        "step began (what ran between is the next line's `between_steps`), else the next step's start (a "
        "scope still open then, e.g. `steptrace.loader()`, whose step ends where the next wait begins). "
        "`tokens_per_second`, `samples_per_second` and `estimated_mfu` divide by it. Python's `watch()` and "
        "the framework callbacks keep a step open after its optimizer step until the next step's work "
        "begins, or work that is no step's does (an evaluation, a phase opened between steps, validation, a "
        "checkpoint): the host returns from `optimizer.step()` before the GPU has run the step, and a "
        "throughput over a window that ends there is not one the GPU reached; an iteration's time is what the "
        "program's own per-iteration clock reads",
        "never").in(kCompact),
    row("throughput", "/step_time_basis", F::string, "`\"next_step_start\"` or `\"scope_end\"`",
        "which end `step_time_ms` ran to",
        "never"),
    row("throughput", "/step_scope_ms", F::number, "ms",
        "`TRACE_STEP` scope duration",
        "never"),
    row("throughput", "/step_interval_ms", F::number, "ms",
        "this step's start → the next step's start (the last step: its scope's end): `step_time_ms` plus "
        "`between_steps.host_ms` of the next line",
        "never"),
    row("throughput", "/between_steps", F::object, "object `{host_ms, phases, gpu}`",
        "what ran after the previous step's scope ended and before this step began: `host_ms` (that time), "
        "`phases` (`{<name>: {host_ms, count}}`: phase scopes that ended in it, e.g. "
        "`TRACE_PHASE_NAMED(\"eval\")`; those after the last step's scope count in the last line's "
        "`phase_scopes_outside_step`), `gpu` (the work launched in it: `{busy_ms, kernel_ms, kernels, "
        "copies, copy_bytes, complete, missing_launches, excluded_records, top_kernels: [{name, ms, "
        "calls}]}`; kernels 0 when records were on and nothing was launched)",
        "the first step (work before it: `gpu.before_first_step_ms`); `gpu`: the previous step was not "
         "traced (GPU records run from a traced step's begin to the next step's begin), attribution off"),
    member("/between_steps/host_ms", F::number, "ms").in(kCompact),
    member("/between_steps/phases", F::names, "—"),
    member("/between_steps/phases/*", F::object, "—"),
    member("/between_steps/phases/*/host_ms", F::number, "ms"),
    member("/between_steps/phases/*/count", F::integer, "count"),
    member("/between_steps/gpu", F::object, "—"),
    member("/between_steps/gpu/busy_ms", F::number, "ms"),
    member("/between_steps/gpu/kernel_ms", F::number, "ms"),
    member("/between_steps/gpu/kernels", F::integer, "count"),
    member("/between_steps/gpu/copies", F::integer, "count"),
    member("/between_steps/gpu/copy_bytes", F::integer, "bytes"),
    member("/between_steps/gpu/complete", F::boolean, "—"),
    member("/between_steps/gpu/missing_launches", F::integer, "count"),
    member("/between_steps/gpu/excluded_records", F::integer, "count"),
    member("/between_steps/gpu/top_kernels", F::array, "—"),
    member("/between_steps/gpu/top_kernels/*", F::object, "—"),
    member("/between_steps/gpu/top_kernels/*/name", F::string, "—"),
    member("/between_steps/gpu/top_kernels/*/ms", F::number, "ms"),
    member("/between_steps/gpu/top_kernels/*/calls", F::integer, "count"),
    row("throughput", "/tokens", F::number, "tokens (this rank)",
        "`TRACE_STEP(tokens)`, `set_step_tokens()`, else `Config::tokens_per_step`",
        "none of these set").in(kCompact),
    row("throughput", "/tokens_per_second", F::number, "tokens/s",
        "`tokens / step_time`",
        "`tokens` null; the quotient not a finite number (tokens near 1e308)").in(kCompact),
    row("throughput", "/samples", F::number, "samples",
        "`TRACE_STEP(tokens, samples)`, `set_step_tokens(t, s)`, else `Config::samples_per_step`",
        "none set"),
    same("/samples_per_second", F::number, "samples/s").in(kCompact),
    row("throughput", "/tokens_total", F::number, "tokens",
        "the sum of `tokens` (`samples`) over every step since `start()`, this one included — also the steps "
        "whose line `log_every` does not write — so it only grows: Prometheus's `steptrace_tokens_total` and "
        "`rate()` read it. Steps whose line was dropped before the background thread saw it "
        "(`dropped.steps_total`) are not in it",
        "no step since `start()` had a count; the sum is not a finite number"),
    same("/samples_total", F::number, "samples (this rank)"),
    row("phases", "/dataloader_wait_ms", F::number, "ms",
        "sum of `input` scopes in the step",
        "no `input` scope in the step"),
    row("phases", "/h2d_time_ms", F::number, "ms",
        "sum of `h2d` scopes",
        "no `h2d` scope"),
    row("phases", "/forward_time_ms", F::number, "ms",
        "sum of `forward` scopes",
        "no `forward` scope"),
    row("phases", "/backward_time_ms", F::number, "ms",
        "sum of `backward` scopes",
        "no `backward` scope"),
    row("phases", "/optimizer_time_ms", F::number, "ms",
        "sum of `optimizer` scopes",
        "no `optimizer` scope"),
    row("phases", "/untracked_time_ms", F::number, "ms",
        "step time not covered by any outermost phase scope on the step's thread",
        "never"),
    row("phases", "/phases", F::names, "object: name → `{host_ms, self_ms, count[, other_thread_count]}`",
        "every phase, built-in and custom, that closed in the step; `self_ms`: the phase's exclusive time "
        "(below)",
        "never (may be `{}`); `self_ms` with `host_ms`"),
    member("/phases/*", F::object, "—"),
    member("/phases/*/host_ms", F::number, "ms").in(kCompact),
    member("/phases/*/self_ms", F::number, "ms").in(kCompact),
    member("/phases/*/count", F::integer, "count").in(kCompact),
    member("/phases/*/other_thread_count", F::integer, "count"),
    member("/phases/*/gpu", F::object, "—"),
    row("memory", "/peak_memory_allocated", F::integer, "bytes",
        "the allocator hook's `peak_allocated_bytes` if registered, else the peak of device-wide used memory "
        "sampled in the step",
        "no hook and no GPU sample"),
    row("memory", "/peak_memory_source", F::string, "`\"allocator_hook\"` or `\"device_used_sampled\"`",
        "which of the two",
        "`peak_memory_allocated` null"),
    member("/memory", F::object, "—"),
    row("memory", "/memory/device_used_peak_bytes", F::integer, "bytes",
        "max of `cudaMemGetInfo` (total − free, all processes on the device) samples taken by the background "
        "thread every `memory_sample_ms` (paced by the budget as `device_state`) within the step; for a step "
        "shorter than the period, the latest earlier sample (`memory.samples` = 0)",
        "no GPU / sampling failed").in(kCompact),
    row("memory", "/memory/device_total_bytes", F::integer, "bytes",
        "`cudaMemGetInfo`",
        "same"),
    row("memory", "/memory/samples", F::integer, "count",
        "samples inside the step",
        "never"),
    row("memory", "/memory/allocator", F::object, "object `{allocated_bytes, reserved_bytes, peak_allocated_bytes, peak_reserved_bytes, alloc_retries, "
         "ooms}`",
        "`set_allocator_stats_hook`, called when the `TRACE_STEP` scope ends; each member null if the hook "
        "did not report it",
        "no hook registered"),
    member("/memory/allocator/allocated_bytes", F::integer, "bytes").in(kCompact),
    member("/memory/allocator/reserved_bytes", F::integer, "bytes").in(kCompact),
    member("/memory/allocator/peak_allocated_bytes", F::integer, "bytes"),
    member("/memory/allocator/peak_reserved_bytes", F::integer, "bytes"),
    member("/memory/allocator/alloc_retries", F::integer, "count"),
    member("/memory/allocator/ooms", F::integer, "count"),
    row("mfu", "/estimated_mfu", F::number, "fraction",
        "`flops_per_token × tokens_per_second_per_gpu / peak_flops` (PaLM, Chowdhery et al. 2022, App. B; "
        "under model parallelism torchtitan's convention, below)",
        "`flops_per_token` not set, tokens unknown, no trusted peak (unknown GPU, no GPU, dtype without a "
         "tensor path), or `model_parallel` does not divide `world_size`").in(kCompact),
    member("/mfu_inputs", F::object, "—"),
    row("mfu", "/mfu_inputs/flops_per_token", F::number, "FLOP/token",
        "`Config::flops_per_token` (e.g. `transformer_flops_per_token`)",
        "not set").in(kRun),
    row("mfu", "/mfu_inputs/peak_flops", F::number, "FLOP/s, one GPU, dense",
        "`Config::peak_flops` override, else the table in `core/metrics.hpp` by device name and `dtype`",
        "no override and no table entry").in(kRun),
    row("mfu", "/mfu_inputs/peak_source", F::string, "—",
        "which table row and datasheet, or why there is none",
        "never").in(kRun),
    row("mfu", "/mfu_inputs/above_one", F::boolean, "—",
        "`estimated_mfu > 1`: the FLOPs count or the peak is wrong (also in `warnings`)",
        "never"),
    row("mfu", "/mfu_inputs/model_parallel", F::object, "object `{tensor, pipeline, context}`",
        "`Config::model_parallel` / `STEPTRACE_TENSOR_PARALLEL`, `_PIPELINE_PARALLEL`, `_CONTEXT_PARALLEL` "
        "(default 1 each)",
        "never"),
    member("/mfu_inputs/model_parallel/tensor", F::integer, "GPUs").in(kRun),
    member("/mfu_inputs/model_parallel/pipeline", F::integer, "GPUs").in(kRun),
    member("/mfu_inputs/model_parallel/context", F::integer, "GPUs").in(kRun),
    row("mfu", "/mfu_inputs/model_parallel_size", F::integer, "GPUs",
        "tensor × pipeline × context: the GPUs one model replica spans",
        "never"),
    row("mfu", "/mfu_inputs/data_parallel_size", F::integer, "replicas",
        "`world_size / model_parallel_size`",
        "the sizes do not divide `world_size` (also warned once at `start()`, naming `model_parallel`)").in(kRun),
    row("mfu", "/mfu_inputs/tokens_per_second_per_gpu", F::number, "tokens/s",
        "`tokens_per_second / model_parallel_size`: this GPU's share of its replica's tokens; summed over "
        "all ranks, the job's throughput",
        "tokens unknown"),
    row("scalars", "/loss", F::number, "as recorded",
        "`steptrace::record(\"loss\", v)` … (last value in the step)",
        "not recorded in the step; or its last value was NaN or ±inf (the reason says which, and how many of "
         "the step's values were not finite; the first such value is also warned about once)").in(kCompact),
    same("/grad_norm", F::number, "as recorded").in(kCompact),
    same("/overflow_count", F::number, "as recorded"),
    row("scalars", "/scalars", F::names, "object name → number",
        "every other `record(name, v)` (last value per name); a non-finite last value is `null` with "
        "`null_reasons.\"scalars.<name>\"` (a dot in the name escaped: `scalars.loss\\.train`)",
        "never (may be `{}`)"),
    member("/scalars/*", F::number, "as recorded").in(kCompact),
    member("/diagnosis", F::object, "—"),
};
// clang-format on

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace
