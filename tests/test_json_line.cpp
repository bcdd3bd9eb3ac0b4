// Every line is valid JSON with the whole minimal log set; nulls carry reasons; the writer escapes.
#include <steptrace/steptrace.hpp>
#include <steptrace/core/line_invariants.hpp>
#include <steptrace/core/json_writer.hpp>
#include <steptrace/core/line_out.hpp>
#include <steptrace/core/step_line.hpp>

#include <cmath>
#include <functional>
#include <map>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

namespace {
// A line's input with only the step and a run without a device.
StepLineInput minimal_input(const StepRecord& r, RunInfo& run) {
  run.device_null_reason = "test";
  StepLineInput in;
  in.step = &r;
  in.run = &run;
  in.host = compute_host_metrics(r);
  return in;
}
}  // namespace
using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

TEST_CASE("JsonWriter escapes strings and writes non-finite numbers as null", "[json]") {
  details::JsonWriter w;
  w.begin_object()
      .field("s", std::string("quote\" back\\ nl\n tab\t ctl\x01"))
      .field("nan", std::nan(""))
      .field("inf", HUGE_VAL)
      .field("opt", std::optional<double>())
      .field("n", int64_t{-5});
  w.key("arr").begin_array().value(1.5).value("x").begin_object().end_object().end_array();
  w.end_object();
  const auto j = nlohmann::json::parse(w.str());
  CHECK(j["s"] == "quote\" back\\ nl\n tab\t ctl\x01");
  CHECK(j["nan"].is_null());
  CHECK(j["inf"].is_null());
  CHECK(j["opt"].is_null());
  CHECK(j["n"] == -5);
  CHECK(j["arr"].size() == 3);
}

TEST_CASE("LineOut: a container a check left out is null with its reason, nothing of it written", "[json]") {
  const std::map<std::string, std::string> excluded{{"a.b", "b left out"}, {"a.list", "list left out"}};
  const auto before = details::line_out_unbalanced().load();
  LineOut out(&excluded);
  out.begin().begin_object("a").begin_object("b").field("x", 1.0).null("y", "why y");
  out.begin_object("c").field("z", 2).end_object().end_object();
  out.begin_array("list").element("t").begin_element().field("k", 1).null("n", "why n").end_object().end_array();
  out.field("after", 3).end_object();
  const auto j = nlohmann::json::parse(out.finish());
  CHECK(details::line_out_unbalanced().load() == before);
  CHECK(j["a"]["b"].is_null());
  CHECK(j["a"]["list"].is_null());
  CHECK(j["a"]["after"] == 3);
  CHECK(j["null_reasons"] == nlohmann::json{{"a.b", "b left out"}, {"a.list", "list left out"}});
}

TEST_CASE("Measured: a value or its reason as one; a later value drops the reason; no reason is counted", "[json]") {
  const auto bugs = details::measured_without_reason().load();
  Measured<double> m("not yet measured");
  CHECK_FALSE(m);
  CHECK(m.why() == "not yet measured");
  m = 2.5;
  REQUIRE(m);
  CHECK(*m == 2.5);
  CHECK(m.why().empty());  // the reason of the unknown value does not outlive it
  m.set(std::nullopt, "the sum is not a finite number");
  CHECK_FALSE(m.has_value());
  CHECK(m.why() == "the sum is not a finite number");
  CHECK(details::measured_without_reason().load() == bugs);
  Measured<int> forgot(std::optional<int>(), "");  // a producer that gives no reason: said as a bug, counted
  CHECK(forgot.why() == details::kNoReasonGiven);
  CHECK(details::measured_without_reason().load() == bugs + 1);
  const std::optional<double>& as_optional = m;  // reads as the optional it holds
  CHECK_FALSE(as_optional.has_value());

  LineOut out;
  m = 1.25;
  out.begin().field("known", m).field("unknown", Measured<int>("never counted"));
  const auto j = nlohmann::json::parse(out.finish());
  CHECK(j["known"] == 1.25);
  CHECK(j["unknown"].is_null());
  CHECK(j["null_reasons"] == nlohmann::json{{"unknown", "never counted"}});
}

