// prometheus_feed - the exporter's inputs that a GPU-less machine cannot produce live, for the
// end-to-end test against a real Prometheus (tests/checks/prometheus_e2e.py):
//   prometheus_feed replay LINES.jsonl TEXTFILE JOB [PACE_MS]
//                                                      lines written on a GPU, through the exporter
//                                                      (sink/prometheus.hpp) into a textfile: at once,
//                                                      or one line every PACE_MS (the textfile then
//                                                      rewritten every 100 ms, for several scrapes)
//   prometheus_feed cross_rank LOG TEXTFILE JOB STEPS  a CPU run whose rank 0 gathers a simulated
//                                                      4-rank exchange (tests/fake_exchange.hpp)
#include <steptrace/sink/prometheus.hpp>
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "fake_exchange.hpp"
#include "host_config.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "replay" && (argc == 5 || argc == 6)) {
    const int pace_ms = argc == 6 ? std::atoi(argv[5]) : 0;
    steptrace::sink::PrometheusSink sink;
    steptrace::sink::PrometheusSink::Options o;
    o.textfile = argv[3];
    o.job = argv[4];
    o.every_ms = pace_ms > 0 ? 100 : 1e9;  // paced: rewritten as a run would; else one write at the end
    for (const auto& p : sink.open(o)) {
      std::fprintf(stderr, "prometheus_feed: %s: %s\n", p.setting.c_str(), p.message.c_str());
      return 1;
    }
    std::ifstream in(argv[2]);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      const std::string err = sink.write_line(line);
      if (!err.empty()) {
        std::fprintf(stderr, "prometheus_feed: line %d: %s\n", n + 1, err.c_str());
        return 1;
      }
      ++n;
      if (pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pace_ms));
    }
    const std::string err = sink.finish_lines();
    sink.close_endpoint();
    if (!err.empty()) std::fprintf(stderr, "prometheus_feed: %s\n", err.c_str());
    std::printf("prometheus_feed: %d lines\n", n);
    return err.empty() && n > 0 ? 0 : 1;
  }
  if (mode == "cross_rank" && argc == 6) {
    auto cfg = steptrace_test::host_config(argv[2]);
    cfg.prometheus_textfile = argv[3];
    cfg.job_name = argv[4];
    cfg.rank = 0;
    cfg.world_size = 4;
    cfg.prometheus_every_ms = 100;
    if (!steptrace::start(cfg)) return 1;
    if (!steptrace::details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 2)) return 1;
    steptrace_test::run_input_nccl_steps(std::atoi(argv[5]));
    steptrace::stop();
    return 0;
  }
  std::fprintf(stderr, "usage: prometheus_feed replay LINES TEXTFILE JOB | cross_rank LOG TEXTFILE JOB STEPS\n");
  return 2;
}
