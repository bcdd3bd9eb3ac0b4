// The stall watchdog (issue #17): when no step begins for the threshold, the background thread writes
// a stall record naming the open step, the phases open on each thread and for how long, and the open
// step's outstanding GPU work; again at doubling intervals; and a resumed record when a step begins.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/core/stall.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <pthread.h>

#include "fake_backend.hpp"
#include "host_config.hpp"
#include "support.hpp"

using steptrace::StallWatch;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;

namespace {

constexpr int64_t kMs = 1'000'000;

std::vector<nlohmann::json> events_named(const std::string& log, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (auto& e : steptrace_test::read_records_live(log))  // whole records only: the log may be being written
    if (e.contains("event") && e["event"] == name) out.push_back(std::move(e));
  return out;
}

/// Waits (10 s at most) for the background thread's next look to write `count` records named `name`.
bool wait_for_events(const std::string& log, const std::string& name, std::size_t count = 1) {
  return steptrace_test::wait_for([&] { return events_named(log, name).size() >= count; });
}

const nlohmann::json* thread_named(const nlohmann::json& stall, const std::string& name) {
  for (const auto& t : stall["threads"])
    if (t["name"] == name) return &t;
  return nullptr;
}

}  // namespace

TEST_CASE("the stall rule: a threshold of stall_after_s or ten median steps, reports at 1x 2x 4x, resumed after", "[stall]") {
  StallWatch w(1.0);
  CHECK(w.look(0, -1) == StallWatch::Due::none);  // no step yet: start-up is not watched
  CHECK(w.look(5000 * kMs, -1) == StallWatch::Due::none);
  CHECK(w.look(5000 * kMs, 0) == StallWatch::Due::none);  // step 0 begins at 5 s
  CHECK(w.threshold_s() == 1.0);                           // no median yet
  CHECK(w.look(5999 * kMs, 0) == StallWatch::Due::none);
  CHECK(w.look(6000 * kMs, 0) == StallWatch::Due::stall);  // 1 s
  CHECK(w.reports() == 1);
  CHECK(w.next_report_s() == 2.0);
  CHECK(w.look(6500 * kMs, 0) == StallWatch::Due::none);
  CHECK(w.look(7000 * kMs, 0) == StallWatch::Due::stall);  // 2 s
  CHECK(w.look(8000 * kMs, 0) == StallWatch::Due::none);
  CHECK(w.look(9000 * kMs, 0) == StallWatch::Due::stall);  // 4 s
  CHECK(w.reports() == 3);
  CHECK(w.stalled_s(9000 * kMs) == Approx(4.0));
  CHECK(w.look(9500 * kMs, 1) == StallWatch::Due::resumed);
  CHECK(w.ended_step() == 0);
  CHECK(w.ended_stalled_s() == Approx(4.5));
  CHECK(w.ended_reports() == 3);
  CHECK(w.look(9600 * kMs, 2) == StallWatch::Due::none);  // a step after a quiet one: nothing to say

  // Steps of 300 ms: ten of them (3 s) is longer than stall_after_s, so the threshold follows them.
  for (int i = 0; i < 9; ++i) w.step_closed(300);
  w.step_closed(5000);  // one outlier does not move the median
  CHECK(*w.median_step_ms() == 300);
  CHECK(w.threshold_s() == Approx(3.0));
  CHECK(w.look(12500 * kMs, 2) == StallWatch::Due::none);   // 2.9 s
  CHECK(w.look(12600 * kMs, 2) == StallWatch::Due::stall);  // 3.0 s
  CHECK(w.reported_threshold_s() == Approx(3.0));

  StallWatch off(0);
  CHECK_FALSE(off.enabled());
  CHECK(off.look(0, 0) == StallWatch::Due::none);
  CHECK(off.look(int64_t{1} << 60, 0) == StallWatch::Due::none);
}

