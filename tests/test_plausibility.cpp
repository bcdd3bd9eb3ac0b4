// What a record cannot be (core/plausibility.hpp), and the attributor leaving such records out of
// every sum while counting them by reason. Hand-made records; no GPU.
#include <steptrace/core/attribution.hpp>
#include <steptrace/core/plausibility.hpp>

#include "support.hpp"

using namespace steptrace;

namespace {
LaunchRecord launch(uint32_t corr, int64_t step, PhaseId phase, int64_t enter_ns, bool graph = false) {
  LaunchRecord l;
  l.correlation = corr;
  l.step = step;
  l.phase = phase;
  l.enter_ns = enter_ns;
  l.graph = graph;
  return l;
}
KernelRecord kernel(uint32_t corr, int64_t b, int64_t e, int64_t delivered) {
  KernelRecord k;
  k.correlation = corr;
  k.start_ns = b;
  k.end_ns = e;
  k.delivered_ns = delivered;
  k.sm_efficiency = 1.0;
  k.occupancy = 0.5;
  k.name = "k";
  return k;
}
uint64_t excluded(const StepGpu& g, Implausible why) { return g.excluded[static_cast<int>(why) - 1]; }
}  // namespace

TEST_CASE("plausibility: each impossible record has one reason; possible ones pass", "[plausibility]") {
  // launched at 1000 us, ran 1010-1020 us, delivered at 2000 us
  const int64_t us = 1000;
  CHECK(check_record(1010 * us, 1020 * us, 1000 * us, 2000 * us) == Implausible::none);
  CHECK(check_record(0, 0, 1000 * us, 2000 * us) == Implausible::no_timestamps);
  CHECK(check_record(1020 * us, 1010 * us, 1000 * us, 2000 * us) == Implausible::ends_before_start);
  CHECK(check_record(900 * us, 1020 * us, 1000 * us, 2000 * us) == Implausible::starts_before_launch);
  CHECK(check_record(1010 * us, 2100 * us, 1000 * us, 2000 * us) == Implausible::ends_after_delivery);
  // The clocks may disagree by less than the slack: not a contradiction.
  CHECK(check_record(1000 * us - kRecordClockSlackNs + 1, 1020 * us, 1000 * us, 2000 * us) == Implausible::none);
  CHECK(check_record(1010 * us, 2000 * us + kRecordClockSlackNs, 1000 * us, 2000 * us) == Implausible::none);
  // Unknown launch entry or delivery: that check is skipped, the others still apply.
  CHECK(check_record(1, 2, 0, 0) == Implausible::none);
  CHECK(check_record(900 * us, 2100 * us, 0, 2000 * us) == Implausible::ends_after_delivery);
  // A graph launch left unsettled when records went off at 1500 us: records delivered later are suspect,
  // records delivered before are not; unknown delivery is suspect.
  CHECK(check_record(1010 * us, 1020 * us, 1000 * us, 2000 * us, 1500 * us) == Implausible::graph_replayed_untraced);
  CHECK(check_record(1010 * us, 1020 * us, 1000 * us, 1400 * us, 1500 * us) == Implausible::none);
  CHECK(check_record(1010 * us, 1020 * us, 1000 * us, 0, 1500 * us) == Implausible::graph_replayed_untraced);
  for (int i = 1; i <= kImplausibleKinds; ++i) {
    CHECK(std::string(implausible_name(static_cast<Implausible>(i))).size() > 0);
    CHECK(std::string(implausible_text(static_cast<Implausible>(i))).size() > 0);
  }
}

TEST_CASE("plausibility: busy time cannot exceed the span of its records nor their summed durations",
          "[plausibility]") {
  CHECK(busy_time_plausible(80, 0, 100, 90));
  CHECK(busy_time_plausible(100, 0, 100, 300));  // three streams overlapping: sum above span, busy = span
  CHECK_FALSE(busy_time_plausible(120, 0, 100, 300));  // busy longer than first start to last end
  CHECK_FALSE(busy_time_plausible(95, 0, 100, 90));    // busy longer than all durations together
  CHECK_FALSE(busy_time_plausible(-1, 0, 100, 90));
}

