// The stream markers on the runtime, on a fake GPU backend (tests/fake_backend.hpp): the diagnosis from
// an untraced step's own markers, the stream they mark and why not, their pace under overhead_budget
// (the records' own time, and marked steps against unmarked ones in the run), and the marker ring.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fake_backend.hpp"
#include "fake_run.hpp"
#include "support.hpp"

using steptrace::Config;
using steptrace_test::FakeBackend;
using steptrace_test::FakeRun;
using steptrace_test::base_config;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::run_steps;
using steptrace_test::start_on_defaults;

namespace {
/// A fake GPU with stream markers whose untraced launches still occupy their stream.
std::unique_ptr<FakeBackend> marked_backend() {
  auto backend = std::make_unique<FakeBackend>();
  backend->with_markers = backend->untraced_work_runs = true;
  return backend;
}

/// A step of two phases, each launching one kernel of `kernel_us`, then `host_us` of host work, then a
/// wait for the stream (the program syncs each step, as on loss.item()).
void marked_step(FakeBackend& gpu, int kernel_us, int host_us, uint32_t stream = 7) {
  TRACE_STEP();
  {
    TRACE_PHASE(forward);
    gpu.launch(kernel_us * 1000, 100, "fwd", stream);
  }
  {
    TRACE_PHASE(backward);
    gpu.launch(kernel_us * 1000, 100, "bwd", stream);
    if (host_us) steptrace_test::spin_for_us(host_us);
  }
  gpu.wait_stream(stream);
}

/// A log's step lines (its run record aside), a compact log's reason codes turned back into the sentences
/// its lines brought them with, so that the defaults' lines read as the full ones' where they hold a field.
std::vector<nlohmann::json> step_lines(const std::string& log) {
  std::map<std::string, std::string> said;
  std::vector<nlohmann::json> out;
  for (auto& l : read_lines(log)) {
    if (l.contains("reason_text"))
      for (const auto& [code, text] : l["reason_text"].items()) said.emplace(code, text.get<std::string>());
    if (!l.contains("global_step")) continue;
    if (l.contains("null_reasons"))
      for (auto it = l["null_reasons"].begin(); it != l["null_reasons"].end(); ++it)
        if (it.value().is_string() && said.count(it.value().get<std::string>())) it.value() = said[it.value().get<std::string>()];
    out.push_back(std::move(l));
  }
  return out;
}

/// Started with the tests' settings but the trace interval (`every`), or on the defaults alone (compact
/// lines, overhead_budget deciding): what users get.
bool start_markers_run(FakeRun& run, const std::string& log, bool defaults, int every = 4) {
  if (defaults) return start_on_defaults(run, log);
  Config cfg = base_config(log);
  cfg.trace_every = every;
  return run.start(cfg);
}
}  // namespace

TEST_CASE("stream markers: a GPU-bound untraced step is diagnosed from its own markers, a host-bound one is not",
          "[runtime][markers]") {
  // Each on full lines at trace_every=4, and on the defaults alone (compact lines, overhead_budget
  // deciding: the first 8 steps traced), which hold no `points`, `scopes`, `agrees_with_records` or
  // diagnosis reason.
  for (const bool defaults : {false, true})
  for (const bool gpu_bound : {true, false}) {
    INFO((gpu_bound ? "GPU-bound" : "host-bound") << (defaults ? ", the defaults" : ""));
    const auto log = fresh_log(std::string(gpu_bound ? "runtime_markers_gpu" : "runtime_markers_host") + (defaults ? "_default" : ""));
    // The same host loop (two 100 us kernels, 20 ms of host work in backward) under a synthetic GPU: every
    // marker reached 1 s after it was recorded (the GPU far behind: pending all through the step, whatever
    // the host's timing), or at once (never behind: pending 0). The traced steps' records say host-bound
    // either way: a GPU-bound step's own markers win over them.
    auto backend = marked_backend();
    backend->fake_markers.lag_ns = gpu_bound ? 1'000'000'000 : 0;
    FakeRun run(std::move(backend));
    REQUIRE(start_markers_run(run, log, defaults));
    constexpr int kernel_us = 100, host_us = 20000;
    const int steps = defaults ? 28 : 12;  // the defaults: past the warm-up (8) by enough for the hold's lines
    marked_step(*run.gpu, kernel_us, host_us);  // step 0, traced: its records arm the markers
    marked_step(*run.gpu, kernel_us, host_us);
    REQUIRE(steptrace_test::wait_for([] { return steptrace::details::marker_ring().armed(); }));
    for (int i = 2; i < steps; ++i) marked_step(*run.gpu, kernel_us, host_us);
    steptrace::stop();
    CHECK(run.gpu->fake_markers.opens == 1);
    CHECK(run.gpu->fake_markers.closes >= 1);  // released at stop()
    const auto lines = step_lines(log);
    REQUIRE(lines.size() == std::size_t(steps));
    const int believed_after = defaults ? 8 : 4;  // a traced step whose markers agreed with its records
    int held = 0, marked_untraced = 0, unbounded = 0;
    for (const auto& l : lines) {
      const int step = l["global_step"];
      INFO(l.dump());
      // A fixed trace_every marks every step: no unmarked step to compare a marked one with, so what the
      // markers cost has no upper end once a marked step is counted (past the ledger's warm-up, 8 steps).
      if (!defaults && step >= 10 && l["overhead"]["estimated_fraction"].is_number()) {
        CHECK(l["overhead"]["markers_every"] == 1);
        CHECK(l["overhead"]["estimated_fraction_high"].is_null());
        CHECK(l["null_reasons"]["overhead.estimated_fraction_high"] ==
              steptrace::reason_text(steptrace::Reason::markers_cost_unbounded));
        ++unbounded;
      }
      // The defaults: the budget holds the markers at 1 in 2 until the comparison has measured (below), and
      // a compact line claims no high end at all - the estimate and its floor stand, nothing more.
      if (defaults && step >= 10 && l["overhead"]["estimated_fraction"].is_number()) {
        CHECK_FALSE(l["overhead"].contains("estimated_fraction_high"));
        CHECK_FALSE(l["overhead"].contains("parts"));
        CHECK(l["overhead"]["estimated_fraction_floor"].is_number());
        ++unbounded;
      }
      if (step < 2) continue;  // armed somewhere in these
      if (defaults && !l["gpu_markers"].is_object()) {
        // The budget deciding: 1 step in 2 from the warm-up's end until the in-run comparison has
        // measured (core/marked_steps.hpp), said as such.
        CHECK(l["traced"] == false);
        CHECK(l["null_reasons"]["gpu_markers"].get<std::string>().find(
                  "until marked and unmarked steps have been compared in this run") != std::string::npos);
        ++held;
        continue;
      }
      REQUIRE(l["gpu_markers"].is_object());
      marked_untraced += l["traced"] == false && step > believed_after;
      if (!defaults) {
        CHECK(l["gpu_markers"]["points"] == 6);  // the step's begin and end, two phases' begins and ends
        CHECK(l["gpu_markers"]["phases"]["forward"]["scopes"] == 1);
      }
      const double share = l["gpu_markers"]["pending_share"];
      // A span is the GPU time between the phase's markers: with a constant lag, the backward's host
      // time, which holds the 20 ms of host work.
      CHECK(double(l["gpu_markers"]["phases"]["backward"]["span_ms"]) >= 20.0);
      if (gpu_bound) {
        // Pending from the step's begin marker to its end: all of the step but the moment between the
        // step's begin and its first marker (a few microseconds in a step of 20 ms and more).
        CHECK(share > 0.7);
      } else {
        CHECK(share == 0);  // every marker reached as it was recorded
      }
      if (l["traced"] == true) {
        if (!defaults) CHECK(l["gpu_markers"]["agrees_with_records"] == true);
        CHECK(l["diagnosis"]["basis"] == "traced");
      } else if (step > believed_after) {  // after a traced step whose markers agreed with its records
        if (!defaults) CHECK(l["gpu_markers"]["agrees_with_records"].is_null());
        CHECK(l["diagnosis"]["basis"] == (gpu_bound ? "markers" : "carried"));
        // The records' 0.2 ms of kernels in a step of 20 ms and more: host-bound, carried; the markers,
        // pending all through the step, say the GPU held it back (SM efficiency 1: compute-bound).
        CHECK(l["diagnosis"]["label"] == (gpu_bound ? "COMPUTE-BOUND" : "HOST/LAUNCH-BOUND"));
        if (gpu_bound && !defaults) CHECK(l["diagnosis"]["reason"].get<std::string>().rfind("stream markers:", 0) == 0);
      }
    }
    CHECK(marked_untraced >= 3);  // diagnosed from their own markers above
    if (defaults) CHECK(held >= 1);  // from the warm-up's end (step 8) on
    CHECK(unbounded == (defaults ? 18 : 2));  // steps 10-27 on the defaults, 10 and 11 at trace_every=4
  }
}