TEST_CASE("a stall is timed from its step's begin, not from the look that first saw the step", "[stall]") {
  StallWatch w(1.0);
  CHECK(w.look(5003 * kMs, 0, 5000 * kMs) == StallWatch::Due::none);  // seen 3 ms after it began
  CHECK(w.stalled_s(5003 * kMs) == Approx(0.003));
  CHECK(w.look(5999 * kMs, 0) == StallWatch::Due::none);
  CHECK(w.look(6000 * kMs, 0) == StallWatch::Due::stall);  // 1 s after the begin, 997 ms after the first look
  CHECK(w.stalled_s(6000 * kMs) == Approx(1.0));
  CHECK(w.look(6504 * kMs, 1, 6500 * kMs) == StallWatch::Due::resumed);
  CHECK(w.ended_stalled_s() == Approx(1.5));  // to the next step's begin
  CHECK(w.look(7000 * kMs, 2, 7001 * kMs) == StallWatch::Due::none);  // a begin read after the look's time: now
  CHECK(w.stalled_s(7000 * kMs) == 0);
}

TEST_CASE("a step that never closes and a phase that never ends on another thread are named, with their durations", "[stall]") {
  const auto log = fresh_log("stall_host");
  steptrace::Config cfg = steptrace_test::host_config(log);
  cfg.stall_after_s = 0.3;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 20; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    steptrace_test::spin_for_us(1000);
  }

  // A loader thread that opens `input` and blocks in it until released.
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> loader_in{false};
  std::thread loader([&] {
    pthread_setname_np(pthread_self(), "st-loader");
    TRACE_PHASE(input);
    loader_in = true;
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return release; });
  });
  while (!loader_in) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // input open 100 ms before the step

  pthread_setname_np(pthread_self(), "st-train");
  std::chrono::steady_clock::time_point began;
  {
    TRACE_STEP();  // step 20: stuck in nccl for 1.5 s, opened 20 ms into the step
    began = std::chrono::steady_clock::now();  // after the step's begin: held_s is at most its length
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    TRACE_PHASE(nccl);
    std::this_thread::sleep_for(std::chrono::milliseconds(1480));
  }
  const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  {
    TRACE_STEP();  // step 21: progress
  }
  {
    std::lock_guard<std::mutex> lock(m);
    release = true;
  }
  cv.notify_all();
  loader.join();
  // The background thread's next look writes the resumed record.
  CHECK(wait_for_events(log, "resumed"));
  steptrace::stop();

  const auto stalls = events_named(log, "stall");
  REQUIRE(stalls.size() == 3);  // at 0.3, 0.6 and 1.2 s; the next (2.4 s) never came
  for (std::size_t i = 0; i < stalls.size(); ++i) {
    const auto& s = stalls[i];
    INFO(s.dump());
    CHECK(s["schema"] == "steptrace.stall/1");
    CHECK(s["open_step"] == 20);
    CHECK(s["report"] == static_cast<int>(i + 1));
    const double due = 0.3 * (1 << i);
    CHECK(s["stalled_s"].get<double>() >= due);
    CHECK(s["stalled_s"].get<double>() < 2 * due);  // said before the next report fell due
    CHECK(s["threshold_s"].get<double>() == Approx(0.3));
    CHECK(s["next_report_s"].get<double>() == Approx(0.3 * (2 << i)));
    CHECK(s["step_scope_open"] == true);
    CHECK(s["median_step_ms"].get<double>() >= 1.0);
    CHECK(s["median_step_ms"].get<double>() < 50.0);
    const auto* train = thread_named(s, "st-train");
    const auto* load = thread_named(s, "st-loader");
    REQUIRE(train != nullptr);
    REQUIRE(load != nullptr);
    CHECK((*train)["step_thread"] == true);
    CHECK((*load)["step_thread"] == false);
    REQUIRE((*train)["open_phases"].size() == 1);
    CHECK((*train)["open_phases"][0]["phase"] == "nccl");
    const double nccl_open = (*train)["open_phases"][0]["open_s"];
    // Opened 20 ms (at least: a sleep) after the step began: a stall timed from a later look, or a
    // phase held to stalled_s, would leave less between the two.
    CHECK(s["stalled_s"].get<double>() - nccl_open >= 0.019);  // a sleep is never shorter: no load can fail it
    CHECK(nccl_open > 0);
    REQUIRE((*load)["open_phases"].size() == 1);
    CHECK((*load)["open_phases"][0]["phase"] == "input");
    CHECK((*load)["open_phases"][0]["open_s"].get<double>() >= s["stalled_s"].get<double>() + 0.09);  // opened earlier
    // No GPU: the GPU fields are null, with the reason.
    CHECK(s["gpu"]["open_step_outstanding"].is_null());
    CHECK(s["null_reasons"]["gpu.open_step_outstanding"].get<std::string>().find("no GPU attribution") == 0);
    CHECK(s["gpu"]["last_activity_s"].is_null());
    CHECK(s["gpu"]["sm_active_recent"].is_null());
    CHECK(s["null_reasons"].contains("gpu.sm_active_recent"));
    CHECK(s["run_id"] == read_lines(log).front()["run_id"]);
  }
  const auto resumed = events_named(log, "resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["stalled_step"] == 20);
  CHECK(resumed[0]["open_step"] == 21);
  CHECK(resumed[0]["reports"] == 3);
  CHECK(resumed[0]["stalled_s"].get<double>() >= held_s - 0.01);
  CHECK(resumed[0]["stalled_s"].get<double>() < held_s + 0.3);
  // The step lines are as ever: 22 of them, step 20's nccl phase 1.5 s long.
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 22);
  CHECK(lines[20]["phases"]["nccl"]["host_ms"].get<double>() >= 1480);  // opened 20 ms into the step
}

