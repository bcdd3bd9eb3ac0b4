// Diagnosis labels: pure rules on synthetic steps, their place in the line, the run's dominant label.
#include <steptrace/steptrace.hpp>
#include <steptrace/core/diagnosis.hpp>
#include <steptrace/core/markers.hpp>
#include <steptrace/core/step_line.hpp>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

namespace {
StepShares gpu_shares(double util, double sm_eff) {
  StepShares s;
  s.gpu_utilization = util;
  s.sm_efficiency = sm_eff;
  s.comm_exposed = 0.0;
  return s;
}
}  // namespace

TEST_CASE("each label from the numbers that define it", "[diagnosis]") {
  StepShares input = gpu_shares(0.5, 0.9);
  input.input = 0.35;
  CHECK(diagnose(input).label == Bottleneck::input_bound);
  CHECK(diagnose(input).reason.find("35 %") != std::string::npos);

  StepShares h2d = gpu_shares(0.6, 0.9);
  h2d.h2d = 0.25;
  CHECK(diagnose(h2d).label == Bottleneck::h2d_bound);

  StepShares comm = gpu_shares(0.9, 0.9);
  comm.comm_exposed = 0.30;
  CHECK(diagnose(comm).label == Bottleneck::comm_bound);

  CHECK(diagnose(gpu_shares(0.40, 0.95)).label == Bottleneck::host_launch_bound);
  CHECK(diagnose(gpu_shares(0.95, 0.20)).label == Bottleneck::low_sm_efficiency);
  CHECK(diagnose(gpu_shares(0.95, 0.97)).label == Bottleneck::compute_bound);
}

TEST_CASE("thresholds: at, just below, and the largest wait wins", "[diagnosis]") {
  StepShares s = gpu_shares(0.95, 0.97);
  s.input = 0.20;  // exactly critical
  CHECK(diagnose(s).label == Bottleneck::input_bound);
  s.input = 0.15;  // warning only: the GPU side decides, the warning is kept
  const Diagnosis d = diagnose(s);
  CHECK(d.label == Bottleneck::compute_bound);
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings[0].find("15 %") != std::string::npos);
  s.input = 0.09;
  CHECK(diagnose(s).warnings.empty());
  StepShares both = gpu_shares(0.5, 0.5);
  both.input = 0.22;
  both.comm_exposed = 0.40;
  CHECK(diagnose(both).label == Bottleneck::comm_bound);
  CHECK(diagnose(both).warnings.size() == 1);  // input still reported
  CHECK(diagnose(gpu_shares(0.70, 0.50)).label == Bottleneck::compute_bound);  // both at threshold
}

TEST_CASE("without GPU attribution only host-side waits can be named", "[diagnosis]") {
  StepShares s;
  s.input = 0.05;
  CHECK(diagnose(s).label == Bottleneck::unknown);
  s.input = 0.5;
  CHECK(diagnose(s).label == Bottleneck::input_bound);
}

TEST_CASE("shares from host and GPU metrics", "[diagnosis]") {
  HostStepMetrics host;
  host.step_time_ns = 100'000'000;
  host.phases[phase_tag::input].total_ns = 30'000'000;
  host.phases[phase_tag::h2d].total_ns = 1'000'000;
  StepGpu gpu;
  gpu.busy_ns = 60'000'000;
  gpu.kernels = 10;
  gpu.sm_efficiency = 0.4;
  gpu.nccl_exposed_ns = 5'000'000;
  gpu.phases[phase_tag::h2d].busy_ns = 8'000'000;  // the copies took longer on the GPU than on the host
  const StepShares s = compute_step_shares(host, gpu);
  CHECK(s.input == Approx(0.30));
  CHECK(s.h2d == Approx(0.08));
  CHECK(*s.comm_exposed == Approx(0.05));
  CHECK(*s.gpu_utilization == Approx(0.60));
  CHECK(*s.sm_efficiency == Approx(0.4));
  const StepShares host_only = compute_step_shares(host, std::nullopt);
  CHECK_FALSE(host_only.gpu_utilization);
  CHECK(host_only.h2d == Approx(0.01));
}

