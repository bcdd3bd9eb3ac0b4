// steptrace/details/cross_rank_link.hpp - the runtime's end of the cross-rank exchange: the training
// thread adds every closed step to a window and posts the window's summary every N steps, the
// background thread collects what completed and hands each gathered view to the line of its own step
// (core/cross_rank.hpp has the semantics).
//
// The collective wait in a summary is the mean over the window's steps that measured it, from the best
// evidence the window has (kWaitPreference): the measures taken every step first, so that every window
// of every rank reads the same kind. Python's backward_end events (steptrace/_waits.py: a CUDA event when
// backward's kernels are all launched, before the framework's end-of-backward callbacks, and one after
// backward returns; the GPU time between them is the collectives' tail the stream waited for), the
// `nccl` phase's span in the stream markers (a collective on the marked stream: a C++ loop's), a traced
// step's exposed NCCL time (the background thread, from its records; its lines reach the window late and
// in bursts of older steps), and last the `nccl` phase's host time (a loop that syncs there), which also
// holds the rank's wait for its own GPU: on examples/dp_train a host delay in backward, hidden under the
// GPU's backward kernels, left the step at 6.19 -> 6.20 ms and the trace read 0.5 ms of exposed NCCL on
// both ranks (balanced, the truth) while the host time read 1.9 ms more on the rank not delayed.
// On 2 H200s backward_end and the trace
// agree under DDP (a rank slowed 20 ms: 35.8 vs 38.4 ms, median per step, benchmarks/dp_culprit.py);
// under FSDP eager, host-bound, the trace's exposed NCCL time counts the victim's GPU idle behind
// all-gathers whose host is still launching (120 ms of a 184 ms step, a 20 ms planted delay) while
// backward_end read 16 ms. The evidence lags the steps by the GPU's lag and the background thread's (a
// few steps; at 6 ms steps 16-30): the window's mean is of the waits measured while its steps ran, in a
// steady job the same steps' neighbours; a window no GPU measure reached carries the rank's latest ones
// (window_summary), so a ms-scale loop is not judged on the host's time between its batches of evidence.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/capture_request.hpp"
#include "../core/cross_rank.hpp"
#include "../core/records.hpp"
#include "../core/step_line.hpp"
#include "../exchange.hpp"
#include "log.hpp"
#include "../core/reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class CrossRankLink {
 public:
  static constexpr std::size_t kMaxViews = 64;

  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    exchange_.reset();  // its destructor waits (bounded) for its own stream, never for the job's
    has_exchange_.store(false, std::memory_order_release);
    has_run_id_.store(false, std::memory_order_relaxed);
    agreed_run_id_.clear();
    posted_.clear();
    views_.clear();
    null_reason_.clear();
    every_ = 0;
    ask_ = {};
    lag_steps_ = 0;
    planned_.clear();
    plans_.clear();
    window_ = {};
    own_.clear();
    for (auto& r : recent_) r.clear();
    last_step_ = -1;
  }

  /// Background thread: whether summaries are exchanged (a capture request can then be agreed on).
  bool exchanging() const { return has_exchange_.load(std::memory_order_acquire); }
  /// Background thread: the request this rank holds, carried in its summaries until a plan names it.
  /// False when that tag was planned already (the plan came through the exchange first).
  bool ask(uint32_t tag, int steps) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(planned_.begin(), planned_.end(), tag) != planned_.end()) return false;
    ask_ = {tag, steps};
    return true;
  }
  /// Background thread: whether the plan of `tag` was agreed and is not taken yet (take_plans() gives it
  /// at the next look): a rank whose peer asked first learns the plan before it reads the request.
  bool plan_pending(uint32_t tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::any_of(plans_.begin(), plans_.end(), [tag](const CapturePlan& p) { return p.tag == tag; });
  }
  /// Background thread: a request given up on (the exchange did not agree in time).
  void withdraw(uint32_t tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ask_.first == tag) ask_ = {};
  }
  /// Background thread: the capture plans agreed since the last call (the same on every rank).
  std::vector<CapturePlan> take_plans() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(plans_, {});
  }

  /// Training thread: the communicator's side of the exchange, handed over once per run.
  bool set(std::unique_ptr<CrossRankExchange> exchange, int every) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exchange_) {
      warn_once("cross_rank.twice", "enable_cross_rank() called twice: the second call is ignored");
      return false;
    }
    every_ = every;
    exchange_ = std::move(exchange);
    agreed_run_id_.clear();
    window_ = {};
    own_.clear();
    for (auto& r : recent_) r.clear();
    last_step_ = -1;
    has_exchange_.store(true, std::memory_order_release);
    posted_.clear();
    null_reason_.clear();
    return true;
  }

  /// Training thread, with set(): rank 0's run_id, for the background thread to adopt.
  void set_agreed_run_id(std::string id) {
    std::lock_guard<std::mutex> lock(mutex_);
    agreed_run_id_ = std::move(id);
    has_run_id_.store(true, std::memory_order_release);
  }
  /// Background thread: the agreed run_id once, "" otherwise.
  std::string take_agreed_run_id() {
    if (!has_run_id_.load(std::memory_order_acquire)) return {};
    std::lock_guard<std::mutex> lock(mutex_);
    has_run_id_.store(false, std::memory_order_relaxed);
    return std::exchange(agreed_run_id_, std::string());
  }

  /// Background thread (or Python's training thread): one step's collective wait, measured.
  /// `step`: the step it measured (a line's); -1: the latest step closed (Python's backward_end, read
  /// within a step or two).
  void add_wait(double ms, WaitBasis basis, int64_t step = -1) {
    if (!has_exchange_.load(std::memory_order_acquire) || !(ms >= 0) || !std::isfinite(ms) || basis == WaitBasis::none) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto& w = window_.waits[static_cast<int>(basis)];
    w.first += ms;
    ++w.second;
    if (basis != WaitBasis::host_nccl) {  // GPU evidence, kept for the windows it reaches too late for
      auto& r = recent_[static_cast<int>(basis)];
      r.emplace_back(ms, step >= 0 ? step : last_step_);
      if (r.size() > kRecentWaits) r.pop_front();
    }
  }

  /// Training thread: every closed step joins the window; every `every` steps the window's summary is
  /// posted (gathered from every rank).
  void post(const StepRecord& r) {
    if (!has_exchange_.load(std::memory_order_acquire)) return;  // the common case: no lock on the training thread
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exchange_) return;
    add_step(r);
    if (r.index % static_cast<uint64_t>(every_) != 0) return;
    RankSummary sum = window_summary();
    sum.rank = exchange_->rank();
    sum.step = static_cast<int64_t>(r.index);
    sum.valid = sum.steps > 0;
    sum.ask_tag = ask_.first;
    sum.ask_steps = ask_.second;
    sum.lag_steps = lag_steps_;
    sum.every = every_;
    window_ = {};
    std::vector<float> wire(kSummaryFloats);
    to_floats(sum, wire.data());
    const std::string err = exchange_->post(wire);
    if (!err.empty()) {
      null_reason_ = reason_text(Reason::exchange_stopped, err);
      warn_once("cross_rank.post", null_reason_);
      exchange_.reset();
      has_exchange_.store(false, std::memory_order_release);
      return;
    }
    posted_.push_back(sum.step);
    own_.push_back(sum);
    if (own_.size() > kMaxViews) own_.pop_front();
  }

  /// Background thread: collects completed exchanges and aggregates them (kept for their lines);
  /// plans the captures they ask for. `current_step`: the step the training thread is in (its lag).
  void collect(int64_t current_step) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exchange_) return;
    std::vector<float> all;
    while (!posted_.empty() && exchange_->poll(all)) {
      const int64_t step = posted_.front();
      posted_.pop_front();
      const int world = exchange_->world_size();
      std::vector<RankSummary> ranks(static_cast<std::size_t>(world));
      for (int k = 0; k < world && static_cast<std::size_t>((k + 1) * kSummaryFloats) <= all.size(); ++k)
        ranks[static_cast<std::size_t>(k)] = from_floats(all.data() + k * kSummaryFloats, step);
      lag_steps_ = static_cast<int32_t>(std::clamp<int64_t>(current_step - step, 0, 1 << 20));
      if (auto plan = plan_capture(ranks, planned_)) {
        planned_.push_back(plan->tag);
        if (planned_.size() > kMaxPlanned) planned_.erase(planned_.begin());
        if (ask_.first == plan->tag) ask_ = {};
        plans_.push_back(std::move(*plan));
      }
      views_.push_back(aggregate_ranks(ranks, step));
      // Lines carry one view each, oldest first, and wait for the line of the view's step: 64 views
      // cover lines lagging 64 exchanges behind (they lag ~20 steps while the first lines wait).
      if (views_.size() > kMaxViews) views_.pop_front();
    }
  }

  /// Background thread, for a line that is written: the newest view of its own step or an earlier one
  /// (a view never lands on an earlier step's line), or why none.
  void fill_line(uint64_t step, int rank, StepLineInput& in) {
    std::lock_guard<std::mutex> lock(mutex_);
    in.cross_rank_every = every_;  // the cadence the views were gathered at, also after the exchange stopped
    std::string no_view;  // why this line has no view (set while it has none)
    if (!exchange_ && null_reason_.empty())
      no_view = reason_text(Reason::no_communicator);
    else if (!exchange_)
      no_view = null_reason_;
    else if (rank != 0)
      no_view = reason_text(Reason::view_on_rank0);
    else if (views_.empty())
      no_view = reason_text(Reason::no_exchange_yet);
    else if (views_.front().step > static_cast<int64_t>(step))
      no_view = reason_text(Reason::view_of_later_step);
    if (!no_view.empty()) in.cross_rank.unknown(no_view);
    // A line takes the newest view of its own step or an earlier one; older ones not yet on a line are
    // dropped (lines not written, log_every: a line never carries a view many exchanges old).
    const auto newest_upto = [step](auto& q) {
      while (q.size() > 1 && q[1].step <= static_cast<int64_t>(step)) q.pop_front();
    };
    if (rank == 0 && !views_.empty() && views_.front().step <= static_cast<int64_t>(step)) {
      newest_upto(views_);
      in.cross_rank = std::move(views_.front());
      views_.pop_front();
    }
    // Every rank's line: its own summary as posted, the newest of its step or an earlier one, the same way.
    if (!own_.empty() && own_.front().step <= static_cast<int64_t>(step)) {
      newest_upto(own_);
      in.rank_wait = std::move(own_.front());
      own_.pop_front();
    } else {
      in.rank_wait.unknown(!exchange_ && own_.empty() ? no_view  // set whenever there is no exchange
                           : reason_text(!own_.empty() ? Reason::summary_of_later_step : Reason::no_summary_posted));
    }
  }

 private:
  /// The steps closed since the last post: sums, and the waits measured per basis (sum, count).
  struct Window {
    int steps = 0;
    double step_ms = 0, untagged_ms = 0, between_ms = 0;
    double phase_ms[kSummaryPhases] = {};
    std::pair<double, int> waits[5] = {};
  };

  // One step into the window. The step runs to its scope's end or where its training work was marked
  // done (Python's watch() and callbacks, whose steps run on to the next one's start); what follows
  // until the next step (a `loss.item()`, a batch fetch watch() does not see, the loop's own code) is
  // its time between steps, as is the untagged time between a C++ loop's scopes. Built-in phases tagged
  // between the previous step and this one, outermost (a C++ loop's input before its TRACE_STEP; not a
  // forward inside an evaluation's scope), count as this step's work.
  void add_step(const StepRecord& r) {
    Window& w = window_;
    const int64_t work_end = r.work_end_or_own_ns();
    double step = ns_to_ms(work_end - r.begin_ns), tagged = 0, phases[kSummaryPhases] = {};
    for (const auto& sp : r.spans) {
      if (sp.phase >= kSummaryPhases || !sp.on_step_thread) continue;
      if (!sp.nested_in_same) phases[sp.phase] += ns_to_ms(sp.end_ns - sp.begin_ns);
      if (sp.depth == 0) {
        const int64_t from = std::max(sp.begin_ns, r.begin_ns), to = std::min(sp.end_ns, work_end);
        if (to > from) tagged += ns_to_ms(to - from);
      }
    }
    const double untagged = std::max(0.0, step - tagged);
    double between = ns_to_ms(r.own_end_ns() - work_end), between_tagged = 0;
    if (r.prev_scope_end_ns > 0) {
      for (const auto& sp : r.between_spans)
        if (sp.phase < kSummaryPhases && sp.on_step_thread && sp.depth == 0) {
          const int64_t from = std::max(sp.begin_ns, r.prev_scope_end_ns), to = std::min(sp.end_ns, r.begin_ns);
          if (to <= from) continue;
          phases[sp.phase] += ns_to_ms(to - from);
          between_tagged += ns_to_ms(to - from);
        }
      step += between_tagged;
      between += std::max(0.0, ns_to_ms(r.between_ns()) - between_tagged);
    }
    ++w.steps;
    last_step_ = static_cast<int64_t>(r.index);
    w.step_ms += step;
    w.untagged_ms += untagged;
    w.between_ms += std::max(0.0, between);
    for (int p = 0; p < kSummaryPhases; ++p) w.phase_ms[p] += phases[p];
    // A loop whose collective runs in its `nccl` phase: the host time there is the wait's last resort.
    if (phases[kSummaryCommPhase] > 0) {
      auto& h = w.waits[static_cast<int>(WaitBasis::host_nccl)];
      h.first += phases[kSummaryCommPhase];
      ++h.second;
    }
  }

  // The window's means, the wait by every kind of evidence it has (the view compares ranks on a kind
  // they all have; this rank's own line shows its best).
  RankSummary window_summary() const {
    RankSummary s;
    const Window& w = window_;
    s.steps = w.steps;
    if (w.steps == 0) return s;
    const double n = w.steps;
    s.step_ms = w.step_ms / n;
    s.untagged_ms = w.untagged_ms / n;
    s.between_ms = w.between_ms / n;
    for (int p = 0; p < kSummaryPhases; ++p) s.phase_ms[p] = w.phase_ms[p] / n;
    for (int b = 1; b <= 4; ++b) {
      if (w.waits[b].second > 0) {
        s.set_wait(static_cast<WaitBasis>(b), w.waits[b].first / w.waits[b].second, w.waits[b].second);
        continue;
      }
      // No new GPU measure in this window (the background thread reads a step's evidence once its line
      // is due, in batches: at 6 ms steps 16-30 steps late): the median of the rank's latest measures
      // of that kind (`every`, at least kCarryMeasures) that this window's iteration can hold, of steps
      // at most kCarrySteps before the window's last, so that the view can still compare the ranks on
      // GPU evidence rather than fall back on the host's time. A measure above the iteration (a late
      // burst) is never carried. The median, not the mean of the latest `every`: a carried measure
      // stands for the rank for up to kCarrySteps steps, and one step's outlier must not - a balanced
      // run's rank 0 waited 3.2 ms in the step after its peer's traced step, and that averaged with the
      // next step's 0.5 ms stood for it for 60 steps (thinned markers, no newer measure) beside the
      // peer's fresh 0.48 ms: 24 views of 100 named rank 1 slowest (H200, session 74, dp_skew).
      const auto& r = recent_[b];
      const double iteration = s.iteration_ms();
      const std::size_t want = std::max(static_cast<std::size_t>(std::max(every_, 1)), kCarryMeasures);
      std::vector<double> carried;
      for (auto it = r.rbegin(); it != r.rend() && carried.size() < want; ++it) {
        if (last_step_ - it->second > kCarrySteps) break;  // older measures came before it
        if (it->first <= iteration) carried.push_back(it->first);
      }
      if (!carried.empty())
        s.set_wait(static_cast<WaitBasis>(b), details::median_of(carried), static_cast<int32_t>(carried.size()));
    }
    return s;
  }

  std::mutex mutex_;  // posted on the training thread, polled by the background thread
  std::unique_ptr<CrossRankExchange> exchange_;
  std::atomic<bool> has_exchange_{false};  // exchange_ != nullptr, readable without the lock
  std::atomic<bool> has_run_id_{false};    // agreed_run_id_ waits for the background thread
  std::string agreed_run_id_;
  int every_ = 0;
  std::deque<int64_t> posted_;
  std::deque<CrossRankView> views_;  // gathered, not yet on a line
  std::string null_reason_;
  static constexpr std::size_t kMaxPlanned = 64;  // tags planned, remembered (every rank the same list)
  std::pair<uint32_t, int> ask_{0, 0};  // this rank's request not yet planned: tag, steps
  int32_t lag_steps_ = 0;               // steps the training thread was past the last gathered view
  std::vector<uint32_t> planned_;
  std::vector<CapturePlan> plans_;      // agreed, not yet taken by the worker
  Window window_;                       // the steps since the last post
  static constexpr std::size_t kRecentWaits = 64;  // GPU measures kept per kind
  static constexpr int64_t kCarrySteps = 64;       // how many steps before the window's last a carried one may be
  static constexpr std::size_t kCarryMeasures = 5;  // a carried wait is the median of the latest max(every, this)
  std::deque<std::pair<double, int64_t>> recent_[5];  // per kind: the measure and the step it measured
  int64_t last_step_ = -1;              // the index of the last step added
  std::deque<RankSummary> own_;         // this rank's posted summaries, not yet on its own lines
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
