// Runs gpu_workloads (label gpu) and checks steptrace's attribution against answers known in advance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;

namespace {
nlohmann::json phase_gpu(const nlohmann::json& line, const std::string& phase) {
  INFO("phase " << phase << " in step " << line["global_step"]);
  REQUIRE(line["phases"].contains(phase));
  REQUIRE(line["phases"][phase].contains("gpu"));
  return line["phases"][phase]["gpu"];
}

/// Runs gpu_workloads in `mode` ("" = the scenario per step); returns its log's lines and its truth.
struct WorkloadRun {
  std::vector<nlohmann::json> lines;
  std::vector<nlohmann::json> events;  // the end record
  nlohmann::json truth;
};
WorkloadRun run_workloads(const std::string& mode, const std::string& program = STEPTRACE_GPU_WORKLOADS) {
  const std::string name = mode.empty() ? "gpu_workloads" : "gpu_workloads_" + mode;
  const auto log = fresh_log(name);
  const std::string truth_path = name + "_truth.json";
  const std::string cmd = program + " " + log + " " + truth_path + (mode.empty() ? "" : " " + mode);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream tin(truth_path);
  WorkloadRun run;
  run.truth = nlohmann::json::parse(tin);
  run.lines = read_lines(log);
  run.events = steptrace_test::read_events(log);
  return run;
}
}  // namespace

TEST_CASE("attribution of known GPU work", "[gpu]") {
  const auto run = run_workloads("");
  const auto& truth = run.truth;
  const int sms = truth["sm_count"];
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 12);
  for (const auto& l : lines) {
    INFO("step " << l["global_step"]);
    REQUIRE(l["gpu"].is_object());
    CHECK(l["gpu"]["complete"] == true);
    CHECK(l["gpu"]["dropped_records"] == 0);
    CHECK(l["gpu"]["unattributed_records"] == 0);
    CHECK(l["gpu_utilization"].is_number());
  }
  // before start(): the two memsets and the graph capture are not in any step
  CHECK_FALSE(lines[0]["gpu"].contains("before_first_step_records"));

  SECTION("hardware counters: on every line, and the one-block phase's SM activity is 1/numSMs") {
    for (const auto& l : lines) {
      INFO("step " << l["global_step"]);
      REQUIRE(l["counters"].is_object());
      CHECK(int(l["counters"]["samples"]) >= 1);
      // A step whose only sample read outside [0, 1] has no value, and says so (seen on H200: an
      // edge-only sample of a 0.7 ms step, excluded_values 3-4); otherwise a number.
      if (l["sm_activity"].is_null())
        CHECK(std::string(l["null_reasons"]["sm_activity"]).find("excluded_values") != std::string::npos);
      else
        CHECK(l["sm_activity"].is_number());
      // NVML: power and SM clock where the driver gives them (device_state null says why otherwise)
      if (l["device_state"].is_object()) CHECK(double(l["device_state"]["sm_clock_mhz_mean"]) > 0);
      else CHECK(std::string(l["null_reasons"]["device_state"]).size() > 0);
    }
    // 2 ms and 3 ms kernels hold whole 1 ms samples: their values are the kernels' own.
    const auto c = phase_gpu(lines[0], "one_block")["counters"];
    CHECK(c["edge_only"] == false);
    CHECK(std::abs(double(c["sm_activity"]) - 1.0 / sms) < 0.005);
    CHECK(double(c["tensor_core_or_pipe_utilization"]) < 0.01);
    const auto f = phase_gpu(lines[1], "full_grid")["counters"];
    CHECK(f["edge_only"] == false);
    CHECK(double(f["sm_activity"]) > 0.95);
  }
  SECTION("one block: SM efficiency is exactly 1/numSMs") {
    const auto g = phase_gpu(lines[0], "one_block");
    CHECK(g["kernels"] == 1);
    CHECK(double(g["sm_efficiency"]) == Approx(1.0 / sms).epsilon(1e-9));
    CHECK(double(g["kernel_ms"]) > 1.0);
  }
  SECTION("full grid: SM efficiency >= 0.99") {
    CHECK(double(phase_gpu(lines[1], "full_grid")["sm_efficiency"]) >= 0.99);
  }
  SECTION("known kernel counts per phase") {
    CHECK(phase_gpu(lines[2], "three")["kernels"] == 3);
    CHECK(phase_gpu(lines[2], "five")["kernels"] == 5);
    CHECK(lines[2]["gpu"]["kernels"] == 8);
  }
  SECTION("64 MiB host-to-device copy and a 1 MiB memset in h2d") {
    const auto g = phase_gpu(lines[3], "h2d");
    REQUIRE(g.contains("h2d"));
    CHECK(g["h2d"]["bytes"] == truth["copy_bytes"]);
    CHECK(g["h2d"]["count"] == 1);
    CHECK(double(g["h2d"]["gb_per_second"]) > 1.0);
    REQUIRE(g.contains("memset"));  // a runtime cudaMemsetAsync in the same phase
    CHECK(g["memset"]["bytes"] == 1 << 20);
    CHECK(g["memset"]["count"] == 1);
  }
  SECTION("cuBLAS GEMMs in forward") {
    const auto g = phase_gpu(lines[4], "forward");
    CHECK(int(g["kernels"]) >= 4);
    CHECK(double(g["kernel_ms"]) > 0.1);
    CHECK(g["top_kernels"].size() >= 1);
  }
  SECTION("CUDA Graph replay: every graph kernel goes to the launching phase") {
    const auto g = phase_gpu(lines[5], "graph");
    CHECK(g["kernels"] == 6);
    CHECK(lines[5]["gpu"]["kernels"] == 6);
  }
  SECTION("two streams: busy is the union, not the sum") {
    const auto g = phase_gpu(lines[6], "streams");
    CHECK(g["kernels"] == 2);
    const double busy = g["busy_ms"], kernel = g["kernel_ms"];
    // CUDA does not promise that the two half-grid kernels run concurrently: on the H200 they overlapped
    // fully in most runs, partly or not at all in others. Whatever the overlap, the union rule holds:
    CHECK(busy <= kernel * 1.0001);
    CHECK(busy >= 0.5 * kernel * 0.9999);  // at least the longer kernel
    // two half-grids (0.5 each) never sum past 1, so the time-weighted efficiency is exactly
    // 0.5 x kernel time / busy time: 1 for full overlap, 0.5 for none, in between for partial.
    CHECK(double(g["sm_efficiency"]) == Approx(0.5 * kernel / busy).epsilon(1e-3));
  }
  SECTION("phase GPU time within 2 % of cudaEvent timing of the same work") {
    const auto g = phase_gpu(lines[7], "timed");
    const double event_ms = truth["timed_event_ms"];
    CHECK(g["kernels"] == 20);
    CHECK(double(g["busy_ms"]) == Approx(event_ms).epsilon(0.02));
  }
  SECTION("cudaLaunchKernelEx, driver-API launch, unphased launch") {
    CHECK(phase_gpu(lines[8], "launch_ex")["kernels"] == 1);
    CHECK(phase_gpu(lines[9], "driver")["kernels"] == 1);
    CHECK(phase_gpu(lines[9], "unphased")["kernels"] == 1);
  }
  SECTION("a helper thread without a phase inherits the step thread's phase (libtorch autograd threads)") {
    CHECK(phase_gpu(lines[11], "parent")["kernels"] == 4);
    CHECK_FALSE(lines[11]["phases"].contains("unphased"));
  }
  SECTION("two threads launching at once keep their phases") {
    CHECK(phase_gpu(lines[10], "thread_a")["kernels"] == 3);
    CHECK(phase_gpu(lines[10], "thread_b")["kernels"] == 2);
  }
}

