// steptrace/details/remote_captures.hpp - captures asked of a running job from outside
// (`steptrace-ctl capture --steps N`), through files in the trace directory; no daemon, no listener.
// Background thread only: nothing here runs on the training thread.
//
//   steptrace-live-<run_id>-r<rank>.json     written at start, when the run_id is agreed or the
//                                            exchange comes, and every 30 s; removed at the end
//   steptrace-request-<id>.json              the operator's request (core/capture_request.hpp)
//   steptrace-answer-<id>-r<rank>.json       this rank's answer: refused (why), waiting for the
//                                            exchange, or the steps it captures (and how they were
//                                            chosen); `<tag>` (the id's first 6 hex digits) in place of
//                                            the id while the rank knows the plan only from the exchange
//
// Trust model: whoever can create files in the trace directory can ask for captures. A request can
// only make steptrace trace and write traces where it writes them anyway, for at most
// kMaxRequestSteps steps, within trace_max_files, kMaxRequestsPerRun times a run at most. Request
// files are read with O_NOFOLLOW, only when regular, at most kMaxRequestBytes long, settled (unchanged
// for kSettleNs) and younger than kRequestStaleS; the directory is listed only when it changed.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/capture_request.hpp"
#include "../core/clock.hpp"
#include "../core/json_writer.hpp"
#include "launch_context.hpp"
#include "../core/printable.hpp"
#include "../core/step_keys.hpp"
#include "../sink/prometheus_textfile.hpp"
#include "cross_rank_link.hpp"
#include "flight_recorder.hpp"
#include "log.hpp"
#include "step_recorder.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class RemoteCaptures {
 public:
  static constexpr int64_t kScanEveryNs = 1'000'000'000;       // the trace directory is looked at once a second
  static constexpr std::size_t kMaxRemembered = 1024;          // request names already read
  static constexpr std::size_t kReadsPerScan = 16;             // request files read per scan, at most
  static constexpr int64_t kSettleNs = 200'000'000;            // a request file this recent may still be written
  static constexpr int64_t kAgreeTimeoutNs = 30'000'000'000;   // waiting for the exchange longer: own steps
  static constexpr int64_t kPresenceEveryNs = 30'000'000'000;  // the presence file's heartbeat
  static constexpr uint64_t kMaxRequestsPerRun = 32;           // planned per run, at most
  static constexpr uint64_t kMaxAnswers = 4096;                // answer files one run writes, at most

  struct Settings {
    bool on = false;  // remote_captures, with the flight recorder on
    std::string dir;
    int rank = 0, world_size = 1;
    int64_t pid = 0;
    std::string host, job_id, log_path;
  };
  struct Stats {
    uint64_t requests = 0, refused = 0, planned = 0, late = 0;
  };

  RemoteCaptures(Settings s, CrossRankLink* link, CaptureRequests* captures, StepRecorder* recorder)
      : s_(std::move(s)), link_(link), captures_(captures), recorder_(recorder) {}

  /// Background thread, every wake: the presence file, new requests (at most once a second), the
  /// plans the exchange agreed on, and a request that waited for the exchange too long.
  void poll(const std::string& run_id) {
    if (!s_.on || stopped_) return;
    const int64_t now = monotonic_ns();
    const bool exchanging = link_->exchanging();
    if (run_id != live_run_id_ || exchanging != live_exchange_ || now - live_written_ns_ >= kPresenceEveryNs)
      write_presence(run_id, exchanging, now);
    if (now - last_scan_ns_ >= kScanEveryNs) {
      last_scan_ns_ = now;
      scan(run_id);
    }
    for (CapturePlan& p : link_->take_plans()) schedule_plan(p, run_id);
    // The exchange stopped, or does not complete (a rank stuck): this rank's own next steps instead.
    if (waiting_ && (!exchanging || now - waiting_->since_ns > kAgreeTimeoutNs)) {
      const Waiting w = *waiting_;
      waiting_.reset();
      link_->withdraw(w.tag);
      schedule_own(w.tag, w.id, w.steps, run_id,
                   exchanging ? "the cross-rank exchange did not agree on steps within 30 s"
                              : "the cross-rank exchange stopped before it agreed on steps");
    }
  }

  /// At the end record: the presence file goes and is not written again; requests and answers stay
  /// for the operator.
  void stop() {
    stopped_ = true;
    if (!live_path_.empty()) ::unlink(live_path_.c_str());
    live_path_.clear();
  }

  const Stats& stats() const { return stats_; }

 private:
  struct Waiting {
    uint32_t tag = 0;
    std::string id;
    int steps = 0;
    int64_t since_ns = 0;
  };
  /// What this rank captures for a tag (to answer again under the request's id).
  struct Planned {
    std::string id;  // "" while known from the exchange only
    int64_t first = 0, last = 0;
    bool aligned = false, late = false;
    std::string how;
    std::vector<int> absent;
  };

  static int64_t current_training_step() { return last_step_of_key(current_step().load(std::memory_order_relaxed)); }

  void write_presence(const std::string& run_id, bool exchanging, int64_t now) {
    if (run_id != live_run_id_ && !live_path_.empty()) ::unlink(live_path_.c_str());
    live_path_.clear();
    live_run_id_ = run_id;
    live_exchange_ = exchanging;
    live_written_ns_ = now;
    JsonWriter w;
    w.begin_object().field("schema", "steptrace.live/1").field("run_id", run_id).field("rank", s_.rank);
    w.field("world_size", s_.world_size).field("pid", s_.pid).field("host", s_.host).field("job_id", s_.job_id);
    w.field("log", s_.log_path).field("trace_dir", s_.dir).field("exchange", exchanging);
    w.field("written_unix_s", static_cast<double>(unix_ns()) / 1e9).end_object();
    const std::string path = s_.dir + "/steptrace-live-" + run_id + "-r" + std::to_string(s_.rank) + ".json";
    const std::string err = sink::replace_file_atomically(path, w.str() + "\n");
    if (!err.empty()) {
      warn_once("remote_captures.live", "remote captures: cannot write '" + path + "' (" + err +
                                            "); steptrace-ctl will not list this process (requests still work)");
      return;
    }
    live_path_ = path;
  }

  void scan(const std::string& run_id) {
    // Listed only when the directory changed since (or a file was left for the next scan).
    struct stat dst {};
    if (::stat(s_.dir.c_str(), &dst) == 0) {
      const int64_t mtime = static_cast<int64_t>(dst.st_mtim.tv_sec) * 1'000'000'000 + dst.st_mtim.tv_nsec;
      if (mtime == dir_mtime_ns_ && !rescan_) return;
      dir_mtime_ns_ = mtime;
    }
    rescan_ = false;
    DIR* d = ::opendir(s_.dir.c_str());
    if (!d) {
      warn_once("remote_captures.dir", "remote captures: cannot list '" + s_.dir + "' (" + std::strerror(errno) +
                                           "); requests from steptrace-ctl are not seen");
      return;
    }
    const int64_t now_unix = unix_ns();
    std::vector<std::string> fresh;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("steptrace-request-", 0) != 0 || name.size() < 24 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
      if (seen_.count(name)) continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      if (now_unix - mtime > static_cast<int64_t>(kRequestStaleS * 1e9)) {
        remember(name);  // an old request (an earlier run's): never read, never answered
        continue;
      }
      // Written within the settling time: may still be being written. A time in the future beyond it
      // (a writer whose clock runs ahead, or a planted one) would keep the directory re-listed at every
      // scan for good: such a file is read as it stands (it is parsed like any other).
      if (now_unix - mtime < kSettleNs && mtime - now_unix < kSettleNs) {
        rescan_ = true;
        continue;
      }
      fresh.push_back(name);
      if (fresh.size() >= 4 * kReadsPerScan) {
        rescan_ = true;
        break;
      }
    }
    ::closedir(d);
    std::sort(fresh.begin(), fresh.end());
    if (fresh.size() > kReadsPerScan) {
      fresh.resize(kReadsPerScan);  // the rest at the next scan
      rescan_ = true;
    }
    for (const std::string& name : fresh) {
      remember(name);
      read_request(name, run_id);
    }
  }

  void remember(const std::string& name) {
    seen_.insert(name);
    seen_order_.push_back(name);
    if (seen_order_.size() > kMaxRemembered) {
      seen_.erase(seen_order_.front());
      seen_order_.pop_front();
    }
  }

  /// "" with the file's text, or why it cannot be read.
  std::string read_file(const std::string& path, std::string& text) const {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::strerror(errno);
    struct stat st {};
    std::string err;
    if (::fstat(fd, &st) != 0) err = std::strerror(errno);
    else if (!S_ISREG(st.st_mode)) err = "not a regular file";
    else if (static_cast<std::size_t>(st.st_size) > kMaxRequestBytes) err = "larger than " + std::to_string(kMaxRequestBytes) + " bytes";
    char buf[4096];
    while (err.empty()) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) err = std::strerror(errno);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > kMaxRequestBytes) err = "larger than " + std::to_string(kMaxRequestBytes) + " bytes";
    }
    ::close(fd);
    return err;
  }

  void read_request(const std::string& name, const std::string& run_id) {
    const std::string path = s_.dir + "/" + name, shown = printable(path, 200);
    std::string text;
    std::string why = read_file(path, text);
    CaptureRequest req;
    if (why.empty()) why = parse_capture_request(text, static_cast<double>(unix_ns()) / 1e9, req);
    // The id as the name gives it: an answer to a request refused for its content still finds its reader.
    const std::string name_id = name.substr(18, name.size() - 18 - 5);
    if (!why.empty()) {
      ++stats_.refused;
      warn_once("remote_captures.refused", "remote captures: request '" + shown + "' refused: " + why + " (said once)");
      // A stale request is an earlier one's: no answer (it would replace the one its run gave). A
      // malformed one names no run: every reader says why.
      if (is_hex16(name_id) && why.rfind("stale", 0) != 0) answer_refused(request_tag(name_id), name_id, run_id, why);
      return;
    }
    if (!req.for_run(run_id)) return;  // another run's request (runs may share a directory)
    ++stats_.requests;
    const uint32_t tag = request_tag(req.id);
    auto refuse = [&](const std::string& reason) {
      ++stats_.refused;
      warn_once("remote_captures.refused", "remote captures: request '" + shown + "' refused: " + reason + " (said once)");
      answer_refused(tag, req.id, run_id, reason);
    };
    if (req.id != name_id) return refuse("its id is not the one in its name");
    const auto known = planned_.find(tag);
    if (known != planned_.end()) {
      if (!known->second.id.empty() && known->second.id != req.id)
        return refuse("its tag " + tag_hex(tag) + " is request " + known->second.id + "'s, planned already; ask again");
      known->second.id = req.id;  // the exchange planned it before this rank read the file
      write_planned(tag, known->second, run_id);
      return;
    }
    if (stats_.planned >= kMaxRequestsPerRun)
      return refuse("this run has planned " + std::to_string(kMaxRequestsPerRun) + " requests, its quota");
    logger()->info("remote captures: {} asks for {} steps (request {})",
                   req.by.empty() ? std::string("someone") : printable(req.by), req.steps, req.id);
    if (link_->exchanging()) {
      // The exchange may have agreed on this request's plan already (another rank read the file first
      // and asked): the plan, taken at this same look, carries this request's id (schedule_plan).
      if (link_->plan_pending(tag)) {
        named_plans_[tag] = req.id;
        return;
      }
      if (waiting_)
        return refuse(waiting_->tag == tag ? "its tag " + tag_hex(tag) + " is request " + waiting_->id + "'s, waiting; ask again"
                                           : "another request (" + waiting_->id + ") waits for the exchange; ask again later");
      if (!link_->ask(tag, req.steps)) return refuse("its tag " + tag_hex(tag) + " was planned already; ask again");
      waiting_ = Waiting{tag, req.id, req.steps, monotonic_ns()};
      JsonWriter w;
      begin_answer(w, tag, req.id, run_id, "waiting");
      w.field("how", "waiting for the cross-rank exchange to agree on the same steps on every rank").end_object();
      write_answer(tag, req.id, w.str());
      return;
    }
    schedule_own(tag, req.id, req.steps, run_id, "no cross-rank exchange (steptrace::enable_cross_rank)");
  }

  void schedule_own(uint32_t tag, const std::string& id, int steps, const std::string& run_id, const std::string& why) {
    Planned p;
    p.id = id;
    p.first = current_training_step() + 2;  // the step beginning meanwhile might miss the forced tracing
    p.last = p.first + steps - 1;
    p.how = "this rank's own next " + std::to_string(steps) + " steps: " + why;
    if (!schedule(p.first, p.last, tag, id, run_id)) return;
    keep_planned(tag, p);
    write_planned(tag, p, run_id);
  }

  void schedule_plan(const CapturePlan& plan, const std::string& run_id) {
    Planned p;
    if (waiting_ && waiting_->tag == plan.tag) {
      p.id = waiting_->id;
      waiting_.reset();
    } else if (const auto named = named_plans_.find(plan.tag); named != named_plans_.end()) {
      p.id = named->second;
      named_plans_.erase(named);
    }
    p.first = plan.first_step;
    p.last = plan.last_step();
    p.aligned = true;
    p.absent = plan.absent_ranks;
    p.how = "agreed through the cross-rank exchange: the view of step " + std::to_string(plan.view_step) +
            " carried the request (from rank " + std::to_string(plan.asked_by_rank) + "), margin " +
            std::to_string(plan.margin) + " steps";
    if (!schedule(p.first, p.last, plan.tag, p.id, run_id)) return;
    // Read after the steps were forced: a step begun by then may be untraced, one whose line was out
    // is not captured (captures are decided at each line).
    p.late = current_training_step() >= p.first;
    if (p.late) {
      ++stats_.late;
      warn_once("remote_captures.late", "remote captures: the agreed steps began before this rank learned them (a "
                                        "margin too small for this rank's lag): steps whose lines were already out "
                                        "are not captured, and the first ones may be untraced");
    }
    keep_planned(plan.tag, p);
    write_planned(plan.tag, p, run_id);
  }

  /// Asks the flight recorder for the steps and traces them; false (answered refused) when it cannot.
  bool schedule(int64_t first, int64_t last, uint32_t tag, const std::string& id, const std::string& run_id) {
    const auto a = static_cast<uint64_t>(std::max<int64_t>(first, 0)), b = static_cast<uint64_t>(std::max<int64_t>(last, 0));
    if (!captures_->add(a, b)) {
      ++stats_.refused;
      answer_refused(tag, id, run_id, "64 capture requests are pending in the flight recorder");
      return false;
    }
    recorder_->force_trace(a, b);  // traced (GPU records in the capture), whatever the interval
    ++stats_.planned;
    return true;
  }

  void keep_planned(uint32_t tag, const Planned& p) {
    if (planned_.size() >= kMaxRemembered) planned_.clear();
    planned_[tag] = p;
  }

  void write_planned(uint32_t tag, const Planned& p, const std::string& run_id) {
    JsonWriter w;
    begin_answer(w, tag, p.id, run_id, "planned");
    w.field("first_step", p.first).field("last_step", p.last).field("aligned", p.aligned).field("how", p.how);
    if (p.aligned) {
      w.field("late", p.late).key("absent_ranks").begin_array();
      for (int r : p.absent) w.value(r);
      w.end_array();
    }
    w.end_object();
    write_answer(tag, p.id, w.str());
  }

  void begin_answer(JsonWriter& w, uint32_t tag, const std::string& id, const std::string& run_id, const char* status) const {
    w.begin_object().field("schema", "steptrace.answer/1").field("tag", tag_hex(tag));
    if (!id.empty()) w.field("id", id);
    else w.key("id").null();
    w.field("run_id", run_id).field("rank", s_.rank).field("world_size", s_.world_size).field("host", s_.host);
    w.field("pid", s_.pid).field("status", status).field("current_step", current_training_step());
    w.field("written_unix_s", static_cast<double>(unix_ns()) / 1e9);
  }

  void answer_refused(uint32_t tag, const std::string& id, const std::string& run_id, const std::string& why) {
    JsonWriter w;
    begin_answer(w, tag, id, run_id, "refused");
    w.field("reason", why).end_object();
    write_answer(tag, id, w.str());
  }

  /// Named by the request's id; by its tag while the id is not known (a plan from the exchange).
  void write_answer(uint32_t tag, const std::string& id, const std::string& text) {
    if (answers_written_ >= kMaxAnswers) {
      warn_once("remote_captures.answers", "remote captures: " + std::to_string(kMaxAnswers) +
                                               " answers written this run; no more (requests are still read)");
      return;
    }
    ++answers_written_;
    const std::string path = s_.dir + "/steptrace-answer-" + (id.empty() ? tag_hex(tag) : id) + "-r" + std::to_string(s_.rank) + ".json";
    const std::string err = sink::replace_file_atomically(path, text + "\n");
    if (!err.empty()) warn_once("remote_captures.answer", "remote captures: cannot write the answer '" + path + "': " + err);
  }

  Settings s_;
  CrossRankLink* link_;
  CaptureRequests* captures_;
  StepRecorder* recorder_;
  Stats stats_;
  bool stopped_ = false;
  int64_t last_scan_ns_ = 0, dir_mtime_ns_ = -1;
  bool rescan_ = false;  // a file was left for the next scan
  std::string live_path_, live_run_id_;
  bool live_exchange_ = false;
  int64_t live_written_ns_ = 0;
  std::set<std::string> seen_;
  std::deque<std::string> seen_order_;
  std::map<uint32_t, Planned> planned_;  // by tag: what this rank captures for it
  std::optional<Waiting> waiting_;       // asked of the exchange, not yet agreed
  std::map<uint32_t, std::string> named_plans_;  // by tag: a request read while its agreed plan waited in the link (taken at the same look)
  uint64_t answers_written_ = 0;
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
