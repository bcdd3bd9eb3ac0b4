// steptrace/sink/prometheus.hpp - the lines as Prometheus metrics, two ways with the same metrics:
// a node_exporter textfile (rewritten atomically at most every `every_ms`, and once more at stop()
// with steptrace_up 0, so a finished run's file is not read as live, by the background thread) and a scrape endpoint. Called
// from the background thread (write_line) and the endpoint's threads (a scrape): one mutex, held only
// to update or render the metrics. The training thread never reaches this code.
#pragma once
#include "../version.hpp"
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "prometheus_http.hpp"
#include "prometheus_metrics.hpp"
#include "prometheus_textfile.hpp"
#include "sink.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class PrometheusSink final : public LineSink {
 public:
  struct Options {
    std::string textfile;  // path ("" = none)
    std::string listen;    // host:port ("" = none)
    std::string job;       // the steptrace_job label ("" = none)
    double every_ms = 5000;
    int window_lines = 32;
    PromLabels labels;     // rank, local_rank, world_size, Hostname, the GPU's identity (until the first line)
  };
  /// A problem with one way out: the setting it concerns and what is wrong (the other way still runs).
  struct Problem {
    std::string setting, message;
  };

  PrometheusSink() = default;
  PrometheusSink(const PrometheusSink&) = delete;
  PrometheusSink& operator=(const PrometheusSink&) = delete;
  ~PrometheusSink() override { endpoint_.stop(); }

  /// Starts what `o` asks for; returns what could not be started.
  std::vector<Problem> open(Options o) {
    std::vector<Problem> problems;
    options_ = std::move(o);
    model_ = PrometheusModel(options_.job, options_.window_lines, options_.labels);
    ++generation_;
    if (!options_.textfile.empty()) {
      // A first file at once: the run is visible (steptrace_up 1) before its first line.
      const std::string err = replace_file_atomically(options_.textfile, model_.render(true, kTextfile));
      if (!err.empty()) problems.push_back({"prometheus_textfile", err + "; the textfile is not written, training continues"});
      else textfile_ok_ = true;
      last_write_ = std::chrono::steady_clock::now();
    }
    if (!options_.listen.empty()) {
      // A scrape serves the exposition rendered once per change (a line, the run's end), not once per
      // scrape: a flood of scrapes held the mutex the writer needs for every line, rendering, and the
      // writer fell behind and dropped lines (issue #58). The rendering is a function of the model alone.
      const std::string err = endpoint_.start(options_.listen, [this] {
        std::lock_guard<std::mutex> lock(mutex_);
        if (rendered_generation_ != generation_) {
          rendered_ = model_.render(up_, kEndpoint);
          rendered_generation_ = generation_;
          ++renders_;
        }
        return rendered_;
      });
      if (!err.empty()) problems.push_back({"prometheus_listen", err + "; no scrape endpoint, training continues"});
      else listening_ = true;
    }
    return problems;
  }

  bool active() const { return textfile_ok_ || listening_; }
  /// How often a scrape rendered the exposition (once per change, however many scrapes).
  uint64_t endpoint_renders() {
    std::lock_guard<std::mutex> lock(mutex_);
    return renders_;
  }
  bool both_ways() const { return textfile_ok_ && listening_; }
  int port() const { return endpoint_.port(); }
  bool counts_lines() const override { return false; }
  std::string describe() const override {
    return options_.textfile.empty() ? std::string("the Prometheus exporter")
                                     : "the Prometheus textfile '" + options_.textfile + "'";
  }

  bool reads_fields() const override { return true; }
  std::string write_line(std::string line) override { return write_step_line(std::move(line), nullptr); }
  /// The exposition reads the line's fields as the writer recorded them; a line without them (a caller
  /// outside the runtime) is read from its text.
  std::string write_step_line(std::string line, const FlatJson* fields) override {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const std::string err = fields ? model_.add_fields(*fields) : model_.add_line(line);
      ++generation_;  // what a scrape shows changed (even a refused line may have changed part of it)
      if (!err.empty()) return err;
      if (!textfile_ok_) return {};
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double, std::milli>(now - last_write_).count() < options_.every_ms) return {};
      last_write_ = now;
      text = model_.render(true, kTextfile);
    }
    return replace_file_atomically(options_.textfile, text);
  }

  /// After the last line (the background thread, at stop()): the textfile gets the last values with
  /// steptrace_up 0, as does a scrape from now on.
  std::string finish_lines() override {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      up_ = false;
      ++generation_;
      if (!textfile_ok_) return {};
      text = model_.render(false, kTextfile);
    }
    const std::string err = replace_file_atomically(options_.textfile, text);
    return err.empty() ? err : "the Prometheus textfile's last write failed: " + err;
  }

  /// At stop(), after the background thread ended: the endpoint closes.
  void close_endpoint() {
    endpoint_.stop();
    listening_ = false;
  }
  /// In a fork's child (details/fork.hpp): only the child's copy of the listening socket is closed.
  void close_endpoint_in_child() { endpoint_.close_in_child(); }

 private:
  // The `sink` label: which way out a series was read from. Both ways on and both scraped (the shipped
  // prometheus.yml does) give every series twice, told apart by it: dashboards select one.
  static constexpr const char* kTextfile = "textfile";
  static constexpr const char* kEndpoint = "endpoint";
  Options options_;
  std::mutex mutex_;
  uint64_t generation_ = 0;                   // bumped at every change the exposition shows
  uint64_t rendered_generation_ = ~uint64_t{0};  // the generation rendered_ holds
  std::string rendered_;                       // the endpoint's exposition, rendered once per change
  uint64_t renders_ = 0;                       // how often it was rendered (tests)
  PrometheusModel model_{"", 1, {}};
  bool up_ = true;
  bool textfile_ok_ = false, listening_ = false;
  std::chrono::steady_clock::time_point last_write_{};
  MetricsServer endpoint_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
