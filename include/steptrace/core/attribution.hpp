// steptrace/core/attribution.hpp - GPU records -> (step, phase) by correlation id, and the per-step,
// per-phase GPU metrics: kernel time, busy time (interval union), SM efficiency, occupancy, copies,
// NCCL and exposed communication, top kernels (the results' types and interval measures are in
// step_gpu.hpp). Pure C++17; tested with synthetic records.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu_records.hpp"
#include "intervals.hpp"
#include "plausibility.hpp"
#include "nccl_names.hpp"
#include "step_gpu.hpp"
#include "step_keys.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Joins launches and GPU records by correlation id and turns a finished step into StepGpu.
/// Not thread-safe: one owner (the background thread).
class Attributor {
 public:
  explicit Attributor(std::size_t top_n = 5, std::size_t max_records_per_step = 1 << 20)
      : top_n_(top_n), max_records_(max_records_per_step) {}

  void add_launch(const LaunchRecord& l) {
    if (l.outer_correlation != 0) {  // nested driver call: an alias of the runtime call
      alias_[l.correlation] = l.outer_correlation;
      return;
    }
    if (l.discard) {  // its records are read only to settle an earlier graph launch: dropped quietly
      if (l.failed) return;
      launches_[l.correlation] = Where{l.step, l.phase, l.enter_ns, 0, true, l.tid, false, l.graph};
      // A settling graph launch's own records come out at the graph's next launch with records on,
      // possibly many steps later, after its step's ids are forgotten: remembered apart (bounded).
      if (l.graph && discard_graphs_.insert(l.correlation).second) {
        discard_graph_order_.push_back(l.correlation);
        if (discard_graph_order_.size() > kMaxDiscardGraphs) {
          discard_graphs_.erase(discard_graph_order_.front());
          discard_graph_order_.erase(discard_graph_order_.begin());
        }
      }
      return;
    }
    if (l.failed) {  // no record will come for it
      auto it = pending_.find(l.step);
      if (it != pending_.end()) it->second.expected.erase(l.correlation);
      return;
    }
    if (reporting_step_of_key(l.step) < emitted_below_) return;  // the line that reports it is already out
    if (l.step < 0 && launches_.size() >= max_records_) return;  // no step ever opened: stay bounded
    launches_[l.correlation] = Where{l.step, l.phase, l.enter_ns, 0, false, l.tid, l.window, l.graph};
    max_launch_id_ = std::max(max_launch_id_, l.correlation);
    Pending& p = pending_[l.step];
    if (!l.window) p.expected.insert(l.correlation);  // a switch's launch: its record may not come
    if (l.graph) p.graph_launches = true;
  }

  /// A launch staged as expected whose call was still in flight on another thread when records went
  /// off (GpuDrain::windowed): its record may not come, so its step stops waiting for it; a record
  /// that comes is still attributed.
  void make_window(uint32_t correlation) {
    auto it = launches_.find(correlation);
    if (it == launches_.end() || it->second.window) return;
    it->second.window = true;
    auto p = pending_.find(it->second.step);
    if (p == pending_.end()) return;
    p->second.expected.erase(correlation);
    p->second.seen.erase(correlation);  // a record already in no longer counts against expected
  }

  /// Graph launches whose records may be overwritten by an untraced replay (sampled attribution):
  /// their records delivered after `u.after_ns` are excluded (Implausible::graph_replayed_untraced).
  void add_unsettled(const UnsettledGraphs& u) {
    for (uint32_t corr : u.correlations) {
      auto it = launches_.find(corr);
      if (it != launches_.end()) it->second.suspect_after_ns = u.after_ns;
    }
  }

  void add_kernel(const KernelRecord& k) { place(k, &Pending::kernels); }
  void add_copy(const CopyRecord& c) { place(c, &Pending::copies); }

  /// Whether every launch of `step` has produced a record (and, for graph launches, a later step's
  /// record has been seen, since a graph's kernels share one correlation id). `drained`: the device
  /// has finished and every record has been flushed (stop()), so a graph needs no later witness.
  bool is_complete(int64_t step, bool drained = false) const {
    auto it = pending_.find(step);
    if (it == pending_.end()) return true;
    const Pending& p = it->second;
    if (p.seen.size() < p.expected.size()) return false;
    return !p.graph_launches || drained || latest_record_step_ > step;
  }

  uint32_t missing_launches(int64_t step) const {
    auto it = pending_.find(step);
    if (it == pending_.end()) return 0;
    return static_cast<uint32_t>(it->second.expected.size() - std::min(it->second.expected.size(), it->second.seen.size()));
  }