TEST_CASE("sampled attribution: every other step traced, every step has its line", "[gpu]") {
  const auto run = run_workloads("sampled");
  const auto& truth = run.truth;
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 8);
  for (const auto& l : lines) {
    const int step = l["global_step"];
    INFO("step " << step);
    CHECK(l["phases"]["work"]["count"] == 1);  // host timings on every line
    if (step % 2 == 0) {
      CHECK(l["traced"] == true);
      REQUIRE(l["gpu"].is_object());
      // The step's kernels were still queued when CUPTI was switched off: all their records came.
      CHECK(l["gpu"]["complete"] == true);
      CHECK(l["gpu"]["missing_launches"] == 0);
      CHECK(l["gpu"]["kernels"] == truth["kernels_per_step"]);
      CHECK(phase_gpu(l, "work")["kernels"] == truth["kernels_per_step"]);
      // Work of the untraced steps produced no records (CUPTI was off for their launches).
      CHECK(l["gpu"]["unattributed_records"] == 0);
      CHECK(l["gpu"]["late_records"] == 0);
      CHECK(l["gpu_utilization"].is_number());
    } else {
      CHECK(l["traced"] == false);
      CHECK(l["gpu"].is_null());
      CHECK(l["gpu_utilization"].is_null());
      CHECK(std::string(l["null_reasons"]["gpu"]).find("trace_every=2") != std::string::npos);
      CHECK_FALSE(l["phases"]["work"].contains("gpu"));
    }
  }
}