TEST_CASE("LineOut: an extra close is ignored and finish() closes what is open, both counted", "[json]") {
  const auto before = details::line_out_unbalanced().load();
  LineOut extra;
  extra.begin().begin_object("o").field("v", 1).end_object().end_object().end_array();
  const auto e = nlohmann::json::parse(extra.finish());
  CHECK(e["o"]["v"] == 1);
  CHECK(details::line_out_unbalanced().load() == before + 2);
  LineOut open;
  open.begin().begin_object("o").begin_array("list").element("t");
  const auto o = nlohmann::json::parse(open.finish());
  CHECK(o["o"]["list"] == nlohmann::json::array({"t"}));
  CHECK(o["null_reasons"].empty());
  CHECK(details::line_out_unbalanced().load() == before + 4);
  LineOut unopened;  // a writer that forgot begin(): still one object
  unopened.field("v", 1).begin_object("o").end_object();
  const auto u = nlohmann::json::parse(unopened.finish());
  CHECK(u["v"] == 1);
  CHECK(u["o"].is_object());
  CHECK(details::line_out_unbalanced().load() == before + 5);
}

TEST_CASE("JsonWriter writes names with invalid UTF-8 as valid JSON (U+FFFD per bad byte)", "[json]") {
  const std::string fffd = "\xEF\xBF\xBD";
  const std::pair<std::string, std::string> cases[] = {
      {"ok \xE2\x82\xAC \xF0\x9F\x98\x80", "ok \xE2\x82\xAC \xF0\x9F\x98\x80"},  // euro sign, emoji: kept
      {"a\xFF" "b", "a" + fffd + "b"},                                          // never valid
      {"cut\xE2\x82", "cut" + fffd + fffd},                                  // truncated at the end
      {"\xC0\xAF", fffd + fffd},                                              // overlong '/'
      {"\xED\xA0\x80", fffd + fffd + fffd},                                   // a surrogate
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},                        // above U+10FFFF
      {"\x80kernel", fffd + "kernel"},                                         // stray continuation byte
  };
  for (const auto& [in, want] : cases) {
    details::JsonWriter w;
    w.begin_object().field("name", in).end_object();
    INFO(w.str());
    const auto j = nlohmann::json::parse(w.str());  // throws on invalid UTF-8
    CHECK(j["name"].get<std::string>() == want);
  }
}

TEST_CASE("a full session writes one valid line per step with the minimal log set", "[json]") {
  const auto log = fresh_log("json_line");
  auto cfg = steptrace_test::host_config(log);
  cfg.tokens_per_step = 512;
  cfg.samples_per_step = 4;
  REQUIRE(start(cfg));
  for (int i = 0; i < 5; ++i) {
    TRACE_STEP();
    { TRACE_PHASE(input); spin_for_us(300); }
    { TRACE_PHASE(h2d); spin_for_us(100); }
    { TRACE_PHASE(forward); spin_for_us(500); }
    { TRACE_PHASE(backward); spin_for_us(800); }
    { TRACE_PHASE(optimizer); spin_for_us(200); }
    record("loss", 2.5 - 0.1 * i);
    record("grad_norm", 1.25);
    record("lr", 3e-4);
    record("lr", 1e-4);  // last value wins
    record("weird\nname\xff", 1);
  }
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 5);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    for (const auto& name : steptrace_test::minimal_log_set()) {
      INFO("field " << name);
      CHECK(l.contains(name));
    }
    steptrace_test::require_null_reasons(l);
    CHECK(l["schema"] == "steptrace.step/1");
    CHECK(l["global_step"] == i);
    CHECK(double(l["loss"]) == Approx(2.5 - 0.1 * i));
    CHECK(l["grad_norm"] == 1.25);
    CHECK(l["overflow_count"].is_null());
    CHECK(l["scalars"]["lr"] == 1e-4);
    CHECK(l["scalars"].contains("weird_name_"));
    // Each phase spun at least this long by steady_clock; steptrace reads the scopes on its tick clock,
    // calibrated against steady_clock to within a fraction of a percent (0.799938 ms seen for an
    // 800 us spin on a loaded machine): 1 % allowed.
    CHECK(double(l["dataloader_wait_ms"]) >= 0.3 * 0.99);
    CHECK(double(l["h2d_time_ms"]) >= 0.1 * 0.99);
    CHECK(double(l["backward_time_ms"]) >= 0.8 * 0.99);
    CHECK(double(l["tokens_per_second"]) > 0);
    CHECK(double(l["samples_per_second"]) > 0);
    // No GPU measured here: every GPU field is null and says why.
    for (const char* f : {"gpu_utilization", "sm_activity", "memory_bandwidth_utilization",
                          "tensor_core_or_pipe_utilization", "nccl_time_ms", "device", "peak_memory_allocated"}) {
      INFO("field " << f);
      CHECK(l[f].is_null());
      CHECK(l["null_reasons"].contains(f));
    }
    CHECK(l["estimated_mfu"].is_null());
    CHECK(l["null_reasons"]["estimated_mfu"] == "flops_per_token is not set");
    CHECK(l["dropped"]["steps_total"] == 0);
  }
}

