// Attribution by correlation id and the per-step GPU metrics, with synthetic records.
#include <steptrace/core/attribution.hpp>

#include "support.hpp"

using namespace steptrace;

namespace {
LaunchRecord launch(uint32_t corr, int64_t step, PhaseId phase, bool graph = false) {
  LaunchRecord l;
  l.correlation = corr;
  l.step = step;
  l.phase = phase;
  l.graph = graph;
  return l;
}
KernelRecord kernel(uint32_t corr, int64_t b, int64_t e, double eff, const char* name = "k", uint32_t stream = 7) {
  KernelRecord k;
  k.correlation = corr;
  k.start_ns = b;
  k.end_ns = e;
  k.sm_efficiency = eff;
  k.occupancy = 0.5;
  k.name = name;
  k.stream = stream;
  return k;
}
CopyRecord copy(uint32_t corr, int64_t b, int64_t e, uint64_t bytes, CopyKind kind) {
  CopyRecord c;
  c.correlation = corr;
  c.start_ns = b;
  c.end_ns = e;
  c.bytes = bytes;
  c.kind = kind;
  return c;
}
}  // namespace

TEST_CASE("interval helpers: merge, intersection, exposed communication", "[attribution]") {
  const auto m = merge_intervals({{10, 20}, {0, 5}, {15, 30}, {40, 40}});
  REQUIRE(m.size() == 2);
  CHECK(m[1] == Interval{10, 30});
  CHECK(intersection_length({{0, 10}, {20, 30}}, {{5, 25}}) == 10);
  // comm [0,100), compute covers [20,50) and [40,70): exposed 100 - 50 = 50
  CHECK(exposed_time({{0, 100}}, {{20, 50}, {40, 70}}) == 50);
  CHECK(exposed_time({{0, 100}}, {}) == 100);
  CHECK(exposed_time({}, {{0, 10}}) == 0);
}

TEST_CASE("time-weighted SM efficiency: concurrent kernels add up, capped at 1", "[attribution]") {
  // one kernel alone at 0.25 for 100 ns
  CHECK(time_weighted_sm_efficiency({{0, 100, 0.25}}) == Approx(0.25));
  // two kernels 0.5 + 0.7 overlapping on [50,100): level 0.5 | 1.0 (capped) | 0.7
  const double e = time_weighted_sm_efficiency({{0, 100, 0.5}, {50, 150, 0.7}});
  CHECK(e == Approx((50 * 0.5 + 50 * 1.0 + 50 * 0.7) / 150.0));
  // a gap is not busy time: [0,10) at 1.0 and [90,100) at 0.5 -> 0.75
  CHECK(time_weighted_sm_efficiency({{0, 10, 1.0}, {90, 100, 0.5}}) == Approx(0.75));
  // zero-weight kernels still count as busy
  CHECK(time_weighted_sm_efficiency({{0, 10, 0.0}, {10, 20, 1.0}}) == Approx(0.5));
  CHECK(time_weighted_sm_efficiency({}) == 0);
}

TEST_CASE("records go to the step and phase that launched them, not the one running", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  a.add_launch(launch(2, 0, phase_tag::backward));
  a.add_launch(launch(3, 1, phase_tag::forward));  // step 1 launched before step 0's kernels ran
  // out of order, straddling: step 1's kernel arrives first and runs during "step 0's" time
  a.add_kernel(kernel(3, 1000, 2000, 1.0));
  CHECK_FALSE(a.is_complete(0));
  a.add_kernel(kernel(2, 500, 900, 0.5));
  a.add_kernel(kernel(1, 0, 400, 0.25));
  CHECK(a.is_complete(0));
  const StepGpu s0 = a.take(0);
  CHECK(s0.complete);
  CHECK(s0.kernels == 2);
  CHECK(s0.kernel_ns == 800);
  CHECK(s0.busy_ns == 800);
  CHECK(s0.phases.at(phase_tag::forward).kernel_ns == 400);
  CHECK(s0.phases.at(phase_tag::backward).kernel_ns == 400);
  CHECK(s0.phases.at(phase_tag::forward).sm_efficiency == Approx(0.25));
  CHECK(s0.sm_efficiency == Approx((400 * 0.25 + 400 * 0.5) / 800.0));
  const StepGpu s1 = a.take(1);
  CHECK(s1.kernels == 1);
  CHECK(s1.phases.at(phase_tag::forward).kernel_ns == 1000);
}

