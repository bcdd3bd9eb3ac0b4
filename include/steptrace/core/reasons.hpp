// steptrace/core/reasons.hpp - the reasons steptrace gives for a null (and for an UNKNOWN diagnosis),
// declared once, as the settings are (settings.hpp): an id, a stable code, and the sentence. The
// compact line writes a reason as its code (core/line_tiers.hpp), and dashboards group by it, so a
// row's code never changes: a reworded sentence keeps it. Each code was the FNV-1a hash of its
// sentence as first worded, digits left out (what a sentence without a row is coded by), so codes
// written before this table are the same codes - but for the sentences that began with their variable
// part, reworded to begin with a fixed one when every reason became a row (docs/schema.md lists them).
// Every reason a null is given is a row (the tests hold each reason their logs carry to one). A `kPrefix` row is the fixed start of a sentence that
// goes on with a detail (an error, a setting's value, another reason): such a sentence's code is the
// detail's hash continued from the row's code (core/line_tiers.hpp, reason_code), one code per detail
// (each carries its own sentence), unchanged when the start is reworded; its digits are left out of the
// hash ("3 of 12 samples" keeps one code), but a `kPrefixCounted` row's detail begins with a count whose
// digits are hashed: it changes seldom and the reader needs it (the markers' pace: a compact line
// carries a code's sentence once, so with the digits left out every later pace would read as the
// first). Producers write a row's
// sentence through reason_text(), so that it has one home. Pure C++17.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

namespace reason_row {
enum Match : uint8_t { kWhole, kPrefix, kPrefixCounted };
}  // namespace reason_row