TEST_CASE("the line carries the label and its evidence; the summary the dominant label", "[diagnosis]") {
  const auto log = steptrace_test::fresh_log("diagnosis");
  auto cfg = steptrace_test::host_config(log);
  cfg.summary = true;  // the default: stop() prints the summary table
  REQUIRE(start(cfg));
  for (int i = 0; i < 4; ++i) {
    TRACE_STEP();
    { TRACE_PHASE(input); steptrace_test::spin_for_us(8000); }
    { TRACE_PHASE(forward); steptrace_test::spin_for_us(500); }
  }
  const Summary summary = stop();
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 4);
  for (const auto& l : lines) {
    CHECK(l["diagnosis"]["label"] == "INPUT-BOUND");
    CHECK(double(l["diagnosis"]["evidence"]["input_share"]) >= 0.2);
    CHECK(l["diagnosis"]["evidence"]["gpu_utilization"].is_null());
    CHECK(l["diagnosis"]["basis"] == "host_only");
    CHECK(l["diagnosis"]["carried_from_step"].is_null());
    CHECK(l["null_reasons"].contains("diagnosis.carried_from_step"));
  }
  CHECK(summary.diagnosis == "INPUT-BOUND");
  CHECK(summary.diagnosis_fraction == 1.0);
  CHECK(summary.table.find("diagnosis: INPUT-BOUND") != std::string::npos);
}

TEST_CASE("dominant label over counts", "[diagnosis]") {
  const auto d = dominant_label({{Bottleneck::compute_bound, 3}, {Bottleneck::input_bound, 7}});
  CHECK(d.label == Bottleneck::input_bound);
  CHECK(d.fraction == Approx(0.7));
  CHECK(dominant_label({}).label == Bottleneck::unknown);
}