TEST_CASE("a non-finite scalar is null with the reason, never as if not recorded", "[json]") {
  const auto log = fresh_log("json_line_nonfinite");
  auto cfg = steptrace_test::host_config(log);
  REQUIRE(start(cfg));
  for (int i = 0; i < 2; ++i) {
    TRACE_STEP();
    record("loss", 1.5);
    record("loss", std::nan(""));  // the last value wins: NaN
    record("grad_norm", i == 0 ? HUGE_VAL : 2.0);
    record("lr", -HUGE_VAL);
  }
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  for (const auto& l : lines) steptrace_test::require_null_reasons(l);
  CHECK(lines[0]["loss"].is_null());
  CHECK(lines[0]["null_reasons"]["loss"] ==
        "the last value recorded was NaN (1 of the step's 2 values were not finite: the run may have diverged)");
  CHECK(lines[0]["grad_norm"].is_null());
  CHECK(std::string(lines[0]["null_reasons"]["grad_norm"]).find("+inf") == 0 + std::string("the last value recorded was ").size());
  CHECK(lines[1]["grad_norm"] == 2.0);
  CHECK_FALSE(lines[1]["null_reasons"].contains("grad_norm"));
  CHECK(lines[1]["scalars"]["lr"].is_null());
  CHECK(std::string(lines[1]["null_reasons"]["scalars.lr"]).find("-inf") != std::string::npos);
}

TEST_CASE("a framework callbacks' step: within_budget false over the budget, null under it (its estimate a lower end)",
          "[json]") {
  // The callbacks' estimate leaves out what they cost the framework's own code (several times the
  // estimate in one run: docs/python.md): over the budget the line is over it; under it, it cannot say.
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 100'000'000;
  RunInfo run;
  StepLineInput in = minimal_input(r, run);
  OverheadLine& o = in.overhead;
  o.budget = 0.001;
  o.estimate.fraction = o.estimate.fraction_low = o.estimate.fraction_high = 0.0006;
  o.estimate.floor_fraction = 0.0004;
  o.estimate.within_budget = true;
  o.parts.present = true;
  const auto line = [&in] { return nlohmann::json::parse(make_step_line(in)); };
  // A step of the program's own: within the budget, "none" over it.
  auto j = line();
  CHECK(j["overhead"]["within_budget"] == true);
  CHECK(j["overhead"]["over_budget_by"] == "none");
  // A framework's: null, said why, and over_budget_by with it.
  o.parts.lower_end_only = true;
  j = line();
  CHECK(j["overhead"]["estimated_fraction"] == Approx(0.0006));  // the estimate stays
  CHECK(j["overhead"]["within_budget"].is_null());
  CHECK(j["null_reasons"]["overhead.within_budget"] == reason_text(Reason::framework_within_unknown));
  CHECK(j["overhead"]["over_budget_by"].is_null());
  CHECK(j["null_reasons"]["overhead.over_budget_by"] == reason_text(Reason::framework_within_unknown));
  // Over the budget: false, and what keeps it there (the floor over it too: its largest part).
  o.estimate.fraction = o.estimate.fraction_low = o.estimate.fraction_high = 0.015;
  o.estimate.floor_fraction = 0.014;
  o.estimate.other_fraction = 0.014;
  o.estimate.within_budget = false;
  j = line();
  CHECK(j["overhead"]["within_budget"] == false);
  CHECK(j["overhead"]["over_budget_by"] == "host_api");
  CHECK_FALSE(j["null_reasons"].contains("overhead.within_budget"));
  // No budget: null for that reason, framework or not.
  o.budget.reset();
  o.no_budget_reason = "trace_every is set";
  j = line();
  CHECK(j["overhead"]["within_budget"].is_null());
  CHECK(j["null_reasons"]["overhead.within_budget"] == "trace_every is set");
}