TEST_CASE("launches the GPU waited for: work that started within 50 us of its launch call", "[attribution]") {
  Attributor a;
  const int64_t t = 1'000'000'000;
  LaunchRecord l1 = launch(1, 0, phase_tag::forward), l2 = launch(2, 0, phase_tag::forward),
               l3 = launch(3, 0, phase_tag::forward), l4 = launch(4, 0, phase_tag::forward);
  l1.enter_ns = t;            // started 10 us after its call: the GPU was waiting
  l2.enter_ns = t + 100'000;  // started 49.999 us after: still waiting
  l3.enter_ns = t + 200'000;  // started 50 us after: the queue held work
  // l4: entry not read (a nested driver call): not counted either way
  for (const auto& l : {l1, l2, l3, l4}) a.add_launch(l);
  a.add_kernel(kernel(1, t + 10'000, t + 20'000, 1.0));
  a.add_kernel(kernel(2, t + 149'999, t + 160'000, 1.0));
  a.add_kernel(kernel(3, t + 250'000, t + 260'000, 1.0));
  a.add_copy(copy(4, t + 300'000, t + 310'000, 64, CopyKind::h2d));
  const StepGpu g = a.take(0);
  CHECK(g.launch_timed == 3);
  CHECK(g.launch_waited == 2);
}

TEST_CASE("concurrent streams: busy time is the union, kernel time the sum", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  a.add_launch(launch(2, 0, phase_tag::forward));
  a.add_kernel(kernel(1, 0, 1000, 0.5, "a", 1));
  a.add_kernel(kernel(2, 500, 1500, 0.5, "b", 2));
  const StepGpu s = a.take(0);
  CHECK(s.kernel_ns == 2000);
  CHECK(s.busy_ns == 1500);
  CHECK(s.phases.at(phase_tag::forward).busy_ns == 1500);
  // [0,500) 0.5, [500,1000) 1.0, [1000,1500) 0.5
  CHECK(s.sm_efficiency == Approx(2.0 / 3.0));
}

TEST_CASE("copies by direction, memsets, unphased and before-first-step work", "[attribution]") {
  Attributor a;
  a.add_launch(launch(9, -1, kNoPhase));  // before the first step
  a.add_launch(launch(10, 0, phase_tag::h2d));
  a.add_launch(launch(11, 0, kNoPhase));
  a.add_launch(launch(12, 0, phase_tag::h2d));
  a.add_kernel(kernel(9, 0, 50, 1.0));
  a.add_copy(copy(10, 100, 200, 64u << 20, CopyKind::h2d));
  a.add_copy(copy(11, 200, 210, 4096, CopyKind::memset));
  a.add_copy(copy(12, 300, 400, 1u << 20, CopyKind::h2d));
  const StepGpu s = a.take(0);
  CHECK(s.before_first_step_records == 1);
  CHECK(s.before_first_step_ns == 50);
  const auto& h2d = s.phases.at(phase_tag::h2d).copies[static_cast<int>(CopyKind::h2d)];
  CHECK(h2d.bytes == (64u << 20) + (1u << 20));
  CHECK(h2d.count == 2);
  CHECK(h2d.total_ns == 200);
  CHECK(s.phases.at(kNoPhase).copies[static_cast<int>(CopyKind::memset)].bytes == 4096);
  CHECK(s.busy_ns == 210);
  CHECK(s.kernels == 0);
}

TEST_CASE("a driver call nested in a runtime call is an alias, not a second launch", "[attribution]") {
  Attributor a;
  a.add_launch(launch(100, 0, phase_tag::forward));
  LaunchRecord nested = launch(101, 0, phase_tag::forward);
  nested.outer_correlation = 100;
  a.add_launch(nested);
  CHECK_FALSE(a.is_complete(0));
  a.add_copy(copy(101, 0, 10, 8, CopyKind::d2h));  // the record carries the driver call's id
  CHECK(a.is_complete(0));
  CHECK(a.take(0).phases.at(phase_tag::forward).copies[static_cast<int>(CopyKind::d2h)].count == 1);
}

TEST_CASE("graph launches: every kernel of the graph goes to the launching phase", "[attribution]") {
  Attributor a;
  a.add_launch(launch(5, 0, phase_tag::forward, /*graph=*/true));
  for (int i = 0; i < 4; ++i) a.add_kernel(kernel(5, i * 100, i * 100 + 90, 1.0, "graph_node"));
  // one id, many kernels: complete only once a later step's record shows the stream moved on
  CHECK_FALSE(a.is_complete(0));
  a.add_launch(launch(6, 1, phase_tag::forward));
  a.add_kernel(kernel(6, 1000, 1100, 1.0));
  CHECK(a.is_complete(0));
  const StepGpu s = a.take(0);
  CHECK(s.kernels == 4);
  REQUIRE(s.phases.at(phase_tag::forward).top_kernels.size() == 1);
  CHECK(s.phases.at(phase_tag::forward).top_kernels[0].calls == 4);
}

