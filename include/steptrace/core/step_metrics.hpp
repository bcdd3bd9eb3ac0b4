// steptrace/core/step_metrics.hpp - one step's host-side numbers, derived from a StepRecord.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clock.hpp"
#include "intervals.hpp"
#include "measured.hpp"
#include "metrics.hpp"
#include "reasons.hpp"
#include "records.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Host time of one phase within a step.
struct PhaseHostTime {
  int64_t total_ns = 0;          // sum of the phase's scopes (a scope nested in the same phase counts once)
  uint32_t count = 0;            // scopes closed in this step
  uint32_t other_thread_count = 0;  // of which opened on a thread other than the step's
  int64_t step_thread_ns = 0;    // the part of total_ns on the step's thread (its scopes run one after another)
  int64_t self_ns = 0;           // exclusive time: its scopes minus the scopes directly inside them (self_times)
};

struct HostStepMetrics {
  int64_t step_time_ns = 0;      // begin -> its own end (StepRecord::own_end_ns: scope end, or the next step's begin)
  int64_t interval_ns = 0;       // begin -> next step's begin (scope end for the last step): what runs between included
  int64_t scope_time_ns = 0;     // begin -> TRACE_STEP scope end
  int64_t untracked_ns = 0;      // step time not covered by any outermost phase on the step thread
  std::map<PhaseId, PhaseHostTime> phases;
  std::optional<double> tokens_per_second;
  std::optional<double> samples_per_second;
};

/// Each phase's exclusive ("self") time: every scope's duration minus the scopes opened directly inside
/// it on its thread (one level deeper, within its span), so that each instant of a thread counts in
/// one phase only, the innermost open one, and the phases' self times stack without counting a nested
/// phase twice (a `softmax` inside `forward` is not in forward's self time). Nesting is known per
/// thread: scopes of threads past the open-phase table's size (tid 0, off the step thread) are each
/// counted whole. A scope whose parent ends in a later step (the parent's line) or was dropped
/// (max_spans_per_step) subtracts from nothing: the parent's self time then holds it too.
inline void add_self_times(const std::vector<PhaseSpan>& spans, std::map<PhaseId, PhaseHostTime>& phases) {
  std::vector<const PhaseSpan*> order;
  order.reserve(spans.size());
  for (const auto& s : spans) order.push_back(&s);
  // By thread, then begin, outer scope first (a child may begin on its parent's clock reading), then
  // the one that ends first (an empty scope before a sibling that begins at the same reading).
  std::sort(order.begin(), order.end(), [](const PhaseSpan* a, const PhaseSpan* b) {
    if (a->on_step_thread != b->on_step_thread) return a->on_step_thread;
    if (a->tid != b->tid) return a->tid < b->tid;
    if (a->begin_ns != b->begin_ns) return a->begin_ns < b->begin_ns;
    if (a->depth != b->depth) return a->depth < b->depth;
    return a->end_ns < b->end_ns;
  });
  std::vector<std::pair<const PhaseSpan*, int64_t>> open;  // this thread's open scopes, their children's time
  const auto close_until = [&](const PhaseSpan* next) {
    while (!open.empty() && (!next || open.back().first->tid != next->tid ||
                             open.back().first->on_step_thread != next->on_step_thread ||
                             open.back().first->depth >= next->depth || open.back().first->end_ns <= next->begin_ns)) {
      const auto [s, children] = open.back();
      open.pop_back();
      phases[s->phase].self_ns += std::max<int64_t>(0, (s->end_ns - s->begin_ns) - children);
    }
  };
  for (const PhaseSpan* s : order) {
    close_until(s);
    if (!s->on_step_thread && s->tid == 0) {  // its thread is unknown: nothing to nest in
      phases[s->phase].self_ns += s->end_ns - s->begin_ns;
      continue;
    }
    if (!open.empty() && open.back().first->depth + 1 == s->depth)  // its parent: count the part inside it
      open.back().second += std::max<int64_t>(0, std::min(s->end_ns, open.back().first->end_ns) - s->begin_ns);
    open.emplace_back(s, 0);
  }
  close_until(nullptr);
}