TEST_CASE("stream markers: a traced step whose work runs on another stream keeps them off, and the lines say why",
          "[runtime][markers]") {
  for (const bool defaults : {false, true}) {  // trace_every=4 on full lines; the defaults alone
  INFO((defaults ? "the defaults" : "trace_every=4, full lines"));
  const auto log = fresh_log(defaults ? "runtime_markers_elsewhere_default" : "runtime_markers_elsewhere");
  FakeRun run(marked_backend());
  REQUIRE(start_markers_run(run, log, defaults));
  marked_step(*run.gpu, 500, 0, /*stream=*/9);
  marked_step(*run.gpu, 500, 0, 9);
  REQUIRE(steptrace_test::wait_for(
      [] { return steptrace::details::marker_ring().why_off().find("other streams") != std::string::npos; }));
  for (int i = 2; i < 6; ++i) marked_step(*run.gpu, 500, 0, 9);
  steptrace::stop();
  CHECK(run.gpu->fake_markers.records == 0);  // never armed: no event recorded on the legacy stream
  const auto lines = step_lines(log);
  REQUIRE(lines.size() == 6);
  for (const auto& l : lines) {
    INFO(l.dump());
    CHECK(l["gpu_markers"].is_null());
    if (l["global_step"] >= 2)
      CHECK(l["null_reasons"]["gpu_markers"].get<std::string>().find("set_marker_stream") != std::string::npos);
  }
  }
}

TEST_CASE("stream markers: a backend without them, or stream_markers=false, gives every line the reason",
          "[runtime][markers]") {
  for (const bool setting_off : {false, true}) {
    const auto log = fresh_log("runtime_markers_off");
    auto backend = std::make_unique<FakeBackend>();
    backend->with_markers = setting_off;
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.stream_markers = !setting_off;
    REQUIRE(run.start(cfg));
    run_steps(*run.gpu, 3, 1);
    steptrace::stop();
    for (const auto& l : read_lines(log)) {
      INFO(l.dump());
      CHECK(l["gpu_markers"].is_null());
      CHECK(l["null_reasons"]["gpu_markers"] ==
            (setting_off ? "stream markers switched off (stream_markers=false / STEPTRACE_STREAM_MARKERS=0)"
                         : "this GPU backend has no stream markers"));
    }
    CHECK(run.gpu->fake_markers.records == 0);
  }
  // The backend without them on the defaults alone (compact lines: the reason as a code, its sentence once).
  const auto log = fresh_log("runtime_markers_off_default");
  FakeRun run(std::make_unique<FakeBackend>());
  REQUIRE(start_on_defaults(run, log));
  run_steps(*run.gpu, 3, 1);
  steptrace::stop();
  const auto lines = step_lines(log);
  REQUIRE(lines.size() == 3);
  for (const auto& l : lines) {
    INFO(l.dump());
    CHECK(l["gpu_markers"].is_null());
    CHECK(l["null_reasons"]["gpu_markers"] == "this GPU backend has no stream markers");
  }
}

