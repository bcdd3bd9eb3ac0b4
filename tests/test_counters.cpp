// Hardware-counter samples and NVML readings attributed to steps and phases (pure core).
#include <steptrace/core/counters.hpp>
#include <steptrace/core/device_state.hpp>
#include <steptrace/core/attribution.hpp>
#include <steptrace/core/gpu_tail.hpp>

#include "support.hpp"

using namespace steptrace;

namespace {
CounterSample sample(int64_t b, int64_t e, double sm, double tensor = std::nan(""), double dram = 0.0) {
  CounterSample s;
  s.start_ns = b;
  s.end_ns = e;
  s.sm_active = sm;
  s.tensor_active = tensor;
  s.dram = dram;
  return s;
}
}  // namespace

TEST_CASE("counters: a window covered by whole samples averages them by time", "[counters]") {
  std::deque<CounterSample> s{sample(0, 100, 0.2), sample(100, 200, 0.4), sample(200, 400, 1.0)};
  const auto c = summarize_counters(s, Interval{0, 400});
  REQUIRE(c.sm_active);
  CHECK(*c.sm_active == Approx((0.2 * 100 + 0.4 * 100 + 1.0 * 200) / 400));
  CHECK(c.samples == 3);
  CHECK(c.coverage == Approx(1.0));
  CHECK_FALSE(c.tensor_active);  // never measured: null, not 0
  REQUIRE(c.dram);
  CHECK(*c.dram == 0.0);  // measured zero stays zero
}

TEST_CASE("counters: whole samples inside the window are preferred to the edges", "[counters]") {
  // Neighbouring work (1.0) at both edges of a window whose own work ran at 0.0.
  std::deque<CounterSample> s{sample(0, 100, 1.0), sample(100, 200, 0.0), sample(200, 300, 0.0), sample(300, 400, 1.0)};
  const auto c = summarize_counters(s, Interval{50, 350});
  CHECK(*c.sm_active == 0.0);
  CHECK(c.samples == 2);
  CHECK_FALSE(c.edge_only);
  CHECK(c.coverage == Approx(200.0 / 300.0));
}

TEST_CASE("counters: partial overlap weights a sample by the time it shares with the window", "[counters]") {
  std::deque<CounterSample> s{sample(0, 100, 0.0), sample(100, 200, 1.0)};
  const auto c = summarize_counters(s, Interval{50, 150});  // half of each, no whole sample inside
  CHECK(*c.sm_active == Approx(0.5));
  CHECK(c.samples == 2);
  CHECK(c.edge_only);
  const auto late = summarize_counters(s, Interval{150, 250});  // half of it is not covered yet
  CHECK(*late.sm_active == Approx(1.0));
  CHECK(late.coverage == Approx(0.5));
  const auto none = summarize_counters(s, Interval{300, 400});
  CHECK(none.samples == 0);
  CHECK_FALSE(none.sm_active);
  CHECK(none.coverage == 0);
}

TEST_CASE("counters: a phase's busy intervals select the samples it ran in", "[counters]") {
  // 10 samples of 100 ns: the phase ran in [100,200) and [700,800), where sm_active was 0.9; elsewhere 0.1.
  std::deque<CounterSample> s;
  for (int i = 0; i < 10; ++i) s.push_back(sample(i * 100, i * 100 + 100, (i == 1 || i == 7) ? 0.9 : 0.1, 0.5));
  const auto c = summarize_phase_counters(s, {{100, 200}, {700, 800}});
  CHECK(*c.sm_active == Approx(0.9));  // samples 2-6 lie in its span but hold none of its work
  CHECK(*c.tensor_active == Approx(0.5));
  CHECK(c.samples == 2);
  CHECK(c.coverage == Approx(1.0));
  CHECK(summarize_phase_counters(s, {}).samples == 0);
}