// X(id, code, match, sentence)
#define STEPTRACE_REASONS(X) \
  X(tokens_unknown, "952a608e", kWhole, "tokens per step unknown (set tokens_per_step or TRACE_STEP(tokens))") \
  X(samples_unknown, "c6662b4f", kWhole, "samples per step unknown (set samples_per_step or TRACE_STEP(tokens, samples))") \
  X(flops_not_set, "57692708", kWhole, "flops_per_token is not set") \
  X(no_allocator_hook, "5c0399c0", kWhole, "no allocator statistics hook (steptrace::set_allocator_stats_hook; in Python, use_torch_memory())") \
  X(not_recorded, "5749a390", kPrefix, "not recorded (steptrace::record(") \
  X(no_communicator, "e9fbfe58", kWhole, "no communicator handed to steptrace (C++: steptrace::enable_cross_rank, steptrace/nccl.hpp; Python: steptrace.cross_rank()); aggregate the ranks' lines by rank in the dashboard instead") \
  X(view_on_rank0, "d501b2a5", kWhole, "rank 0's line carries the cross-rank view") \
  X(no_exchange_yet, "91af46c6", kWhole, "no exchange completed since the previous line") \
  X(view_of_later_step, "d1a43dee", kWhole, "the next gathered view is of a later step (it waits for that step's line)") \
  X(exchange_stopped, "b75d40ba", kPrefix, "cross-rank exchange stopped: ") \
  X(fork_child, "e57599de", kWhole, "a child made by fork() after its parent's steptrace used CUDA (CUDA cannot be used in such a child; start steptrace in a process made by spawn or exec)") \
  X(no_gpu_measured, "43193842", kPrefix, "no GPU measured: ") \
  X(cupti_off, "bc074a87", kWhole, "CUPTI attribution switched off (cupti=off / STEPTRACE_CUPTI=off)") \
  X(cupti_unavailable, "c4649598", kPrefix, "CUPTI unavailable: ") \
  X(nvml_unavailable, "e4361a2c", kPrefix, "NVML unavailable: ") \
  X(estimate_without_attribution, "b353ac56", kPrefix, "CUPTI attribution is off (") \
  X(not_traced_interval, "58ff2d1f", kPrefixCounted, "step not traced: trace_every=") \
  X(not_traced_stopped, "36b5c21a", kWhole, "step not traced: CUPTI could not be switched back on (see the steptrace warning)") \
  X(tracing_stopped, "eced8403", kWhole, "no step is traced any more: CUPTI could not be switched back on (see the steptrace warning)") \
  X(counters_traced_only, "07052861", kWhole, "hardware counters run on traced steps only (overhead_budget decides the trace interval) and this step was not traced") \
  X(counters_stopped_detached, "606823f3", kPrefix, "hardware counters stopped from step ") \
  X(no_pm_sample, "8382f83b", kPrefix, "no PM sample covered this ") \
  X(markers_need_attribution, "ed4fdb7d", kPrefix, "stream markers need GPU attribution") \
  X(markers_no_stream_yet, "2ce75f1b", kWhole, "no traced step has shown where the program's GPU work runs yet") \
  X(markers_armed_late, "85fec65e", kWhole, "the stream markers were armed after this step ran (by the first traced step's line)") \
  X(markers_thinned, "1a9ab004", kPrefixCounted, "stream markers on 1 step in ") \
  X(markers_not_read, "6d11f0c4", kWhole, "stream markers not read for this step") \
  X(markers_span_unmarked, "11f9f645", kPrefix, "the step's begin or end was not marked") \
  X(first_step_between, "88b2aa27", kWhole, "the first step: GPU work launched before it is gpu.before_first_step_ms") \
  X(flight_recorder_off, "e438ac0f", kWhole, "flight recorder off (trace_keep_steps=0)") \
  X(unknown_no_attribution, "978fb68a", kWhole, "no GPU attribution for this step; host-side waits are below their thresholds") \
  X(unknown_nothing_traced, "04840ef1", kWhole, "no GPU attribution for this step and no traced step before it; host-side waits are below their thresholds") \
  X(phase_no_kernel, "afaa6848", kWhole, "no kernel ran in this phase") \
  X(phase_occupancy_unknown, "13d3b23f", kWhole, "the occupancy calculator had no inputs for this phase's kernels (device properties or kernel attributes unknown)") \
  X(copies_untimed, "780aca6d", kWhole, "the copies took no measurable time") \
  X(step_no_kernel, "d051f25f", kWhole, "no kernel ran in this step") \
  X(evidence_own_attribution, "94a52ca4", kWhole, "this step's own GPU attribution decided") \
  X(evidence_not_carried, "e14b4b0f", kWhole, "no traced step's GPU view was carried: see diagnosis.reason") \
  X(window_no_tokens, "584d8e3e", kWhole, "no step of the window had tokens and a step time") \
  X(counter_not_sampled, "76abfd84", kWhole, "this metric is not available from PM sampling on this GPU") \
  X(no_cross_rank_exchange, "d5da9384", kWhole, "no cross-rank exchange") \
  X(no_rank_waited, "65b11e08", kWhole, "a rank measured no collective wait") \
  X(no_part_exceeds, "f38cc090", kWhole, "no part of the slowest rank's step exceeds the other ranks' median") \
  X(no_wait_measured, "48c80267", kWhole, "no step in the window measured its collective wait (no traced step, no `nccl` phase, no backward_end events)") \
  X(nvml_no_reading, "80661af2", kWhole, "NVML gave no such reading for this GPU") \
  X(nvml_no_clock_reasons, "b9826bae", kWhole, "NVML gave no clock event reasons for this GPU") \
  X(step_no_nccl_kernel, "8de99d73", kWhole, "no NCCL kernel ran in this step") \
  X(no_memory_sample, "80f21c7c", kWhole, "no memory sample fell inside this step") \
  X(allocator_field_missing, "ee7636d6", kWhole, "the allocator hook did not give it") \
  X(flops_per_token_unset, "c37504a3", kWhole, "flops_per_token not set (Config::flops_per_token, STEPTRACE_FLOPS_PER_TOKEN)") \
  X(markers_end_unmarked, "ba1f437f", kWhole, "the step's end was not marked") \
  X(markers_not_traced, "cbd52c40", kWhole, "the step was not traced: no records to compare with") \
  X(records_incomplete, "69a02012", kWhole, "the step's GPU records are incomplete") \
  X(framework_steps_unbounded, "5b776841", kWhole, "a framework's callbacks open and close the steps: what they cost the framework's own code around their calls is in no measurement (inside one run the callbacks cost several times what the lines estimate: docs/python.md), so the cost has no upper end here") \
  X(framework_within_unknown, "9054f8ca", kWhole, "a framework's callbacks open and close the steps: the estimate is a lower end of their cost (what they cost the framework's own code around their calls is in no measurement), so under the budget the line cannot say the cost is within it") \
  X(markers_cost_unbounded, "3af05072", kWhole, "the stream markers' cost is not measured in this run: it needs 16 blocks of 32 steps holding both marked and unmarked ones (none form while every step is marked; a detach of CUPTI starts them again), and a marked step can cost several times its records' own time, so it has no upper end") \
  X(no_step_ended, "ccc00d40", kWhole, "no step ended") \
  X(gpu_no_uuid, "24cf7caf", kWhole, "the GPU reported no UUID") \
  X(no_step_had_line, "ae368080", kWhole, "no step had a line") \
  X(no_after_last_step, "fc870dda", kWhole, "no step, or the last step's scope was still open at the end") \
  X(stall_not_read, "7f762759", kWhole, "not read: the stall watchdog did not fill it in") \
  X(no_step_closed, "84b97656", kWhole, "no step has closed yet") \
  X(step_scope_still_open, "f5cc52fa", kWhole, "the step's TRACE_STEP scope is still open") \
  X(clock_unconvertible, "442152ea", kWhole, "its clock reading could not be converted") \
  X(gpu_record_unnamed, "aef18a0f", kWhole, "the last GPU record carried no name") \
  X(stall_no_record_yet, "0ba3ad12", kWhole, "no kernel, copy or memset record has come in yet") \
  X(stall_no_pm_sample, "1e1dadd5", kWhole, "no PM sample has been decoded yet") \
  X(stall_no_sm_activity, "c7da7bcc", kWhole, "the recent PM samples carry no SM activity") \
  X(stall_counters_paused, "1e7c869b", kWhole, "PM sampling paused between traced steps (overhead_budget decides): no recent sample") \
  X(stall_step_untraced, "1133d53d", kPrefix, "the open step is not traced (trace_every ") \
  X(no_attribution_because, "12c5393b", kPrefix, "no GPU attribution: ") \
  X(markers_not_armed, "1fd8b013", kWhole, "the stream markers are not armed") \
  X(no_gpu_attribution, "2129a699", kWhole, "no GPU attribution") \
  X(counters_off, "6f10d2cd", kWhole, "hardware counters are off") \
  X(no_step_had_count, "490c0cd0", kPrefix, "no step since start() had ") \
  X(count_sum_not_finite, "47a95aff", kPrefix, "the sum of the steps' ") \
  X(no_between_records, "ede2b2bd", kWhole, "no GPU records between steps") \
  X(no_stream_markers, "da470f09", kWhole, "no stream markers") \
  X(nvml_not_open, "7c2dcf8e", kWhole, "NVML is not open yet (the background thread opens it after start())") \
  X(nvml_no_reading_yet, "1b728d62", kWhole, "no NVML reading within or before this step yet (NVML opens in the background after start())") \
  X(no_memory_sample_yet, "40d04464", kWhole, "no device-memory sample yet") \
  X(parallel_not_read, "132bf051", kWhole, "the parallel sizes were not read") \
  X(model_parallel_not_dividing, "5c106f4b", kPrefix, "model_parallel (tensor ") \
  X(no_gpu_no_peak, "deab13da", kWhole, "no GPU, and peak_flops is not set") \
  X(no_peak_entry, "9a8f5634", kPrefix, "no peak-FLOPs entry for device '") \
  X(not_finite, "79176e99", kPrefix, "not a finite number (") \
  X(rate_not_finite, "0dd146ab", kPrefix, "the count over the step time is not a finite number (") \
  X(scalar_not_finite, "8fa492f6", kPrefix, "the last value recorded was ") \
  X(host_ms_left_out, "28552f18", kPrefix, "host_ms was left out: ") \
  X(step_no_time, "93d89586", kWhole, "the step has no time") \
  X(step_no_attribution, "95e84c73", kPrefix, "this step has no GPU attribution (") \
  X(counter_values_excluded, "15aad68c", kPrefix, "no value in [0, 1] over this ") \
  X(no_sample_used, "f6ae4b81", kWhole, "no sample used") \
  X(work_needs_wait, "4b0cafcf", kWhole, "own work needs the collective wait") \
  X(phase_not_opened, "0e819970", kPrefix, "no phase scope '") \
  X(busy_over_window, "77096e51", kPrefix, "the step's GPU work was busy ") \
  X(kernels_over_streams, "eca81f10", kPrefix, "kernels over their streams' time: ") \
  X(sm_efficiency_outside, "b0ec9ff0", kPrefix, "gpu.sm_efficiency = ") \
  X(markers_before_host, "7f5add01", kWhole, "a marker's GPU time read before its host time by more than 0.1 ms (the clock calibration is off)") \
  X(markers_out_of_order, "47ceb89c", kWhole, "the markers' GPU times are out of the order they were recorded in") \
  X(warm_up_uncounted, "1f21ae38", kWhole, "no step counted yet (warm-up)") \
  X(no_traced_step_yet, "167d807d", kWhole, "no traced step observed yet") \
  X(no_estimate_yet, "2214e1aa", kWhole, "no estimate yet") \
  X(modelled_no_spread, "56af7225", kWhole, "method launch_model: the extra is modelled, it has no spread") \
  X(parts_not_computed, "c2ba9f14", kWhole, "the estimate's parts were not computed for this line") \
  X(no_step_timed, "9d18b431", kWhole, "no step timed yet") \
  X(counters_in_tracing, "d59bbd99", kWhole, "PM sampling runs only around traced steps: its cost is inside tracing's") \
  X(counters_every_step, "6ff36c97", kWhole, "PM sampling runs on every step (trace_every set or overhead_budget=0): no step without it to compare with") \
  X(budget_trace_every_set, "c7d54c4d", kWhole, "trace_every set explicitly: no budget applies") \
  X(budget_zero, "91addd50", kWhole, "overhead_budget=0: every step is traced") \
  X(summary_of_later_step, "c04a10e2", kWhole, "this rank's next summary is of a later step") \
  X(no_summary_posted, "e7b539b7", kWhole, "no summary posted since the previous line (one every cross_rank_every steps)") \
  X(not_captured, "38a70e00", kWhole, "step not captured") \
  X(slow_not_captured, "7f977019", kPrefix, "slow step not captured: within the slow-step rule's rate limit (one capture per ") \
  X(recorder_no_file, "e1d10ea6", kWhole, "flight recorder off: no log file to put trace files beside and no trace_dir") \
  X(gpu_off_by_env, "5137284f", kWhole, "GPU measurement switched off by STEPTRACE_GPU=off in the environment") \
  X(gpu_off_by_program, "e3c5f6f8", kWhole, "GPU measurement switched off by the program (its setting gpu=off)") \
  X(counters_setting_off, "e91c21b2", kWhole, "hardware counters switched off (counters=off / STEPTRACE_COUNTERS=off)") \
  X(counters_cupti_off, "9e745b42", kWhole, "hardware counters are read through CUPTI, switched off (cupti=off / STEPTRACE_CUPTI=off)") \
  X(counters_detach, "3d7fee99", kWhole, "hardware counters are not read with untraced_cupti=detach: detaching CUPTI between traced steps would end PM sampling") \
  X(counters_unavailable, "ed0a79ca", kPrefix, "hardware counters unavailable: ") \
  X(counters_stopped, "b1217581", kPrefix, "hardware counters stopped: ") \
  X(markers_backend_none, "19a63af1", kWhole, "this GPU backend has no stream markers") \
  X(markers_setting_off, "25dee9f5", kWhole, "stream markers switched off (stream_markers=false / STEPTRACE_STREAM_MARKERS=0)") \
  X(markers_moved_default, "c8964738", kWhole, "the step thread's kernel launches moved to the default stream; the records decide whether it is marked") \
  X(markers_spread, "c8f9998a", kWhole, "the step thread's kernel launches spread over streams (none took 9 in 10): name one with set_marker_stream") \
  X(markers_stream_destroyed, "6d646a31", kWhole, "the program destroyed the stream the markers were recorded on; a traced step shows the next one") \
  X(markers_unreadable, "6c893c80", kWhole, "a marker's GPU time could not be read") \
  X(markers_end_not_marked, "7f12692d", kWhole, "the step's end was not marked (its scope did not end, no free marker slot, a CUDA graph capture, or another CUDA context current)") \
  X(markers_skipped, "e1469a86", kPrefix, "markers not recorded in this step: ") \
  X(markers_setup_failed, "86ce0e3a", kPrefix, "stream markers could not be set up: ") \
  X(markers_line_due, "52359d82", kWhole, "the GPU had not reached the step's last marker when its line was due (max_lag_steps, max_lag_ms)") \
  X(markers_none_recorded, "85b79e18", kWhole, "no marker was recorded in this step") \
  X(markers_stream_id_unknown, "8e0e3cd3", kWhole, "the marker stream's id in the GPU records is not known (CUPTI did not give it)") \
  X(markers_other_streams, "5c39cce8", kPrefix, "traced step ") \
  X(stall_watchdog_off, "6ac8db21", kWhole, "the stall watchdog is off (stall_after_s=0)") \
  X(no_job_id, "2334ae2e", kWhole, "no job id: set job_id (STEPTRACE_JOB_ID), or run under Slurm (SLURM_JOB_ID), torchrun (TORCHELASTIC_RUN_ID) or Kubernetes (the pod's name)") \
  X(between_untraced, "762ca937", kPrefix, "no GPU records between steps: step ") \
  X(no_driver, "2bfb791d", kPrefix, "no NVIDIA driver found (") \
  X(driver_too_old, "9c7a444c", kPrefix, "the NVIDIA driver is older than this program's CUDA runtime needs: ") \
  X(no_gpu_found, "910f0fef", kPrefix, "no NVIDIA GPU found (the driver sees none): ") \
  X(no_usable_gpu, "f66cc4b6", kPrefix, "no usable GPU: ") \
  X(fewer_than_two_ranks, "fedf3baf", kWhole, "fewer than two ranks reported") \
  X(rank_summary_missing, "f0f9490e", kWhole, "a rank's summary is missing (it may be the slow one)") \
  X(no_positive_median, "bb431d1e", kWhole, "no positive median step time") \
  X(no_common_wait, "bf3f76f1", kWhole, "no kind of collective wait was measured on every rank (backward_end events, `nccl` phase markers, a traced step, an `nccl` phase): step times alone cannot tell") \
  X(capture_budget_spent, "e3ea197a", kPrefix, "capture refused: captures have spent their share of overhead_budget (") \
  X(memory_sampling_stopped, "801ac674", kPrefix, "device memory sampling stopped: ") \
  X(no_gpu, "f650f4bc", kWhole, "no GPU") \
  X(trace_max_files, "3f74ec4b", kPrefix, "trace_max_files (") \
  X(fraction_outside, "f47bbb26", kPrefix, "a fraction outside [0, 1], which it cannot be, left out: ") \
  X(phase_busy_over_step, "e1d520bf", kPrefix, "a phase busier on the GPU than its step, left out: ") \
  X(nvml_not_read, "d477a343", kWhole, "NVML is not read") \
  X(phase_over_step, "7c1ae39c", kPrefix, "phase scopes longer than their step: '")