  /// Launches of `step` whose records have not come in, by the phase that launched them (the stall
  /// watchdog's view of outstanding work).
  std::map<PhaseId, uint32_t> missing_by_phase(int64_t step) const {
    std::map<PhaseId, uint32_t> out;
    auto it = pending_.find(step);
    if (it == pending_.end()) return out;
    for (uint32_t corr : it->second.expected) {
      if (it->second.seen.count(corr)) continue;
      auto w = launches_.find(corr);
      ++out[w == launches_.end() ? kNoPhase : w->second.phase];
    }
    return out;
  }
  uint32_t launches_of(int64_t step) const {
    auto it = pending_.find(step);
    return it == pending_.end() ? 0 : static_cast<uint32_t>(it->second.expected.size());
  }

  /// Computes and removes `step`'s metrics. Steps are taken in increasing order. `keep`, when given,
  /// receives the step's records (those the sums were made of).
  StepGpu take(int64_t step, bool drained = false, StepActivity* keep = nullptr) {
    StepGpu g;
    g.complete = is_complete(step, drained);
    g.missing_launches = missing_launches(step);
    if (first_take_) {  // the first line carries what was launched before the first step
      auto before = pending_.find(-1);
      if (before != pending_.end()) {
        for (const auto& k : before->second.kernels) g.before_first_step_ns += k.record.end_ns - k.record.start_ns;
        for (const auto& c : before->second.copies) g.before_first_step_ns += c.record.end_ns - c.record.start_ns;
        g.before_first_step_records =
            static_cast<uint32_t>(before->second.kernels.size() + before->second.copies.size());
        pending_.erase(before);
      }
    }
    first_take_ = false;
    auto it = pending_.find(step);
    if (it != pending_.end()) {
      const std::set<uint64_t> broken = overcommitted_streams(it->second);
      fill(it->second, g, broken);
      if (keep) {  // what the sums were made of: without the records left out as overcommitted
        for (auto& r : it->second.kernels)
          if (!excluded_as_overcommitted(r, broken)) keep->kernels.push_back(std::move(r));
        for (auto& r : it->second.copies)
          if (!excluded_as_overcommitted(r, broken)) keep->copies.push_back(std::move(r));
      }
      pending_.erase(it);
    }
    g.late_records = std::exchange(late_records_, 0);
    g.unattributed_records = std::exchange(unattributed_, 0);
    g.launched_untraced_records = std::exchange(launched_untraced_, 0);
    close_step(step);
    return g;
  }

  /// A step that was not traced (sampled attribution): whatever was filed under it is dropped and
  /// later records of it count as late. Steps are skipped or taken in increasing order.
  void skip(int64_t step) {
    pending_.erase(step);
    if (step > 0) pending_.erase(between_steps_key(step - 1));
    if (first_take_) pending_.erase(-1);
    first_take_ = false;
    close_step(step);
  }

  /// Whether GPU work was launched after `after_step`'s scope ended and before the next step began
  /// (records on: the step was traced), and whether all of its records are in.
  bool has_between(int64_t after_step) const { return pending_.count(between_steps_key(after_step)) > 0; }
  bool between_complete(int64_t after_step, bool drained = false) const {
    auto it = pending_.find(between_steps_key(after_step));
    return it == pending_.end() || it->second.seen.size() >= it->second.expected.size() || drained;
  }

  /// Takes the work launched between `after_step` and the next step (call before taking or skipping
  /// the next step, or at the end for the last step); nullopt when none was launched with records on.
  std::optional<BetweenGpu> take_between(int64_t after_step) {
    auto it = pending_.find(between_steps_key(after_step));
    if (it == pending_.end()) return std::nullopt;
    StepGpu g;
    fill(it->second, g, overcommitted_streams(it->second));
    BetweenGpu b;
    b.busy_ns = g.busy_ns;
    b.kernel_ns = g.kernel_ns;
    b.kernels = g.kernels;
    b.complete = it->second.seen.size() >= it->second.expected.size() && g.complete;
    b.missing_launches = static_cast<uint32_t>(it->second.expected.size() -
                                               std::min(it->second.expected.size(), it->second.seen.size()));
    b.excluded_records = g.excluded_records;
    for (const auto& [id, pg] : g.phases) {
      for (const auto& c : pg.copies) {
        b.copies += static_cast<uint32_t>(c.count);
        b.copy_bytes += c.bytes;
      }
      for (const auto& t : pg.top_kernels) {
        auto same = std::find_if(b.top_kernels.begin(), b.top_kernels.end(), [&](const TopKernel& x) { return x.name == t.name; });
        if (same == b.top_kernels.end()) {
          b.top_kernels.push_back(t);
        } else {  // one name launched under several phases
          const int64_t total = same->total_ns + t.total_ns;
          same->sm_efficiency = total > 0 ? (same->sm_efficiency * static_cast<double>(same->total_ns) +
                                             t.sm_efficiency * static_cast<double>(t.total_ns)) / static_cast<double>(total)
                                          : 0;
          same->total_ns = total;
          same->calls += t.calls;
        }
      }
    }
    std::sort(b.top_kernels.begin(), b.top_kernels.end(), [](const TopKernel& x, const TopKernel& y) { return x.total_ns > y.total_ns; });
    if (b.top_kernels.size() > top_n_) b.top_kernels.resize(top_n_);
    pending_.erase(it);
    return b;
  }