namespace {
// A phase's GPU work as hundreds of short kernels with gaps of a few microseconds: [b, e) in ns.
std::vector<Interval> many_kernels(int64_t b, int64_t e, int64_t kernel_ns, int64_t gap_ns) {
  std::vector<Interval> out;
  for (int64_t t = b; t + kernel_ns <= e; t += kernel_ns + gap_ns) out.push_back({t, t + kernel_ns});
  return out;
}
CounterSample full_sample(int64_t b, int64_t e, double sm, double tensor, double dram, double occ) {
  CounterSample s = sample(b, e, sm, tensor, dram);
  s.occupancy = occ;
  return s;
}
}  // namespace

TEST_CASE("phase counters: a phase of many short kernels gets every sample its work spans", "[counters]") {
  // The defect: a 33 ms backward phase of 343 kernels a few us apart got 1-2 of its ~33 one-ms samples,
  // because hardly any sample lies whole inside one kernel's interval.
  const int64_t ms = 1'000'000;
  std::deque<CounterSample> s;
  for (int i = 0; i < 60; ++i) s.push_back(full_sample(i * ms, (i + 1) * ms, 0.9, 0.6, 0.3, 0.4));
  // backward: 33 ms of 90 us kernels 4 us apart, starting mid-sample, with one 2.5 ms GEMM among them
  auto busy = many_kernels(5 * ms + ms / 3, 20 * ms, 90'000, 4'000);
  busy.push_back({20 * ms + 4'000, 22 * ms + ms / 2});
  for (const auto& k : many_kernels(22 * ms + ms / 2 + 4'000, 38 * ms + ms / 3, 90'000, 4'000)) busy.push_back(k);
  int64_t busy_ns = 0;
  for (const auto& [b, e] : busy) busy_ns += e - b;
  REQUIRE(busy.size() > 300);
  const auto c = summarize_phase_counters(s, busy);
  const double spanned = 34;  // samples 5..38 hold some of its work
  CHECK(c.samples >= 0.8 * spanned);
  CHECK(c.samples == 32);  // 6..37: all but the two it shares with idle time at its ends
  int64_t inside = 0;
  for (const auto& [b, e] : busy) inside += std::max<int64_t>(0, std::min(e, 38 * ms) - std::max(b, 6 * ms));
  CHECK(c.sample_ns == inside);
  CHECK(c.coverage == Approx(double(inside) / double(busy_ns)));
  CHECK_FALSE(c.edge_only);
  CHECK(*c.sm_active == Approx(0.9));
  CHECK(*c.tensor_active == Approx(0.6));
  CHECK(*c.occupancy == Approx(0.4));
}

TEST_CASE("phase counters: phases run one after another give back the step's value when weighted",
          "[counters]") {
  // forward 0-17.3 ms (tensor-heavy GEMMs), backward 17.3-50.6 ms (element-wise), optimizer 50.6-53 ms;
  // samples of 1 ms whose values mix whichever phases ran in them, in proportion to their time there.
  const int64_t ms = 1'000'000;
  struct Phase {
    int64_t b, e;
    double sm, tensor, dram, occ;
  };
  const Phase phases[] = {{0, 17'300'000, 0.95, 0.7, 0.2, 0.3},
                          {17'300'000, 50'600'000, 0.8, 0.05, 0.6, 0.6},
                          {50'600'000, 53'000'000, 0.4, 0.0, 0.9, 0.2}};
  std::vector<std::vector<Interval>> busy;
  for (const auto& p : phases) busy.push_back(many_kernels(p.b, p.e, 20'000, 3'000));
  // Each sample's value: the time-weighted mix of the phases' kernels inside it (gaps count as idle).
  std::deque<CounterSample> s;
  for (int64_t t = 0; t < 53 * ms; t += ms) {
    double v[4] = {}, len = static_cast<double>(ms);
    for (std::size_t i = 0; i < busy.size(); ++i) {
      double in = 0;
      for (const auto& [b, e] : busy[i]) in += static_cast<double>(std::max<int64_t>(0, std::min(e, t + ms) - std::max(b, t)));
      v[0] += in / len * phases[i].sm;
      v[1] += in / len * phases[i].tensor;
      v[2] += in / len * phases[i].dram;
      v[3] += in / len * phases[i].occ;
    }
    s.push_back(full_sample(t, t + ms, v[0], v[1], v[2], v[3]));
  }
  const auto step = summarize_counters(s, Interval{0, 53 * ms});
  REQUIRE(step.samples == 53);
  double sum_w = 0, sm = 0, tensor = 0, dram = 0, occ = 0;
  std::vector<CounterSummary> per;
  for (const auto& b : busy) {
    const auto c = summarize_phase_counters(s, b);
    per.push_back(c);
    const double w = static_cast<double>(c.sample_ns);
    sum_w += w;
    sm += w * *c.sm_active;
    tensor += w * *c.tensor_active;
    dram += w * *c.dram;
    occ += w * *c.occupancy;
  }
  // Weighted by the sample time each phase was given, the phases reproduce the step (within 0.02).
  CHECK(sm / sum_w == Approx(*step.sm_active).margin(0.02));
  CHECK(tensor / sum_w == Approx(*step.tensor_active).margin(0.02));
  CHECK(dram / sum_w == Approx(*step.dram).margin(0.02));
  CHECK(occ / sum_w == Approx(*step.occupancy).margin(0.02));
  // Each phase reads close to its own work (samples at its edges mix in the neighbour).
  CHECK(per[0].samples == 17);  // 0..16; sample 17 is shared with backward and belongs to neither
  CHECK(per[1].samples == 32);  // 18..49
  CHECK(per[2].samples == 1);   // 51 (its last kernel ends a few us before 53 ms: 52 is not whole)
  CHECK(*per[0].tensor_active > 0.5);
  CHECK(*per[1].tensor_active < 0.1);
  CHECK(*per[1].dram > *per[0].dram);
}

TEST_CASE("phase counters: a phase inside one sample is edge_only; no work, no samples", "[counters]") {
  std::deque<CounterSample> s{sample(0, 1000, 0.2), sample(1000, 2000, 0.8)};
  const auto tiny = summarize_phase_counters(s, {{1100, 1200}, {1300, 1350}});
  CHECK(tiny.samples == 1);
  CHECK(tiny.edge_only);
  CHECK(tiny.sample_ns == 150);
  CHECK(*tiny.sm_active == Approx(0.8));
  const auto half = summarize_phase_counters(s, {{400, 1500}});  // 600 ns of sample 0, 500 of sample 1
  CHECK(half.samples == 2);
  CHECK(half.edge_only);
  CHECK(*half.sm_active == Approx((0.2 * 600 + 0.8 * 500) / 1100));
  CHECK(summarize_phase_counters(s, {}).samples == 0);
  CHECK_FALSE(summarize_phase_counters(s, {{5000, 6000}}).sm_active);  // after the last sample: nothing
  CHECK(summarize_phase_counters(s, {{5000, 6000}}).coverage == 0);
}

TEST_CASE("phase counters: phases taking turns inside the samples say they share them", "[counters]") {
  // Two per-layer phases alternating every 100 us for 10 ms: their spans cover the same samples, so
  // each reads the mix of both; `shared_ns` says half the work in its samples was the other's.
  const int64_t ms = 1'000'000, us = 1'000;
  std::deque<CounterSample> s;
  for (int i = 0; i < 12; ++i) s.push_back(sample(i * ms, (i + 1) * ms, 0.7));
  std::vector<Interval> a, b;
  for (int64_t t = ms; t < 11 * ms; t += 200 * us) {
    a.push_back({t, t + 100 * us});
    b.push_back({t + 100 * us, t + 200 * us});
  }
  const auto ca = summarize_phase_counters(s, a, b);
  CHECK(ca.samples == 9);  // 1..9: its last kernel ends 100 us before 11 ms, so sample 10 is not whole
  CHECK(ca.sample_ns == 9 * ms / 2);
  CHECK(ca.shared_ns == 9 * ms / 2);
  // One after another instead: no sample of one holds the other's work.
  const auto first = summarize_phase_counters(s, {{ms, 5 * ms}}, {{5 * ms, 9 * ms}});
  CHECK(first.samples == 4);
  CHECK(first.shared_ns == 0);
  // Nested: the inner phase's kernels inside the outer's span (records go to the innermost phase).
  const auto outer = summarize_phase_counters(s, {{ms, 3 * ms}, {5 * ms, 9 * ms}}, {{3 * ms, 5 * ms}});
  CHECK(outer.samples == 6);
  CHECK(outer.shared_ns == 0);  // the inner phase's samples (3, 4) hold none of the outer's work
  const auto outer_mixed = summarize_phase_counters(s, {{ms, 3 * ms + ms / 2}, {4 * ms + ms / 2, 9 * ms}},
                                                    {{3 * ms + ms / 2, 4 * ms + ms / 2}});
  CHECK(outer_mixed.shared_ns == ms);  // samples 3 and 4 are half the inner phase's
}

TEST_CASE("phase counters: a long kernel between idle time reads its own value, not the idle edges",
          "[counters]") {
  // A 3 ms full-grid kernel from 0.4 ms: samples 1 and 2 are its own (1.0), samples 0 and 3 are mostly
  // idle (0.6 and 0.4 of the kernel's value). Weighting the edges by the kernel's time in them would
  // read (0.6*0.6 + 1 + 1 + 0.4*0.4) / 3 = 0.84: the edges are left out.
  const int64_t ms = 1'000'000;
  std::deque<CounterSample> s{sample(0, ms, 0.6), sample(ms, 2 * ms, 1.0), sample(2 * ms, 3 * ms, 1.0),
                              sample(3 * ms, 4 * ms, 0.4), sample(4 * ms, 5 * ms, 0.0)};
  const auto c = summarize_phase_counters(s, {{4 * ms / 10, 3 * ms + 4 * ms / 10}});
  CHECK(c.samples == 2);
  CHECK(*c.sm_active == Approx(1.0));
  CHECK(c.sample_ns == 2 * ms);
  CHECK(c.coverage == Approx(2.0 / 3.0));
  CHECK_FALSE(c.edge_only);
}

TEST_CASE("device state: readings within the step, the latest earlier one for a short step", "[counters]") {
  std::deque<DeviceStateSample> r;
  auto reading = [](int64_t t, double w, double mhz, double temp, uint64_t reasons) {
    DeviceStateSample s;
    s.time_ns = t;
    s.power_w = w;
    s.sm_clock_mhz = mhz;
    s.temperature_c = temp;
    s.clock_event_reasons = reasons;
    return s;
  };
  r.push_back(reading(0, 100, 1980, 40, 0x1));
  r.push_back(reading(10, 500, 1755, 55, 0x4));
  r.push_back(reading(20, 700, 1700, 60, 0x4 | 0x20));
  const auto d = summarize_device_state(r, 5, 25);
  REQUIRE(d);
  CHECK(d->samples == 2);
  CHECK(*d->power_w_mean == Approx(600));
  CHECK(*d->power_w_max == Approx(700));
  CHECK(*d->sm_clock_mhz_min == Approx(1700));
  CHECK(*d->sm_clock_mhz_mean == Approx(1727.5));
  CHECK(*d->temperature_c_max == Approx(60));
  CHECK(clock_event_reason_names(*d->clock_event_reasons) == std::vector<std::string>{"sw_power_cap", "sw_thermal_slowdown"});
  const auto shortstep = summarize_device_state(r, 21, 23);  // between readings
  REQUIRE(shortstep);
  CHECK(shortstep->samples == 0);
  CHECK(*shortstep->power_w_mean == Approx(700));
  DeviceStateSample partial;  // a VM that hides power: that field stays absent
  partial.time_ns = 30;
  partial.sm_clock_mhz = 1500;
  std::deque<DeviceStateSample> p{partial};
  const auto d2 = summarize_device_state(p, 0, 40);
  REQUIRE(d2);
  CHECK_FALSE(d2->power_w_mean);
  CHECK(*d2->sm_clock_mhz_mean == 1500);
  CHECK_FALSE(summarize_device_state(p, 0, 20));  // no reading within or before the step
}

TEST_CASE("gpu tail: the allowance is the longest recent tail plus a margin, none before a complete step", "[counters]") {
  GpuTail t;
  CHECK_FALSE(t.allowance_ns().has_value());
  t.saw(-5'000'000);  // GPU work done before the host end counts as no tail
  CHECK(*t.allowance_ns() == GpuTail::kMarginNs);
  t.saw(40'000'000);
  t.saw(1'000'000);
  CHECK(*t.allowance_ns() == 40'000'000 + GpuTail::kMarginNs);
  for (std::size_t i = 0; i < GpuTail::kRemembered; ++i) t.saw(2'000'000);  // the long one is forgotten
  CHECK(*t.allowance_ns() == 2'000'000 + GpuTail::kMarginNs);
}

TEST_CASE("gpu tail: a step's GPU work ends with its phases' last busy interval", "[counters]") {
  StepGpu g;
  CHECK_FALSE(gpu_work_interval(g).has_value());
  g.phases[1].busy = {{100, 200}, {300, 450}};
  g.phases[2].busy = {{150, 400}};
  g.phases[3];  // a phase without GPU work
  CHECK(gpu_work_interval(g)->second == 450);
  CHECK(gpu_work_interval(g)->first == 100);
  CHECK(gpu_span_ns(g) == 350);
}

TEST_CASE("counters: a sample value outside [0, 1] is left out and counted, rounding of 1 reads as 1", "[counters]") {
  CounterSample s = sample(0, 1000, 1.71, 1.0006, -0.2);
  s.occupancy = 0.5;
  CHECK(exclude_impossible_values(s) == 2);
  CHECK(std::isnan(s.sm_active));
  CHECK(s.tensor_active == 1.0);
  CHECK(std::isnan(s.dram));
  CHECK(s.occupancy == 0.5);
  CounterSample fine = sample(0, 1000, 0.4, 0.0, 1.0);
  CHECK(exclude_impossible_values(fine) == 0);
  CHECK(fine.sm_active == 0.4);

  // A short phase between two long ones, its only whole sample partial and impossible (H100: 1.71):
  // the phase has no value (null, not 1.71 and not a clamped 1); with a valid partial sample it reads
  // that sample, inside the neighbours' range.
  std::deque<CounterSample> samples;
  for (int i = 0; i < 10; ++i) samples.push_back(sample(i * 1000, (i + 1) * 1000, 0.9));
  CounterSample partial = sample(10'000, 10'640, 1.71);
  exclude_impossible_values(partial);
  samples.push_back(partial);
  for (int i = 11; i < 20; ++i) samples.push_back(sample(i * 1000, (i + 1) * 1000, 0.2));
  const CounterSummary shortp = summarize_phase_counters(samples, {{10'000, 11'500}});
  CHECK_FALSE(shortp.sm_active.has_value());
  CHECK(shortp.coverage <= 1.0);
  samples[10].sm_active = 0.6;
  const CounterSummary valid = summarize_phase_counters(samples, {{10'000, 11'500}});
  REQUIRE(valid.sm_active.has_value());
  CHECK(*valid.sm_active == Approx(0.6));
  const CounterSummary step = summarize_counters(samples, {0, 20'000});
  REQUIRE(step.sm_active.has_value());
  CHECK(*step.sm_active >= 0.2);
  CHECK(*step.sm_active <= 0.9);
}