TEST_CASE("plausibility: impossible records are left out of every sum and counted by reason", "[plausibility]") {
  // The defect this guards against: a graph's 50 tiny kernels came back lasting ~54 ms each in a
  // 13.6 ms step. Here: one good kernel per phase, then one impossible record of each kind.
  Attributor a;
  const int64_t us = 1000;
  a.add_launch(launch(1, 0, phase_tag::forward, 100 * us));
  a.add_launch(launch(2, 0, phase_tag::optimizer, 200 * us));
  a.add_launch(launch(3, 0, phase_tag::optimizer, 300 * us, /*graph=*/true));
  a.add_kernel(kernel(1, 110 * us, 150 * us, 1000 * us));
  a.add_kernel(kernel(2, 210 * us, 250 * us, 1000 * us));
  a.add_kernel(kernel(3, 310 * us, 320 * us, 1000 * us));               // good graph kernel
  a.add_kernel(kernel(3, 250 * us, 54000 * us, 1000 * us));             // starts before launch, ends after delivery
  a.add_kernel(kernel(3, 330 * us, 54000 * us, 1000 * us));             // ends 53 ms after its buffer was handed over
  a.add_kernel(kernel(3, 0, 0, 1000 * us));                              // no timestamps
  a.add_kernel(kernel(3, 400 * us, 390 * us, 1000 * us));               // ends before it starts
  a.add_launch(launch(4, 1, phase_tag::forward, 2000 * us));             // the stream moved on: step 0 complete
  a.add_kernel(kernel(4, 2010 * us, 2020 * us, 3000 * us));
  REQUIRE(a.is_complete(0));
  const StepGpu g = a.take(0);
  CHECK(g.kernels == 3);
  CHECK(g.kernel_ns == 90 * us);
  CHECK(g.busy_ns == 90 * us);
  CHECK(g.phases.at(phase_tag::optimizer).kernel_ns == 50 * us);
  CHECK(g.phases.at(phase_tag::optimizer).busy_ns == 50 * us);
  CHECK(g.excluded_records == 4);
  CHECK(excluded(g, Implausible::starts_before_launch) == 1);
  CHECK(excluded(g, Implausible::ends_after_delivery) == 1);
  CHECK(excluded(g, Implausible::no_timestamps) == 1);
  CHECK(excluded(g, Implausible::ends_before_start) == 1);
  CHECK(excluded(g, Implausible::graph_replayed_untraced) == 0);
  CHECK(g.implausible_phases == 0);
  CHECK(g.late_records == 0);
  CHECK(g.unattributed_records == 0);
  CHECK(g.complete);
  // Excluded records are not held for a later line either.
  const StepGpu g1 = a.take(1);
  CHECK(g1.kernels == 1);
  CHECK(g1.excluded_records == 0);
}

TEST_CASE("plausibility: sampled attribution settles a traced graph by launching it again with records on",
          "[plausibility]") {
  // trace_every > 1 with untraced_cupti=keep. Step 0 is traced and launches graph 10. CUPTI reads the
  // graph's kernel records out only when the same executable graph is launched again with records on
  // (or at a flush); a replay with records off overwrites their end times. So records stay on for the
  // next step, whose launches are marked discard: their records are dropped without a count, but they
  // show the stream moved on.
  Attributor a;
  const int64_t us = 1000;
  a.add_launch(launch(10, 0, phase_tag::optimizer, 100 * us, /*graph=*/true));
  LaunchRecord settle = launch(11, 1, phase_tag::optimizer, 1100 * us, /*graph=*/true);
  settle.discard = true;
  a.add_launch(settle);
  for (int i = 0; i < 50; ++i) a.add_kernel(kernel(10, (110 + i) * us, (110 + i) * us + 1000, 1150 * us));
  CHECK_FALSE(a.is_complete(0));  // one id, many kernels: still running as far as anyone knows
  for (int i = 0; i < 50; ++i) a.add_kernel(kernel(11, (1110 + i) * us, (1110 + i) * us + 1000, 2000 * us));
  REQUIRE(a.is_complete(0));       // the discard launch's records are the witness
  const StepGpu g = a.take(0);
  CHECK(g.kernels == 50);
  CHECK(g.kernel_ns == 50 * 1000);
  CHECK(g.excluded_records == 0);
  CHECK(g.late_records == 0);
  CHECK(g.unattributed_records == 0);
  CHECK(a.discarded_records() == 50);
  a.skip(1);
  CHECK(a.pending_steps() == 0);
  // The settling launch's own records come out at the graph's next launch with records on, steps
  // later, after step 1's ids were forgotten: dropped as settling records, not counted unattributed.
  for (int64_t step = 2; step < 5; ++step) a.skip(step);  // skip(4) forgets the launches of step 1
  a.add_launch(launch(30, 5, phase_tag::optimizer, 4100 * us, /*graph=*/true));
  a.add_launch(launch(31, 5, phase_tag::forward, 4200 * us));
  for (int i = 0; i < 50; ++i) a.add_kernel(kernel(11, (1110 + i) * us, 4000 * us, 5000 * us));
  a.add_kernel(kernel(31, 4210 * us, 4220 * us, 5000 * us));
  for (int i = 0; i < 50; ++i) a.add_kernel(kernel(30, (4110 + i) * us, (4110 + i) * us + 1000, 5000 * us));
  const StepGpu g4 = a.take(5, /*drained=*/true);
  CHECK(g4.kernels == 51);
  CHECK(g4.unattributed_records == 0);
  CHECK(g4.late_records == 0);
  CHECK(g4.excluded_records == 0);
  CHECK(a.discarded_records() == 100);
}