TEST_CASE("make_step_line reports an MFU above one as a warning", "[json]") {
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 1'000'000'000;
  r.tokens = 1e6;
  RunInfo run;
  StepLineInput in = minimal_input(r, run);
  in.flops_per_token = 1e9;
  in.peak.flops_per_second = 1e14;
  in.mfu = compute_mfu(in.flops_per_token, in.host.tokens_per_second, in.peak);
  const auto j = nlohmann::json::parse(make_step_line(in));
  CHECK(double(j["estimated_mfu"]) == Approx(10.0));
  CHECK(j["mfu_inputs"]["above_one"] == true);
  REQUIRE(j["warnings"].size() == 1);
  CHECK(j["warnings"][0].get<std::string>().find("estimated_mfu > 1") != std::string::npos);
}

TEST_CASE("make_step_line counts excluded GPU records by reason and gives phase counters their sample time",
          "[json]") {
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 10'000'000;
  RunInfo run;
  StepLineInput in = minimal_input(r, run);
  StepGpu g;
  g.kernels = 1;
  g.kernel_ns = g.busy_ns = 1'000'000;
  g.excluded[static_cast<int>(Implausible::ends_after_delivery) - 1] = 50;
  g.excluded[static_cast<int>(Implausible::graph_replayed_untraced) - 1] = 2;
  g.excluded_records = 52;
  g.implausible_phases = 1;
  PhaseGpu pg;
  pg.kernels = 1;
  pg.kernel_ns = pg.busy_ns = 1'000'000;
  pg.busy = {{0, 1'000'000}};
  g.phases[phase_tag::forward] = pg;
  in.gpu = g;
  CounterSummary c;
  c.sm_active = 0.5;
  c.samples = 3;
  c.sample_ns = 1'000'000;
  c.coverage = 1;
  in.phase_counters[phase_tag::forward] = c;
  const auto j = nlohmann::json::parse(make_step_line(in));
  CHECK(j["gpu"]["excluded_records"] == 52);
  CHECK(j["gpu"]["excluded"]["ends_after_delivery"] == 50);
  CHECK(j["gpu"]["excluded"]["graph_replayed_untraced"] == 2);
  CHECK(j["gpu"]["excluded"]["starts_before_launch"] == 0);
  CHECK(j["gpu"]["excluded"].size() == kImplausibleKinds);
  CHECK(j["gpu"]["implausible_phases"] == 1);
  const auto& pc = j["phases"]["forward"]["gpu"]["counters"];
  CHECK(pc["samples"] == 3);
  CHECK(double(pc["sample_ms"]) == Approx(1.0));
}

TEST_CASE("log_every writes every N-th step with a window summary", "[json]") {
  const auto log = fresh_log("log_every");
  auto cfg = steptrace_test::host_config(log);
  cfg.log_every = 4;
  REQUIRE(start(cfg));
  for (int i = 0; i < 10; ++i) {
    TRACE_STEP();
    spin_for_us(200);
  }
  const auto summary = stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);  // steps 3, 7, and the last one (9)
  CHECK(lines[0]["global_step"] == 3);
  CHECK(lines[1]["global_step"] == 7);
  CHECK(lines[2]["global_step"] == 9);
  CHECK(lines[0]["window"]["steps"] == 4);
  CHECK(lines[2]["window"]["steps"] == 2);
  CHECK(double(lines[0]["window"]["step_time_ms_min"]) <= double(lines[0]["window"]["step_time_ms_mean"]));
  CHECK(double(lines[0]["window"]["step_time_ms_mean"]) <= double(lines[0]["window"]["step_time_ms_max"]));
  CHECK(summary.steps == 10);
}