TEST_CASE("an untraced step: its own waits, else the last traced step's GPU view if recent and alike", "[diagnosis]") {
  const CarriedGpuView compute{100, 50.0, gpu_shares(0.95, 0.90)};
  const CarryRule rule{16, 1.5};
  StepShares host;  // no wait past a threshold
  host.input = 0.02;
  // A traced step's own diagnosis has basis traced.
  CHECK(diagnose(gpu_shares(0.95, 0.90)).basis == DiagnosisBasis::traced);
  // Carried: the GPU shares of step 100, the host shares of this one.
  Diagnosis d = diagnose_untraced(host, 105, 52.0, compute, rule);
  CHECK(d.label == Bottleneck::compute_bound);
  CHECK(d.basis == DiagnosisBasis::carried);
  REQUIRE(d.carried_from_step);
  CHECK(*d.carried_from_step == 100);
  CHECK(d.reason.find("carried from traced step 100") == 0);
  // A host-visible wait decides without any GPU view.
  StepShares waiting = host;
  waiting.input = 0.35;
  d = diagnose_untraced(waiting, 105, 52.0, compute, rule);
  CHECK(d.label == Bottleneck::input_bound);
  CHECK(d.basis == DiagnosisBasis::host_only);
  CHECK_FALSE(d.carried_from_step);
  // GPU shares the caller left in are not this step's: ignored.
  StepShares stale = host;
  stale.gpu_utilization = 0.1;
  CHECK(diagnose_untraced(stale, 105, 52.0, std::nullopt, rule).basis == DiagnosisBasis::none);
  // Too old, unlike, or nothing traced yet: UNKNOWN, with why.
  d = diagnose_untraced(host, 117, 50.0, compute, rule);
  CHECK(d.label == Bottleneck::unknown);
  CHECK(d.basis == DiagnosisBasis::none);
  CHECK(d.reason.find("17 steps old") != std::string::npos);
  CHECK(diagnose_untraced(host, 116, 50.0, compute, rule).basis == DiagnosisBasis::carried);  // 16: still recent
  d = diagnose_untraced(host, 101, 80.0, compute, rule);  // 1.6x the traced step: an evaluation, a checkpoint
  CHECK(d.basis == DiagnosisBasis::none);
  CHECK(d.reason.find("not within 1.5x") != std::string::npos);
  CHECK(diagnose_untraced(host, 101, 34.0, compute, rule).basis == DiagnosisBasis::carried);  // 1/1.47x
  // No untraced reference yet (the traced step's own time): beyond 1.5x nothing is scaled.
  CHECK(diagnose_untraced(host, 101, 33.0, compute, rule).basis == DiagnosisBasis::none);
  CarriedGpuView busy = compute;
  busy.untraced_median_ms = 50.0;
  // Shorter: the traced step's 47.5 ms of GPU work cannot fit 33 ms, so the premise fails: UNKNOWN
  // (never "busy 100 %", which a clamp would say).
  d = diagnose_untraced(host, 101, 33.0, busy, rule);
  CHECK(d.basis == DiagnosisBasis::none);
  // Longer: 47.5 ms of 80 (59 %) would say HOST/LAUNCH-BOUND, unlike the view: more GPU work or a
  // host stall cannot be told apart, so UNKNOWN.
  d = diagnose_untraced(host, 101, 80.0, busy, rule);
  CHECK(d.basis == DiagnosisBasis::none);
  CHECK(d.label == Bottleneck::unknown);
  // A host-launch-bound view (15 ms busy of a traced 50 ms step): a longer step, a shorter one where the
  // work still fits, up to 4x the untraced median and no further.
  CarriedGpuView waiting_gpu{100, 50.0, gpu_shares(0.30, 0.90)};
  waiting_gpu.untraced_median_ms = 50.0;
  d = diagnose_untraced(host, 101, 80.0, waiting_gpu, rule);
  CHECK(d.basis == DiagnosisBasis::carried_scaled);
  CHECK(d.label == Bottleneck::host_launch_bound);
  REQUIRE(d.carried_from_step);
  CHECK(*d.carried_from_step == 100);
  CHECK(d.reason.find("carried from traced step 100, scaled by its GPU work") == 0);
  CHECK(d.reason.find("GPU busy 19 %") != std::string::npos);  // 15 ms of 80
  CHECK(diagnose_untraced(host, 101, 30.0, waiting_gpu, rule).basis == DiagnosisBasis::carried_scaled);  // 50 %
  CHECK(diagnose_untraced(host, 101, 200.0, waiting_gpu, rule).basis == DiagnosisBasis::carried_scaled);  // 4x
  CHECK(diagnose_untraced(host, 101, 201.0, waiting_gpu, rule).basis == DiagnosisBasis::none);            // 4.02x
  CHECK(diagnose_untraced(host, 101, 20.0, waiting_gpu, rule).basis == DiagnosisBasis::none);  // 15/20: busy, unlike

  d = diagnose_untraced(host, 3, 50.0, std::nullopt, rule);
  CHECK(d.basis == DiagnosisBasis::none);
  CHECK(d.reason.find("no traced step before it") != std::string::npos);
  // A carried view that says the GPU waited names that.
  const CarriedGpuView idle{100, 50.0, gpu_shares(0.30, 0.90)};
  CHECK(diagnose_untraced(host, 101, 50.0, idle, rule).label == Bottleneck::host_launch_bound);
  // The reference is the untraced steps' median, never the traced step's own (tracing-inflated) time:
  // an eager loop's traced step ran 29.9 ms against 20.2 ms untraced, and a 19.6 ms step then fell
  // outside 1.5x of the traced one (UNKNOWN on 690 of 1 000 lines).
  CarriedGpuView inflated{100, 29.9, gpu_shares(0.40, 0.90)};
  CHECK(diagnose_untraced(host, 101, 19.6, inflated, rule).basis == DiagnosisBasis::none);  // no reference yet
  inflated.untraced_median_ms = 20.2;
  d = diagnose_untraced(host, 101, 19.6, inflated, rule);
  CHECK(d.basis == DiagnosisBasis::carried);
  CHECK(d.label == Bottleneck::host_launch_bound);
  CHECK(d.reason.find("untraced steps' median 20.2 ms") != std::string::npos);
  d = diagnose_untraced(host, 101, 31.0, inflated, rule);  // 1.53x the untraced steps: something else ran
  CHECK(d.basis == DiagnosisBasis::carried_scaled);  // 12 ms busy of the traced 29.9: 39 % of 31 ms
  CHECK(d.label == Bottleneck::host_launch_bound);
  CHECK(d.reason.find("untraced steps' median 20.2 ms, this step 31 ms: 1.5x") != std::string::npos);
  // Much shorter: the traced step's 12 ms of GPU work cannot fit 8 ms: UNKNOWN.
  d = diagnose_untraced(host, 101, 8.0, inflated, rule);
  CHECK(d.basis == DiagnosisBasis::none);
  CHECK(d.reason.find("untraced steps' median around traced step 100 (20.2 ms)") != std::string::npos);
  // The carry window follows the trace interval: two intervals, at least 16 steps.
  CHECK(carry_max_age(1) == 16);
  CHECK(carry_max_age(100) == 200);
}