  /// CUPTI was attached again and numbers correlation ids from 1: every id seen so far is
  /// forgotten, so that a new launch is never joined to an old launch's step or alias. Records of
  /// the old ids still to come count as unattributed.
  void forget_correlations() {
    launches_.clear();
    max_launch_id_ = 0;
    alias_.clear();
    discard_graphs_.clear();
    discard_graph_order_.clear();
  }

  std::size_t pending_steps() const { return pending_.size(); }
  /// Records of discard launches (graph settling) dropped so far.
  uint64_t discarded_records() const { return discarded_; }

 private:
  struct Where {
    int64_t step;
    PhaseId phase;
    int64_t enter_ns;          // the launch call's entry (CUPTI clock), 0 = unknown
    int64_t suspect_after_ns;  // see add_unsettled; 0 = not suspect
    bool discard;
    int32_t tid;               // the launching thread, 0 = unknown
    bool window;               // launched at a trace switch: not expected (see LaunchRecord::window)
    bool graph;                // a CUDA graph launch
  };
  struct Pending {
    std::unordered_set<uint32_t> expected, seen;
    bool graph_launches = false;
    std::vector<Placed<KernelRecord>> kernels;
    std::vector<Placed<CopyRecord>> copies;
    uint64_t dropped = 0;
    uint64_t excluded[kImplausibleKinds] = {};
    uint32_t launch_timed = 0, launch_waited = 0;
  };

  /// Files a record under its launch's step and phase, within the per-step bound.
  /// Impossible records are counted and left out of every sum (their launch still counts as seen).
  template <class R>
  void place(const R& record, std::vector<Placed<R>> Pending::*list) {
    const Where* where = nullptr;
    Pending* p = route(record.correlation, &where);
    if (!p) return;
    const Implausible why = check_record(record.start_ns, record.end_ns, where->enter_ns, record.delivered_ns,
                                         where->suspect_after_ns);
    if (why != Implausible::none) {
      ++p->excluded[static_cast<int>(why) - 1];
      return;
    }
    if (p->kernels.size() + p->copies.size() >= max_records_) {
      ++p->dropped;
      return;
    }
    if (where->enter_ns > 0) {
      ++p->launch_timed;
      p->launch_waited += record.start_ns - where->enter_ns < kHostBoundStartNs;
    }
    (p->*list).push_back({record, where->phase, where->enter_ns, where->tid, where->graph});
  }

  uint32_t resolve(uint32_t corr) const {
    auto a = alias_.find(corr);
    return a == alias_.end() ? corr : a->second;
  }

  Pending* route(uint32_t corr, const Where** where) {
    const uint32_t id = resolve(corr);
    auto it = launches_.find(id);
    if (it == launches_.end()) {
      if (discard_graphs_.count(id)) ++discarded_;
      else if (id < max_launch_id_) ++launched_untraced_;  // called before a launch that was seen: records were off
      else ++unattributed_;
      return nullptr;
    }
    const int64_t step = it->second.step;
    *where = &it->second;
    if (it->second.discard) {  // a later step's record: witness for graph completeness, then dropped
      latest_record_step_ = std::max(latest_record_step_, step);
      ++discarded_;
      return nullptr;
    }
    if (reporting_step_of_key(step) < emitted_below_) {
      ++late_records_;
      return nullptr;
    }
    latest_record_step_ = std::max(latest_record_step_, step);
    Pending& p = pending_[step];
    if (!it->second.window) p.seen.insert(id);  // seen counts against expected (is_complete)
    return &p;
  }

