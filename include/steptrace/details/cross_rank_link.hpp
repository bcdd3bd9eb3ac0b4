// steptrace/details/cross_rank_link.hpp - the runtime's end of the cross-rank exchange: the training
// thread posts a closed step's summary every N steps, the background thread collects what completed
// and hands each gathered view to the line of its own step (core/cross_rank.hpp has the semantics).
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../core/capture_request.hpp"
#include "../core/cross_rank.hpp"
#include "../core/records.hpp"
#include "../core/step_line.hpp"
#include "../exchange.hpp"
#include "log.hpp"

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

  /// Training thread: every `every` steps, start gathering the closed step's summary.
  void post(const StepRecord& r) {
    if (!has_exchange_.load(std::memory_order_acquire)) return;  // the common case: no lock on the training thread
    std::lock_guard<std::mutex> lock(mutex_);
    if (!exchange_ || r.index % static_cast<uint64_t>(every_) != 0) return;
    RankSummary sum;
    sum.rank = exchange_->rank();
    sum.step = static_cast<int64_t>(r.index);
    // The step's own time (to its scope's end, or where its training work was marked done: Python's
    // watch() and callbacks, whose steps run on to the next one's start), not to the next step's start: a
    // loop that waits for the slow rank between steps (a `loss.item()` after the optimizer step) would
    // otherwise give every rank the same step and the same work, and the wait would hide the culprit. Built-in phases tagged between
    // the previous step and this one, outermost (a C++ loop's input before its TRACE_STEP; not a forward
    // inside an evaluation's scope), count as this step's work; what a rank does outside its steps
    // untagged is in no summary (docs/schema.md, `cross_rank`).
    sum.step_ms = ns_to_ms(r.work_end_or_own_ns() - r.begin_ns);
    for (const auto& sp : r.spans)
      if (sp.phase < kSummaryPhases && sp.on_step_thread && !sp.nested_in_same)
        sum.phase_ms[sp.phase] += ns_to_ms(sp.end_ns - sp.begin_ns);
    if (r.prev_scope_end_ns > 0)
      for (const auto& sp : r.between_spans)
        if (sp.phase < kSummaryPhases && sp.on_step_thread && sp.depth == 0) {
          const int64_t from = std::max(sp.begin_ns, r.prev_scope_end_ns), to = std::min(sp.end_ns, r.begin_ns);
          if (to <= from) continue;
          sum.phase_ms[sp.phase] += ns_to_ms(to - from);
          sum.step_ms += ns_to_ms(to - from);
        }
    sum.valid = true;
    sum.ask_tag = ask_.first;
    sum.ask_steps = ask_.second;
    sum.lag_steps = lag_steps_;
    sum.every = every_;
    std::vector<float> wire(kSummaryFloats);
    to_floats(sum, wire.data());
    const std::string err = exchange_->post(wire);
    if (!err.empty()) {
      null_reason_ = "cross-rank exchange stopped: " + err;
      warn_once("cross_rank.post", null_reason_);
      exchange_.reset();
      has_exchange_.store(false, std::memory_order_release);
      return;
    }
    posted_.push_back(sum.step);
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

  /// Background thread, for a line that is written: the oldest view of its own step or an earlier
  /// one (lines may lag the exchange; a view never lands on an earlier step's line), or why none.
  void fill_line(uint64_t step, int rank, StepLineInput& in) {
    std::lock_guard<std::mutex> lock(mutex_);
    in.cross_rank_every = every_;  // the cadence the views were gathered at, also after the exchange stopped
    if (!exchange_ && null_reason_.empty())
      in.cross_rank_null_reason = "no communicator handed to steptrace (C++: steptrace::enable_cross_rank, steptrace/nccl.hpp; "
                                  "Python: steptrace.cross_rank()); "
                                  "aggregate the ranks' lines by rank in the dashboard instead";
    else if (!exchange_)
      in.cross_rank_null_reason = null_reason_;
    else if (rank != 0)
      in.cross_rank_null_reason = "rank 0's line carries the cross-rank view";
    else if (views_.empty())
      in.cross_rank_null_reason = "no exchange completed since the previous line";
    else if (views_.front().step > static_cast<int64_t>(step))
      in.cross_rank_null_reason = "the next gathered view is of a later step (it waits for that step's line)";
    if (rank == 0 && !views_.empty() && views_.front().step <= static_cast<int64_t>(step)) {
      in.cross_rank = std::move(views_.front());
      views_.pop_front();
    }
  }

 private:
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
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