TEST_CASE("stream markers: a stream the program names is marked from the first step", "[runtime][markers]") {
  for (const bool defaults : {false, true}) {  // trace_every=4 on full lines; the defaults alone
  INFO((defaults ? "the defaults" : "trace_every=4, full lines"));
  const auto log = fresh_log(defaults ? "runtime_markers_named_default" : "runtime_markers_named");
  auto backend = marked_backend();
  backend->marker_stream = 9;
  // A synthetic GPU far behind (every marker reached 1 s after it was recorded): pending through each
  // step whatever the host's timing, so that the markers decide the untraced steps on any machine.
  backend->fake_markers.lag_ns = 1'000'000'000;
  FakeRun run(std::move(backend));
  steptrace::set_marker_stream(reinterpret_cast<void*>(0x9));
  REQUIRE(start_markers_run(run, log, defaults));
  const int steps = defaults ? 12 : 6;  // on the defaults the first 8 are traced
  for (int i = 0; i < steps; ++i) marked_step(*run.gpu, 500, 0, 9);
  steptrace::stop();
  const auto lines = step_lines(log);
  REQUIRE(lines.size() == std::size_t(steps));
  int untraced_marked = 0;
  for (const auto& l : lines) {
    INFO(l.dump());
    // No traced step needed to arm them; on the defaults the budget may leave untraced steps after the
    // first 8 unmarked (its thinning, said), never for another reason.
    if (defaults && l["gpu_markers"].is_null() && l["traced"] == false && l["global_step"] >= 8) {
      CHECK(l["null_reasons"]["gpu_markers"].get<std::string>().find("overhead_budget") != std::string::npos);
      continue;
    }
    REQUIRE(l["gpu_markers"].is_object());
    if (!defaults) CHECK(l["gpu_markers"]["points"] == 6);
    // Believed from traced step 0's agreement on: an untraced step's basis is its own markers.
    if (l["traced"] == false) {
      CHECK(l["diagnosis"]["basis"] == "markers");
      ++untraced_marked;
    }
  }
  if (!defaults) CHECK(lines[0]["gpu_markers"]["agrees_with_records"] == true);
  // On full lines steps 1-3 and 5 are untraced and marked; on the defaults which untraced steps the
  // budget's pace marks is its pick (in this fake, ~1 ms steps, it thins them).
  if (!defaults) CHECK(untraced_marked == 4);
  }
}

TEST_CASE("stream markers: thinned by overhead_budget where marking every step costs over their share of it, "
          "1 step in 2 where it does not until the in-run comparison has measured (the default's settings)",
          "[runtime][markers]") {
  // Full lines (the budget deciding, as by default), costly and cheap markers; then the costly ones on the
  // defaults alone: compact lines, where an unmarked line's reason is a code and its sentence comes once.
  // Moderate markers on a 5 ms GPU-bound step (session 67's H200 case): as cheap as they come for the
  // first 60 steps, then 3 us a record (~0.4 % of the step when every step is marked), so that they
  // are thinned once the budget measures the traces. They are thinned to a pace in between, into the
  // share the aim leaves beside CUPTI kept attached and the calls, and charged at that pace from the line
  // that sets it: the line that thinned them once charged them at every step, and the budget, taking
  // that for a cost no interval could fix, chose the longest interval (on the H200: 1 trace in 4000).
  enum class Markers { costly, cheap, moderate };
  struct Case {
    Markers markers;
    bool compact;     // the defaults alone (compact lines)
    const char* log;  // also what the case is called
    const char* what;
  };
  const Case cases[] = {
      {Markers::costly, false, "runtime_markers_thinned", "40 us a marker"},
      {Markers::cheap, false, "runtime_markers_every_step", "markers as cheap as they come"},
      {Markers::costly, true, "runtime_markers_thinned_default", "40 us a marker, the defaults (compact lines)"},
      {Markers::moderate, false, "runtime_markers_moderate", "3 us a marker from step 60, 5 ms steps"},
      {Markers::moderate, true, "runtime_markers_moderate_default",
       "3 us a marker from step 60, 5 ms steps, the defaults (compact lines)"},
  };
  for (const Case& c : cases) {
    const bool costly = c.markers == Markers::costly, moderate = c.markers == Markers::moderate;
    const bool compact = c.compact;
    INFO(c.what);
    const auto log = fresh_log(c.log);
    auto backend = marked_backend();
    backend->fake_markers.lag_ns = 1'000'000'000;  // a synthetic GPU: markers read whatever the host's timing
    // 6 markers a step x 40 us against ~1 ms steps: ~24 % of the step, against half of the default
    // budget (0.05 %): the most thinning there is (1 step in 64).
    if (costly) backend->fake_markers.record_cost_ns = 40'000;
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.trace_every = 0;  // the default: overhead_budget decides
    steptrace::set_marker_stream(reinterpret_cast<void*>(0x7));
    REQUIRE((compact ? start_on_defaults(run, log) : run.start(cfg)));
    // Cheap markers (~0.2 us a record here) against 20 ms steps: ~0.01 % of the step, far under the cap.
    constexpr int kSteps = 200;
    for (int i = 0; i < kSteps; ++i) {
      if (moderate && i == 60) run.gpu->fake_markers.record_cost_ns = 3'000;  // (the training thread: this one)
      marked_step(*run.gpu, moderate ? 2'500 : 500, costly || moderate ? 0 : 20'000);
    }
    steptrace::stop();
    std::vector<nlohmann::json> lines;
    for (auto& l : read_lines(log))
      if (l.contains("global_step")) lines.push_back(std::move(l));  // (the compact log's run record aside)
    REQUIRE(lines.size() == kSteps);
    if (compact) CHECK(lines.front()["schema"] == "steptrace.step/2");
    std::map<std::string, std::string> sentences;  // a compact log's codes, as its lines bring them
    int thinned = 0, marked_after = 0, pace = 0, held_for_comparison = 0;
    int64_t first_thinned = -1;
    for (const auto& l : lines) {
      const int64_t step = l["global_step"];
      INFO("step " << step << ": " << l["gpu_markers"].dump() << " " << l["null_reasons"].dump());
      if (l.contains("reason_text"))
        for (const auto& [code, text] : l["reason_text"].items()) sentences.emplace(code, text.get<std::string>());
      const bool marked = l["gpu_markers"].is_object();
      if (l["traced"] == true) CHECK(marked);  // a traced step is always marked (the records check them)
      std::string why = l["null_reasons"].contains("gpu_markers") ? l["null_reasons"]["gpu_markers"].get<std::string>() : "";
      if (compact && sentences.count(why)) why = sentences[why];  // a code: its sentence
      if (!marked && why.find("overhead_budget") != std::string::npos) {
        CHECK(l["traced"] == false);
        CHECK(why.rfind(steptrace::reason_text(steptrace::Reason::markers_thinned), 0) == 0);
        if (costly) CHECK(why.find("1 step in 64") != std::string::npos);
        const std::size_t at = why.find("1 step in ");
        REQUIRE(at != std::string::npos);
        pace = std::stoi(why.substr(at + 10));
        ++thinned;
        held_for_comparison += why.find("until marked and unmarked steps have been compared in this run") != std::string::npos;
        if (first_thinned < 0) first_thinned = step;
        continue;
      }
      CHECK(marked);  // any other step is marked
      if (first_thinned >= 0 && l["traced"] == false) {
        if (costly) CHECK(steptrace::marked_at(uint64_t(step), 64));  // the untraced steps left marked: 1 in 64
        ++marked_after;
      }
      // From the line that thins them, the markers are charged at the new pace: the estimate's floor (its
      // parts no interval changes: CUPTI attached ~0.03 %, the calls, the markers in what the aim leaves)
      // stays under the budget, compact lines too, and so does host_api. Charged at every step on the
      // line that thinned them, they put both over it. (The interval itself is not checked
      // here: on this loaded machine a traced step's measured extra spreads +-0.25 ms, and its high end
      // alone asks for intervals in the thousands.)
      if (moderate && step >= int64_t(steptrace::details::kProbeAfterSteps)) {
        const nlohmann::json& o = l["overhead"];
        if (o["estimated_fraction_floor"].is_number()) CHECK(double(o["estimated_fraction_floor"]) <= 0.001);
        if (!compact && o["parts"].is_object()) CHECK(double(o["parts"]["host_api"]["fraction"]) <= 0.001);
      }
    }
    if (moderate) {  // thinned (how far depends on what CUPTI attached and the calls leave them here)
      CHECK(thinned >= 10);
      CHECK(pace >= 2);
      if (!compact) CHECK(int(lines.back()["overhead"]["markers_every"]) >= 2);
    } else if (costly) {
      CHECK(thinned >= 60);
      CHECK(first_thinned >= 8);  // not in the warm-up: its one-off costs are not counted
      CHECK(first_thinned <= 100);
    } else {
      // Cheap markers: 1 step in 2 from the warm-up's end, held there until the in-run comparison has
      // measured (16 blocks of 32 steps: more than these 200), whatever their own time says; a record
      // preempted on a loaded machine may still make a marked step look dear (0.91 us a mark against ~0.2
      // seen in a full suite run: 6 lines at 1 in 8 before the hold).
      CHECK(thinned >= 50);  // about half of the ~180 untraced steps after the warm-up (70 seen)
      CHECK(held_for_comparison >= 40);
      CHECK(pace >= 2);
    }
    // The full line says the pace in force (overhead.markers_every): costly markers' 1 in 64.
    if (!compact && costly) CHECK(lines.back()["overhead"]["markers_every"] == 64);
    std::printf("%s: %d lines thinned (1 step in %d) from step %lld, %d untraced lines marked after\n", c.what,
                thinned, pace, static_cast<long long>(first_thinned), marked_after);
  }
}