/// Derives step, phase and untracked times. Pure: tested with synthetic records.
inline HostStepMetrics compute_host_metrics(const StepRecord& step) {
  HostStepMetrics m;
  m.step_time_ns = step.own_end_ns() - step.begin_ns;
  m.interval_ns = step.end_ns - step.begin_ns;
  m.scope_time_ns = (step.scope_end_ns > 0 ? step.scope_end_ns : step.end_ns) - step.begin_ns;
  std::vector<Interval> covered;
  for (const auto& span : step.spans) {
    auto& p = m.phases[span.phase];
    ++p.count;
    if (!span.on_step_thread) ++p.other_thread_count;
    if (!span.nested_in_same) p.total_ns += span.end_ns - span.begin_ns;
    if (!span.nested_in_same && span.on_step_thread) p.step_thread_ns += span.end_ns - span.begin_ns;
    if (span.on_step_thread && span.depth == 0)
      covered.push_back(clip({span.begin_ns, span.end_ns}, step.begin_ns, step.own_end_ns()));
  }
  m.untracked_ns = m.step_time_ns - union_length(std::move(covered));
  add_self_times(step.spans, m.phases);
  if (m.step_time_ns > 0) {
    const double seconds = static_cast<double>(m.step_time_ns) / 1e9;
    // A rate that overflows (tokens near 1e308) is left null; the line says why (write_time).
    if (step.tokens && std::isfinite(*step.tokens / seconds)) m.tokens_per_second = *step.tokens / seconds;
    if (step.samples && std::isfinite(*step.samples / seconds)) m.samples_per_second = *step.samples / seconds;
  }
  return m;
}

/// How the job splits the model: the degrees of Config::model_parallel and the world size.
struct ParallelSizes {
  int tensor = 1, pipeline = 1, context = 1;
  int world_size = 1;
  long long model_parallel() const { return static_cast<long long>(tensor) * pipeline * context; }
};

/// MFU with its inputs, or the reason it cannot be computed.
struct MfuResult {
  Measured<double> value{reason_text(Reason::flops_not_set)};
  bool above_one = false;  // a number above 1 is impossible: the FLOPs count or the peak is wrong
  ParallelSizes parallel;
  // world_size / (tensor x pipeline x context), or why the sizes do not give one
  Measured<int64_t> data_parallel_size{reason_text(Reason::parallel_not_read)};
  std::optional<double> tokens_per_second_per_gpu;   // tokens_per_second / (tensor x pipeline x context)
};

/// MFU under model parallelism, torchtitan's convention (pytorch/torchtitan, the trainer's throughput:
/// tps = tokens / (time x parallel_dims.non_data_parallel_size), mfu = num_flops_per_token x tps /
/// gpu_peak_flops; non_data_parallel_size = cp x tp x pp in torchtitan/distributed/parallel_dims.py).
/// A rank's `tokens` are those its data-parallel replica processed in the step (the local batch x
/// sequence length), which every GPU of the replica reports alike; the replica's tensor x pipeline x
/// context GPUs share that work, so one GPU's share is tokens / (t x p x c), and flops_per_token is the
/// whole model's. Summed over all ranks, tokens_per_second_per_gpu is the job's throughput. Expert
/// parallelism is no factor: experts are sharded within the data-parallel ranks, which each still
/// process their own tokens.
inline MfuResult compute_mfu(double flops_per_token, const std::optional<double>& tokens_per_second,
                             const PeakFlops& peak, const ParallelSizes& parallel = {}) {
  MfuResult r;
  r.parallel = parallel;
  const long long mp = parallel.model_parallel();
  if (mp >= 1 && parallel.world_size >= 1 && parallel.world_size % mp == 0) {
    r.data_parallel_size = static_cast<int64_t>(parallel.world_size / mp);
  } else {
    r.data_parallel_size.unknown(reason_text(Reason::model_parallel_not_dividing, std::to_string(parallel.tensor)) + " x pipeline " +
                             std::to_string(parallel.pipeline) + " x context " + std::to_string(parallel.context) +
                             " = " + std::to_string(mp) + ") does not divide world_size " +
                             std::to_string(parallel.world_size));
  }
  if (tokens_per_second && mp >= 1) r.tokens_per_second_per_gpu = *tokens_per_second / static_cast<double>(mp);
  if (!(flops_per_token > 0)) {
    r.value.unknown(reason_text(Reason::flops_not_set));
  } else if (!tokens_per_second) {
    r.value.unknown(reason_text(Reason::tokens_unknown));
  } else if (!peak.flops_per_second) {
    r.value.unknown(peak.null_reason);
  } else if (!r.data_parallel_size) {
    r.value.unknown(r.data_parallel_size.why() + ": the sizes are wrong, so is any MFU");
  } else {
    r.value = model_flops_utilization(flops_per_token, *r.tokens_per_second_per_gpu, *peak.flops_per_second);
    r.above_one = *r.value > 1.0;
  }
  return r;
}

STEPTRACE_END_NAMESPACE  // steptrace
