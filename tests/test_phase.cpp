// Phase identities, the per-thread phase stack, and nesting as seen in a step's line.
#include <steptrace/steptrace.hpp>

#include <chrono>

#include "host_config.hpp"
#include "support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

TEST_CASE("built-in phases have fixed ids and names", "[phase]") {
  CHECK(steptrace::phase_name(steptrace::phase_tag::input) == "input");
  CHECK(steptrace::phase_name(steptrace::phase_tag::h2d) == "h2d");
  CHECK(steptrace::phase_name(steptrace::phase_tag::forward) == "forward");
  CHECK(steptrace::phase_name(steptrace::phase_tag::backward) == "backward");
  CHECK(steptrace::phase_name(steptrace::phase_tag::optimizer) == "optimizer");
  CHECK(steptrace::phase_name(steptrace::phase_tag::nccl) == "nccl");
  CHECK(steptrace::phase_name(999) == "unknown");
}

TEST_CASE("custom phase names register once and are validated", "[phase]") {
  const auto a = steptrace::register_phase_checked("attention");
  CHECK(a.error.empty());
  CHECK(a.id >= steptrace::kBuiltinPhaseCount);
  CHECK(steptrace::register_phase_checked("attention").id == a.id);
  CHECK(steptrace::register_phase_checked("forward").id == steptrace::phase_tag::forward);

  const auto bad = steptrace::register_phase_checked("My Phase!");
  CHECK_FALSE(bad.error.empty());
  CHECK(bad.error.find("My Phase!") != std::string::npos);
  CHECK(steptrace::phase_name(bad.id) == "my_phase_");

  CHECK(steptrace::is_valid_phase_name("loss.scale-2"));
  CHECK_FALSE(steptrace::is_valid_phase_name(""));
  CHECK_FALSE(steptrace::is_valid_phase_name("2fast"));
  CHECK_FALSE(steptrace::is_valid_phase_name(std::string(49, 'a')));
}

TEST_CASE("the phase table is bounded", "[phase]") {
  for (int i = 0; i < 100; ++i) steptrace::register_phase_checked("bulk" + std::to_string(i));
  CHECK(steptrace::phase_count() == steptrace::kMaxPhases);
  const auto full = steptrace::register_phase_checked("one_too_many");
  CHECK(full.id == steptrace::kNoPhase);
  CHECK(full.error.find("full") != std::string::npos);
}

TEST_CASE("nested phases: inclusive times, same-phase nesting counted once", "[phase]") {
  const auto log = fresh_log("phase_nesting");
  auto cfg = steptrace_test::host_config(log);
  REQUIRE(steptrace::start(cfg));
  // The outer forward's time outside attention, as this thread saw it (t0..t1 and t2..t3 hold it).
  std::chrono::steady_clock::time_point t0, t1, t2, t3;
  {
    TRACE_STEP();
    t0 = std::chrono::steady_clock::now();
    {
      TRACE_PHASE(forward);
      spin_for_us(2000);
      {
        TRACE_PHASE_NAMED("attention");
        t1 = std::chrono::steady_clock::now();
        spin_for_us(3000);
        {
          TRACE_PHASE(forward);  // recursion: must not add its time to forward twice
          spin_for_us(20000);
        }
      }
      t2 = std::chrono::steady_clock::now();
    }
    t3 = std::chrono::steady_clock::now();
  }
  steptrace::stop();
  const double outside_ms = std::chrono::duration<double, std::milli>((t1 - t0) + (t3 - t2)).count();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 1);
  const auto& phases = lines[0]["phases"];
  const double forward = phases["forward"]["host_ms"];
  const double attention = phases["attention"]["host_ms"];
  CHECK(phases["forward"]["count"] == 2);
  CHECK(attention >= 23.0);
  CHECK(forward >= 25.0);
  // forward = its own ~2 ms + attention when the inner forward counts once; counting it again would add
  // its 20 ms. Its own part is at most what this thread measured outside attention (however long a
  // loaded machine stretched it).
  CHECK(forward - attention <= outside_ms + 0.2);
  CHECK(forward >= attention);
  CHECK(lines[0]["forward_time_ms"] == forward);
  // Everything ran inside forward: almost nothing is untracked.
  CHECK(double(lines[0]["untracked_time_ms"]) < 0.5 * forward);
}