TEST_CASE("sampled attribution with CUPTI detached between traced steps", "[gpu]") {
  const auto run = run_workloads("detached");
  const auto& truth = run.truth;
  // Detached after steps 0, 3 and 6 at least (the untraced steps wait 40 ms before launching).
  CHECK(int(truth["detaches"]) >= 3);
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 12);
  for (const auto& l : lines) {
    const int step = l["global_step"];
    INFO("step " << step);
    CHECK(l["phases"]["work"]["count"] == 1);
    if (step % 3 == 0) {
      // After each attach CUPTI numbers correlation ids from 1 again: the step's launches must still
      // find their own records, phases and aliases (the memset's driver call).
      CHECK(l["traced"] == true);
      REQUIRE(l["gpu"].is_object());
      CHECK(l["gpu"]["complete"] == true);
      CHECK(l["gpu"]["missing_launches"] == 0);
      CHECK(l["gpu"]["kernels"] == int(truth["kernels_per_step"]) + 1);  // + the driver-API launch
      CHECK(phase_gpu(l, "work")["kernels"] == truth["kernels_per_step"]);
      CHECK(phase_gpu(l, "driver")["kernels"] == 1);
      const auto clear = phase_gpu(l, "clear");
      CHECK(clear["kernels"] == 0);
      REQUIRE(clear.contains("memset"));
      CHECK(clear["memset"]["bytes"] == 4096);
      CHECK(l["gpu"]["unattributed_records"] == 0);
      CHECK(l["gpu"]["late_records"] == 0);
      CHECK(l["counters"].is_null());
      CHECK(std::string(l["null_reasons"]["counters"]).find("untraced_cupti=detach") != std::string::npos);
    } else {
      CHECK(l["traced"] == false);
      CHECK(l["gpu"].is_null());
      CHECK(std::string(l["null_reasons"]["gpu"]).find("untraced_cupti=detach") != std::string::npos);
    }
  }
}

TEST_CASE("the defaults on a launch-bound step: the budget detaches CUPTI, traced steps stay whole", "[gpu]") {
  const auto run = run_workloads("budget_detach");
  const auto& truth = run.truth;
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 240);
  const int per_phase = truth["kernels_per_phase"];
  int64_t since = -1;
  int traced_detached = 0, untraced_detached = 0, counters_null = 0;
  for (const auto& l : lines) {
    const int64_t step = l["global_step"];
    INFO("step " << step << ": " << l["overhead"].dump());
    const std::string mode = l["overhead"]["untraced_cupti"];
    const std::string ts = l["overhead"]["kernel_timestamps"];
    CHECK((ts == "hardware_events" || ts.rfind("instrumented (", 0) == 0));  // Hopper: instrumented (why)
    if (mode == "detach" && since < 0) since = step;
    CHECK(mode == (since >= 0 ? "detach" : "keep"));  // once detached, never back
    if (l["traced"] == true) {
      REQUIRE(l["gpu"].is_object());
      CHECK(l["gpu"]["complete"] == true);
      CHECK(l["gpu"]["missing_launches"] == 0);
      CHECK(l["gpu"]["unattributed_records"] == 0);
      CHECK(phase_gpu(l, "forward")["kernels"] == per_phase);
      CHECK(phase_gpu(l, "backward")["kernels"] == per_phase);
      traced_detached += since >= 0;
    } else {
      untraced_detached += since >= 0;
    }
    if (since >= 0 && l["counters"].is_null()) {  // the first steps after may hold samples from before the stop
      ++counters_null;
      CHECK(std::string(l["null_reasons"]["counters"]).find("overhead_budget detaches CUPTI") != std::string::npos);
    }
  }
  CHECK(since >= 9);  // decided on a line after the 8 warm-up steps
  CHECK(traced_detached >= 1);
  CHECK(untraced_detached >= 100);
  CHECK(counters_null >= traced_detached + untraced_detached - 3);
  // CUPTI detaches after the switch and after each traced step but the last (stop() ends that one).
  CHECK(int(truth["detaches"]) >= 1);
  CHECK(int(truth["detaches"]) <= traced_detached + 1);
}