TEST_CASE("a graph in the last step is complete once the device is drained", "[attribution]") {
  Attributor a;
  a.add_launch(launch(5, 0, phase_tag::forward, /*graph=*/true));
  a.add_kernel(kernel(5, 0, 90, 1.0));
  CHECK_FALSE(a.is_complete(0));       // running: more graph kernels may come
  CHECK(a.is_complete(0, /*drained=*/true));
  CHECK(a.take(0, /*drained=*/true).complete);
}

TEST_CASE("failed launches are not waited for; missing ones are counted; late ones too", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  a.add_launch(launch(2, 0, phase_tag::forward));
  LaunchRecord failed = launch(2, 0, phase_tag::forward);
  failed.failed = true;
  a.add_launch(failed);
  a.add_launch(launch(3, 0, phase_tag::forward));
  a.add_kernel(kernel(1, 0, 10, 1.0));
  CHECK_FALSE(a.is_complete(0));
  CHECK(a.missing_launches(0) == 1);
  const StepGpu s = a.take(0);  // at the deadline
  CHECK_FALSE(s.complete);
  CHECK(s.missing_launches == 1);
  a.add_kernel(kernel(3, 20, 30, 1.0));    // arrives after its line
  a.add_kernel(kernel(999, 20, 30, 1.0));  // no launch ever seen
  a.add_launch(launch(4, 1, phase_tag::forward));
  a.add_kernel(kernel(4, 40, 50, 1.0));
  const StepGpu s1 = a.take(1);
  CHECK(s1.late_records == 1);
  CHECK(s1.unattributed_records == 1);
  CHECK(s1.complete);
}

TEST_CASE("a launch made while records switch on or off: attributed if its record comes, never waited for", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  LaunchRecord came = launch(2, 0, phase_tag::backward), lost = launch(3, 0, phase_tag::backward);
  came.window = lost.window = true;  // another thread's launches during set_tracing
  a.add_launch(came);
  a.add_launch(lost);
  a.add_kernel(kernel(2, 5, 15, 1.0));
  CHECK_FALSE(a.is_complete(0));  // launch 1 is still expected
  CHECK(a.missing_launches(0) == 1);
  a.add_kernel(kernel(1, 0, 10, 1.0));
  CHECK(a.is_complete(0));  // launch 3's record never came: not waited for
  CHECK(a.missing_launches(0) == 0);
  const StepGpu s = a.take(0);
  CHECK(s.complete);
  CHECK(s.kernels == 2);
  CHECK(s.phases.at(phase_tag::backward).kernels == 1);
  CHECK(s.unattributed_records == 0);
  CHECK(s.launched_untraced_records == 0);
}

TEST_CASE("a launch still in flight when records went off becomes the switch's, before or after its record", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  a.add_launch(launch(2, 0, phase_tag::backward));  // another thread's call, staged as expected
  a.add_launch(launch(3, 0, phase_tag::backward));  // the same, its record already in
  a.add_kernel(kernel(1, 0, 10, 1.0));
  a.add_kernel(kernel(3, 12, 14, 1.0));
  CHECK(a.missing_launches(0) == 1);
  a.make_window(2);  // neither call had returned when records went off (GpuDrain::windowed)
  a.make_window(3);
  a.make_window(77);  // a launch never staged (its step's line is out): nothing to do
  CHECK(a.is_complete(0));
  CHECK(a.missing_launches(0) == 0);
  a.add_kernel(kernel(2, 11, 12, 1.0));  // came after all: attributed, not counted twice
  a.make_window(2);
  const StepGpu s = a.take(0);
  CHECK(s.complete);
  CHECK(s.kernels == 3);
  CHECK(s.phases.at(phase_tag::backward).kernels == 2);
  CHECK(s.unattributed_records == 0);
}