TEST_CASE("cross_rank.balanced is null with a reason when a rank is missing", "[json]") {
  StepRecord r;
  r.end_ns = 10'000'000;
  RunInfo run;
  StepLineInput in = minimal_input(r, run);
  CrossRankView v;
  v.step = 0;
  v.world_size = 3;
  v.reporting = 2;
  v.step_ms_median = 6;
  v.step_skew = 0.001;  // looks balanced, but rank 2 did not report
  v.waits_measured = true;
  v.missing_count = 1;
  v.missing_ranks = {2};
  in.cross_rank = std::move(v);
  auto j = nlohmann::json::parse(make_step_line(in));
  CHECK(j["cross_rank"]["balanced"].is_null());
  CHECK(std::string(j["null_reasons"]["cross_rank.balanced"]).find("missing") != std::string::npos);
  in.cross_rank->missing_count = 0;
  in.cross_rank->missing_ranks.clear();
  in.cross_rank->world_size = 2;
  j = nlohmann::json::parse(make_step_line(in));
  CHECK(j["cross_rank"]["balanced"] == true);
  // Balanced is about the waits: one rank waiting 20 % of its step for another is not, whatever the
  // step times say.
  in.cross_rank->wait_share = 0.2;
  j = nlohmann::json::parse(make_step_line(in));
  CHECK(j["cross_rank"]["balanced"] == false);
  CHECK(j["cross_rank"]["wait_share"] == Approx(0.2));
  // No wait measured on some rank: not judged, and the line says why.
  in.cross_rank->waits_measured = false;
  j = nlohmann::json::parse(make_step_line(in));
  CHECK(j["cross_rank"]["balanced"].is_null());
  CHECK(std::string(j["null_reasons"]["cross_rank.balanced"]).find("collective wait") != std::string::npos);
  CHECK(j["cross_rank"]["wait_share"].is_null());
}

namespace {
// A 10 ms step with a forward phase that launched 4 ms of GPU work, every value possible.
struct InvariantCase {
  StepRecord r;
  RunInfo run;
  StepGpu g;
  InvariantCase() {
    r.begin_ns = 0;
    r.end_ns = 10'000'000;
    PhaseSpan s;
    s.phase = phase_tag::forward;
    s.begin_ns = 1'000'000;
    s.end_ns = 6'000'000;
    r.spans.push_back(s);
    g.kernels = 2;
    g.streams = 1;
    g.kernel_ns = g.busy_ns = 4'000'000;
    g.sm_efficiency = 0.5;
    PhaseGpu pg;
    pg.kernels = 2;
    pg.streams = 1;
    pg.kernel_ns = pg.busy_ns = 4'000'000;
    pg.sm_efficiency = 0.5;
    pg.busy = {{1'000'000, 5'000'000}};
    g.phases[phase_tag::forward] = pg;
  }
  nlohmann::json line(const std::function<void(StepLineInput&)>& edit = {}) {
    StepLineInput in = minimal_input(r, run);
    in.gpu = g;
    CounterSummary c;
    c.sm_active = 0.7;
    c.samples = 4;
    c.sample_ns = 4'000'000;
    c.coverage = 1;
    in.counters = c;
    in.phase_counters[phase_tag::forward] = c;
    if (edit) edit(in);
    in.shares = compute_step_shares(in.host, in.gpu);
    check_line_invariants(in);
    for (const auto& [path, why] : in.excluded) {  // each check's reason is a row of the reasons' table
      INFO(path << ": " << why);
      CHECK(steptrace::reason_of(why) != nullptr);
    }
    return nlohmann::json::parse(make_step_line(in));
  }
};
}  // namespace

TEST_CASE("invariants: a possible line passes whole", "[json][invariants]") {
  InvariantCase t;
  const auto j = t.line();
  CHECK(j["gpu"]["invariant_exclusions"] == 0);
  CHECK(double(j["gpu_utilization"]) == Approx(0.4));
  CHECK(double(j["forward_time_ms"]) == Approx(5.0));
  CHECK(double(j["sm_activity"]) == Approx(0.7));
  CHECK(j["phases"]["forward"]["gpu"].is_object());
}