TEST_CASE("the defaults on a GPU-bound step: counters around traced steps only, a diagnosis on every line", "[gpu]") {
  const auto run = run_workloads("budget_counters");
  const auto& lines = run.lines;
  REQUIRE(lines.size() == size_t(run.truth["steps"]));
  int traced = 0, traced_with_counters = 0, untraced = 0, carried = 0, late_traced = 0, thinned = 0;
  int high_unbounded = 0, high_bounded_late = 0;  // lines without a high end; with one from step 1100 on
  std::vector<double> early_coverage, late_coverage;  // sampling on every step (warm-up) / resumed for the step
  std::vector<double> traced_forward_busy, untraced_forward_span;
  bool believed = false;
  for (const auto& l : lines) {
    const int64_t step = l["global_step"];
    INFO("step " << step << ": " << l["diagnosis"].dump() << " " << l["overhead"].dump() << " " << l["counters"].dump());
    CHECK(l["overhead"]["parts"]["counters"]["basis"] == "in_tracing");
    CHECK(l["diagnosis"]["basis"] != "none");  // every line has a usable diagnosis
    // The step-time estimate stays small; its high end adds the background thread's CPU time (PM
    // decodes are CPU-heavy while sampling runs), never the time a reading waited for a CUDA lock, and
    // the markers at the in-run comparison's upper end: none, said why, until that comparison has
    // measured (16 blocks of 32 steps, marked and unmarked).
    if (step >= 20) {
      const double low = l["overhead"]["estimated_fraction"];
      CHECK(low < 0.01);
      const auto& high = l["overhead"]["estimated_fraction_high"];
      if (high.is_null()) {
        ++high_unbounded;
        CHECK(l["null_reasons"]["overhead.estimated_fraction_high"].get<std::string>().find(
                  "the stream markers' cost is not measured in this run") == 0);
      } else {
        high_bounded_late += step >= 1100;
        CHECK(high.get<double>() >= low);
        CHECK(high.get<double>() < 1.0);
      }
    }
    if (step == 0) continue;  // the first step loads the module: not what this test is about
    if (l["traced"] == true) {
      ++traced;
      late_traced += step >= 80;
      CHECK(l["diagnosis"]["basis"] == "traced");
      CHECK(l["diagnosis"]["label"] == "COMPUTE-BOUND");
      if (l["counters"].is_object()) {
        ++traced_with_counters;
        (step < 8 ? early_coverage : late_coverage).push_back(double(l["counters"]["coverage"]));
        // A step with no sample over it, or whose only sample read outside [0, 1] (both seen on H100),
        // has no value and says why; a value is never above 1.
        if (l["sm_activity"].is_null()) {
          const std::string why = l["null_reasons"]["sm_activity"];
          if (int(l["counters"]["samples"]) == 0) CHECK(why == "no PM sample covered this step");
          else CHECK(why.find("excluded_values") != std::string::npos);
        } else {
          const double sm = l["sm_activity"];
          CHECK(sm > 0.8);  // the step's window holds the host's launch gap and its edges: 0.87 seen on H100
          CHECK(sm <= 1.0);
        }
        const nlohmann::json fwd = phase_gpu(l, "forward")["counters"]["sm_activity"];
        if (fwd.is_number()) {
          CHECK(double(fwd) > 0.9);
          CHECK(double(fwd) <= 1.0);
        }
      }
      // Armed by the first traced step's line (tens of steps in: CUPTI's first records), the markers
      // of each traced step after are checked against its records.
      if (l["gpu_markers"].is_object() && l["gpu_markers"]["span_ms"].is_null()) {
        // Armed in the middle of this step: part of it marked, nothing whole to compare (seen on H100).
        CHECK(!believed);
        CHECK(l["gpu_markers"]["agrees_with_records"].is_null());
        CHECK(std::string(l["null_reasons"]["gpu_markers.agrees_with_records"]).find("not marked") != std::string::npos);
      } else if (l["gpu_markers"].is_object()) {
        CHECK(l["gpu_markers"]["agrees_with_records"] == true);
        believed = believed || l["gpu_markers"]["agrees_with_records"] == true;
        traced_forward_busy.push_back(double(phase_gpu(l, "forward")["busy_ms"]));
      } else if (!believed) {
        CHECK(std::string(l["null_reasons"]["gpu_markers"]).find("armed after this step ran") != std::string::npos);
      }
    } else {
      ++untraced;
      CHECK(l["counters"].is_null());
      CHECK(std::string(l["null_reasons"]["counters"]).find("traced steps only") != std::string::npos);
      // The carried view decides: the step's own markers see only a lower bound of its GPU time (below).
      if (l["diagnosis"]["basis"] == "carried" || l["diagnosis"]["basis"] == "markers") {
        ++carried;
        CHECK(l["diagnosis"]["label"] == "COMPUTE-BOUND");
        CHECK(l["diagnosis"]["carried_from_step"].is_number());
      }
      if (believed && l["gpu_markers"].is_null()) {
        // Thinned: marking every step of this short loop costs over its share of overhead_budget (0.30 % of
        // the step on one H200: 1 step in 2).
        CHECK(std::string(l["null_reasons"]["gpu_markers"]).find("overhead_budget") != std::string::npos);
        ++thinned;
      } else if (believed) {  // after a traced step whose markers agreed with its records
        REQUIRE(l["gpu_markers"].is_object());
        // A lower bound: the 3 ms forward is seen pending (the host ran ahead of it); the 2 ms backward
        // ran while the host waited in cudaDeviceSynchronize inside the backward scope, where no
        // marker is recorded. So about 60 %, below the 70 % at which markers decide: carried.
        const double pending = l["gpu_markers"]["pending_share"];
        CHECK(pending > 0.5);
        CHECK(pending < 0.7);
        CHECK(l["diagnosis"]["basis"] == "carried");
        untraced_forward_span.push_back(double(l["gpu_markers"]["phases"]["forward"]["span_ms"]));
      }
    }
  }
  // Per-phase GPU time on untraced lines from markers: the forward kernel's time as the traced steps'
  // records measure it (its span holds the launch latency too: within 10 % + 0.1 ms).
  REQUIRE(traced_forward_busy.size() >= 2);
  REQUIRE(untraced_forward_span.size() >= 4);
  CHECK(thinned <= untraced - int(untraced_forward_span.size()));
  std::sort(traced_forward_busy.begin(), traced_forward_busy.end());
  std::sort(untraced_forward_span.begin(), untraced_forward_span.end());
  const double busy = traced_forward_busy[traced_forward_busy.size() / 2];
  const double span = untraced_forward_span[untraced_forward_span.size() / 2];
  std::printf("budget_counters: forward busy %.3f ms (traced, records), span %.3f ms (untraced, markers); %d untraced lines "
              "thinned\n", busy, span, thinned);
  CHECK(span >= busy * 0.98);
  CHECK(span <= busy * 1.1 + 0.1);
  // Enough untraced lines to hold the claim. How many is the budget's, i.e. the card's and the
  // moment's: the interval is the one the measured trace cost's 95 % high end asks for, taken whole
  // (about 1 % of this 5 ms step: 1 in ~60; before that rule the interval climbed 4x at a time and
  // 18-78 of 159 lines went untraced).
  std::printf("budget_counters: %d traced (%d from step 80), %d untraced; last interval %d, traced extra %s ms\n", traced,
              late_traced, untraced, int(lines.back()["overhead"]["trace_every"]),
              lines.back()["overhead"].value("traced_step_extra_ms", nlohmann::json()).dump().c_str());
  CHECK(untraced >= 10);
  CHECK(late_traced >= 2);  // sampling paused and resumed again and again (the program runs until it did)
  // Resumed before the traced step began: it covers as much of the step as sampling that never stops.
  REQUIRE(early_coverage.size() >= 3);
  REQUIRE(late_coverage.size() >= 2);
  std::sort(early_coverage.begin(), early_coverage.end());
  std::sort(late_coverage.begin(), late_coverage.end());
  CHECK(late_coverage[late_coverage.size() / 2] >= 0.9 * early_coverage[early_coverage.size() / 2]);
  CHECK(traced_with_counters >= traced - 2);  // the first steps may start before the first samples
  CHECK(carried >= untraced - 2);
  // The markers mark 1 step in 2 or fewer from the warm-up on: the high end comes once their comparison has
  // measured, well before step 1100 where the run goes that far.
  std::printf("budget_counters: %d lines without a high end, %d with one from step 1100\n", high_unbounded,
              high_bounded_late);
  CHECK(high_unbounded > 0);
  if (lines.size() > 1200) CHECK(high_bounded_late > 0);
}