TEST_CASE("plausibility: a graph launch left unsettled when records go off is excluded, not published",
          "[plausibility]") {
  // The graph is not launched again within the settling steps: records go off at 1500 us. Its records
  // delivered after that may carry an untraced replay's end time and are excluded; a normal kernel of
  // the same step delivered at the same moment is kept.
  Attributor a;
  const int64_t us = 1000;
  a.add_launch(launch(20, 0, phase_tag::optimizer, 100 * us, /*graph=*/true));
  a.add_launch(launch(21, 0, phase_tag::forward, 50 * us));
  a.add_unsettled(UnsettledGraphs{{20}, 1500 * us});
  a.add_kernel(kernel(21, 60 * us, 90 * us, 9000 * us));
  for (int i = 0; i < 5; ++i) a.add_kernel(kernel(20, (110 + i) * us, 7000 * us, 9000 * us));
  const StepGpu g = a.take(0, /*drained=*/true);
  CHECK(g.kernels == 1);
  CHECK(g.phases.count(phase_tag::optimizer) == 0);
  CHECK(g.phases.at(phase_tag::forward).kernel_ns == 30 * us);
  CHECK(g.excluded_records == 5);
  CHECK(excluded(g, Implausible::graph_replayed_untraced) == 5);
}

TEST_CASE("plausibility: a stream whose records add up to more than its span is left out, other streams kept",
          "[plausibility]") {
  // What a graph replayed with records off between a traced launch and its read-out leaves: each of
  // its 50 kernels starts where it did and "ends" at the replay ~13.6 ms later. No timestamp check
  // sees it (each starts after its launch and ends before its buffer); together they claim 50 x the
  // stream's span. A forward kernel on another stream is kept whole.
  const int64_t us = 1000;
  const auto on = [](KernelRecord k, uint32_t stream) {
    k.stream = stream;
    return k;
  };
  Attributor a;
  a.add_launch(launch(40, 0, phase_tag::optimizer, 100 * us, /*graph=*/true));
  a.add_launch(launch(41, 0, phase_tag::forward, 50 * us));
  a.add_kernel(on(kernel(41, 60 * us, 90 * us, 20000 * us), 3));
  for (int i = 0; i < 50; ++i) a.add_kernel(on(kernel(40, (110 + 2 * i) * us, 13700 * us, 20000 * us), 9));
  const StepGpu g = a.take(0, /*drained=*/true);
  CHECK(g.kernels == 1);
  CHECK(g.phases.count(phase_tag::optimizer) == 0);
  CHECK(g.phases.at(phase_tag::forward).kernel_ns == 30 * us);
  CHECK(g.busy_ns == 30 * us);
  CHECK(g.excluded_records == 50);
  CHECK(excluded(g, Implausible::stream_overcommitted) == 50);

  // Controls on one stream: 50 kernels one after another, and pairs overlapping as programmatic
  // dependent launch lets them (the next one waiting while the previous finishes), are kept.
  Attributor b;
  b.add_launch(launch(50, 0, phase_tag::optimizer, 100 * us, /*graph=*/true));
  for (int i = 0; i < 50; ++i) b.add_kernel(on(kernel(50, (110 + 10 * i) * us, (118 + 10 * i) * us, 20000 * us), 9));
  b.add_launch(launch(51, 0, phase_tag::backward, 600 * us));
  b.add_launch(launch(52, 0, phase_tag::backward, 601 * us));
  b.add_kernel(on(kernel(51, 700 * us, 900 * us, 20000 * us), 4));
  b.add_kernel(on(kernel(52, 701 * us, 1000 * us, 20000 * us), 4));
  const StepGpu h = b.take(0, /*drained=*/true);
  CHECK(h.kernels == 52);
  CHECK(h.excluded_records == 0);
  CHECK(h.phases.at(phase_tag::optimizer).kernel_ns == 50 * 8 * us);
  CHECK(h.phases.at(phase_tag::backward).kernel_ns == 499 * us);
  CHECK(stream_records_plausible(2 * 100 * us, 0, 100 * us, 2));
  CHECK_FALSE(stream_records_plausible(3 * 100 * us, 0, 100 * us, 3));
  CHECK(h.streams == 2);
  CHECK(h.phases.at(phase_tag::optimizer).streams == 1);

  // Records of plain launches on an overcommitted stream are not what a replay leaves: kept here (the
  // line's invariants judge the phase: core/line_invariants.hpp), and the flight recorder keeps what
  // the sums were made of.
  Attributor c;
  for (uint32_t i = 0; i < 3; ++i) {
    c.add_launch(launch(60 + i, 0, phase_tag::forward, 100 * us));
    c.add_kernel(on(kernel(60 + i, 110 * us, 500 * us, 20000 * us), 2));
  }
  c.add_launch(launch(70, 0, phase_tag::optimizer, 100 * us, /*graph=*/true));
  for (int i = 0; i < 4; ++i) c.add_kernel(on(kernel(70, (110 + i) * us, 500 * us, 20000 * us), 2));
  StepActivity kept;
  const StepGpu k = c.take(0, /*drained=*/true, &kept);
  CHECK(excluded(k, Implausible::stream_overcommitted) == 4);
  CHECK(k.kernels == 3);
  CHECK(kept.kernels.size() == 3);
  CHECK(k.phases.count(phase_tag::optimizer) == 0);
}
