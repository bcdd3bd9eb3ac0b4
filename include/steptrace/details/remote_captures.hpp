// steptrace/details/remote_captures.hpp - captures asked of a running job from outside
// (`steptrace-ctl capture --steps N`), through files in the trace directory; no daemon, no listener.
// Background thread only: nothing here runs on the training thread.
//
//   steptrace-live-<run_id>-r<rank>.json     written at start (and when the run_id is agreed), removed
//                                            at stop(): how steptrace-ctl finds the job's processes
//   steptrace-request-<id>.json              the operator's request (core/capture_request.hpp)
//   steptrace-answer-<tag>-r<rank>.json      this rank's answer: refused (why), waiting for the
//                                            exchange, or the steps it captures (and how they were chosen)
//
// Trust model: whoever can create files in the trace directory can ask for captures. A request can
// only make steptrace write traces where it writes them anyway, for at most kMaxRequestSteps steps,
// within trace_max_files, and trace those steps (their cost is counted like any capture's). Request
// files are read with O_NOFOLLOW, only when regular and at most kMaxRequestBytes long.
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
#include "../core/launch_context.hpp"
#include "../core/step_keys.hpp"
#include "../sink/prometheus_textfile.hpp"
#include "cross_rank_link.hpp"
#include "flight_recorder.hpp"
#include "log.hpp"
#include "step_recorder.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class RemoteCaptures {
 public:
  static constexpr int64_t kScanEveryNs = 1'000'000'000;  // the trace directory is listed once a second
  static constexpr std::size_t kMaxRemembered = 1024;     // request names already read
  static constexpr std::size_t kReadsPerScan = 16;        // request files read per scan, at most

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

  /// Background thread, every wake: the presence file under the run_id in force, new requests (at
  /// most once a second), and the plans the exchange agreed on.
  void poll(const std::string& run_id) {
    if (!s_.on) return;
    if (run_id != live_run_id_) write_presence(run_id);
    const int64_t now = monotonic_ns();
    if (now - last_scan_ns_ >= kScanEveryNs) {
      last_scan_ns_ = now;
      scan(run_id);
    }
    for (CapturePlan& p : link_->take_plans()) schedule_plan(p, run_id);
    // Waiting for the exchange, which stopped meanwhile: this rank's own next steps instead.
    if (waiting_ && !link_->exchanging()) {
      const Waiting w = *waiting_;
      waiting_.reset();
      schedule_own(w.tag, w.id, w.steps, run_id, "the cross-rank exchange stopped before it agreed on steps");
    }
  }

  /// stop(): the presence file goes; requests and answers stay for the operator.
  void stop() {
    if (!live_path_.empty()) ::unlink(live_path_.c_str());
    live_path_.clear();
    live_run_id_.clear();
  }

  const Stats& stats() const { return stats_; }

 private:
  struct Waiting {
    uint32_t tag = 0;
    std::string id;
    int steps = 0;
  };

  static int64_t current_training_step() { return last_step_of_key(current_step().load(std::memory_order_relaxed)); }

  void write_presence(const std::string& run_id) {
    stop();
    live_run_id_ = run_id;
    JsonWriter w;
    w.begin_object().field("schema", "steptrace.live/1").field("run_id", run_id).field("rank", s_.rank);
    w.field("world_size", s_.world_size).field("pid", s_.pid).field("host", s_.host).field("job_id", s_.job_id);
    w.field("log", s_.log_path).field("trace_dir", s_.dir).field("exchange", link_->exchanging());
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
    DIR* d = ::opendir(s_.dir.c_str());
    if (!d) {
      warn_once("remote_captures.dir", "remote captures: cannot list '" + s_.dir + "' (" + std::strerror(errno) +
                                           "); requests from steptrace-ctl are not seen");
      return;
    }
    std::vector<std::string> fresh;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("steptrace-request-", 0) != 0 || name.size() < 24 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
      if (seen_.count(name)) continue;
      fresh.push_back(name);
    }
    ::closedir(d);
    std::sort(fresh.begin(), fresh.end());
    if (fresh.size() > kReadsPerScan) fresh.resize(kReadsPerScan);  // the rest at the next scan
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
    std::string text;
    const std::string path = s_.dir + "/" + name;
    std::string why = read_file(path, text);
    CaptureRequest req;
    if (why.empty()) why = parse_capture_request(text, static_cast<double>(unix_ns()) / 1e9, req);
    // The id as the name gives it: an answer to a request refused for its content still finds its reader.
    const std::string name_id = name.substr(18, name.size() - 18 - 5);
    if (!why.empty()) {
      ++stats_.refused;
      warn_once("remote_captures.refused", "remote captures: request '" + path + "' refused: " + why + " (said once)");
      if (is_hex16(name_id)) answer_refused(request_tag(name_id), name_id, run_id, why);
      return;
    }
    if (!req.for_run(run_id)) return;  // another run's request (runs may share a directory)
    ++stats_.requests;
    const uint32_t tag = request_tag(req.id);
    if (handled_.count(tag)) return;  // the exchange planned it before this rank read the file
    if (req.id != name_id) {
      ++stats_.refused;
      warn_once("remote_captures.refused", "remote captures: request '" + path + "' refused: its id is not the one in its name (said once)");
      answer_refused(tag, req.id, run_id, "its id is not the one in its name");
      return;
    }
    if (ids_.size() >= kMaxRemembered) ids_.clear();
    ids_[tag] = req.id;
    logger()->info("remote captures: {} asks for {} steps (request {})", req.by.empty() ? "someone" : req.by, req.steps, req.id);
    if (link_->exchanging()) {
      if (waiting_ && waiting_->tag != tag) {
        ++stats_.refused;
        answer_refused(tag, req.id, run_id, "another request (" + waiting_->id + ") waits for the exchange; ask again later");
        return;
      }
      waiting_ = Waiting{tag, req.id, req.steps};
      link_->ask(tag, req.steps);
      JsonWriter w;
      begin_answer(w, tag, req.id, run_id, "waiting");
      w.field("how", "waiting for the cross-rank exchange to agree on the same steps on every rank").end_object();
      write_answer(tag, w.str());
      return;
    }
    schedule_own(tag, req.id, req.steps, run_id, "no cross-rank exchange (steptrace::enable_cross_rank)");
  }

  void handled(uint32_t tag) {
    if (handled_.size() >= kMaxRemembered) handled_.clear();
    handled_.insert(tag);
  }

  void schedule_own(uint32_t tag, const std::string& id, int steps, const std::string& run_id, const std::string& why) {
    handled(tag);
    const int64_t first = current_training_step() + 1;
    schedule(first, steps);
    ++stats_.planned;
    JsonWriter w;
    begin_answer(w, tag, id, run_id, "planned");
    w.field("first_step", first).field("last_step", first + steps - 1).field("aligned", false);
    w.field("how", "this rank's own next " + std::to_string(steps) + " steps: " + why).end_object();
    write_answer(tag, w.str());
  }

  void schedule_plan(const CapturePlan& p, const std::string& run_id) {
    handled(p.tag);
    if (waiting_ && waiting_->tag == p.tag) waiting_.reset();
    const int64_t now_step = current_training_step();
    const bool late = now_step >= p.first_step;
    schedule(p.first_step, p.steps);
    ++stats_.planned;
    if (late) {
      ++stats_.late;
      warn_once("remote_captures.late", "remote captures: the agreed steps began before this rank learned them "
                                        "(the margin was too small); captured from what the flight recorder still holds");
    }
    const auto id = ids_.find(p.tag);
    JsonWriter w;
    begin_answer(w, p.tag, id == ids_.end() ? std::string() : id->second, run_id, "planned");
    w.field("first_step", p.first_step).field("last_step", p.last_step()).field("aligned", true);
    w.field("how", "agreed through the cross-rank exchange: the view of step " + std::to_string(p.view_step) +
                       " carried the request (from rank " + std::to_string(p.asked_by_rank) + "), margin " +
                       std::to_string(p.margin) + " steps");
    w.field("late", late);
    w.key("absent_ranks").begin_array();
    for (int r : p.absent_ranks) w.value(r);
    w.end_array().end_object();
    write_answer(p.tag, w.str());
  }

  void schedule(int64_t first, int steps) {
    if (first < 0) first = 0;
    const auto a = static_cast<uint64_t>(first), b = static_cast<uint64_t>(first + steps - 1);
    if (!captures_->add(a, b)) warn_once("capture_steps.full", "capture requests: 64 are pending; this one is ignored");
    recorder_->force_trace(a, b);  // the steps are traced (GPU records in the capture), whatever the interval
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
    write_answer(tag, w.str());
  }

  void write_answer(uint32_t tag, const std::string& text) {
    const std::string path = s_.dir + "/steptrace-answer-" + tag_hex(tag) + "-r" + std::to_string(s_.rank) + ".json";
    const std::string err = sink::replace_file_atomically(path, text + "\n");
    if (!err.empty()) warn_once("remote_captures.answer", "remote captures: cannot write the answer '" + path + "': " + err);
  }

  Settings s_;
  CrossRankLink* link_;
  CaptureRequests* captures_;
  StepRecorder* recorder_;
  Stats stats_;
  int64_t last_scan_ns_ = 0;
  std::string live_path_, live_run_id_;
  std::set<std::string> seen_;
  std::deque<std::string> seen_order_;
  std::set<uint32_t> handled_;          // tags planned on this rank
  std::map<uint32_t, std::string> ids_;  // tag -> id, for the answers
  std::optional<Waiting> waiting_;      // asked of the exchange, not yet agreed
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