TEST_CASE("invariants: GPU busy time beyond the step's time leaves the utilization out, not capped", "[json][invariants]") {
  InvariantCase t;
  t.g.busy_ns = 12'000'000;  // e.g. work launched after the step's scope (an evaluation) counted in it
  t.g.phases[phase_tag::forward].busy_ns = 12'000'000;
  const auto j = t.line();
  CHECK(j["gpu_utilization"].is_null());
  CHECK(j["gpu"]["idle_ms"].is_null());
  CHECK(j["diagnosis"]["evidence"]["gpu_utilization"].is_null());
  CHECK(double(j["gpu"]["busy_ms"]) == Approx(12.0));  // the measured union itself is a fact
  CHECK(j["gpu"]["invariant_exclusions"] == 3);
  CHECK(std::string(j["null_reasons"]["gpu_utilization"]).find("utilization above 1") != std::string::npos);
  CHECK(j["diagnosis"]["label"] != "COMPUTE-BOUND");
}

TEST_CASE("invariants: a phase busier on the GPU than its step is left out", "[json][invariants]") {
  InvariantCase t;
  t.g.phases[phase_tag::forward].busy_ns = 5'000'000;  // more than the step's 4 ms union
  const auto j = t.line();
  CHECK(j["phases"]["forward"]["gpu"].is_null());
  CHECK(std::string(j["null_reasons"]["phases.forward.gpu"]).find("more than its step") != std::string::npos);
  CHECK(j["gpu"]["invariant_exclusions"] == 1);
  CHECK(double(j["gpu_utilization"]) == Approx(0.4));
}

