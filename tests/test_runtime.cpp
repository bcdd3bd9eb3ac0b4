// The runtime's rules, on a fake GPU backend (tests/fake_backend.hpp): sampled tracing switches the
// backend at step boundaries, untraced and unavailable sections say why, lines wait for their
// records and go out incomplete when overdue, CUPTI is asked for records only when a line has
// waited, detach is asked for after each traced line, and stop() releases everything.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <map>
#include <cstdlib>
#include <set>
#include <optional>

#include "fake_backend.hpp"
#include "fake_run.hpp"
#include "host_config.hpp"
#include "support.hpp"

using steptrace::Config;
using steptrace::details::Session;
using steptrace_test::FakeBackend;
using steptrace_test::FakeRun;
using steptrace_test::base_config;
using steptrace_test::start_on_defaults;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::run_steps;

TEST_CASE("every step traced: each line has its kernels, complete, in its phase", "[runtime]") {
  const auto log = fresh_log("runtime_full");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(run.start(base_config(log)));
  run_steps(*run.gpu, 4, 3);
  {
    TRACE_STEP();  // while this step is open, the first four lines go out: records and samples are in
    CHECK(steptrace_test::wait_for([&] { return steptrace_test::read_lines_live(log).size() == 4; }));
  }
  const auto summary = steptrace::stop();
  CHECK(summary.lines_written == 5);
  auto lines = read_lines(log);
  REQUIRE(lines.size() == 5);
  lines.pop_back();
  for (const auto& l : lines) {
    INFO(l.dump());
    CHECK(l["traced"] == true);
    CHECK(l["gpu"]["complete"] == true);
    CHECK(l["gpu"]["kernels"] == 3);
    CHECK(l["phases"]["forward"]["gpu"]["kernels"] == 3);
    CHECK(l["gpu"]["kernel_ms"].get<double>() == Approx(0.3).margin(1e-9));
  }
  const auto calls = run.gpu->calls();
  CHECK(calls.set_tracing.empty());  // trace_every = 1: never switched
  CHECK(calls.synchronizes == 1);    // stop(): the device, then every record
  CHECK(calls.forced_flushes == 1);
  CHECK(calls.attribution_stops == 1);
  CHECK(calls.counters_stops == 1);
  CHECK(calls.device_state_closed);
}

TEST_CASE("sampled tracing switches the backend at step boundaries, attached ahead of each traced step; untraced "
          "lines say why", "[runtime]") {
  const auto log = fresh_log("runtime_sampled");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = base_config(log);
  cfg.trace_every = 3;
  REQUIRE(run.start(cfg));
  run_steps(*run.gpu, 7, 2);
  steptrace::stop();
  // Step k is traced when k % 3 == 0; the backend is asked at every step boundary (it ignores no-ops).
  CHECK(run.gpu->calls().set_tracing == std::vector<bool>{true, false, false, true, false, false, true});
  // A traced step's CUPTI is attached ahead: at the end of steps 2 and 5, before 3 and 6 begin.
  CHECK(run.gpu->calls().switches == "+--a+--a+");
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 7);
  for (const auto& l : lines) {
    const int step = l["global_step"];
    INFO(l.dump());
    if (step % 3 == 0) {
      CHECK(l["traced"] == true);
      CHECK(l["gpu"]["kernels"] == 2);
    } else {
      CHECK(l["traced"] == false);
      CHECK(l["gpu"].is_null());
      CHECK(l["null_reasons"]["gpu"].get<std::string>().find("trace_every=3") != std::string::npos);
    }
  }
}

TEST_CASE("the stream markers learn the stream a traced step's kernels went to (trace_every=4, and the defaults)",
          "[runtime][markers]") {
  for (const bool defaults : {false, true}) {
    INFO((defaults ? "defaults: overhead_budget decides, compact lines" : "trace_every=4, full lines"));
    const auto log = fresh_log(defaults ? "runtime_learn_stream_default" : "runtime_learn_stream");
    auto backend = std::make_unique<FakeBackend>();
    backend->with_markers = true;
    backend->launch_streams = steptrace::LaunchStreams{0x5000, 19, 20};  // the program's own stream, unnamed
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.trace_every = 4;
    REQUIRE((defaults ? start_on_defaults(run, log) : run.start(cfg)));
    run_steps(*run.gpu, 9, 2);
    steptrace::stop();
    if (defaults) CHECK(read_lines(log).front()["schema"] == "steptrace.step/2");  // the default: compact lines
    CHECK(run.gpu->fake_markers.opened_on == 0x5000);  // learned after step 0 (traced either way), marked from step 1 on
    const auto lines = read_lines(log);
    int steps = 0;
    for (const auto& l : lines) {
      if (!l.contains("global_step")) continue;  // the default log's run record
      ++steps;
      INFO(l.dump());
      if (l["global_step"] >= 1) CHECK(l["gpu_markers"].is_object());
    }
    CHECK(steps == 9);
  }
}

TEST_CASE("a backend that cannot switch tracing back on: the rest of the run is untraced, and says so", "[runtime]") {
  const auto log = fresh_log("runtime_toggle_fails");
  auto backend = std::make_unique<FakeBackend>();
  backend->tracing_error = "CUPTI_ERROR_NOT_INITIALIZED";
  FakeRun run(std::move(backend));
  Config cfg = base_config(log);
  cfg.trace_every = 2;
  REQUIRE(run.start(cfg));
  run_steps(*run.gpu, 5, 1);
  steptrace::stop();
  // Step 0: on (fails), then never asked again.
  CHECK(run.gpu->calls().set_tracing == std::vector<bool>{true});
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 5);
  for (const auto& l : lines) {
    INFO(l.dump());
    CHECK(l["traced"] == false);
    const std::string why = l["null_reasons"]["gpu"];
    if (l["global_step"].get<int>() % 2 == 0) CHECK(why.find("could not be switched back on") != std::string::npos);
    else CHECK(why.find("trace_every=2") != std::string::npos);
  }
}

TEST_CASE("records that come only with a flush: CUPTI is asked once a line has waited flush_after_ms", "[runtime]") {
  const auto log = fresh_log("runtime_flush");
  auto backend = std::make_unique<FakeBackend>();
  backend->delivery = FakeBackend::Delivery::at_flush;
  FakeRun run(std::move(backend));
  Config cfg = base_config(log);
  cfg.flush_after_ms = 30;
  REQUIRE(run.start(cfg));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {  // 10 steps of ~5 ms: ~50 ms, so one or two flushes, not ten
    TRACE_STEP();
    TRACE_PHASE(forward);
    run.gpu->launch(100'000);
    steptrace_test::spin_for_us(5000);
  }
  // The lines wait, then CUPTI is asked: out before stop(), the flushed records made them complete.
  CHECK(steptrace_test::wait_for([&] { return steptrace_test::read_lines_live(log).size() >= 9; }));
  const int flushes_before_stop = run.gpu->calls().flushes;
  const double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  steptrace::stop();
  CHECK(flushes_before_stop >= 1);
  // Not one per step: at most one per flush_after_ms of the time the loop and the wait took (a late
  // background thread stretches that time, never the rule).
  CHECK(flushes_before_stop <= elapsed_ms / 30 + 2);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 10);
  for (const auto& l : lines) {
    INFO(l.dump());
    CHECK(l["gpu"]["complete"] == true);
    CHECK(l["gpu"]["kernels"] == 1);
  }
}