TEST_CASE("per-phase counters over phases of hundreds of short kernels (cuBLAS GEMMs, element-wise)", "[gpu]") {
  const auto run = run_workloads("phases", STEPTRACE_REAL_SHAPES);
  const auto& lines = run.lines;
  REQUIRE(lines.size() == 18);
  const char* keys[] = {"sm_activity", "tensor_core_or_pipe_utilization", "memory_bandwidth_utilization", "occupancy"};
  auto step_value = [](const nlohmann::json& l, const std::string& key) {
    return key == "occupancy" ? double(l["counters"]["occupancy"]) : double(l[key]);
  };
  // Steps 0-5 run both phases, 6-11 the GEMMs alone, 12-17 the element-wise kernels alone. The loop is
  // pipelined, so a step's window holds the tail of the previous step's GPU work: the first two steps
  // of each block and the last step (whose work ends after its window) are not in steady state.
  auto steady = [](int step) { return step % 6 >= 2 && step != 17; };
  // The same kernels measured alone: the steady steps' own values.
  std::map<std::string, std::map<std::string, double>> alone;
  for (int i = 8; i < 17; ++i) {
    if (i == 11 || !steady(i)) continue;  // 8-10 GEMMs, 14-16 element-wise
    const std::string phase = i < 12 ? "gemm" : "elementwise";
    INFO("step " << i);
    REQUIRE(lines[static_cast<std::size_t>(i)]["counters"].is_object());
    for (const char* k : keys) alone[phase][k] += step_value(lines[static_cast<std::size_t>(i)], k) / 3;
  }
  // Per block of steady steps: the steps' values and the phases' values weighted by sample time.
  struct Block {
    int steps = 0;
    std::map<std::string, double> step, phases;
  };
  Block blocks[3];
  for (const auto& l : lines) {
    const int step = l["global_step"];
    INFO("step " << step << ": " << l["phases"].dump() << " counters " << l["counters"].dump());
    REQUIRE(l["gpu"].is_object());
    CHECK(l["gpu"]["complete"] == true);
    CHECK(l["gpu"]["excluded_records"] == 0);
    CHECK(l["gpu"]["late_records"] == 0);
    CHECK(l["gpu"]["unattributed_records"] == 0);
    REQUIRE(l["counters"].is_object());
    const double interval_ms = double(l["counters"]["interval_us"]) / 1000;
    double weight = 0;
    std::map<std::string, double> weighted;
    for (const std::string phase : {"gemm", "elementwise"}) {
      if (!l["phases"].contains(phase)) continue;
      const auto g = phase_gpu(l, phase);
      CHECK(int(g["kernels"]) >= (phase == "gemm" ? int(run.truth["gemms"]) : int(run.truth["elementwise"])));
      const double busy_ms = g["busy_ms"];
      REQUIRE(busy_ms >= 5 * interval_ms);  // the property below is promised for phases this long
      REQUIRE(g["counters"].is_object());
      const auto& c = g["counters"];
      // A phase gets >= 80 % of the samples its busy time spans (at least busy/interval of them): all
      // but the two at its ends, which it shares with idle time or the other phase.
      CHECK(int(c["samples"]) >= 0.8 * std::floor(busy_ms / interval_ms));
      CHECK_FALSE(c["edge_only"]);
      CHECK(double(c["shared"]) <= 0.02);  // one after another: its samples hold only its own work
      const double w = c["sample_ms"];
      CHECK(w <= busy_ms * 1.0001);
      CHECK(w >= busy_ms - 2 * interval_ms);
      weight += w;
      for (const char* k : keys) weighted[k] += w * double(c[k]);
      if (step < 6 && steady(step)) {
        // Against the same kernels alone: no sample shared with the other phase is used (shared above),
        // so what is left is how the kernels themselves ran after the other phase: within 0.02 on H100,
        // the GEMMs' tensor pipe 0.81-0.82 mixed against 0.846 alone on an H200, 0.786 in session 65's
        // run (how the GEMMs ran after the element-wise phase, not what was attributed). So 0.1 here:
        // it still catches a phase given the other's samples wholesale (the element-wise kernels' tensor
        // pipe is ~0 against the GEMMs' ~0.85); one shared sample (1/28 of the phase x the phases' gap)
        // is caught by `shared` above.
        for (const char* k : keys) {
          INFO(phase << " " << k << " in the mixed step " << double(c[k]) << ", alone " << alone[phase][k]);
          CHECK(std::abs(double(c[k]) - alone[phase][k]) <= 0.1);
        }
      }
    }
    if (steady(step)) {
      auto& b = blocks[step / 6];
      ++b.steps;
      for (const char* k : keys) {
        b.step[k] += step_value(l, k);
        b.phases[k] += weighted[k] / weight;
      }
    }
    if (step < 6) {
      const double gemm_tensor = phase_gpu(l, "gemm")["counters"]["tensor_core_or_pipe_utilization"];
      const double ew_tensor = phase_gpu(l, "elementwise")["counters"]["tensor_core_or_pipe_utilization"];
      CHECK(gemm_tensor > 0.3);
      CHECK(ew_tensor < 0.05);
      CHECK(double(phase_gpu(l, "elementwise")["counters"]["memory_bandwidth_utilization"]) >
            double(phase_gpu(l, "gemm")["counters"]["memory_bandwidth_utilization"]));
    }
  }
  // Phases one after another on a GPU kept busy: their values weighted by the sample time each was
  // given give back the step's value (0.02). A pipelined step's window holds the previous step's tail
  // and its own head, not its own work: the two measure the same repeating work at different times,
  // and the counters differ by up to ~0.02 from one millisecond to the next (tensor pipe of the GEMMs:
  // 0.82-0.84 per step). So the comparison is over each block's steady steps, not step by step (the
  // rule itself is checked step by step on hand-made samples in test_counters).
  for (int i = 0; i < 3; ++i) {
    INFO("block " << i << " (steps " << 6 * i << "-" << 6 * i + 5 << ")");
    REQUIRE(blocks[i].steps >= 3);
    for (const char* k : keys) {
      const double st = blocks[i].step[k] / blocks[i].steps, ph = blocks[i].phases[k] / blocks[i].steps;
      INFO(k << " steps " << st << ", phases weighted " << ph);
      CHECK(std::abs(st - ph) <= 0.02);
    }
  }
}