/// `steps` steps (two 2.5 ms kernels each, ~5 ms) on the fake backend's named stream, each record
/// costing the training thread `record_ns` and holding the GPU `gpu_ns`, the budget deciding: full lines,
/// or the defaults (`compact`).
void run_budget_paced(const std::string& log, bool compact, int64_t record_ns, int64_t gpu_ns, int steps) {
  auto backend = marked_backend();
  backend->fake_markers.record_cost_ns = record_ns;
  backend->fake_markers.gpu_cost_ns = gpu_ns;
  FakeRun run(std::move(backend));
  Config cfg = base_config(log);
  cfg.trace_every = 0;  // the default: overhead_budget decides
  steptrace::set_marker_stream(reinterpret_cast<void*>(0x7));
  REQUIRE((compact ? start_on_defaults(run, log) : run.start(cfg)));
  for (int i = 0; i < steps; ++i) marked_step(*run.gpu, 2'500, 0);
  steptrace::stop();
}

TEST_CASE("stream markers: a record's cost on the GPU, which its call does not pay, is found by comparing marked and "
          "unmarked steps in the run; the pace follows it (full lines and the defaults)", "[runtime][markers]") {
  // A 5 ms GPU-bound step (two 2.5 ms kernels, then a wait for the stream) whose 6 records cost the
  // training thread 1 us each (~0.12 % of the step when every step is marked: thinned by their own time
  // to 1 in 4 or 8, more on a loaded machine) and, in the first case, hold the stream 150 us each on the
  // GPU (what the call never sees: an event holds the next kernel until the one before has finished,
  // ~3 us on an H200; here 50 times that, to stand out of this machine's noise): a marked step costs
  // ~0.7 ms more than an unmarked one (5 holds before the step's wait; the end's falls on the next step).
  // Once 16 blocks of 32 steps hold both kinds, the comparison is what the pace charges: the
  // thinning's message says so and the pace goes to the most there is. Without the GPU's part the
  // comparison may still find a marked step dearer than its records' own time (the ring's bookkeeping,
  // the fake backend's lock that the background thread's reads share with the launches: it did in a CI
  // run, not on a busier machine), but by tens of us, not the ~0.7 ms: the pace stays well short of it.
  struct Case {
    bool gpu_cost, compact;
    const char* log;
  };
  const Case cases[] = {{true, false, "runtime_markers_in_run"},
                        {true, true, "runtime_markers_in_run_default"},
                        {false, false, "runtime_markers_own_time"},
                        {false, true, "runtime_markers_own_time_default"}};
  int pace_with[2] = {0, 0}, pace_without[2] = {0, 0};
  for (const Case& c : cases) {
    INFO(c.log);
    const auto log = fresh_log(c.log);
    run_budget_paced(log, c.compact, 1'000, c.gpu_cost ? 150'000 : 0, 900);
    std::map<std::string, std::string> sentences;  // a compact log's codes, as its lines bring them
    int pace = 0, in_run = 0, own = 0, lines = 0;
    int unbounded = 0, bounded_late = 0;  // lines with an estimate: no high end (said why); one, from step 800 on
    int last_unbounded = -1, widest = 0, widest_before = 0;  // the last line without one; the sparsest pace so far, up to it
    for (const auto& l : read_lines(log)) {
      if (l.contains("reason_text"))
        for (const auto& [code, text] : l["reason_text"].items()) sentences.emplace(code, text.get<std::string>());
      if (!l.contains("global_step")) continue;
      ++lines;
      // The estimate's high end: none while the markers mark and the comparison has not measured what a
      // marked step costs (its records' own time can read several times low), said why; from then on
      // host_api's high end holds the markers at the comparison's upper end. Compact lines carry none.
      REQUIRE(l.contains("overhead"));
      const auto& o = l["overhead"];
      if (c.compact) {
        CHECK_FALSE(o.contains("estimated_fraction_high"));
      } else if (o["estimated_fraction"].is_number()) {
        const int step = l["global_step"];
        INFO("step " << step << ": " << o.dump());
        if (o["markers_every"].is_number()) widest = std::max(widest, o["markers_every"].get<int>());
        if (o["estimated_fraction_high"].is_null()) {
          ++unbounded;
          CHECK(l["null_reasons"]["overhead.estimated_fraction_high"] ==
                steptrace::reason_text(steptrace::Reason::markers_cost_unbounded));
          CHECK(o["parts"]["host_api"]["fraction_high"].is_null());
          last_unbounded = step, widest_before = widest;
        } else {
          bounded_late += step >= 800;
          const auto& host = o["parts"]["host_api"];
          CHECK(host["fraction_high"].is_number() == host["fraction"].is_number());  // both untimed at first
          if (host["fraction"].is_number()) CHECK(host["fraction_high"].get<double>() >= host["fraction"].get<double>());
          CHECK(o["estimated_fraction_high"].get<double>() >= o["estimated_fraction"].get<double>());
        }
      }
      if (l["gpu_markers"].is_object() || !l["null_reasons"].contains("gpu_markers")) continue;
      std::string why = l["null_reasons"]["gpu_markers"];
      if (c.compact && sentences.count(why)) why = sentences[why];
      if (why.find("overhead_budget") == std::string::npos) continue;
      const std::size_t at = why.find("1 step in ");
      REQUIRE(at != std::string::npos);
      pace = std::stoi(why.substr(at + 10));  // the last line's pace
      in_run += why.find("(marked steps against unmarked ones in this run)") != std::string::npos;
      own += why.find("(the records' own time)") != std::string::npos;
    }
    std::printf("%s: the last pace 1 step in %d; %d unmarked lines thinned by the records' own time, %d by the "
                "comparison\n", c.log, pace, own, in_run);
    CHECK(lines == 900);
    if (!c.compact) {
      std::printf("%s: %d lines without a high end (the markers not measured yet), %d with one from step 800\n", c.log,
                  unbounded, bounded_late);
      CHECK(unbounded > 0);
      // 16 blocks of 32 steps holding both kinds come by step ~550 at 1 in 32 or denser (one marked step a
      // block); at 1 in 64 (the records' own time alone on a very loaded machine) half the blocks hold one.
      if (widest_before <= 32) {
        CHECK(last_unbounded < 800);
        CHECK(bounded_late >= 90);
      }
    }
    CHECK(own > 0);  // thinned first by the records' own time
    if (c.gpu_cost) CHECK(in_run > 0);  // then by the comparison
    (c.gpu_cost ? pace_with : pace_without)[c.compact] = pace;
  }
  // ~0.7 ms a marked step of 5 ms: ~13 %, against the markers' share of the 0.1 % budget: the most
  // thinning (64); the records' own ~6 us a marked step (0.12 %): 1 in 4 or 8 (up to 32 when loaded).
  for (int compact : {0, 1}) {
    INFO((compact ? "the defaults" : "full lines"));
    CHECK(pace_with[compact] == steptrace::kMaxMarkersEvery);
    CHECK(pace_without[compact] >= 2);
    CHECK(pace_without[compact] <= 32);
    CHECK(pace_with[compact] > pace_without[compact]);
  }
}

TEST_CASE("stream markers: the unmarked lines' reason says the cost the pace charges now, written again where "
          "the comparison takes over at the same pace (full lines and the defaults)", "[runtime][markers]") {
  // Records that cost the training thread 60 us each (their own time alone, ~0.3 ms a marked step, ~6 %
  // of the ~5 ms step: the most thinning, 1 in 64) and hold the GPU 400 us each: once the comparison has
  // 16 blocks it finds ~2 ms more a marked step and takes over at the same pace. The lines' reason then
  // says so (it kept the records' own time it was first written with, as host_api charged the other).
  // At 1 in 64 about one block of 32 steps in two holds a marked step: 16 blocks take ~1 050 steps, more
  // where a loaded machine's noise keeps the comparison unresolved a while (a run beside a build took
  // ~1 250): 1 800 steps.
  struct Case {
    bool compact;
    const char* log;
  };
  for (const Case& c : {Case{false, "runtime_markers_reason_moves"}, Case{true, "runtime_markers_reason_moves_default"}}) {
    INFO(c.log);
    const auto log = fresh_log(c.log);
    run_budget_paced(log, c.compact, 60'000, 400'000, 1800);
    int own_at_64 = 0, in_run_at_64 = 0, own_after_in_run = 0;
    bool in_run_seen = false;
    for (const auto& l : step_lines(log)) {
      if (l["gpu_markers"].is_object() || !l["null_reasons"].contains("gpu_markers")) continue;
      const std::string why = l["null_reasons"]["gpu_markers"];
      if (why.find("overhead_budget") == std::string::npos || why.find("1 step in 64") == std::string::npos) continue;
      const bool in_run = why.find("(marked steps against unmarked ones in this run)") != std::string::npos;
      const bool own = why.find("(the records' own time)") != std::string::npos;
      own_at_64 += own, in_run_at_64 += in_run;
      in_run_seen = in_run_seen || in_run;
      own_after_in_run += in_run_seen && own;
    }
    std::printf("%s: at 1 in 64, %d unmarked lines by the records' own time, %d by the comparison, %d by the records' "
                "own time after it\n", c.log, own_at_64, in_run_at_64, own_after_in_run);
    CHECK(own_at_64 > 0);         // first the records' own time, already the most thinning
    CHECK(in_run_at_64 > 0);      // then the comparison's, at the same pace
    CHECK(own_after_in_run == 0);
  }
}

TEST_CASE("stream markers: once thinned, they come back to every step only after the comparison has measured "
          "(a larger budget on full lines, and the defaults)", "[runtime][markers]") {
  // The 5 ms step above, its records holding the stream 150 us each on the GPU (a marked step ~0.7 ms
  // dearer), their calls first dear and from step 100 on nearly free (0.1 us; what remains is the ring's
  // bookkeeping, ~2-3 us a mark here). At 1 in 1 no unmarked step is left to compare with, so the pace
  // holds at 1 in 2 or more until the comparison has measured and its upper end fits every step; here it
  // finds the GPU's part and thins again.
  //  - overhead_budget=0.05 (full lines): the calls at 100 us thin to 1 in 8 or so; once cheap, their own
  //    time (~0.3 % a marked step) fits every step, which the pace took before session 71 (~step 360, with
  //    ~11 blocks measured: it then stayed there, all of the last 300 steps marked); the GPU's part (~15 %)
  //    fits 1 in 8.
  //  - the defaults (0.1 %): the calls at 20 us thin to the most there is; on this machine the ring's own
  //    time keeps the pace over 1 anyway, so this sibling checks what a user gets: the comparison takes
  //    over and the markers stay thinned (a compact line has no `overhead.markers_every`: its pace is
  //    read from the unmarked lines' reasons, and 1 in 1 leaves none, so the pace is checked through the
  //    marked share of the last steps).
  struct Case {
    bool compact;
    int64_t first_record_ns;
    int thinned_at_least;  // the last 300 untraced steps: at most 1 in this many marked
    const char* log;
  };
  for (const Case& c : {Case{false, 100'000, 4, "runtime_markers_back"}, Case{true, 20'000, 8, "runtime_markers_back_default"}}) {
    INFO(c.log);
    const auto log = fresh_log(c.log);
    auto backend = marked_backend();
    backend->fake_markers.record_cost_ns = c.first_record_ns;
    backend->fake_markers.gpu_cost_ns = 150'000;
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.trace_every = 0;
    cfg.overhead_budget = 0.05;
    steptrace::set_marker_stream(reinterpret_cast<void*>(0x7));
    REQUIRE((c.compact ? start_on_defaults(run, log) : run.start(cfg)));
    constexpr int kSteps = 1200;
    for (int i = 0; i < kSteps; ++i) {
      if (i == 100) run.gpu->fake_markers.record_cost_ns = 100;
      marked_step(*run.gpu, 2'500, 0);
    }
    steptrace::stop();
    const auto lines = step_lines(log);
    REQUIRE(lines.size() == kSteps);
    int marked_late = 0, untraced_late = 0, in_run = 0, every_step = 0;
    bool thinned = false;  // a full line has said a pace over 1
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const auto& l = lines[i];
      if (l.value("traced", false)) continue;
      const bool marked = l["gpu_markers"].is_object();
      if (i >= lines.size() - 300) untraced_late += 1, marked_late += marked;
      if (!marked && l["null_reasons"].contains("gpu_markers")) {
        const std::string why = l["null_reasons"]["gpu_markers"];
        in_run += why.find("(marked steps against unmarked ones in this run)") != std::string::npos;
      }
      if (l.contains("overhead") && l["overhead"].contains("markers_every") && l["overhead"]["markers_every"].is_number()) {
        every_step += thinned && l["overhead"]["markers_every"] == 1;
        thinned = thinned || l["overhead"]["markers_every"] > 1;
      }
    }
    std::printf("%s: %d of the last %d untraced lines marked; %d thinned by the comparison; %d lines at 1 in 1 "
                "after thinning\n", c.log, marked_late, untraced_late, in_run, every_step);
    CHECK(untraced_late > 200);
    CHECK(in_run > 0);                                        // the comparison measured
    CHECK(marked_late * c.thinned_at_least < untraced_late);  // and the markers stayed thinned
    if (!c.compact) {
      CHECK(thinned);
      CHECK(every_step == 0);  // never every step again: the comparison's upper end (~15 % a step) does not fit
    }
  }
}

TEST_CASE("stream markers: cheap ones mark every step only once the comparison has measured (full lines with a "
          "larger budget, and the defaults)", "[runtime][markers]") {
  // The 5 ms step, its records 0.1 us each and free on the GPU. With overhead_budget=0.2 their own
  // time (the ring's ~2-3 us a mark here, ~0.3 % a marked step) fits every step, but until the in-run
  // comparison has measured (16 blocks of 32 steps) the pace is 1 in 2, and the unmarked lines say why;
  // once measured, its upper end (the step's noise on this machine: a fraction of a percent) fits 80 %
  // of the markers' share (8 %) and every step is marked. On the defaults (0.1 %) that own time is over
  // the markers' share: the lines left unmarked say the budget's reason, one or the other (the release
  // on the defaults needs steps long enough for the ring's own time to fit, ~50 ms here: not run).
  for (bool compact : {false, true}) {
    INFO((compact ? "the defaults" : "full lines"));
    const auto log = fresh_log(compact ? "runtime_markers_probe_default" : "runtime_markers_probe");
    auto backend = marked_backend();
    backend->fake_markers.record_cost_ns = 100;
    FakeRun run(std::move(backend));
    Config cfg = base_config(log);
    cfg.trace_every = 0;
    cfg.overhead_budget = 0.2;
    steptrace::set_marker_stream(reinterpret_cast<void*>(0x7));
    REQUIRE((compact ? start_on_defaults(run, log) : run.start(cfg)));
    constexpr int kSteps = 1000;
    for (int i = 0; i < kSteps; ++i) marked_step(*run.gpu, 2'500, 0);
    steptrace::stop();
    const auto lines = step_lines(log);
    REQUIRE(lines.size() == kSteps);
    int comparing = 0, other_budget = 0, unmarked_early = 0, marked_late = 0, untraced_late = 0;
    for (std::size_t i = 20; i < lines.size(); ++i) {
      const auto& l = lines[i];
      if (l.value("traced", false)) continue;
      const bool marked = l["gpu_markers"].is_object();
      if (i >= lines.size() - 200) untraced_late += 1, marked_late += marked;
      if (marked || !l["null_reasons"].contains("gpu_markers")) continue;
      const std::string why = l["null_reasons"]["gpu_markers"];
      if (why.find("overhead_budget") == std::string::npos) continue;
      unmarked_early += i < 300;
      if (why.find("until marked and unmarked steps have been compared in this run") != std::string::npos) ++comparing;
      else ++other_budget;
    }
    std::printf("%s: %d unmarked lines before step 300, %d held for the comparison, %d thinned by the cost; "
                "%d of the last %d untraced lines marked\n", compact ? "the defaults" : "full lines", unmarked_early,
                comparing, other_budget, marked_late, untraced_late);
    CHECK(unmarked_early > 50);  // 1 in 2 at least, before any measurement
    if (!compact) {
      CHECK(comparing > 50);
      CHECK(other_budget == 0);
      CHECK(marked_late * 20 >= untraced_late * 19);  // measured: every step (a flip back at most)
      CHECK(lines.back()["overhead"]["markers_every"] == 1);
    } else {
      CHECK(comparing + other_budget > 50);
    }
  }
}

TEST_CASE("stream markers: a step with a marker not recorded is left out whole, and says why", "[runtime][markers]") {
  for (const bool defaults : {false, true}) {  // trace_every=4 on full lines; the defaults alone
  INFO((defaults ? "the defaults" : "trace_every=4, full lines"));
  const auto log = fresh_log(defaults ? "runtime_markers_refused_default" : "runtime_markers_refused");
  auto backend = marked_backend();
  backend->fake_markers.refuse_from_record = 6;  // the second step's first marker on
  backend->fake_markers.refuse_count = 2;        // its step_begin and forward begin
  FakeRun run(std::move(backend));
  steptrace::set_marker_stream(reinterpret_cast<void*>(0x7));
  REQUIRE(start_markers_run(run, log, defaults));
  for (int i = 0; i < 3; ++i) marked_step(*run.gpu, 500, 0);
  steptrace::stop();
  const auto lines = step_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["gpu_markers"].is_object());
  CHECK(lines[1]["gpu_markers"].is_null());
  CHECK(lines[1]["null_reasons"]["gpu_markers"] ==
        "markers not recorded in this step: 2 of them (no free slot, a CUDA graph capture, or another CUDA context current)");
  CHECK(lines[2]["gpu_markers"].is_object());  // the next step is whole again
  }
}

namespace {
/// Events whose GPU time is the host time + `lag_ns`, reached once `reached` says so.
class ScriptedEvents final : public steptrace::backend::MarkerEvents {
 public:
  std::string open(uint32_t slots, std::uintptr_t, bool*) override {
    host_.assign(slots, 0);
    return {};
  }
  bool record(uint32_t slot, bool, int64_t* host_ns, std::string*) override {
    *host_ns = host_[slot] = ++clock_ * 1000;
    ++records;
    return true;
  }
  // The scripted host clock: each record advances it 1 us; `gap_ns` more has passed since the last one.
  int64_t now_ns() const override { return clock_ * 1000 + gap_ns; }
  Read read(uint32_t slot, int64_t* gpu_ns) override {
    if (!reached) return Read::pending;
    *gpu_ns = host_[slot] + lag_ns;
    return Read::done;
  }
  std::optional<uint32_t> stream_record_id(std::uintptr_t) override { return 7u; }
  void set_stream(std::uintptr_t stream) override { stream_set = stream; }
  void close() override {}
  std::uintptr_t stream_set = 0;
  bool reached = true;
  int64_t lag_ns = 500;
  int64_t gap_ns = 0;
  int records = 0;

 private:
  std::vector<int64_t> host_;
  int64_t clock_ = 0;
};

/// A marker ring on scripted events, the stream named (0x7): marked from the first mark.
std::unique_ptr<steptrace::details::MarkerRing> named_ring(ScriptedEvents& events) {
  auto ring = std::make_unique<steptrace::details::MarkerRing>();
  ring->attach(&events, "");
  ring->name_stream(0x7);
  return ring;
}
}  // namespace

TEST_CASE("the marker ring learns the program's stream from traced steps' launches, follows it, leaves it when destroyed",
          "[runtime][markers]") {
  using Ring = steptrace::details::MarkerRing;
  using steptrace::LaunchStreams;
  auto ring = std::make_unique<Ring>();
  ScriptedEvents events;
  ring->attach(&events, "");
  CHECK(!ring->armed());
  ring->learn_stream(LaunchStreams{0, 100, 100}, false);  // the legacy stream: the records decide
  CHECK(!ring->armed());
  ring->learn_stream(LaunchStreams{0x5000, 89, 100}, false);  // not 9 in 10: the step's work is on several
  CHECK(!ring->armed());
  ring->learn_stream(LaunchStreams{0x5000, 90, 100}, false);
  CHECK(ring->armed());
  CHECK(ring->stream() == 0x5000);
  CHECK(ring->stream_chosen());
  CHECK_FALSE(ring->stream_named());
  ring->mark(0, steptrace::MarkerKind::step_begin, steptrace::kNoPhase);  // opens the events on it
  ring->learn_stream(LaunchStreams{0x6000, 100, 100}, false);  // a later traced step on another: followed
  CHECK(ring->stream() == 0x6000);
  CHECK(events.stream_set == 0x6000);
  ring->learn_stream(LaunchStreams{0x7000, 100, 100}, true);  // detached between traces: once is not enough
  CHECK(ring->stream() == 0x6000);
  ring->learn_stream(LaunchStreams{0x7000, 100, 100}, true);
  CHECK(ring->stream() == 0x7000);
  CHECK(events.stream_set == 0x7000);
  ring->forget_stream(0x6000);  // another stream destroyed: nothing changes
  CHECK(ring->armed());
  ring->forget_stream(0x7000);
  CHECK_FALSE(ring->armed());
  CHECK(ring->why_off().find("destroyed") != std::string::npos);
  CHECK(ring->stream_forgotten());
  CHECK(ring->stream_id() == -1);
  ring->arm(true, {});  // a late traced line's records would arm it again: the destroyed handle is refused
  CHECK_FALSE(ring->armed());
  CHECK(ring->why_off().find("destroyed") != std::string::npos);
  ring->learn_stream(LaunchStreams{0x8000, 100, 100}, false);  // the next traced step shows the next one
  CHECK(ring->armed());
  CHECK(ring->stream() == 0x8000);
  CHECK_FALSE(ring->stream_forgotten());
  // Traced steps whose launches left the learnt stream (the legacy stream, or spread): once is noise,
  // twice in a row the markers go back to the legacy stream, off until the records show the work there.
  ring->learn_stream(LaunchStreams{0, 100, 100}, false);
  CHECK(ring->armed());
  CHECK(ring->stream() == 0x8000);
  ring->learn_stream(LaunchStreams{0x8000, 100, 100}, false);  // back on it: the count starts over
  ring->learn_stream(LaunchStreams{0x9000, 50, 100}, false);
  CHECK(ring->stream() == 0x8000);
  ring->learn_stream(LaunchStreams{0x9000, 50, 100}, false);
  CHECK_FALSE(ring->armed());
  CHECK_FALSE(ring->stream_chosen());
  CHECK(ring->stream() == 0);
  CHECK(events.stream_set == 0);
  CHECK(ring->why_off().find("spread over streams") != std::string::npos);
  ring->detach();

  // A stream the program named is never learned over.
  auto named = std::make_unique<Ring>();
  REQUIRE(named->name_stream(0x9));
  named->attach(&events, "");
  named->learn_stream(LaunchStreams{0x5000, 100, 100}, false);
  CHECK(named->stream() == 0x9);
  named->detach();
}

TEST_CASE("the marker ring: a step's markers once reached, older ones dropped, a step left out whole and why",
          "[runtime][markers]") {
  using steptrace::MarkerKind;
  using steptrace::MarkerPoint;
  using Ring = steptrace::details::MarkerRing;
  auto ring = std::make_unique<Ring>();
  ScriptedEvents events;
  ring->attach(&events, "");
  CHECK(!ring->armed());  // the legacy stream waits for a traced step's line
  REQUIRE(ring->name_stream(0x7));
  CHECK(ring->armed());  // a named stream is marked at once
  std::vector<MarkerPoint> points;
  std::string why;
  const steptrace::PhaseId fwd = steptrace::phase_tag::forward;

  // Step 0 whole; step 1 begun only (its scope never ended); step 2 whole.
  ring->mark(0, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(0, MarkerKind::phase_begin, fwd);
  ring->mark(0, MarkerKind::phase_end, fwd);
  ring->mark(0, MarkerKind::step_end, steptrace::kNoPhase);
  ring->mark(1, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(2, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(2, MarkerKind::step_end, steptrace::kNoPhase);

  events.reached = false;  // not reached yet: nothing consumed
  CHECK(ring->collect(0, points, &why) == Ring::Collect::pending);
  events.reached = true;
  REQUIRE(ring->collect(0, points, &why) == Ring::Collect::ready);
  REQUIRE(points.size() == 4);
  CHECK(points[1].kind == MarkerKind::phase_begin);
  CHECK(points[1].gpu_ns == points[1].host_ns + 500);
  CHECK(ring->collect(1, points, &why) == Ring::Collect::left_out);
  CHECK(why.find("the step's end was not marked") == 0);
  CHECK(points.empty());
  CHECK(ring->collect(2, points, &why) == Ring::Collect::ready);
  CHECK(points.size() == 2);
  CHECK(ring->collect(3, points, &why) == Ring::Collect::none);

  // Steps whose lines were never made (4) are dropped when a later one (5) is asked for.
  ring->mark(4, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(4, MarkerKind::step_end, steptrace::kNoPhase);
  ring->mark(5, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(5, MarkerKind::step_end, steptrace::kNoPhase);
  REQUIRE(ring->collect(5, points, &why) == Ring::Collect::ready);
  CHECK(points.size() == 2);

  // A full ring: the marks that find no free slot are counted in the step's end marker, and the step
  // is left out whole (kSlots + 10 phase marks in step 6, none read meanwhile).
  ring->mark(6, MarkerKind::step_begin, steptrace::kNoPhase);
  for (uint32_t i = 0; i < Ring::kSlots + 10; ++i) ring->mark(6, MarkerKind::phase_begin, fwd);
  ring->mark(6, MarkerKind::step_end, steptrace::kNoPhase);  // no slot either: the end is missing too
  CHECK(ring->collect(6, points, &why) == Ring::Collect::left_out);
  CHECK(why.find("the step's end was not marked") == 0);
  // Read, the ring takes marks again; the next step is whole.
  ring->mark(7, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(7, MarkerKind::step_end, steptrace::kNoPhase);
  CHECK(ring->collect(7, points, &why) == Ring::Collect::ready);
  CHECK(ring->steps_left_out() == 2);
  ring->detach();
  CHECK(!ring->armed());
  CHECK(!ring->stream_named());  // forgotten at stop: a next run is told again
  CHECK(ring->name_stream(0x7));  // and can be: the markers are no longer set up
  ring->detach();
}

TEST_CASE("the marker ring: a boundary right after another shares its marker, one later records its own",
          "[runtime][markers]") {
  using steptrace::MarkerKind;
  using Ring = steptrace::details::MarkerRing;
  ScriptedEvents events;
  const auto ring = named_ring(events);
  REQUIRE(ring->armed());
  const steptrace::PhaseId in = steptrace::phase_tag::input, fwd = steptrace::phase_tag::forward;
  std::vector<steptrace::MarkerPoint> points;
  std::string why;

  // Back to back (no host time between the boundaries): each phase's begin takes the marker before
  // it (the step's begin, the last phase's end); ends always record. 6 marks, 4 records.
  ring->mark(0, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(0, MarkerKind::phase_begin, in);
  ring->mark(0, MarkerKind::phase_end, in);
  ring->mark(0, MarkerKind::phase_begin, fwd);
  ring->mark(0, MarkerKind::phase_end, fwd);
  ring->mark(0, MarkerKind::step_end, steptrace::kNoPhase);
  CHECK(events.records == 4);
  CHECK(ring->recorded() == 4);
  CHECK(ring->shared() == 2);
  REQUIRE(ring->collect(0, points, &why) == Ring::Collect::ready);
  REQUIRE(points.size() == 6);  // every boundary is a point of the step
  CHECK(points[1].gpu_ns == points[0].gpu_ns);  // input's begin is the step's begin on the GPU
  CHECK(points[3].gpu_ns == points[2].gpu_ns);  // forward's begin is input's end
  CHECK(points[5].gpu_ns > points[4].gpu_ns);  // the step's end its own: work after the last phase is the step's
  std::string bad;
  const auto m = steptrace::summarize_markers(points, 0, 1'000'000, &bad);
  REQUIRE(m);
  CHECK(m->phases.at(in).count == 1);
  CHECK(m->phases.at(fwd).count == 1);
  CHECK(m->phases.at(fwd).span_ns == points[4].gpu_ns - points[2].gpu_ns);
  CHECK(m->span_ns == points[5].gpu_ns - points[0].gpu_ns);

  // Host time between them past kShareWithinNs: each boundary records its own.
  events.gap_ns = Ring::kShareWithinNs + 1;
  ring->mark(1, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(1, MarkerKind::phase_begin, in);
  ring->mark(1, MarkerKind::phase_end, in);
  ring->mark(1, MarkerKind::step_end, steptrace::kNoPhase);
  CHECK(events.records == 4 + 4);
  CHECK(ring->shared() == 2);
  REQUIRE(ring->collect(1, points, &why) == Ring::Collect::ready);
  REQUIRE(points.size() == 4);
  CHECK(points[1].gpu_ns > points[0].gpu_ns);

  // Never shared: a phase's end or the step's end (they close the work before them), a phase begun
  // after another's begin (nested or repeated), a boundary of another step.
  events.gap_ns = 0;
  ring->mark(2, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(2, MarkerKind::step_end, steptrace::kNoPhase);
  ring->mark(3, MarkerKind::step_begin, steptrace::kNoPhase);
  ring->mark(3, MarkerKind::phase_begin, in);  // shares step 3's begin
  ring->mark(3, MarkerKind::phase_begin, fwd);
  ring->mark(3, MarkerKind::phase_end, fwd);
  ring->mark(3, MarkerKind::phase_end, in);
  ring->mark(3, MarkerKind::step_end, steptrace::kNoPhase);
  CHECK(events.records == 8 + 2 + 5);
  CHECK(ring->shared() == 2 + 1);
  REQUIRE(ring->collect(2, points, &why) == Ring::Collect::ready);
  REQUIRE(ring->collect(3, points, &why) == Ring::Collect::ready);
  CHECK(points.size() == 6);
  ring->detach();
}