TEST_CASE("a line whose records never come goes out after max_lag_ms, marked incomplete", "[runtime]") {
  const auto log = fresh_log("runtime_overdue");
  auto backend = std::make_unique<FakeBackend>();
  backend->delivery = FakeBackend::Delivery::never;
  FakeRun run(std::move(backend));
  Config cfg = base_config(log);
  cfg.max_lag_ms = 50;
  cfg.max_lag_steps = 1000;  // only the time bound applies
  REQUIRE(run.start(cfg));
  const int64_t t0 = steptrace::monotonic_ns();
  run_steps(*run.gpu, 2, 2);
  {
    TRACE_STEP();  // a third step stays open while the first two wait
    steptrace_test::spin_for_us(20'000);
    const auto early = steptrace_test::read_lines_live(log);
    // Still waiting while under max_lag_ms: certain only if this read ended within 50 ms of the first
    // step's begin (a loaded machine may have held this thread longer; then the lines may be out).
    if (steptrace::monotonic_ns() - t0 < 50'000'000) CHECK(early.empty());
    // Overdue: out without their records.
    CHECK(steptrace_test::wait_for([&] { return steptrace_test::read_lines_live(log).size() == 2; }));
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  for (int i = 0; i < 2; ++i) {
    INFO(lines[i].dump());
    CHECK(lines[i]["gpu"]["complete"] == false);
    CHECK(lines[i]["gpu"]["missing_launches"] == 2);
  }
}

TEST_CASE("detach mode: a detach is asked for once each traced step's line is out; no counters", "[runtime]") {
  const auto log = fresh_log("runtime_detach");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = base_config(log);
  cfg.trace_every = 2;
  cfg.untraced_cupti = steptrace::UntracedCupti::detach;
  REQUIRE(run.start(cfg));
  for (int i = 0; i < 6; ++i) {
    run_steps(*run.gpu, 1, 1);
    // Step i closes traced step i - 1 (odd i): the background thread takes its line and asks for the
    // detach, which the fake grants with records off; wait for it before the next traced step begins.
    if (i % 2 == 1) CHECK(steptrace_test::wait_for([&] { return run.gpu->calls().detaches == (i + 1) / 2; }));
  }
  steptrace::stop();
  const auto calls = run.gpu->calls();
  CHECK(calls.detach_mode);
  CHECK(calls.counters_starts == 0);
  // Traced steps 0, 2, 4: one request per traced line, numbered by traced lines done.
  CHECK(calls.detach_requests == std::vector<uint64_t>{1, 2, 3});
  CHECK(calls.detaches == 3);  // each asked for with records off and no newer traced step begun
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 6);
  CHECK(lines[0]["null_reasons"]["counters"].get<std::string>().find("untraced_cupti=detach") != std::string::npos);
  CHECK(lines[1]["null_reasons"]["gpu"].get<std::string>().find("CUPTI detached between traced steps") !=
        std::string::npos);
}

TEST_CASE("each unavailable part of the backend gives its section a reason that names the cause", "[runtime]") {
  SECTION("no device") {
    const auto log = fresh_log("runtime_no_device");
    auto backend = std::make_unique<FakeBackend>();
    backend->probe_error = "no usable GPU: fake says so";
    FakeRun run(std::move(backend));
    REQUIRE(run.start(base_config(log)));
    run_steps(*run.gpu, 1, 1);
    steptrace::stop();
    const auto l = read_lines(log).at(0);
    INFO(l.dump());
    CHECK(l["device"].is_null());
    CHECK(l["null_reasons"]["gpu"] == "no GPU measured: no usable GPU: fake says so");
    CHECK(l["null_reasons"]["counters"] == "no GPU measured: no usable GPU: fake says so");
    CHECK(run.gpu->calls().attribution_starts == 0);
  }
  SECTION("no device, the budget deciding: no interval of its own past the warm-up (nothing is traced)") {
    const auto log = fresh_log("runtime_no_device_budget");
    auto backend = std::make_unique<FakeBackend>();
    backend->probe_error = "no usable GPU: fake says so";
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.trace_every = 0;  // the budget decides (the default)
    REQUIRE(run.start(cfg));
    run_steps(*run.gpu, 20, 1);
    steptrace::stop();
    const auto lines = read_lines(log);
    REQUIRE(lines.size() == 20);
    for (const auto& l : lines) {
      INFO(l.dump());
      CHECK(l["overhead"]["trace_every"] == 1);
      CHECK(l["traced"] == false);
    }
  }
  SECTION("no device, on the defaults (compact lines): nothing traced, the floor null with its reason") {
    const auto log = fresh_log("runtime_no_device_defaults");
    auto backend = std::make_unique<FakeBackend>();
    backend->probe_error = "no usable GPU: fake says so";
    FakeRun run(std::move(backend));
    REQUIRE(start_on_defaults(run, log));
    run_steps(*run.gpu, 20, 1);
    steptrace::stop();
    std::vector<nlohmann::json> lines;
    for (auto& l : read_lines(log))
      if (l.contains("global_step")) lines.push_back(std::move(l));  // (the run record aside)
    REQUIRE(lines.size() == 20);
    std::map<std::string, std::string> sentences;  // the compact log's codes, as its lines bring them
    for (const auto& l : lines) {
      INFO(l.dump());
      CHECK(l["schema"] == "steptrace.step/2");
      if (l.contains("reason_text"))
        for (const auto& [code, text] : l["reason_text"].items()) sentences.emplace(code, text.get<std::string>());
      CHECK(l["traced"] == false);
      CHECK(l["overhead"]["estimated_fraction_floor"].is_null());
      const std::string code = l["null_reasons"]["overhead.estimated_fraction_floor"];
      REQUIRE(sentences.count(code));
      CHECK(sentences[code].find("no GPU measured: no usable GPU: fake says so") != std::string::npos);
    }
  }
  SECTION("CUPTI held by another tool, counters locked, NVML missing") {
    const auto log = fresh_log("runtime_unavailable");
    auto backend = std::make_unique<FakeBackend>();
    backend->attribution_error = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
    backend->counters_error = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
    backend->device_state_error = "libnvidia-ml.so.1 not found";
    FakeRun run(std::move(backend));
    REQUIRE(run.start(base_config(log)));
    run_steps(*run.gpu, 2, 1);
    {
      TRACE_STEP();
      // A memory reading inside the step (the background thread's next one, whenever it runs).
      const int readings = run.gpu->memory_samples;
      CHECK(steptrace_test::wait_for([&] { return run.gpu->memory_samples > readings + 1; }));
    }
    steptrace::stop();
    const auto l = read_lines(log).at(2);
    INFO(l.dump());
    CHECK(l["traced"] == false);
    CHECK(l["null_reasons"]["gpu"] == "CUPTI unavailable: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED");
    CHECK(l["null_reasons"]["counters"].get<std::string>().find("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES") !=
          std::string::npos);
    CHECK(l["null_reasons"]["device_state"] == "NVML unavailable: libnvidia-ml.so.1 not found");
    CHECK(l["device"]["name"] == "Fake GPU");
    CHECK(l["device"]["uuid"] == "GPU-00000000-1111-2222-3333-444444444444");  // dcgm-exporter's join keys
    CHECK(l["device"]["pci_bus_id"] == "00000000:3B:00.0");
    CHECK(l["memory"]["device_used_peak_bytes"] == int64_t{1} << 30);  // memory still sampled
    const auto calls = run.gpu->calls();
    CHECK(calls.attribution_stops == 0);  // never started
    CHECK(calls.counters_stops == 0);
  }
  SECTION("switched off in the configuration") {
    const auto log = fresh_log("runtime_off");
    FakeRun run(std::make_unique<FakeBackend>());
    Config cfg = base_config(log);
    cfg.cupti = steptrace::Mode::off;
    REQUIRE(run.start(cfg));
    run_steps(*run.gpu, 1, 1);
    steptrace::stop();
    const auto l = read_lines(log).at(0);
    CHECK(l["null_reasons"]["gpu"].get<std::string>().find("cupti=off") != std::string::npos);
    CHECK(l["null_reasons"]["counters"].get<std::string>().find("cupti=off") != std::string::npos);
    CHECK(run.gpu->calls().attribution_starts == 0);
  }
}

TEST_CASE("overhead_budget: a costly trace lowers the trace rate; every line says what it costs and why", "[runtime]") {
  const auto log = fresh_log("runtime_budget");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = base_config(log);
  cfg.trace_every = 0;  // the budget decides
  cfg.overhead_budget = 0.05;
  REQUIRE(run.start(cfg));
  // A step is 1 ms of host work; while records are on it costs 0.5 ms more (what CUPTI would). At
  // every N the cost is 0.5 / N of a step: 5 % needs N >= 10. The three kernels make the model's
  // guess 3 x 1.1 us: far too low, so only a measurement finds the cost.
  constexpr int kSteps = 200;
  for (int i = 0; i < kSteps; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    for (int k = 0; k < 3; ++k) run.gpu->launch(10'000);
    steptrace_test::spin_for_us(run.gpu->tracing() ? 1500 : 1000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == kSteps);
  for (const auto& l : lines) {
    INFO(l.dump());
    const auto& o = l["overhead"];
    CHECK(o["decided_by"] == "overhead_budget");
    CHECK(o["budget"].get<double>() == 0.05);
    const uint64_t step = l["global_step"];
    if (step < 8) CHECK(o["trace_every"] == 1);  // the warm-up traces every step
    if (!l["traced"].get<bool>()) {
      CHECK(l["null_reasons"]["gpu"].get<std::string>().find("chosen by overhead_budget=0.05") != std::string::npos);
    }
    if (step >= kSteps - 80) {
      // What the budget makes of the costs is the controller's, tested on step series without a
      // clock (test_overhead, "[controller]": this case's 0.5 ms per traced step settles on 13). Here,
      // on a machine others share, only what holds whatever the spin loops measure (two busy loops
      // beside it make untraced steps as slow as traced ones, and the interval rightly goes back to
      // 1): the interval within the budget's range, every part saying how it was obtained.
      CHECK(o["trace_every"].get<int>() >= 1);
      CHECK(o["trace_every"].get<int>() <= steptrace::details::kMaxBudgetTraceEvery);
      CHECK((o["method"] == "measured" || o["method"] == "launch_model"));
      CHECK((o["parts"]["tracing"]["basis"] == "measured" || o["parts"]["tracing"]["basis"] == "modelled"));
      CHECK(o["estimated_fraction"].is_number());
      CHECK(o["within_budget"].is_boolean());
    }
  }
}

namespace {
/// The budget chooses the interval (trace_every 0); `mode` for what CUPTI does between traced steps.
Config budget_config(const std::string& log, steptrace::UntracedCupti mode = steptrace::UntracedCupti::automatic) {
  Config cfg = base_config(log);
  cfg.trace_every = 0;
  cfg.untraced_cupti = mode;
  return cfg;
}

/// A launch-bound step on the fake: `launches` kernels of 10 ns each (the GPU mostly idle), then host
/// work up to `step_us`.
void launch_bound_step(FakeBackend& gpu, int launches, int64_t step_us) {
  const int64_t t0 = steptrace::monotonic_ns();
  TRACE_STEP();
  TRACE_PHASE(forward);
  for (int k = 0; k < launches; ++k) gpu.launch(10);
  const int64_t left = step_us - (steptrace::monotonic_ns() - t0) / 1000;
  if (left > 0) steptrace_test::spin_for_us(static_cast<int>(left));
}
}  // namespace

TEST_CASE("overhead_budget, untraced_cupti=auto: a launch-bound step detaches CUPTI; counters stop; lines say so",
          "[runtime]") {
  const auto log = fresh_log("runtime_budget_detach");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(Config{}.untraced_cupti == steptrace::UntracedCupti::automatic);  // the default
  REQUIRE(run.start(budget_config(log)));
  // 2 000 launches in 3 ms, the GPU busy ~1 %: kept attached, CUPTI would cost 2 000 x 0.6 us = 1.2 ms
  // per step (~40 %) at any interval. Detached, the model's trace costs 2.2 + 8.3 ms, over 4000 steps
  // of 3 ms where the GPU waited for the launches (over 100, 3.5 %, where it did not): detaching pays.
  // The switch is decided on a line (step 8's at the earliest) and a detach follows a traced line:
  // whenever the background thread gets to them (a sanitizer's slowdown makes that hundreds of steps
  // later). The program runs until CUPTI was detached once, then 120 steps more.
  int kSteps = 0;
  for (; kSteps < 20'000 && run.gpu->calls().detaches == 0; ++kSteps) launch_bound_step(*run.gpu, 2000, 3000);
  for (int i = 0; i < 120; ++i, ++kSteps) launch_bound_step(*run.gpu, 2000, 3000);
  steptrace::stop();
  const auto calls = run.gpu->calls();
  CHECK(calls.switches_to_detach == 1);
  REQUIRE(calls.detach_mode);
  CHECK(calls.counters_starts == 1);
  CHECK(calls.counters_stops == 1);  // stopped by the switch, not again at stop()
  CHECK(calls.detaches >= 1);
  const int64_t since = calls.detach_in_force_at;
  CHECK(since >= 9);  // decided on step 8's line at the earliest, in force from a later step
  // A background thread that far behind may also have dropped steps (max_pending_steps): counted.
  const auto lines = read_lines(log);
  const auto end = steptrace_test::read_events(log).back();
  REQUIRE(lines.size() + end["dropped"]["steps_total"].get<std::size_t>() == static_cast<std::size_t>(kSteps));
  int detached_untraced = 0, detached_traced = 0, counters_null = 0;
  for (const auto& l : lines) {
    INFO(l.dump());
    const int64_t step = l["global_step"];
    const auto& o = l["overhead"];
    CHECK(o["kernel_timestamps"] == "instrumented (fake backend)");
    CHECK(o["untraced_cupti"] == (step >= since ? "detach" : "keep"));
    // The estimate follows the mode the step ran under: kept attached, every step pays the residual.
    if (o["untraced_residual_ms"].is_number()) CHECK((o["untraced_residual_ms"].get<double>() > 0) == (step < since));
    if (step < since) continue;
    // PM sampling stops once the background thread sees detach in force: the first steps after may
    // still hold samples taken before (as many as that thread was late by, on a loaded machine); from
    // the first null on, counters are null with the reason (no sample after the stop).
    if (!l["counters"].is_null()) {
      CHECK(counters_null == 0);
    } else {
      ++counters_null;
      CHECK(l["null_reasons"]["counters"].get<std::string>().find("overhead_budget detaches CUPTI") != std::string::npos);
    }
    if (l["traced"].get<bool>()) {
      ++detached_traced;
      CHECK(l["gpu"]["kernels"] == 2000);  // a traced step after a detach has all its kernels
    } else {
      ++detached_untraced;
      CHECK(l["null_reasons"]["gpu"].get<std::string>().find("chosen by overhead_budget, untraced_cupti=auto") !=
            std::string::npos);
    }
  }
  CHECK(detached_traced >= 1);
  CHECK(detached_untraced >= 50);
  CHECK(counters_null >= 1);
  CHECK(lines.back()["counters"].is_null());
  // The estimate starts over in detach mode, from the model: 2 000 x 1.1 us + 8.3 ms per trace.
  const auto at_since = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l["global_step"] == since; });
  REQUIRE(at_since != lines.end());
  const auto& first = (*at_since)["overhead"];
  INFO(first.dump());
  CHECK(first["method"] == "launch_model");
  CHECK(first["untraced_residual_ms"] == 0.0);
  CHECK(first["traced_step_extra_ms"].get<double>() == Approx(2.2 + 8.3).epsilon(0.01));
  CHECK(lines.back()["overhead"]["untraced_residual_ms"] == 0.0);
}

TEST_CASE("untraced_cupti=detach: the CUPTI attaches and detaches the backend timed are what the launch model charges",
          "[runtime]") {
  // The fake attaches in 30 ms and detaches in 20 (an H200 host's took 9-54 ms, session 73), where the
  // model says 6.8 + 1.5 (an H100's). A trace every 100 steps: the model speaks until three traced steps
  // are compared (step 300), its charge the timed means once cycles timed from step 64 on reached it.
  const auto log = fresh_log("runtime_cycle_times");
  FakeRun run(std::make_unique<FakeBackend>());
  run.gpu->attach_ms_each = 30;
  run.gpu->detach_ms_each = 20;
  Config cfg = base_config(log);
  cfg.trace_every = 100;
  cfg.untraced_cupti = steptrace::UntracedCupti::detach;
  REQUIRE(run.start(cfg));
  for (int i = 0; i < 320; ++i) launch_bound_step(*run.gpu, 2000, 3000);
  steptrace::stop();
  REQUIRE(run.gpu->calls().detaches >= 2);
  int early = 0, timed = 0;
  for (const auto& l : read_lines(log)) {
    const int64_t step = l["global_step"];
    const auto& o = l["overhead"];
    if (o["method"] != "launch_model" || !o["traced_step_extra_ms"].is_number()) continue;
    INFO("step " << step << ": " << o.dump());
    const double extra = o["traced_step_extra_ms"];
    if (step >= 1 && step < 64) {  // no cycle kept yet: the model's
      ++early;
      CHECK(extra == Approx(2.2 + 6.8 + 1.5).epsilon(0.01));
    } else if (step >= 250 && step < 300) {  // the attach ahead of step 100's trace and its detach, at least
      ++timed;
      CHECK(extra == Approx(2.2 + 30 + 20).epsilon(0.01));
    }
  }
  CHECK(early >= 30);
  CHECK(timed >= 30);
}

TEST_CASE("on the defaults: the CUPTI attaches and detaches the backend timed reach the floor the compact lines give",
          "[runtime]") {
  // The sibling of the test above on what a user who sets nothing runs (compact lines, the budget deciding,
  // untraced_cupti=auto): a launch-bound 1 ms step (200 launches) is detached after the warm-up, its first
  // detached interval traced at once (before step 64: its cycle is not kept), then one step in 4000 (the
  // longest). Until a cycle timed from step 64 on reached the estimator the floor (the cost at 4000) charges
  // the model's 8.3 ms a trace; after, the fake's 30 + 20: (50 - 8.3) / (step x 4000) more.
  const auto log = fresh_log("runtime_cycle_times_defaults");
  FakeRun run(std::make_unique<FakeBackend>());
  run.gpu->attach_ms_each = 30;
  run.gpu->detach_ms_each = 20;
  REQUIRE(start_on_defaults(run, log));
  // Until a trace after step 100 was detached from (the fake times that detach and the attach before it).
  int steps = 0, detaches_at_100 = -1;
  for (; steps < 20'000; ++steps) {
    if (steps == 100) detaches_at_100 = run.gpu->calls().detaches;
    if (steps > 100 && run.gpu->calls().detaches > detaches_at_100) break;
    launch_bound_step(*run.gpu, 200, 1000);
  }
  for (int i = 0; i < 300; ++i, ++steps) launch_bound_step(*run.gpu, 200, 1000);
  steptrace::stop();
  REQUIRE(run.gpu->calls().detaches > detaches_at_100);
  std::vector<double> step_ms, before, after;
  const auto lines = read_lines(log);
  for (const auto& l : lines) {
    if (!l.contains("global_step")) continue;  // the run record
    const int64_t step = l["global_step"];
    INFO("step " << step << ": " << l["overhead"].dump());
    CHECK(l["schema"] == "steptrace.step/2");
    step_ms.push_back(l["step_time_ms"]);
    const auto& floor = l["overhead"]["estimated_fraction_floor"];
    if (!floor.is_number()) continue;
    if (step >= 200 && step < 1200) before.push_back(floor);
    if (step >= steps - 60) after.push_back(floor);
  }
  REQUIRE(before.size() >= 500);
  REQUIRE(after.size() >= 30);
  const auto median = [](const std::vector<double>& v) { return steptrace::details::median_of(v); };
  const double expected = (30 + 20 - 8.3) / (median(step_ms) * 4000);
  INFO("floor before " << median(before) << ", after " << median(after) << ", expected rise " << expected);
  CHECK(median(after) - median(before) > 0.7 * expected);
  CHECK(median(after) - median(before) < 1.3 * expected);
}

TEST_CASE("overhead_budget: untraced_cupti=keep never detaches; a step with few launches is not detached", "[runtime]") {
  SECTION("launch-bound, keep: over the budget, said so") {
    const auto log = fresh_log("runtime_budget_keep");
    FakeRun run(std::make_unique<FakeBackend>());
    REQUIRE(run.start(budget_config(log, steptrace::UntracedCupti::keep)));
    for (int i = 0; i < 40; ++i) launch_bound_step(*run.gpu, 2000, 3000);
    steptrace::stop();
    CHECK(run.gpu->calls().switches_to_detach == 0);
    CHECK_FALSE(run.gpu->calls().detach_mode);
    const auto lines = read_lines(log);
    REQUIRE(lines.size() == 40);
    for (const auto& l : lines) CHECK(l["overhead"]["untraced_cupti"] == "keep");
    CHECK(lines.back()["overhead"]["within_budget"] == false);
  }
  SECTION("GPU-bound, few launches, auto: staying attached costs less than an attach per trace") {
    const auto log = fresh_log("runtime_budget_gpu_bound");
    auto backend = std::make_unique<FakeBackend>();
    backend->start_delay_ns = 2'000'000;  // kernels start 2 ms after their launch: the host runs ahead
    FakeRun run(std::move(backend));
    REQUIRE(run.start(budget_config(log)));
    for (int i = 0; i < 40; ++i) {
      TRACE_STEP();
      TRACE_PHASE(forward);
      for (int k = 0; k < 20; ++k) run.gpu->launch(1'000'000);
      steptrace_test::spin_for_us(3000);
    }
    steptrace::stop();
    CHECK(run.gpu->calls().switches_to_detach == 0);
    const auto lines = read_lines(log);
    for (const auto& l : lines) CHECK(l["overhead"]["untraced_cupti"] == "keep");
    // 20 launches x 0.79 us charged whole (0.5 % of 3 ms: detaching, 8.3 ms per trace over 100 steps,
    // would cost 2.8 %); none waited for the host: the low end is 0.
    CHECK(double(lines.back()["overhead"]["untraced_residual_ms"]) == Approx(20 * 0.79e-3));
    CHECK(lines.back()["overhead"]["untraced_residual_low_ms"] == 0.0);
  }
  SECTION("detach asked for under the budget: detached from the start, requests counted by traced steps begun") {
    const auto log = fresh_log("runtime_budget_detach_explicit");
    FakeRun run(std::make_unique<FakeBackend>());
    REQUIRE(run.start(budget_config(log, steptrace::UntracedCupti::detach)));
    // Until the background thread has taken the warm-up's lines in and a detach followed them (at
    // once on an idle machine, later under a sanitizer), then 20 steps more.
    int steps = 0;
    for (; steps < 20'000 && run.gpu->calls().detaches == 0; ++steps) launch_bound_step(*run.gpu, 500, 2000);
    for (int i = 0; i < 20; ++i, ++steps) launch_bound_step(*run.gpu, 500, 2000);
    steptrace::stop();
    const auto calls = run.gpu->calls();
    CHECK(calls.detach_mode);
    CHECK(calls.switches_to_detach == 0);
    CHECK(calls.counters_starts == 0);
    const auto lines = read_lines(log);
    const auto end = steptrace_test::read_events(log).back();
    REQUIRE(lines.size() + end["dropped"]["steps_total"].get<std::size_t>() == static_cast<std::size_t>(steps));
    int traced = 0;
    for (const auto& l : lines) {
      CHECK(l["overhead"]["untraced_cupti"] == "detach");
      traced += l["traced"].get<bool>();
    }
    // Every request names the traced steps begun so far (the warm-up's 8 back to back count 8, not one
    // attach); a detach follows the traced lines once records are off.
    REQUIRE_FALSE(calls.detach_requests.empty());
    CHECK(calls.detach_requests.back() <= static_cast<uint64_t>(traced));
    // The warm-up traces 8 steps back to back with one attach: had requests counted attaches (1), they
    // would never match the 8 traced steps begun and no detach would follow.
    CHECK(calls.detaches >= 1);
    CHECK(traced < steps);
  }
}

TEST_CASE("overhead: an explicit trace_every wins; without attribution the estimate is null with the reason", "[runtime]") {
  const auto log = fresh_log("runtime_budget_explicit");
  {
    FakeRun run(std::make_unique<FakeBackend>());
    Config cfg = base_config(log);
    cfg.trace_every = 3;
    REQUIRE(run.start(cfg));
    run_steps(*run.gpu, 6, 2);
    steptrace::stop();
  }
  for (const auto& l : read_lines(log)) {
    INFO(l.dump());
    CHECK(l["overhead"]["decided_by"] == "trace_every");
    CHECK(l["overhead"]["trace_every"] == 3);
    CHECK(l["overhead"]["budget"].is_null());
    CHECK(l["null_reasons"]["overhead.budget"].get<std::string>().find("trace_every set explicitly") == 0);
  }
  const auto off = fresh_log("runtime_budget_off");
  {
    FakeRun run(std::make_unique<FakeBackend>());
    Config cfg = base_config(off);
    cfg.cupti = steptrace::Mode::off;
    REQUIRE(run.start(cfg));
    run_steps(*run.gpu, 3, 1);
    steptrace::stop();
  }
  for (const auto& l : read_lines(off)) {
    INFO(l.dump());
    CHECK(l["overhead"]["estimated_fraction"].is_null());
    CHECK(l["null_reasons"]["overhead.estimated_fraction"].get<std::string>().find("CUPTI attribution is off") == 0);
  }
}

TEST_CASE("a binding's measured bookkeeping is charged in host_api at its latest value, from the step it came with",
          "[runtime]") {
  // 1 ms steps; from step 100 the binding says its bookkeeping costs 0.1 ms a step beyond its calls'
  // model (as the Python callbacks do: details::set_binding_step_extra_ns), until step 200; a line's
  // host_api charges the value in force as its step closed on every step of its window (the steps
  // before the first value were not measured, not free), and a start() set it back to 0.
  steptrace::details::set_binding_step_extra_ns(5e6);  // an earlier run's (clamped to 1 ms)
  CHECK(steptrace::details::binding_step_extra_ns() == 1e6);
  const auto log = fresh_log("runtime_binding_extra");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(run.start(base_config(log)));
  CHECK(steptrace::details::binding_step_extra_ns() == 0);
  for (int i = 0; i < 300; ++i) {
    if (i == 100) steptrace::details::set_binding_step_extra_ns(100'000);
    if (i == 200) steptrace::details::set_binding_step_extra_ns(0);
    TRACE_STEP();
    TRACE_PHASE(forward);
    steptrace_test::spin_for_us(1000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 300);
  const auto host_api = [&](int step) { return lines[static_cast<std::size_t>(step)]["overhead"]["parts"]["host_api"]["fraction"].get<double>(); };
  // The window at step N (steps 8..N; the warm-up's not counted): the calls 2 x 120 ns each and, with a
  // value in force, 0.1 ms each, over the steps' own times as the lines give them (the ledger's step time).
  const auto expected = [&](int last, double extra_ms) {
    double step_ms = 0;
    for (int i = 8; i <= last; ++i) step_ms += lines[static_cast<std::size_t>(i)]["step_time_ms"].get<double>();
    return (last - 7) * (extra_ms + 2 * steptrace::OverheadLedger::kScopeNs * 1e-6) / step_ms;
  };
  // Step 98: none yet, the calls' model alone. Step 99 closed as step 100 began, after the value was set:
  // from its line on, each step of the window carries 0.1 ms (~10 % of a 1 ms step). Step 199 closed
  // after it was set back to 0: the calls alone again; and so does the step stop() closed (299), which
  // takes no new value (the last one taken stands: 0).
  CHECK(host_api(98) < 0.001);
  CHECK(host_api(99) == Approx(expected(99, 0.1)).epsilon(0.1));
  CHECK(host_api(198) == Approx(expected(198, 0.1)).epsilon(0.1));
  CHECK(host_api(99) > 50 * host_api(98));  // ~0.1 against the calls' ~0.0003 (on 1 ms steps)
  CHECK(host_api(199) == Approx(expected(199, 0)).epsilon(0.1));
  CHECK(host_api(299) == Approx(expected(299, 0)).epsilon(0.1));
}

namespace {
/// 120 steps of 1 ms (their scopes), each followed by 1 ms outside any step, a binding's 0.1 ms a step:
/// full lines, or the defaults (`defaults`: as a user who sets nothing but the log).
void run_with_gaps(const std::string& log, bool defaults) {
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE((defaults ? start_on_defaults(run, log) : run.start(base_config(log))));
  steptrace::details::set_binding_step_extra_ns(100'000);
  for (int i = 0; i < 120; ++i) {
    {
      TRACE_STEP();
      TRACE_PHASE(forward);
      steptrace_test::spin_for_us(1000);
    }
    steptrace_test::spin_for_us(1000);  // between steps
  }
  steptrace::stop();
}
}  // namespace

TEST_CASE("host_api is a share of the steps' own time, not of what runs between them", "[runtime]") {
  // 1 ms steps (their scopes), each followed by 1 ms of the program's own outside any step (an
  // evaluation, a data wait, a benchmark's steps without steptrace), with a binding's 0.1 ms a step:
  // host_api ~10 % of the steps' own time. Over the time to the next step's begin it would read ~5 %
  // (the C++ transformer timed in groups with and without steptrace's calls read 124 ms steps for 62 so,
  // and its markers' pace went from 1 in 4 back to 1 in 2; H200, session 76).
  const auto log = fresh_log("runtime_host_api_own_time");
  run_with_gaps(log, /*defaults=*/false);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 120);
  double own_ms = 0, to_next_ms = 0;
  for (int i = 8; i <= 118; ++i) {
    own_ms += lines[static_cast<std::size_t>(i)]["step_time_ms"].get<double>();  // its scope's
    to_next_ms += lines[static_cast<std::size_t>(i)]["step_interval_ms"].get<double>();
  }
  INFO("own " << own_ms << " ms, to the next step " << to_next_ms << " ms");
  REQUIRE(to_next_ms > 1.5 * own_ms);
  const double host_api = lines[118]["overhead"]["parts"]["host_api"]["fraction"].get<double>();
  const double expected = 111 * (0.1 + 2 * steptrace::OverheadLedger::kScopeNs * 1e-6) / own_ms;
  CHECK(host_api == Approx(expected).epsilon(0.1));
  CHECK(host_api > 1.3 * 111 * 0.1 / to_next_ms);  // not over the time between steps too
}

TEST_CASE("host_api over the steps' own time, on the defaults: the compact line's floor holds it", "[runtime]") {
  // The case above as a user who sets nothing runs it: compact lines carry no parts, but the estimate's
  // floor (the longest interval's: what no trace interval takes away) holds host_api, ~10 % of the
  // steps' own time here; over the time to the next step it would be ~5 %.
  const auto log = fresh_log("runtime_host_api_own_time_default");
  run_with_gaps(log, /*defaults=*/true);
  const auto lines = read_lines(log);
  std::vector<nlohmann::json> steps;
  for (const auto& l : lines)
    if (l.contains("global_step")) steps.push_back(l);
  REQUIRE(steps.size() == 120);
  CHECK_FALSE(steps.back()["overhead"].contains("parts"));  // a compact line
  const double floor = steps[118]["overhead"]["estimated_fraction_floor"].get<double>();
  INFO("floor " << floor);
  CHECK(floor > 0.08);
  CHECK(steps[118]["overhead"]["within_budget"] == false);  // 0.1 ms a 1 ms step, against 0.1 %
}

namespace {
/// 1 ms steps; from step 100 a binding says 1 ms a step beyond its calls' model (the most the runtime
/// takes): no interval can help that. `full`: full lines; else the defaults, as a user who sets nothing.
std::vector<nlohmann::json> binding_over_budget_lines(const std::string& name, bool full) {
  const auto log = fresh_log(name);
  FakeRun run(std::make_unique<FakeBackend>());
  if (full) {
    Config cfg;
    cfg.log_path = log;
    cfg.summary = false;
    cfg.line_detail = steptrace::LineDetail::full;
    REQUIRE(run.start(cfg));
  } else {
    REQUIRE(start_on_defaults(run, log));
  }
  for (int i = 0; i < 300; ++i) {
    if (i == 100) steptrace::details::set_binding_step_extra_ns(1e6);
    TRACE_STEP();
    TRACE_PHASE(forward);
    steptrace_test::spin_for_us(1000);
  }
  steptrace::stop();
  steptrace::details::set_binding_step_extra_ns(0);
  return read_lines(log);
}
/// The interval an untraced line's reason names ("step not traced: trace_every=N ..."), 0: none.
int named_interval(const std::string& why) {
  const std::string prefix = steptrace::reason_text(steptrace::Reason::not_traced_interval);
  return why.rfind(prefix, 0) == 0 ? std::atoi(why.c_str() + prefix.size()) : 0;
}
}  // namespace

TEST_CASE("on the defaults, a binding's measured bookkeeping reaches the compact line's estimate and its floor",
          "[runtime]") {
  // What a user of the framework callbacks gets without a setting: compact lines, overhead_budget
  // deciding; the binding's 1 ms from step 100 goes to the floor (the estimate at the longest interval),
  // and the lines say the budget is not kept.
  const auto lines = binding_over_budget_lines("runtime_binding_extra_default", false);
  REQUIRE(lines.size() == 300);
  CHECK(lines.front()["schema"] == "steptrace.step/2");  // the default: compact lines
  const auto& before = lines[98]["overhead"], after = lines[299]["overhead"];
  INFO(before.dump() << "\n" << after.dump());
  REQUIRE(before["estimated_fraction_floor"].is_number());
  REQUIRE(after["estimated_fraction_floor"].is_number());
  CHECK(before["estimated_fraction_floor"].get<double>() < 0.05);
  // Every step of the window carries the 1 ms in force (~1 ms steps: the step's own time and the
  // binding's bookkeeping's share, ~100 %), on the last line too: the step stop() closed takes no new
  // value and keeps the last one (it used to charge 0 there).
  CHECK(after["estimated_fraction_floor"].get<double>() > 0.4);
  CHECK(after["estimated_fraction"].get<double>() >= after["estimated_fraction_floor"].get<double>() - 1e-9);
  CHECK(after["within_budget"] == false);
  CHECK_FALSE(after.contains("over_budget_by"));  // the full line's: the floor over the budget says it here
  // An untraced line's reason names the interval it ran under, each interval its own code, so that the
  // compact log (which carries a code's sentence once) reads each one, not the first for all (it said
  // "trace_every=8" on every untraced step after the probe: GPT-2 on an H200, session 73).
  std::map<std::string, std::string> sentences;
  std::vector<int64_t> traced;
  std::vector<std::pair<int64_t, int>> named;  // untraced step, the interval its reason names
  for (const auto& l : lines) {
    if (l.contains("reason_text"))
      for (const auto& [code, text] : l["reason_text"].items()) sentences.emplace(code, text.get<std::string>());
    const int64_t step = l["global_step"];
    if (l["traced"] == true) {
      traced.push_back(step);
      continue;
    }
    const std::string code = l["null_reasons"]["gpu"];
    REQUIRE(sentences.count(code));
    named.emplace_back(step, named_interval(sentences[code]));
  }
  // Under the interval a line names, N, the budget's schedule traces one step in each block of N (a
  // change of interval traces the step it takes effect at): a trace lies less than 2N steps from the line,
  // unless the run ended first. (Read as "8" for every interval, the lines long after the probe's last
  // trace would say 8 with no trace near.)
  const int64_t last = lines.back()["global_step"];
  std::set<int> intervals;
  for (const auto& [step, n] : named) {
    INFO("untraced step " << step << " names trace_every=" << n);
    REQUIRE(n >= 2);
    intervals.insert(n);
    const bool near = std::any_of(traced.begin(), traced.end(), [&](int64_t t) { return std::abs(t - step) < 2 * n; });
    CHECK((near || step > last - 2 * n));
  }
  CHECK(named.size() > 200);
  CHECK(intervals.size() >= 2);  // the probe's 8, then the budget's longer ones
}

TEST_CASE("a line over the budget names what keeps it there (full lines; the defaults' sibling above)", "[runtime]") {
  const auto lines = binding_over_budget_lines("runtime_binding_extra_full", true);
  REQUIRE(lines.size() == 300);
  CHECK(lines.front()["schema"] == "steptrace.step/1");
  for (const auto& l : lines) {
    const auto& o = l["overhead"];
    INFO(l["global_step"] << " " << o.dump());
    if (!o["estimated_fraction"].is_number() || !o["estimated_fraction_floor"].is_number()) {
      CHECK(o["over_budget_by"].is_null());
      continue;
    }
    const bool within = o["within_budget"] == true;
    const std::string by = o["over_budget_by"];
    // "none" exactly on the lines within the budget; over it, "interval" exactly where the floor fits.
    CHECK((by == "none") == within);
    if (!within) CHECK((by == "interval") == (o["estimated_fraction_floor"].get<double>() <= o["budget"].get<double>()));
    // The untraced line's reason names the interval in force.
    if (l["traced"] == false) CHECK(named_interval(l["null_reasons"]["gpu"]) == o["trace_every"].get<int>());
  }
  // The binding's 1 ms a step is steptrace's calls on the training thread: no interval cuts it.
  CHECK(lines.back()["overhead"]["over_budget_by"] == "host_api");
}

TEST_CASE("overhead_budget: counters run around traced steps only; untraced lines say so; parts in every line",
          "[runtime]") {
  const auto log = fresh_log("runtime_counters_duty");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = budget_config(log, steptrace::UntracedCupti::keep);
  cfg.overhead_budget = 0.05;
  REQUIRE(run.start(cfg));
  // 1 ms steps of host work; a trace costs 0.5 ms more: the budget traces about one step in 10+. How
  // many steps that takes depends on what the spin loops measure on this machine: the loop runs
  // until 3 steps past the 40th were traced (the cost asks for ~13; 2000 steps bound the loop), so
  // that the checks below never depend on the interval the budget chose.
  int steps = 0, traced_seen_late = 0;
  for (; steps < 160 || (traced_seen_late < 3 && steps < 2000); ++steps) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    for (int k = 0; k < 3; ++k) run.gpu->launch(10'000);
    const bool tracing = run.gpu->tracing();
    traced_seen_late += tracing && steps >= 40;
    steptrace_test::spin_for_us(tracing ? 1500 : 1000);
  }
  steptrace::stop();
  const int kSteps = steps;
  const auto calls = run.gpu->calls();
  CHECK(calls.counters_pauses >= 2);
  CHECK(calls.counters_resumes >= 1);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == static_cast<std::size_t>(kSteps));
  int untraced = 0, traced_with_counters = 0, traced_late = 0;
  for (const auto& l : lines) {
    INFO(l.dump());
    const auto& parts = l["overhead"]["parts"];
    REQUIRE(parts.is_object());
    for (const char* part : {"tracing", "attached", "counters", "host_api", "background", "captures"})
      CHECK(parts.contains(part));
    CHECK(parts["counters"]["basis"] == "in_tracing");
    CHECK(parts["host_api"]["basis"] == "modelled");
    CHECK(parts["background"]["basis"] == "measured");
    if (l["overhead"]["estimated_fraction"].is_number()) {
      const double low = l["overhead"]["estimated_fraction"];
      CHECK(low >= 0);
      // The parts add up: the step-time ones to the estimate, all of them to its high end (host_api at its
      // own high end: the markers at the in-run comparison's upper end).
      const auto fraction = [&](const char* part) {  // null: not counted yet (warm-up)
        return parts[part]["fraction"].is_number() ? parts[part]["fraction"].get<double>() : 0.0;
      };
      CHECK(fraction("tracing") + fraction("attached") + fraction("host_api") == Approx(low).epsilon(1e-6));
      const auto& high = l["overhead"]["estimated_fraction_high"];
      if (high.is_null()) {  // the markers mark, their cost not measured in the run yet: no high end, said why
        CHECK(l["null_reasons"]["overhead.estimated_fraction_high"] ==
              steptrace::reason_text(steptrace::Reason::markers_cost_unbounded));
        CHECK(parts["host_api"]["fraction_high"].is_null());
        CHECK(l["overhead"]["markers_every"].is_number());
      } else {
        const double host_high = parts["host_api"]["fraction_high"].is_number()
                                     ? parts["host_api"]["fraction_high"].get<double>() : fraction("host_api");
        CHECK(host_high >= fraction("host_api"));
        CHECK(low <= high.get<double>());
        CHECK(low + host_high - fraction("host_api") + fraction("background") + fraction("captures") ==
              Approx(high.get<double>()).epsilon(1e-6));
      }
    }
    if (!l["traced"].get<bool>()) {
      ++untraced;
      CHECK(l["counters"].is_null());
      CHECK(l["null_reasons"]["counters"].get<std::string>().find("traced steps only") != std::string::npos);
    } else if (l["global_step"].get<int>() >= 40) {
      ++traced_late;
      traced_with_counters += l["counters"].is_object();
    }
  }
  CHECK(untraced >= 1);
  CHECK(traced_late >= 3);
  CHECK(traced_with_counters == traced_late);  // sampling resumed for each of them and their samples came in
}

TEST_CASE("steps a framework's callbacks open: the estimate stays, no upper end is claimed, said why", "[runtime]") {
  // The Python callbacks say so as each step opens (set_next_step_framework, then the step): what they
  // cost the framework's own code around their calls is in no measurement (several times the lines'
  // estimate, session 69), so estimated_fraction_high - "the program's cost lies in
  // [estimated_fraction, estimated_fraction_high]" - is null on their steps: 20-39 and 60-64 below, the
  // last of them closed by stop(). The opening takes the mark back; a mark no step took (steptrace not
  // running) stays on its thread until the binding clears it. On the defaults (compact lines, which carry
  // no high end) the estimate stays written. Its estimate a lower end, a framework's step never says it is
  // within the budget: over it, false; under it (a roomy budget, 0.5, which these steps fit), null, said
  // why, where the program's own steps say true - in both line modes.
  // `spin_us`: each step's host time (the roomy budget's steps: 1 ms, which the estimate fits under 0.5).
  const auto steps = [](FakeBackend& gpu, int n, bool framework, int spin_us) {
    for (int i = 0; i < n; ++i) {
      if (framework) steptrace::details::set_next_step_framework(true);
      TRACE_STEP();
      CHECK_FALSE(steptrace::details::next_step_framework());  // taken by the step
      TRACE_PHASE(forward);
      for (int k = 0; k < 2; ++k) gpu.launch(100'000);
      if (spin_us) steptrace_test::spin_for_us(spin_us);
    }
  };
  for (const bool roomy : {false, true})
  for (const bool defaults : {false, true}) {
    INFO((defaults ? "defaults (compact lines)" : "full lines") << (roomy ? ", overhead_budget 0.5" : ""));
    const auto log = fresh_log(std::string(defaults ? "runtime_framework_steps_defaults" : "runtime_framework_steps") +
                               (roomy ? "_roomy" : ""));
    FakeRun run(std::make_unique<FakeBackend>());
    Config cfg = budget_config(log);
    if (roomy) cfg.overhead_budget = 0.5;
    REQUIRE((defaults ? start_on_defaults(run, log, roomy ? std::optional<double>(0.5) : std::nullopt) : run.start(cfg)));
    const int spin_us = roomy ? 1000 : 0;
    steps(*run.gpu, 20, false, spin_us);
    steps(*run.gpu, 20, true, spin_us);
    steps(*run.gpu, 20, false, spin_us);
    steps(*run.gpu, 5, true, spin_us);
    steptrace::stop();
    const auto lines = read_lines(log);
    REQUIRE(lines.size() == 65);
    int framework_estimated = 0, plain_bounded = 0, framework_under = 0, plain_within = 0;
    bool last_unbounded = false;
    std::map<std::string, std::string> sentences;  // the compact log's codes, as its lines bring them
    for (const auto& l : lines) {
      if (l.contains("reason_text"))
        for (const auto& [code, text] : l["reason_text"].items()) sentences.emplace(code, text.get<std::string>());
      const int step = l["global_step"].get<int>();
      const auto& o = l["overhead"];
      if (!o["estimated_fraction"].is_number()) continue;
      const bool framework = (step >= 20 && step <= 39) || step >= 60;
      INFO("step " << step << ": " << o.dump());
      // Its estimate a lower end, a framework's step never says it is within the budget: false, or null.
      if (framework) CHECK(o["within_budget"] != true);
      if (framework && o["within_budget"].is_null()) {
        ++framework_under;
        const std::string why = l["null_reasons"]["overhead.within_budget"];
        CHECK((defaults ? sentences[why] : why) == steptrace::reason_text(steptrace::Reason::framework_within_unknown));
        if (!defaults) {
          CHECK(o["over_budget_by"].is_null());
          CHECK(l["null_reasons"]["overhead.over_budget_by"] == why);
        }
      }
      if (framework && o["within_budget"] == false && !defaults) CHECK(o["over_budget_by"].is_string());
      if (!framework) plain_within += o["within_budget"] == true;
      if (defaults) {
        framework_estimated += framework;
        continue;
      }
      if (framework) {
        ++framework_estimated;
        CHECK(o["estimated_fraction_high"].is_null());
        CHECK(l["null_reasons"]["overhead.estimated_fraction_high"] ==
              steptrace::reason_text(steptrace::Reason::framework_steps_unbounded));
        CHECK(o["parts"]["host_api"]["fraction"].is_number());  // the parts stay
        last_unbounded = step == 64;
      } else {
        REQUIRE(o["estimated_fraction_high"].is_number());
        ++plain_bounded;
        CHECK(o["estimated_fraction_high"].get<double>() >= o["estimated_fraction"].get<double>());
      }
    }
    CHECK(framework_estimated >= 20);
    if (roomy) {  // the budget fits these steps: the program's say so, the framework's cannot
      CHECK(framework_under >= 15);
      CHECK(plain_within >= 20);
    } else {  // tiny fake steps over 0.1 %: false on both kinds
      CHECK(framework_under == 0);
    }
    if (!defaults) {
      CHECK(plain_bounded >= 30);
      CHECK(last_unbounded);  // the step stop() closes is the framework's too
    }
  }
}

TEST_CASE("work between steps and after the last one has its own field, never a step's", "[runtime]") {
  const auto log = fresh_log("runtime_between");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(run.start(base_config(log)));
  for (int i = 0; i < 3; ++i) {
    {
      TRACE_STEP();
      TRACE_PHASE(forward);
      for (int k = 0; k < 2; ++k) run.gpu->launch(100'000);
      steptrace_test::spin_for_us(1'000);  // the step outlasts its 0.2 ms of GPU work
    }
    if (i == 1) {  // an evaluation between steps 1 and 2
      TRACE_PHASE_NAMED("eval");
      for (int k = 0; k < 5; ++k) run.gpu->launch(100'000, 100, "eval_kernel");
      steptrace_test::spin_for_us(3'000);
    }
  }
  for (int k = 0; k < 4; ++k) run.gpu->launch(100'000, 100, "validation_kernel");  // after the last step
  steptrace_test::spin_for_us(2'000);
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  for (int i = 0; i < 3; ++i) {
    const auto& l = lines[i];
    INFO(l.dump());
    CHECK(l["gpu"]["kernels"] == 2);  // never the evaluation's or the validation's
    CHECK_FALSE(l["phases"].contains("eval"));
    CHECK(l["step_time_basis"] == "scope_end");
    CHECK(l["gpu"]["invariant_exclusions"] == 0);
  }
  CHECK(lines[0]["between_steps"].is_null());
  CHECK(lines[1]["between_steps"]["gpu"]["kernels"] == 0);
  const auto& b = lines[2]["between_steps"];
  CHECK(b["gpu"]["kernels"] == 5);
  CHECK(b["gpu"]["busy_ms"].get<double>() > 0);
  CHECK(b["gpu"]["top_kernels"][0]["name"] == "eval_kernel");
  CHECK(b["host_ms"].get<double>() >= 3.0);
  CHECK(b["phases"]["eval"]["host_ms"].get<double>() >= 3.0);
  // Step 1's own time ends at its scope; the interval to step 2 holds the evaluation.
  CHECK(lines[1]["step_interval_ms"].get<double>() >= lines[1]["step_time_ms"].get<double>() + 3.0);
  const auto events = steptrace_test::read_events(log);
  REQUIRE(events.size() == 1);
  const auto& end = events[0];
  INFO(end.dump());
  REQUIRE(end["event"] == "end");
  CHECK(end["after_last_step"]["gpu"]["kernels"] == 4);
  CHECK(end["after_last_step"]["gpu"]["top_kernels"][0]["name"] == "validation_kernel");
  CHECK(end["after_last_step"]["host_ms"].get<double>() >= 2.0);
}

TEST_CASE("work between steps after an untraced step is unknown, and says why", "[runtime]") {
  const auto log = fresh_log("runtime_between_sampled");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = base_config(log);
  cfg.trace_every = 2;
  REQUIRE(run.start(cfg));
  for (int i = 0; i < 4; ++i) {
    {
      TRACE_STEP();
      run.gpu->launch(100'000);
    }
    run.gpu->launch(100'000, 100, "between_kernel");
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 4);
  CHECK(lines[1]["between_steps"]["gpu"]["kernels"] == 1);  // after traced step 0: records were on
  CHECK(lines[1]["gpu"].is_null());
  CHECK(lines[2]["between_steps"]["gpu"].is_null());        // after untraced step 1
  CHECK(lines[2]["null_reasons"]["between_steps.gpu"].get<std::string>().find("not traced") != std::string::npos);
  CHECK(lines[2]["gpu"]["kernels"] == 1);
  CHECK(lines[3]["between_steps"]["gpu"]["kernels"] == 1);
  const auto events = steptrace_test::read_events(log);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["after_last_step"]["gpu"].is_null());  // step 3 was not traced
}

TEST_CASE("a record whose launch entered before tracing switched on is left out with its reason", "[runtime]") {
  const auto log = fresh_log("runtime_switch_in");
  FakeRun run(std::make_unique<FakeBackend>());
  Config cfg = base_config(log);
  cfg.trace_every = 2;
  REQUIRE(run.start(cfg));
  for (int i = 0; i < 4; ++i) {
    TRACE_STEP();
    TRACE_PHASE(backward);
    if (i == 2) run.gpu->launch_entered_before_switch(50'000);  // a second thread's call, entered at the switch
    run.gpu->launch(100'000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 4);
  const auto& l = lines[2];
  INFO(l.dump());
  CHECK(l["gpu"]["kernels"] == 1);  // only the kernel whose launch was seen
  CHECK(l["gpu"]["complete"] == true);
  // Counted on the next traced line taken after the record came (counts since the previous line).
  int left_out = 0, unattributed = 0;
  for (const auto& x : lines)
    if (x["gpu"].is_object()) {
      left_out += x["gpu"]["launched_untraced_records"].get<int>();
      unattributed += x["gpu"]["unattributed_records"].get<int>();
    }
  CHECK(left_out == 1);
  CHECK(unattributed == 0);
}

TEST_CASE("invariants on a live run: a phase opened before its step, counter samples above 1", "[runtime]") {
  const auto log = fresh_log("runtime_invariants");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(run.start(base_config(log)));
  {
    TRACE_STEP();
    run.gpu->launch(100'000);
    steptrace_test::spin_for_us(1'000);
  }
  std::optional<steptrace::PhaseScope> early;
  early.emplace(steptrace::phase_tag::forward);  // opened between steps, closed inside the next one
  // Opened well before the step (50 ms) so that, on an unloaded machine, it outlasts the ~1 ms step.
  // The checks below hold whatever the step's length: a loaded machine may stretch the step past it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  run.gpu->set_sample_value(1.5);  // the PM samples of the next step read an impossible 150 %
  {
    TRACE_STEP();
    run.gpu->launch(100'000);
    steptrace_test::spin_for_us(500);
    early.reset();
    steptrace_test::spin_for_us(500);
  }
  run.gpu->set_sample_value(0.5);
  for (int i = 0; i < 2; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    run.gpu->launch(100'000);
    steptrace_test::spin_for_us(2'000);
  }
  steptrace::stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 4);
  const auto& bad = lines[1];
  INFO(bad.dump());
  // The invariant, not a timing: a phase longer than its step is never published. Here it is longer
  // unless the step itself ran past 50 ms; either way the line is possible, and says why when not.
  const bool host_excluded = bad["forward_time_ms"].is_null();
  if (host_excluded) {
    CHECK(bad["gpu"]["invariant_exclusions"].get<int>() >= 2);  // the phase and its built-in field
    CHECK(bad["phases"]["forward"]["host_ms"].is_null());
    CHECK(bad["null_reasons"]["forward_time_ms"].get<std::string>().find("before the step began") != std::string::npos);
  } else {
    CHECK(bad["forward_time_ms"].get<double>() <= bad["step_time_ms"].get<double>() + steptrace::details::kInvariantHostSlackNs / 1e6);
  }
  CHECK(bad["counters"]["excluded_values"].get<int>() > 0);
  for (const auto& l : lines) {
    INFO(l.dump());
    for (const char* f : {"sm_activity", "memory_bandwidth_utilization", "tensor_core_or_pipe_utilization", "gpu_utilization"})
      if (l[f].is_number()) {
        CHECK(l[f].get<double>() >= 0.0);
        CHECK(l[f].get<double>() <= 1.0);
      }
  }
  CHECK(lines[3]["sm_activity"].get<double>() == Approx(0.5));
  CHECK(lines[3]["forward_time_ms"].is_number());
  CHECK(lines[3]["gpu"]["invariant_exclusions"] == 0);
}

TEST_CASE("an ending with thousands of lines waiting still writes its end record in time, the rest counted",
          "[runtime]") {
  const auto log = fresh_log("runtime_end_backlog");
  auto cfg = steptrace_test::host_config(log);
  cfg.max_pending_steps = 65536;
  cfg.max_lag_steps = 100000;
  REQUIRE(steptrace::start(cfg));
  constexpr int kSteps = 20000;
  for (int i = 0; i < kSteps; ++i) {
    TRACE_STEP();
    for (int p = 0; p < 20; ++p) {
      TRACE_PHASE_NAMED("phase_with_a_long_name_for_a_heavy_line");
    }
  }
  // What the SIGTERM handler's thread does; true when the ending was served within its wait.
  const bool served = steptrace::details::Session::current().end_now("SIGTERM", 0);
  const auto early = steptrace_test::read_events(log);
  const auto written = read_lines(log).size();
  steptrace::stop();
  INFO(written << " lines written by the ending");
  // Served: its end record is in the log when end_now returns (the handler then lets the process die).
  // A machine so loaded that the background thread got no time in 0.9 s is not this test's question.
  if (served) REQUIRE(early.size() == 1);
  const auto events = steptrace_test::read_events(log);
  REQUIRE(events.size() == 2);  // the ending's, and stop()'s
  const auto& end = events[0];
  CHECK(end["reason"] == "SIGTERM");
  // Every step is accounted for: written, cut at the end, or dropped by the full queue.
  const auto accounted = end["lines_written"].get<uint64_t>() + end["dropped"]["lines_cut_at_end"].get<uint64_t>() +
                         end["dropped"]["steps_total"].get<uint64_t>();
  CHECK(accounted == static_cast<uint64_t>(kSteps));
  if (early.size() == 1) CHECK(end["lines_written"].get<uint64_t>() == written);
  std::remove(log.c_str());  // ~100 MB
}