TEST_CASE("sampled attribution of a CUDA graph launched every step (untraced_cupti keep and detach)", "[gpu]") {
  // A replay of the graph with records off between traced steps used to overwrite the end times of
  // the traced launch's kernels (each "lasted" ~3 steps in keep mode; in detach mode, where CUPTI left
  // only after the traced line was out, until the next replay: 680 ms in a 13.7 ms step). Records stay
  // on until the graph is launched again, in either mode; what cannot be settled is excluded and
  // counted, never published.
  for (const std::string mode : {"graph_sampled", "graph_sampled_detach"}) {
    const auto run = run_workloads(mode, STEPTRACE_REAL_SHAPES);
    const auto& lines = run.lines;
    const int steps = run.truth["steps"], every = run.truth["every"];
    REQUIRE(lines.size() == static_cast<std::size_t>(steps));
    int traced = 0;
    for (const auto& l : lines) {
      const int step = l["global_step"];
      INFO(mode << " step " << step << ": " << l.dump());
      CHECK(l["overhead"]["untraced_cupti"] == (mode == "graph_sampled" ? "keep" : "detach"));
      if (step % every != 0) {
        CHECK(l["traced"] == false);
        CHECK(l["gpu"].is_null());
        continue;
      }
      ++traced;
      REQUIRE(l["gpu"].is_object());
      CHECK(l["gpu"]["complete"] == true);
      CHECK(l["gpu"]["excluded_records"] == 0);
      CHECK(l["gpu"]["late_records"] == 0);
      CHECK(l["gpu"]["unattributed_records"] == 0);
      const auto opt = phase_gpu(l, "optimizer");
      CHECK(opt["kernels"] == run.truth["graph_kernels"]);
      const double event_ms = run.truth["graph_event_ms"][static_cast<std::size_t>(step)];
      // The graph's kernels run one after another inside the events: their sum cannot exceed it.
      CHECK(double(opt["kernel_ms"]) <= event_ms * 1.02 + 0.005);
      CHECK(double(opt["busy_ms"]) <= event_ms * 1.02 + 0.005);
      if (mode == "graph_sampled") CHECK(double(l["gpu"]["busy_ms"]) <= double(l["step_time_ms"]));
      CHECK(phase_gpu(l, "forward")["kernels"] == 1);
    }
    CHECK(traced == (steps - 1) / every + 1);
  }
}