TEST_CASE("stream markers: pending time, spans and lags from known marker times", "[diagnosis][markers]") {
  using K = MarkerKind;
  // A step of 10 ms: forward launched in 1 ms runs 4 ms on the GPU; backward launched from 1 to 2 ms
  // runs until 9 ms; the step's end is marked at 9.5 ms, when the GPU has caught up.
  const std::vector<MarkerPoint> points = {
      {K::step_begin, kNoPhase, 0, 0},
      {K::phase_begin, phase_tag::forward, 0, 0},
      {K::phase_end, phase_tag::forward, 1'000'000, 4'000'000},
      {K::phase_begin, phase_tag::backward, 1'000'000, 4'000'000},
      {K::phase_end, phase_tag::backward, 2'000'000, 9'000'000},
      {K::step_end, kNoPhase, 9'500'000, 9'500'000},
  };
  std::string why;
  const auto m = summarize_markers(points, 0, 10'000'000, &why);
  REQUIRE(m);
  CHECK(m->points == 6);
  CHECK(m->pending_ns == 8'000'000);  // [1, 4] and [2, 9] ms: 1 to 9
  CHECK(m->pending_own_ns == 8'000'000);
  CHECK(*m->span_ns == 9'500'000);
  CHECK(*m->end_lag_ns == 0);
  CHECK(m->max_lag_ns == 7'000'000);
  CHECK(m->phases.at(phase_tag::forward).span_ns == 4'000'000);
  CHECK(m->phases.at(phase_tag::backward).span_ns == 5'000'000);
  CHECK(m->phases.at(phase_tag::backward).end_lag_ns == 7'000'000);
  // Clipped to the step: a marker reached after the step's end counts up to the end only.
  const auto clipped = summarize_markers(points, 0, 5'000'000, &why);
  REQUIRE(clipped);
  CHECK(clipped->pending_ns == 4'000'000);
  // The previous step's work the GPU still ran when this one began is not the step's own.
  const std::vector<MarkerPoint> behind = {{K::step_begin, kNoPhase, 0, 3'000'000}, {K::step_end, kNoPhase, 4'000'000, 6'000'000}};
  const auto b = summarize_markers(behind, 0, 10'000'000, &why);
  REQUIRE(b);
  CHECK(b->pending_ns == 5'000'000);      // [0, 3] and [4, 6]
  CHECK(b->pending_own_ns == 2'000'000);  // from 3 ms, when the GPU reached the step's begin
  // A GPU time before its host time beyond the slack, or out of the stream's order: left out.
  CHECK(!summarize_markers({{K::step_begin, kNoPhase, 1'000'000, 800'000}}, 0, 2'000'000, &why));
  CHECK(why.find("calibration") != std::string::npos);
  CHECK(!summarize_markers({{K::step_begin, kNoPhase, 0, 5'000'000}, {K::step_end, kNoPhase, 1'000'000, 2'000'000}}, 0,
                           9'000'000, &why));
  CHECK(why.find("order") != std::string::npos);
}

TEST_CASE("stream markers agree with records within 0.5 ms or 3 % of the step", "[diagnosis][markers]") {
  CHECK(markers_agree(10'000'000, 10'000'000, 20'000'000));
  CHECK(markers_agree(10'500'000, 10'000'000, 10'000'000));   // 0.5 ms over
  CHECK(!markers_agree(10'600'000, 10'000'000, 10'000'000));  // 0.6 ms over a 10 ms step
  CHECK(markers_agree(12'900'000, 10'000'000, 100'000'000));  // 3 % of 100 ms
  CHECK(!markers_agree(13'100'000, 10'000'000, 100'000'000));
}

TEST_CASE("an untraced step's own markers decide when the GPU held it back, never otherwise", "[diagnosis][markers]") {
  StepShares host;  // no host-visible waits
  CarriedGpuView view;
  view.step = 10;
  view.step_ms = 20;
  view.shares.gpu_utilization = 0.4;  // the traced step looked host-bound
  view.shares.sm_efficiency = 0.3;
  view.shares.comm_exposed = 0.0;
  // Pending 90 % of a step: the GPU held it back, whatever the traced step said.
  auto d = diagnose_by_markers(host, 0.9, 12, 25, view, 16);
  REQUIRE(d);
  CHECK(d->basis == DiagnosisBasis::markers);
  CHECK(d->label == Bottleneck::low_sm_efficiency);  // the traced step's kernels fill 30 % of the SMs
  CHECK(d->carried_from_step == 10u);
  CHECK(d->reason.rfind("stream markers: the GPU had work pending for at least 90 % of this step, with the SM "
                        "efficiency and NCCL time of traced step 10: ", 0) == 0);
  // Without a recent traced step: its own share alone (SM efficiency unknown).
  d = diagnose_by_markers(host, 0.95, 40, 25, view, 16);
  REQUIRE(d);
  CHECK(d->label == Bottleneck::compute_bound);
  CHECK(!d->carried_from_step);
  // A traced step's exposed NCCL share, as carried (its milliseconds are lengthened by tracing).
  view.shares.comm_exposed = 0.3;
  d = diagnose_by_markers(host, 0.9, 12, 25, view, 16);
  REQUIRE(d);
  CHECK(d->label == Bottleneck::comm_bound);
  // Below the GPU-busy threshold markers cannot tell; a host-visible wait decides before them.
  CHECK(!diagnose_by_markers(host, 0.69, 12, 25, view, 16));
  StepShares waiting = host;
  waiting.input = 0.25;
  CHECK(!diagnose_by_markers(waiting, 0.9, 12, 25, view, 16));
}

TEST_CASE("a traced step's markers not marked whole: agrees_with_records is null, and the line says why",
          "[diagnosis][markers]") {
  using namespace steptrace;
  StepRecord r;
  r.end_ns = 10'000'000;
  RunInfo run;
  StepLineInput in;
  in.step = &r;
  in.run = &run;
  in.host = compute_host_metrics(r);
  StepGpu g;
  g.kernels = 1;
  g.kernel_ns = g.busy_ns = 2'000'000;
  in.gpu = g;
  StepMarkers sm;  // armed in the middle of the step: a phase's two markers, no step begin (span_ns unset)
  sm.points = 2;
  sm.pending_ns = sm.pending_own_ns = 100'000;
  in.markers = sm;
  const auto reason = [&] {
    const auto j = nlohmann::json::parse(make_step_line(in));
    CHECK(j["gpu_markers"]["agrees_with_records"].is_null());
    return std::string(j["null_reasons"]["gpu_markers.agrees_with_records"]);
  };
  CHECK(reason().find("begin or end was not marked") != std::string::npos);
  in.markers->span_ns = 9'000'000;  // marked whole, but no verdict (the records were incomplete)
  CHECK(reason() == "the step's GPU records are incomplete");
  in.gpu.unknown("not traced (the test's step)");
  CHECK(reason().find("not traced") != std::string::npos);
}