  /// `step`'s line is out: its late records are counted as late; ids older than two steps are
  /// forgotten (two are kept for graph kernels that finish late).
  void close_step(int64_t step) {
    emitted_below_ = std::max(emitted_below_, step + 1);
    forget_before(step - 2);
  }

  void forget_before(int64_t step) {
    for (auto it = launches_.begin(); it != launches_.end();) {
      if (reporting_step_of_key(it->second.step) < step) {
        it = launches_.erase(it);
      } else {
        ++it;
      }
    }
    // Aliases whose runtime id is gone.
    for (auto it = alias_.begin(); it != alias_.end();)
      it = launches_.count(it->second) ? std::next(it) : alias_.erase(it);
  }

  void fill(const Pending& p, StepGpu& g, const std::set<uint64_t>& broken) const {
    std::vector<Interval> all, comm, compute;
    std::vector<WeightedInterval> weighted_all;
    std::map<PhaseId, std::vector<Interval>> phase_busy;
    std::map<PhaseId, std::vector<WeightedInterval>> phase_weighted;
    std::map<PhaseId, double> occupancy_weighted;
    std::map<PhaseId, std::map<std::string_view, TopKernel>> by_name;
    std::map<PhaseId, std::map<std::string_view, double>> name_eff_weighted;
    uint64_t& broken_records = g.excluded[static_cast<int>(Implausible::stream_overcommitted) - 1];
    std::set<uint64_t> streams;
    std::map<PhaseId, std::set<uint64_t>> phase_streams;
    std::map<uint32_t, std::vector<Interval>> stream_busy;  // not NCCL's: the streams the step's own work ran on
    for (const auto& placed : p.kernels) {
      if (excluded_as_overcommitted(placed, broken)) {
        ++broken_records;
        continue;
      }
      const auto& [k, phase, launch_ns, launch_tid, from_graph] = placed;
      streams.insert(stream_key(k.device, k.stream));
      phase_streams[phase].insert(stream_key(k.device, k.stream));
      const int64_t d = k.end_ns - k.start_ns;
      PhaseGpu& pg = g.phases[phase];
      pg.kernel_ns += d;
      ++pg.kernels;
      g.kernel_ns += d;
      ++g.kernels;
      all.emplace_back(k.start_ns, k.end_ns);
      phase_busy[phase].emplace_back(k.start_ns, k.end_ns);
      weighted_all.push_back({k.start_ns, k.end_ns, k.sm_efficiency});
      phase_weighted[phase].push_back({k.start_ns, k.end_ns, k.sm_efficiency});
      occupancy_weighted[phase] += k.occupancy * static_cast<double>(d);
      if (is_nccl_kernel(k.name)) {
        g.nccl_ns += d;
        auto& c = g.nccl_collectives[nccl_collective(k.name)];
        c.first += d;
        ++c.second;
        comm.emplace_back(k.start_ns, k.end_ns);
      } else {
        compute.emplace_back(k.start_ns, k.end_ns);
        stream_busy[k.stream].emplace_back(k.start_ns, k.end_ns);
      }
      TopKernel& t = by_name[phase][k.name];
      t.total_ns += d;
      ++t.calls;
      name_eff_weighted[phase][k.name] += k.sm_efficiency * static_cast<double>(d);
    }
    for (const auto& placed : p.copies) {
      if (excluded_as_overcommitted(placed, broken)) {
        ++broken_records;
        continue;
      }
      const auto& [c, phase, launch_ns, launch_tid, from_graph] = placed;
      PhaseGpu& pg = g.phases[phase];
      CopyTotals& t = pg.copies[static_cast<int>(c.kind)];
      t.bytes += c.bytes;
      t.total_ns += c.end_ns - c.start_ns;
      ++t.count;
      all.emplace_back(c.start_ns, c.end_ns);
      phase_busy[phase].emplace_back(c.start_ns, c.end_ns);
      stream_busy[c.stream].emplace_back(c.start_ns, c.end_ns);
    }
    g.busy_ns = union_length(all);
    for (auto& [stream, busy] : stream_busy) g.stream_busy_ns[stream] = union_length(std::move(busy));
    g.streams = static_cast<uint32_t>(streams.size());
    g.sm_efficiency = time_weighted_sm_efficiency(weighted_all);
    g.nccl_exposed_ns = exposed_time(comm, compute);
    for (int i = 0; i < kImplausibleKinds; ++i) {
      g.excluded[i] += p.excluded[i];
      g.excluded_records += g.excluded[i];
    }
    g.launch_timed = p.launch_timed;
    g.launch_waited = p.launch_waited;
    for (auto it = g.phases.begin(); it != g.phases.end();) {
      auto& [phase, pg] = *it;
      pg.busy = merge_intervals(std::move(phase_busy[phase]));
      pg.busy_ns = 0;
      for (const auto& [b, e] : pg.busy) pg.busy_ns += e - b;
      int64_t duration_sum = pg.kernel_ns;
      for (const auto& c : pg.copies) duration_sum += c.total_ns;
      if (!pg.busy.empty() &&
          !busy_time_plausible(pg.busy_ns, pg.busy.front().first, pg.busy.back().second, duration_sum)) {
        ++g.implausible_phases;  // never published: the sums above are broken
        it = g.phases.erase(it);
        continue;
      }
      pg.streams = static_cast<uint32_t>(phase_streams[phase].size());
      pg.sm_efficiency = time_weighted_sm_efficiency(phase_weighted[phase]);
      pg.occupancy = pg.kernel_ns > 0 ? occupancy_weighted[phase] / static_cast<double>(pg.kernel_ns) : 0;
      std::vector<TopKernel> top;
      for (auto& [name, t] : by_name[phase]) {
        t.name = std::string(name);
        t.sm_efficiency = t.total_ns > 0 ? name_eff_weighted[phase][name] / static_cast<double>(t.total_ns) : 0;
        top.push_back(t);
      }
      std::sort(top.begin(), top.end(), [](const TopKernel& a, const TopKernel& b) { return a.total_ns > b.total_ns; });
      if (top.size() > top_n_) top.resize(top_n_);
      pg.top_kernels = std::move(top);
      ++it;
    }
    if (p.dropped) g.complete = false;
  }