TEST_CASE("the threshold follows slow steps: ten median steps before a stall is said", "[stall]") {
  const auto log = fresh_log("stall_median");
  steptrace::Config cfg = steptrace_test::host_config(log);
  cfg.stall_after_s = 0.05;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 8; ++i) {
    TRACE_STEP();
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // ten of them: 0.4 s
  }
  const auto slow_began = std::chrono::steady_clock::now();
  {
    TRACE_STEP();  // 0.25 s: slow, but not ten median steps
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  // Not a stall unless a loaded machine stretched the sleep past 0.4 s (ten 40 ms steps at least).
  if (std::chrono::steady_clock::now() - slow_began < std::chrono::milliseconds(400))
    CHECK(events_named(log, "stall").empty());
  {
    TRACE_STEP();  // 0.6 s: a stall, said at ten median steps (~0.4 s)
    CHECK(wait_for_events(log, "stall"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  {
    TRACE_STEP();
  }
  CHECK(wait_for_events(log, "resumed"));
  steptrace::stop();
  const auto stalls = events_named(log, "stall");
  REQUIRE(stalls.size() >= 1);
  CHECK(stalls[0]["open_step"] == 9);
  // Ten median steps: the 40 ms steps (each at least 40 ms; a loaded machine makes them longer).
  const double median_s = stalls[0]["median_step_ms"].get<double>() / 1000;
  CHECK(median_s >= 0.04);
  CHECK(stalls[0]["threshold_s"].get<double>() == Approx(10 * median_s));
  CHECK(stalls[0]["step_scope_open"] == true);
  CHECK(events_named(log, "resumed").size() == 1);
}

TEST_CASE("between steps: a scope that ended long ago is said, and stall_after_s 0 says nothing", "[stall]") {
  const auto log = fresh_log("stall_between");
  steptrace::Config cfg = steptrace_test::host_config(log);
  cfg.stall_after_s = 0.2;
  REQUIRE(steptrace::start(cfg));
  {
    TRACE_STEP();
  }
  // An evaluation outside any step, for as long as it takes the background thread to say it (0.2 s on).
  CHECK(wait_for_events(log, "stall"));
  steptrace::stop();
  const auto stalls = events_named(log, "stall");
  REQUIRE(stalls.size() >= 1);
  CHECK(stalls[0]["step_scope_open"] == false);
  CHECK(stalls[0]["step_scope_closed_s"].get<double>() >= 0.2);
  CHECK(events_named(log, "resumed").empty());  // stop() is not progress
  // The end record counts the stall records the run wrote.
  const auto ends = events_named(log, "end");
  REQUIRE(ends.size() == 1);
  CHECK(ends[0]["stall_records"] == stalls.size());

  const auto quiet = fresh_log("stall_off");
  cfg.log_path = quiet;
  cfg.stall_after_s = 0;
  REQUIRE(steptrace::start(cfg));
  {
    TRACE_STEP();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  steptrace::stop();
  CHECK(events_named(quiet, "stall").empty());
  const auto quiet_end = events_named(quiet, "end");
  REQUIRE(quiet_end.size() == 1);
  CHECK(quiet_end[0]["stall_records"].is_null());  // no watchdog, nothing counted: why, in the record
  CHECK(quiet_end[0]["null_reasons"]["stall_records"] == "the stall watchdog is off (stall_after_s=0)");
}

TEST_CASE("the open step's GPU work: launches without a record after a flush are outstanding, by phase", "[stall]") {
  using steptrace_test::FakeBackend;
  auto backend = std::make_unique<FakeBackend>();
  FakeBackend& gpu = *backend;
  steptrace::details::Session session(std::move(backend));
  const auto log = fresh_log("stall_gpu");
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.trace_every = 1;
  cfg.stall_after_s = 0.3;
  REQUIRE(session.start(cfg, {}));
  for (int i = 0; i < 5; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    gpu.launch(100'000);
  }
  gpu.delivery = FakeBackend::Delivery::never;  // from here the kernels never finish
  {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      gpu.launch(100'000);
      gpu.launch(100'000);
    }
    TRACE_PHASE(nccl);
    gpu.launch(100'000);
    CHECK(wait_for_events(log, "stall"));  // 0.3 s into the step, or as soon after as the thread runs
  }
  session.stop();
  const auto stalls = events_named(log, "stall");
  REQUIRE(stalls.size() >= 1);
  const auto& g = stalls[0]["gpu"];
  INFO(stalls[0].dump());
  CHECK(stalls[0]["open_step"] == 5);
  CHECK(g["open_step_launches"] == 3);
  CHECK(g["open_step_outstanding"] == 3);
  CHECK(g["outstanding_by_phase"]["forward"] == 2);
  CHECK(g["outstanding_by_phase"]["nccl"] == 1);
  CHECK(g["last_activity"] == "fake_kernel");
  // Step 4's kernel: 100 us long, queued behind the earlier steps' 100 us kernels on the fake stream
  // (FakeBackend::launch: its start is the later of its launch + 1 us and the stream's end) when the
  // loop launches faster than they run, so it ends at most 5 x 100 us + 1 us after step 5 began, which
  // the stall is timed from; both ages are read at the same instant (0.299736 s seen on a loaded
  // machine once a step's hand-over stopped waking the background thread).
  CHECK(g["last_activity_s"].get<double>() >= stalls[0]["stalled_s"].get<double>() - 0.000501 - 1e-6);
  CHECK(g["last_activity_s"].get<double>() < 1.0);
  CHECK(stalls[0]["device_uuid"] == "GPU-00000000-1111-2222-3333-444444444444");
  CHECK(g["sm_active_recent"].get<double>() == Approx(0.5));  // the fake sampler's every sample
  CHECK(g["sm_active_sample_age_s"].get<double>() >= 0);
  CHECK(g["sm_active_sample_age_s"].get<double>() < 0.2);
  CHECK(gpu.calls().flushes >= 1);  // completed records asked for before the report
}
