// Runs trace_steps (label gpu): the stream markers learn a stream nobody named, and a traced step
// keeps an untraced step's time and label, its records whole up to stop() (issue #61).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../support.hpp"

namespace {
struct Run {
  std::vector<nlohmann::json> lines;
  nlohmann::json truth;
};
Run run_mode(const std::string& mode) {
  const std::string log = steptrace_test::fresh_log("trace_steps_" + mode);
  const std::string truth_path = "trace_steps_" + mode + "_truth.json";
  const std::string cmd = std::string(STEPTRACE_TRACE_STEPS) + " " + log + " " + truth_path + " " + mode;
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  Run r;
  r.truth = nlohmann::json::parse(std::ifstream(truth_path));
  r.lines = steptrace_test::read_lines(log);
  return r;
}
double median(std::vector<double> v) {
  REQUIRE_FALSE(v.empty());
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
std::string text_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
}  // namespace

TEST_CASE("a C++ loop on its own stream, defaults, nothing named: the markers learn the stream", "[gpu][markers]") {
  const Run run = run_mode("own_stream");
  const int recreated = run.truth["recreated_at"];
  REQUIRE(run.lines.size() == std::size_t(run.truth["steps"]));
  int marked = 0, before = 0, destroyed_said = 0, marked_after = 0, by_markers = 0, thinned = 0;
  for (const auto& l : run.lines) {
    const int step = l["global_step"];
    INFO("step " << step << ": " << l["gpu_markers"].dump() << " " << l["null_reasons"].dump());
    const bool has = l["gpu_markers"].is_object();
    if (!has) {  // every line without markers says why
      REQUIRE(l["null_reasons"].contains("gpu_markers"));
      if (text_of(l["null_reasons"], "gpu_markers").find("destroyed") != std::string::npos) ++destroyed_said;
    }
    // Left unmarked by overhead_budget (marking every one of these 3.5 ms steps costs over its share of it):
    // the stream is known, the budget chose 1 step in N.
    const bool thin = !has && text_of(l["null_reasons"], "gpu_markers").find("overhead_budget") != std::string::npos;
    thinned += thin;
    if (step >= 2 && step < recreated) ++before, marked += has || thin;
    if (step > recreated) marked_after += has;
    if (l["traced"] == false && l["diagnosis"]["basis"] == "markers") ++by_markers;
  }
  std::printf("own_stream: %d of %d lines before the new stream marked or thinned by the budget (%d thinned), %d marked "
              "after it; %d untraced lines decided by markers; %d lines say the stream was destroyed\n", marked, before,
              thinned, marked_after, by_markers, destroyed_said);
  CHECK(marked >= before * 9 / 10);  // learned from the first traced step: every line from step 2 on
  CHECK(by_markers >= 1);
  const auto& first_new = run.lines[std::size_t(recreated)];
  std::printf("own_stream: step %d (the first on the new stream) traced %s; CUPTI %s between traces, interval %d\n",
              recreated, first_new["traced"].dump().c_str(), first_new["overhead"]["untraced_cupti"].dump().c_str(),
              int(first_new["overhead"]["trace_every"]));
  // CUPTI attached (the collector heard the destroy): that step is traced whatever the interval, and
  // the markers are on the new stream from the step after it. Otherwise the lines between the destroy
  // and the next traced step say why they have no markers.
  if (first_new["overhead"]["untraced_cupti"] == "keep") CHECK(first_new["traced"] == true);
  if (first_new["traced"] != true) CHECK(destroyed_said >= 1);
  // The program destroyed the markers' stream: the next step was traced (Session::relearn_marker_stream),
  // whatever the budget's interval (1 in ~60 or more on this 3.5 ms step), and it showed the new stream.
  CHECK(marked_after >= 1);
}

TEST_CASE("a traced step keeps an untraced step's time and label; the last one's records are whole at stop()",
          "[gpu][trace]") {
  const Run run = run_mode("input_wait");
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 40);
  std::vector<double> traced_ms, untraced_ms, own_traced, own_untraced;
  std::map<std::string, int> untraced_labels;
  std::vector<std::string> traced_labels;
  int last_traced = -1;
  for (const auto& l : lines) {
    const int step = l["global_step"];
    if (step < 5) continue;  // the first steps load the module and attach CUPTI for the first time
    const double ms = l["step_scope_ms"];
    const double own = run.truth["step_ms"][step];
    if (l["traced"] == true) {
      traced_ms.push_back(ms), own_traced.push_back(own);
      traced_labels.push_back(l["diagnosis"]["label"]);
      last_traced = step;
    } else {
      untraced_ms.push_back(ms), own_untraced.push_back(own);
      ++untraced_labels[l["diagnosis"]["label"].get<std::string>()];
    }
  }
  REQUIRE(traced_ms.size() >= 6);
  // Detached between traced steps (each line out within the 4 untraced steps after it): the attach made
  // ahead is what is measured here.
  CHECK(run.truth["detaches"].get<int>() >= 4);
  const double t = median(traced_ms), u = median(untraced_ms), ot = median(own_traced), ou = median(own_untraced);
  std::printf("input_wait: traced step %.2f ms (program's clock %.2f), untraced %.2f ms (%.2f): traced / untraced %.3f\n",
              t, ot, u, ou, t / u);
  CHECK(t <= 1.05 * u);    // the attach is paid between steps, not in the traced one
  CHECK(ot <= 1.05 * ou);  // ... by the program's own clock too
  std::string majority;
  int most = 0;
  for (const auto& [label, n] : untraced_labels)
    if (n > most) majority = label, most = n;
  std::printf("input_wait: untraced label %s (%d lines)\n", majority.c_str(), most);
  CHECK(majority == "INPUT-BOUND");
  for (const auto& label : traced_labels) CHECK(label == majority);
  // The last traced step before stop(): its records whole.
  REQUIRE(last_traced >= 35);
  const auto& l = lines[last_traced];
  INFO(l["gpu"].dump());
  REQUIRE(l["gpu"].is_object());
  CHECK(l["gpu"]["complete"] == true);
  CHECK(l["gpu"]["dropped_records"] == 0);
  CHECK(l["gpu"]["missing_launches"] == 0);
  CHECK(l["gpu"]["kernels"] == run.truth["kernels_per_step"]);
}