TEST_CASE("invariants: kernels that cannot fit their streams within the window are left out", "[json][invariants]") {
  // The line issue #48 saw: 50 graph kernels of one stream claiming 680 ms in a 13.7 ms step.
  InvariantCase t;
  t.r.end_ns = 13'700'000;
  PhaseGpu opt;
  opt.kernels = 50;
  opt.streams = 1;
  opt.kernel_ns = 680'000'000;
  opt.busy_ns = 13'600'000;
  opt.busy = {{100'000, 13'700'000}};
  t.g.phases[phase_tag::optimizer] = opt;
  t.g.kernels += 50;
  t.g.kernel_ns += 680'000'000;
  t.g.busy_ns = 13'650'000;
  const auto j = t.line();
  CHECK(j["phases"]["optimizer"]["gpu"].is_null());
  CHECK(std::string(j["null_reasons"]["phases.optimizer.gpu"]).find("on 1 stream(s) in a window of 13.700 ms") != std::string::npos);
  CHECK(j["gpu"]["kernel_ms"].is_null());
  CHECK(j["gpu"]["sm_efficiency"].is_null());
  CHECK(j["phases"]["forward"]["gpu"].is_object());  // 4 ms on its stream: possible
  // The same kernel time spread over 50 streams (concurrent kernels) is possible: kept.
  t.g.phases[phase_tag::optimizer].streams = 50;
  t.g.streams = 51;
  const auto k = t.line();
  CHECK(k["phases"]["optimizer"]["gpu"].is_object());
  CHECK(double(k["gpu"]["kernel_ms"]) == Approx(684.0));
}

TEST_CASE("invariants: counters and efficiencies outside [0, 1] are left out", "[json][invariants]") {
  InvariantCase t;
  t.g.phases[phase_tag::forward].sm_efficiency = 1.3;
  const auto j = t.line([](StepLineInput& in) {
    in.counters->sm_active = 1.02;
    in.phase_counters[phase_tag::forward].sm_active = 1.71;
    in.phase_counters[phase_tag::forward].dram = -0.1;
  });
  CHECK(j["sm_activity"].is_null());
  CHECK(std::string(j["null_reasons"]["sm_activity"]).find("outside [0, 1]") != std::string::npos);
  const auto& pc = j["phases"]["forward"]["gpu"]["counters"];
  CHECK(pc["sm_activity"].is_null());
  CHECK(pc["memory_bandwidth_utilization"].is_null());
  CHECK(j["phases"]["forward"]["gpu"]["sm_efficiency"].is_null());
  CHECK(j["null_reasons"].contains("phases.forward.gpu.counters.sm_activity"));
  CHECK(j["gpu"]["invariant_exclusions"] == 4);
}

TEST_CASE("invariants: a phase's scopes on the step thread longer than the step are left out", "[json][invariants]") {
  InvariantCase t;
  t.r.spans[0].begin_ns = -5'000'000;  // opened before the step began
  const auto j = t.line();
  CHECK(j["forward_time_ms"].is_null());
  CHECK(j["phases"]["forward"]["host_ms"].is_null());
  CHECK(std::string(j["null_reasons"]["forward_time_ms"]).find("before the step began") != std::string::npos);
  CHECK(j["gpu"]["invariant_exclusions"] == 2);
  // Scopes on other threads add up beyond the step without contradiction (a loader's threads).
  InvariantCase o;
  PhaseSpan s = o.r.spans[0];
  s.on_step_thread = false;
  for (int i = 0; i < 3; ++i) o.r.spans.push_back(s);
  const auto k = o.line();
  CHECK(double(k["forward_time_ms"]) == Approx(20.0));
  CHECK(k["gpu"]["invariant_exclusions"] == 0);
}

TEST_CASE("an overflowing rate is null with its reason; unregistered phase ids are distinct keys", "[json]") {
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 1'000'000;
  r.tokens = 1e308;
  PhaseSpan a, b;
  a.phase = static_cast<PhaseId>(60000);  // ids no name was registered under
  b.phase = static_cast<PhaseId>(60001);
  a.begin_ns = b.begin_ns = 0;
  a.end_ns = b.end_ns = 100;
  a.on_step_thread = b.on_step_thread = false;
  r.spans = {a, b};
  RunInfo run;
  StepLineInput in = minimal_input(r, run);
  const std::string text = make_step_line(in);
  const auto j = nlohmann::json::parse(text);
  CHECK(j["tokens_per_second"].is_null());
  CHECK(std::string(j["null_reasons"]["tokens_per_second"]).find("not a finite number") != std::string::npos);
  CHECK(j["phases"].contains("unknown.60000"));
  CHECK(j["phases"].contains("unknown.60001"));
  CHECK(text.find("\"unknown\":") == std::string::npos);
  CHECK(steptrace::register_phase_checked("unknown.3").error.find("reserved") != std::string::npos);
}

TEST_CASE("tokens_total and samples_total count every step since start(), written or not", "[json]") {
  const auto log = fresh_log("json_line_totals");
  Config cfg = steptrace_test::host_config(log);
  cfg.log_every = 3;  // lines for steps 2, 5 and the last (6): the steps between are counted all the same
  REQUIRE(start(cfg));
  for (int i = 0; i < 7; ++i) {
    if (i == 0) {
      TRACE_STEP();  // no count: adds nothing
    } else {
      TRACE_STEP(100.0 * i, static_cast<double>(i));
    }
  }
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  for (const auto& l : lines) steptrace_test::require_null_reasons(l);
  CHECK(lines[0]["tokens_total"] == 300.0);  // steps 1, 2
  CHECK(lines[0]["samples_total"] == 3.0);
  CHECK(lines[1]["tokens_total"] == 1500.0);  // + steps 3, 4, 5
  CHECK(lines[2]["tokens_total"] == 2100.0);
  CHECK(lines[2]["samples_total"] == 21.0);

  // No count on any step: null, and the reason says what to set.
  const auto none = fresh_log("json_line_totals_none");
  cfg.log_path = none;
  cfg.log_every = 1;
  REQUIRE(start(cfg));
  for (int i = 0; i < 2; ++i) TRACE_STEP();
  stop();
  const auto empty = read_lines(none);
  REQUIRE(empty.size() == 2);
  CHECK(empty[1]["tokens_total"].is_null());
  CHECK(std::string(empty[1]["null_reasons"]["tokens_total"]).find("no step since start() had tokens") == 0);
  CHECK(empty[1]["samples_total"].is_null());
}