TEST_CASE("NCCL kernels: time whatever the phase, exposed part, top kernels sorted", "[attribution]") {
  Attributor a(/*top_n=*/2);
  a.add_launch(launch(1, 0, phase_tag::backward));
  a.add_launch(launch(2, 0, phase_tag::nccl));
  a.add_launch(launch(3, 0, phase_tag::backward));
  a.add_launch(launch(4, 0, phase_tag::backward));
  a.add_kernel(kernel(1, 0, 600, 1.0, "_Z4gemmv"));
  a.add_kernel(kernel(2, 400, 1000, 0.1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  a.add_kernel(kernel(3, 1000, 1100, 0.5, "_Z7softmaxv"));
  a.add_kernel(kernel(4, 1100, 1150, 0.5, "_Z4tinyv"));
  const StepGpu s = a.take(0);
  CHECK(s.nccl_ns == 600);
  CHECK(s.nccl_exposed_ns == 400);  // [400,600) hidden behind the GEMM
  const auto& top = s.phases.at(phase_tag::backward).top_kernels;
  REQUIRE(top.size() == 2);
  CHECK(top[0].name == "_Z4gemmv");
  CHECK(top[1].name == "_Z7softmaxv");
  CHECK(top[1].sm_efficiency == Approx(0.5));
  CHECK(is_nccl_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t"));
  CHECK_FALSE(is_nccl_kernel("_Z12my_ncclish_kernel"));
}

TEST_CASE("per-step record bound: excess dropped and the step marked incomplete", "[attribution]") {
  Attributor a(5, /*max_records_per_step=*/3);
  a.add_launch(launch(1, 0, phase_tag::forward, true));
  for (int i = 0; i < 10; ++i) a.add_kernel(kernel(1, i, i + 1, 1.0));
  const StepGpu s = a.take(0);
  CHECK(s.kernels == 3);
  CHECK_FALSE(s.complete);
}

TEST_CASE("NCCL kernel names give the collective", "[attribution]") {
  CHECK(nccl_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "AllReduce");
  CHECK(nccl_collective("_Z29ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE") == "AllGather");
  CHECK(nccl_collective("ncclKernel_ReduceScatter_RING_LL_Sum_int8_t") == "ReduceScatter");
  CHECK(nccl_collective("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)") == "other");
  CHECK(nccl_collective("not_nccl") == "other");
}

TEST_CASE("skip: a step not traced leaves no state, and its stray records count as late", "[attribution]") {
  Attributor a;
  a.add_launch(launch(1, 0, phase_tag::forward));
  a.add_launch(launch(2, 1, phase_tag::forward));  // a launch filed under a step that is then not traced
  a.add_launch(launch(3, 2, phase_tag::forward));
  a.add_kernel(kernel(1, 0, 100, 1.0));
  REQUIRE(a.is_complete(0));
  CHECK(a.take(0).kernels == 1);
  a.skip(1);
  CHECK(a.pending_steps() == 1);  // only step 2 waits
  a.add_kernel(kernel(2, 100, 200, 1.0));  // step 1's record after its line: late, not in step 2
  a.add_kernel(kernel(3, 200, 300, 1.0));
  const auto g = a.take(2);
  CHECK(g.kernels == 1);
  CHECK(g.late_records == 1);
  CHECK(g.unattributed_records == 0);
  a.add_launch(launch(4, 1, phase_tag::forward));  // a launch of a skipped step arriving late is ignored
  CHECK(a.pending_steps() == 0);
}

TEST_CASE("CUPTI attached again numbers ids from 1: old ids and aliases are forgotten", "[attribution]") {
  // untraced_cupti=detach with trace_every=3: step 0 traced, CUPTI detached, steps 1-2 not traced,
  // CUPTI attached again for step 3, whose launches reuse step 0's ids.
  auto run = [](bool forget) {
    Attributor a;
    a.add_launch(launch(1, 0, phase_tag::forward));
    LaunchRecord memset_driver = launch(2, 0, phase_tag::forward);  // a memset's driver call inside runtime call 1
    memset_driver.outer_correlation = 1;
    a.add_launch(memset_driver);
    a.add_kernel(kernel(1, 0, 100, 1.0));
    REQUIRE(a.is_complete(0));
    a.take(0);
    a.skip(1);
    a.skip(2);
    if (forget) a.forget_correlations();
    a.add_launch(launch(1, 3, phase_tag::backward));
    a.add_launch(launch(2, 3, phase_tag::optimizer));  // id 2 was step 0's alias of id 1
    a.add_kernel(kernel(1, 1000, 1100, 1.0));
    a.add_kernel(kernel(2, 1100, 1300, 1.0));
    return a;
  };
  Attributor a = run(true);
  REQUIRE(a.is_complete(3));
  const auto g = a.take(3);
  CHECK(g.kernels == 2);
  CHECK(g.phases.at(phase_tag::backward).kernel_ns == 100);
  CHECK(g.phases.at(phase_tag::optimizer).kernel_ns == 200);
  CHECK(g.unattributed_records == 0);
  // Without forgetting, id 2's record follows the stale alias to id 1: the optimizer's kernel lands in
  // the backward phase and step 3 never sees id 2.
  Attributor stale = run(false);
  CHECK_FALSE(stale.is_complete(3));
}