TEST_CASE("hardware counters of known kernels (PM sampling)", "[gpu]") {
  const std::string out = "counters_check.json";
  REQUIRE(std::system((std::string(STEPTRACE_COUNTERS_CHECK) + " > " + out).c_str()) == 0);
  std::ifstream in(out);
  const auto r = nlohmann::json::parse(in);
  INFO(r.dump());
  REQUIRE(r["error"] == "");
  CHECK(r["overflows"] == 0);
  const int sms = r["sm_count"];
  const auto& w = r["workloads"];
  CHECK(int(w["one_block"]["samples"]) >= 50);  // ~100 ms at 1 ms
  CHECK(std::abs(double(w["one_block"]["sm_active"]) - 1.0 / sms) < 0.005);
  CHECK(double(w["full_grid_fma"]["sm_active"]) > 0.95);
  CHECK(double(w["full_grid_fma"]["tensor_active"]) < 0.02);
  CHECK(double(w["gemm_bf16"]["tensor_active"]) > 0.5);
  CHECK(double(w["d2d_copy"]["dram"]) > 0.5);
  CHECK(double(w["d2d_copy"]["tensor_active"]) < 0.02);
}

TEST_CASE("work between steps and after the last one: its own fields; a short phase's counters in range", "[gpu]") {
  const auto run = run_workloads("between");
  const auto& truth = run.truth;
  const auto& lines = run.lines;
  REQUIRE(lines.size() == truth["steps"].get<size_t>());
  for (const auto& l : lines) {
    const int step = l["global_step"];
    INFO("step " << step << ": " << l.dump());
    REQUIRE(l["gpu"].is_object());
    CHECK(l["gpu"]["kernels"] == 3);  // never the evaluation's or the validation's
    CHECK_FALSE(l["phases"].contains("eval"));
    CHECK(l["gpu"]["invariant_exclusions"] == 0);
    CHECK(l["gpu"]["busy_ms"].get<double>() <= l["step_time_ms"].get<double>());
    CHECK(l["gpu_utilization"].get<double>() <= 1.0);
    CHECK(l["step_time_basis"] == "scope_end");
    // Every value in [0, 1]; the step's SM activity between its phases' extremes (the short optimizer
    // phase, 1 ms between two 4 ms ones, included).
    if (l["sm_activity"].is_number()) {
      const double sa = l["sm_activity"];
      CHECK(sa >= 0.0);
      CHECK(sa <= 1.0);
      double lo = 1, hi = 0;
      for (const char* p : {"forward", "optimizer", "backward"}) {
        const auto& c = l["phases"][p]["gpu"]["counters"];
        if (!c.is_object() || !c["sm_activity"].is_number()) continue;
        const double v = c["sm_activity"];
        CHECK(v >= 0.0);
        CHECK(v <= 1.0);
        CHECK(c["coverage"].get<double>() <= 1.0);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (lo <= hi) {
        // The step's window holds idle time around its phases (the host's launch gaps: 5.2 % of it once
        // on an H100), in which no SM is active: at least the phases' lowest activity over the busy
        // share of the window, less a sample's rounding.
        const double busy_share = l["gpu_utilization"].is_number() ? l["gpu_utilization"].get<double>() : 0.95;
        CHECK(sa >= lo * busy_share - 0.02);
        CHECK(sa <= hi + 1e-9);
      }
    }
    if (step == 3) {
      const auto& b = l["between_steps"];
      CHECK(b["gpu"]["kernels"] == truth["eval_kernels"]);
      CHECK(b["gpu"]["busy_ms"].get<double>() >= 5.0);
      CHECK(b["phases"]["eval"]["count"] == 1);
      CHECK(b["host_ms"].get<double>() >= 5.0);
      CHECK(l["step_interval_ms"].get<double>() < l["step_time_ms"].get<double>() + 0.5);  // step 3's gap is tiny
      CHECK(lines[2]["step_interval_ms"].get<double>() >= lines[2]["step_time_ms"].get<double>() + 5.0);
    } else if (step > 0) {
      CHECK(l["between_steps"]["gpu"]["kernels"] == 0);
    }
  }
  REQUIRE(run.events.size() == 1);
  const auto& after = run.events[0]["after_last_step"];
  INFO(run.events[0].dump());
  CHECK(after["gpu"]["kernels"] == truth["validation_kernels"]);
  CHECK(after["gpu"]["busy_ms"].get<double>() >= 9.0);
  CHECK(after["host_ms"].get<double>() >= 9.0);
}

TEST_CASE("trace switches under a second launching thread lose nothing (trace_every=5, kept and detached)", "[gpu]") {
  for (const std::string mode : {"switch_keep", "switch_detach"}) {
    const auto run = run_workloads(mode);
    const auto& truth = run.truth;
    const auto& lines = run.lines;
    INFO(mode);
    REQUIRE(lines.size() == truth["steps"].get<size_t>());
    int64_t attributed = 0, left_out = 0, traced = 0;
    for (const auto& l : lines) {
      const int step = l["global_step"];
      INFO("step " << step << ": " << l.dump());
      // The step's thread launches on its own stream, the helper on another, 50x as often: the markers
      // learn the step thread's (from traced steps 0 and 5, twice when detached), where forward's span
      // is its 1 ms spin; on the helper's stream it would be the launches' few microseconds.
      if (step >= 11) {
        INFO(l["null_reasons"].dump());
        REQUIRE(l["gpu_markers"].is_object());
        CHECK(l["gpu_markers"]["phases"]["forward"]["span_ms"].get<double>() >= 0.8);
      }
      if (step % 5 != 0) {
        CHECK(l["traced"] == false);
        CHECK(l["gpu"].is_null());
        CHECK(l["null_reasons"]["gpu"].is_string());
        continue;
      }
      ++traced;
      CHECK(l["traced"] == true);
      REQUIRE(l["gpu"].is_object());
      const auto& g = l["gpu"];
      // The helper's launches at the switch into tracing are either its step's (launched after the
      // switch) or left out with a count (called while records were off); none is unattributed.
      CHECK(g["unattributed_records"] == 0);
      CHECK(g["invariant_exclusions"] == 0);
      CHECK(g["complete"] == true);
      CHECK(g["missing_launches"] == 0);
      CHECK(phase_gpu(l, "forward")["kernels"] == truth["forward_kernels"]);
      // The helper launches all through the run, but on a busy host its thread may not run within a
      // given 4 ms step (seen twice on the device with the suite on 2 cores): what it launched in a
      // traced step is that step's backward; over the run it must have some (below).
      const auto& phases = l["phases"];
      const int64_t backward = phases.contains("backward") && phases["backward"].contains("gpu")
                                   ? phase_gpu(l, "backward")["kernels"].get<int64_t>()
                                   : 0;  // no helper scope in the step, or one that launched nothing traced
      CHECK(g["kernels"].get<int64_t>() == int64_t(truth["forward_kernels"]) + backward);
      CHECK(g["busy_ms"].get<double>() <= l["step_time_ms"].get<double>());
      attributed += backward;
      left_out += g["launched_untraced_records"].get<int64_t>();
    }
    CHECK(traced == 8);
    CHECK(attributed >= 1);  // the helper's work was seen in traced steps' backward
    // Never more of the helper's work than it launched.
    CHECK(attributed + left_out <= truth["helper_kernels"].get<int64_t>());
    REQUIRE(run.events.size() == 1);
    std::printf("%s: helper kernels %lld, in traced steps' backward %lld, left out at switches %lld\n",
                mode.c_str(), static_cast<long long>(truth["helper_kernels"]), static_cast<long long>(attributed),
                static_cast<long long>(left_out));
  }
}

TEST_CASE("stream markers on a stream the program names: untraced GPU-bound lines diagnosed from their own", "[gpu]") {
  const auto run = run_workloads("markers_named");
  REQUIRE(run.lines.size() == size_t(run.truth["steps"]));
  int own = 0;
  bool believed = false;
  for (const auto& l : run.lines) {
    const int step = l["global_step"];
    INFO("step " << step << ": " << l["gpu_markers"].dump() << " " << l["diagnosis"].dump());
    REQUIRE(l["gpu_markers"].is_object());  // a named stream is marked from the first step
    if (step == 0) continue;  // the first step loads the module
    CHECK(double(l["gpu_markers"]["pending_share"]) > 0.9);
    if (l["traced"] == true) {
      CHECK(l["gpu_markers"]["agrees_with_records"] == true);
      believed = true;
    } else if (believed) {
      CHECK(l["diagnosis"]["basis"] == "markers");
      CHECK(l["diagnosis"]["label"] == "COMPUTE-BOUND");
      ++own;
    }
  }
  CHECK(own >= 24);  // from step 4 on, one in 4 traced: 27 untraced
}

TEST_CASE("stream markers never touch a CUDA graph capture inside a step; those steps say why", "[gpu]") {
  const auto run = run_workloads("markers_capture");  // exits non-zero if a capture was invalidated
  REQUIRE(run.lines.size() == size_t(run.truth["steps"]));
  CHECK(run.truth["captures"] == 4);
  int marked = 0;
  for (const auto& l : run.lines) {
    const int step = l["global_step"];
    INFO("step " << step << ": " << l["gpu_markers"].dump() << " " << l["null_reasons"].dump());
    if (step % 6 == 5) {
      CHECK(l["gpu_markers"].is_null());
      CHECK(std::string(l["null_reasons"]["gpu_markers"]).find("capture") != std::string::npos);
    } else {
      REQUIRE(l["gpu_markers"].is_object());
      ++marked;
    }
  }
  CHECK(marked >= 18);  // the legacy stream named: marked from the first step
}
