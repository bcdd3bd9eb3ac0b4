// Hardware-counter samples and NVML readings attributed to steps and phases (pure core).
#include <steptrace/core/counters.hpp>
#include <steptrace/core/device_state.hpp>

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
  const auto c = summarize_counters(s, std::vector<Interval>{{100, 200}, {700, 800}});
  CHECK(*c.sm_active == Approx(0.9));
  CHECK(*c.tensor_active == Approx(0.5));
  CHECK(c.samples == 2);
  CHECK(c.coverage == Approx(1.0));
  CHECK(summarize_counters(s, std::vector<Interval>{}).samples == 0);
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