  /// The streams whose records in this step cannot all be right (stream_records_plausible). The
  /// records on them that a CUDA graph launch produced are left out of the step's sums and counted as
  /// stream_overcommitted: what a graph replayed with records off leaves (each kernel "lasting" until
  /// the replay). Other records there are kept (no known failure produces them); a phase whose kernel
  /// time still cannot fit its streams is left out by the line's invariants (core/line_invariants.hpp).
  /// A stream is named by its device and CUPTI's stream id (ids are per context).
  static uint64_t stream_key(uint32_t device, uint32_t stream) { return uint64_t{device} << 32 | stream; }
  static std::set<uint64_t> overcommitted_streams(const Pending& p) {
    struct Extent {
      int64_t first = 0, last = 0, sum = 0;
      std::size_t records = 0;
    };
    std::map<uint64_t, Extent> by_stream;
    const auto add = [&](uint64_t stream, int64_t b, int64_t e) {
      Extent& x = by_stream[stream];
      x.first = x.records ? std::min(x.first, b) : b;
      x.last = x.records ? std::max(x.last, e) : e;
      x.sum += e - b;
      ++x.records;
    };
    for (const auto& k : p.kernels) add(stream_key(k.record.device, k.record.stream), k.record.start_ns, k.record.end_ns);
    for (const auto& c : p.copies) add(stream_key(c.record.device, c.record.stream), c.record.start_ns, c.record.end_ns);
    std::set<uint64_t> broken;
    for (const auto& [stream, x] : by_stream)
      if (!stream_records_plausible(x.sum, x.first, x.last, x.records)) broken.insert(stream);
    return broken;
  }

  template <class R>
  static bool excluded_as_overcommitted(const Placed<R>& r, const std::set<uint64_t>& broken) {
    return r.from_graph && !broken.empty() && broken.count(stream_key(r.record.device, r.record.stream));
  }

  std::size_t top_n_;
  std::size_t max_records_;
  std::unordered_map<uint32_t, Where> launches_;
  std::unordered_map<uint32_t, uint32_t> alias_;
  std::map<int64_t, Pending> pending_;
  int64_t emitted_below_ = 0;
  int64_t latest_record_step_ = -1;
  uint64_t late_records_ = 0, unattributed_ = 0, discarded_ = 0, launched_untraced_ = 0;
  uint32_t max_launch_id_ = 0;  // the highest correlation id of a launch seen (ids restart at an attach)
  static constexpr std::size_t kMaxDiscardGraphs = 4096;
  std::unordered_set<uint32_t> discard_graphs_;  // settling graph launches (see add_launch)
  std::vector<uint32_t> discard_graph_order_;    // oldest first, for the bound
  bool first_take_ = true;
};

STEPTRACE_END_NAMESPACE  // steptrace