/// A reason's id.
enum class Reason : uint16_t {
#define STEPTRACE_REASON_ID(id, code, match, sentence) id,
  STEPTRACE_REASONS(STEPTRACE_REASON_ID)
#undef STEPTRACE_REASON_ID
};

struct ReasonRow {
  Reason id;
  const char* name;      // the id as written in the table
  const char* code;      // 8 hex digits, stable
  reason_row::Match match;
  const char* sentence;  // the whole sentence, or (kPrefix) its fixed start
};

/// Every row, in the table's order.
inline const std::vector<ReasonRow>& reason_rows() {
  using namespace reason_row;
  // Never destroyed (docs/architecture.md, "statics"): read by the exit hook's last lines.
  static const std::vector<ReasonRow>* rows = new std::vector<ReasonRow>{
#define STEPTRACE_REASON_ROW(id, code, match, sentence) {Reason::id, #id, code, match, sentence},
      STEPTRACE_REASONS(STEPTRACE_REASON_ROW)
#undef STEPTRACE_REASON_ROW
  };
  return *rows;
}

/// A row's sentence (a kPrefix row's start: the producer appends its detail).
inline const char* reason_text(Reason r) { return reason_rows()[static_cast<std::size_t>(r)].sentence; }
/// A kPrefix row's sentence with its detail.
inline std::string reason_text(Reason r, std::string_view detail) {
  std::string s = reason_text(r);
  s.append(detail.data(), detail.size());
  return s;
}

/// The row a written sentence is: the row whose sentence it is, else the longest kPrefix row it starts
/// with; nullptr: none (a reason not in the table).
inline const ReasonRow* reason_of(std::string_view text) {
  struct Index {
    std::unordered_map<std::string_view, const ReasonRow*> whole;
    std::vector<std::pair<std::string_view, const ReasonRow*>> prefixes;  // longest first
  };
  static const Index* index = [] {  // never destroyed, as reason_rows()
    auto* ix = new Index;
    for (const ReasonRow& r : reason_rows()) {
      if (r.match == reason_row::kWhole) ix->whole.emplace(r.sentence, &r);
      else ix->prefixes.emplace_back(r.sentence, &r);
    }
    std::sort(ix->prefixes.begin(), ix->prefixes.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    return ix;
  }();
  if (const auto it = index->whole.find(text); it != index->whole.end()) return it->second;
  for (const auto& [start, row] : index->prefixes)
    if (text.substr(0, start.size()) == start) return row;
  return nullptr;
}

STEPTRACE_END_NAMESPACE  // steptrace