#ifdef STEPTRACE_REATTACH_STRESS
TEST_CASE("1 000 attach and detach cycles with NCCL communicators made and destroyed between them", "[gpu][trace]") {
  // Each traced step's kernel against the CUDA events around it and its least time: a timestamp broken
  // by a re-attach (PyTorch issue #192021: a callback registered again each session) would not fit.
  const std::string log = steptrace_test::fresh_log("reattach_stress");
  const std::string truth_path = "reattach_stress_truth.json";
  const std::string cmd = std::string(STEPTRACE_REATTACH_STRESS) + " " + log + " " + truth_path + " 1000";
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);  // no crash, no heap damage seen by the allocator
  const auto truth = nlohmann::json::parse(std::ifstream(truth_path));
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 4000);
  CHECK(truth["comms"] == 80);
  CHECK(truth["detaches"].get<int>() >= 900);  // a cycle may keep CUPTI when a line comes late
  const double spin_ms = truth["spin_ms"];
  int traced = 0, complete = 0, fits = 0, shown = 0;
  double worst = 0;
  for (const auto& l : lines) {
    if (l["traced"] != true || !l["gpu"].is_object()) continue;
    ++traced;
    if (l["gpu"]["complete"] != true) continue;
    ++complete;
    const int step = l["global_step"];
    const double kernel = l["gpu"]["kernel_ms"], events = truth["event_ms"][step];
    // The kernel runs between the two events, so never longer than they (the events may hold more: a
    // launch held back); and it spins its cycles, so never shorter than they take at the highest clock.
    const double off = std::max(kernel - events, spin_ms - kernel);
    worst = std::max(worst, off);
    fits += off <= 0.005;
    if (off > 0.005 && ++shown <= 12)
      std::printf("reattach_stress: step %d kernel %.4f ms (%d kernels), events %.4f ms, least %.4f ms, complete %s\n", step, kernel,
                  l["gpu"]["kernels"].get<int>(), events, spin_ms, l["gpu"]["complete"].dump().c_str());
  }
  std::printf("reattach_stress: %d traced lines, %d complete, %d kernels within their events and least time (worst %.4f ms off), "
              "%d detaches, %d communicators\n", traced, complete, fits, worst, truth["detaches"].get<int>(),
              truth["comms"].get<int>());
  CHECK(traced >= 990);
  CHECK(complete >= traced - 2);  // the last at stop() included
  CHECK(fits == complete);
}
#endif
