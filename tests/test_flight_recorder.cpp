// The flight recorder: the trigger rule, the trace it writes, the ring's bounds, and a run with a
// fake GPU whose lines name their traces.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <steptrace/core/capture_budget.hpp>
#include <steptrace/core/chrome_trace.hpp>
#include <steptrace/core/trace_trigger.hpp>
#include <steptrace/details/flight_recorder.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/steptrace.hpp>

#include "capture_log.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_backend.hpp"
#include "host_config.hpp"
#include "support.hpp"

using steptrace::Bottleneck;
using steptrace::TraceTrigger;
using json = nlohmann::json;

namespace {

TraceTrigger::Step plain(uint64_t i, double ms, std::optional<Bottleneck> label = std::nullopt) {
  TraceTrigger::Step s;
  s.index = i;
  s.step_ms = ms;
  s.label = label;
  return s;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

}  // namespace

TEST_CASE("step ranges: a, a-b, lists; bad spellings are refused", "[flight]") {
  std::vector<std::pair<uint64_t, uint64_t>> r;
  CHECK(steptrace::parse_step_ranges("100-105,200", r).empty());
  REQUIRE(r.size() == 2);
  CHECK(r[0] == std::make_pair<uint64_t, uint64_t>(100, 105));
  CHECK(r[1] == std::make_pair<uint64_t, uint64_t>(200, 200));
  CHECK(steptrace::parse_step_ranges("", r).empty());
  CHECK(r.empty());
  for (const char* bad : {"5-3", "-5", "a-b", "1,,2", "1-", "1 -2", "3-4,"}) {
    INFO(bad);
    CHECK_FALSE(steptrace::parse_step_ranges(bad, r).empty());
    CHECK(r.empty());
  }
}

TEST_CASE("the slow-step trigger: above trigger x the median of the last 64, only after 20 steps", "[flight]") {
  TraceTrigger t({1.5, true, {}});
  for (uint64_t i = 0; i < 20; ++i) CHECK(t.look(plain(i, i == 3 ? 100.0 : 10.0)).reasons.empty());  // warm-up
  auto d = t.look(plain(20, 14.9));
  CHECK(d.reasons.empty());
  REQUIRE(d.median_ms);
  CHECK(*d.median_ms == Approx(10.0));
  d = t.look(plain(21, 15.1));
  CHECK(d.reasons == std::vector<std::string>{"slow_step"});
  TraceTrigger off({0, true, {}});
  for (uint64_t i = 0; i < 30; ++i) CHECK(off.look(plain(i, i == 25 ? 1000.0 : 10.0)).reasons.empty());
}

TEST_CASE("the diagnosis trigger: the first step of a stretch that differs from the usual label", "[flight]") {
  TraceTrigger t({0, true, {}});
  for (uint64_t i = 0; i < 25; ++i) CHECK(t.look(plain(i, 10, Bottleneck::compute_bound)).reasons.empty());
  auto d = t.look(plain(25, 10, Bottleneck::input_bound));
  CHECK(d.reasons == std::vector<std::string>{"diagnosis_changed"});
  CHECK(d.usual_label == "COMPUTE-BOUND");
  CHECK(t.look(plain(26, 10, Bottleneck::input_bound)).reasons.empty());  // the same stretch
  CHECK(t.look(plain(27, 10, Bottleneck::compute_bound)).reasons.empty());
  CHECK(t.look(plain(28, 10, Bottleneck::input_bound)).reasons == std::vector<std::string>{"diagnosis_changed"});
  CHECK(t.look(plain(29, 10)).reasons.empty());  // untraced: no label, no verdict
}

TEST_CASE("requested and named steps are captured whatever the rule says", "[flight]") {
  TraceTrigger t({1.5, true, {{3, 4}, {9, 9}}});
  auto s = plain(2, 10);
  s.requested = true;
  CHECK(t.look(s).reasons == std::vector<std::string>{"capture_steps"});
  CHECK(t.look(plain(3, 10)).reasons == std::vector<std::string>{"capture_steps_env"});
  CHECK(t.look(plain(4, 10)).reasons == std::vector<std::string>{"capture_steps_env"});
  CHECK(t.look(plain(5, 10)).reasons.empty());
  CHECK(t.look(plain(9, 10)).reasons == std::vector<std::string>{"capture_steps_env"});
}

namespace {

steptrace::KeptStep kept(uint64_t index, int64_t begin, int64_t end) {
  steptrace::KeptStep k;
  k.index = index;
  k.begin_ns = begin;
  k.end_ns = end;
  k.traced = true;
  return k;
}

steptrace::KeptRecord kernel(int64_t start, int64_t end, uint32_t stream, int64_t launch, int32_t tid,
                             steptrace::PhaseId phase) {
  steptrace::KeptRecord r;
  r.start_ns = start;
  r.end_ns = end;
  r.stream = stream;
  r.launch_ns = launch;
  r.launch_tid = tid;
  r.phase = phase;
  return r;
}

steptrace::TraceDocument document(const std::vector<const steptrace::KeptStep*>& steps,
                                  const std::vector<std::string>& names) {
  steptrace::TraceDocument d;
  d.steps = steps;
  d.captured = {steps.front()->index};
  d.reasons = {"slow_step"};
  d.names = &names;
  d.phase_name = [](steptrace::PhaseId id) { return "phase" + std::to_string(id); };
  d.thread_name = [](int32_t tid) { return "t" + std::to_string(tid); };
  d.pid = 42;
  d.gpu_clock_offset_ns = 5'000;  // GPU clock = host + 5 us
  return d;
}

}  // namespace

TEST_CASE("a trace: steps, scopes on their threads, records on their streams, a flow per launch", "[flight]") {
  const std::vector<std::string> names = {"gemm", "softmax"};
  auto s = kept(7, 1'000'000, 2'000'000);
  s.own_end_ns = 1'950'000;  // its scope ended 50 us before the next step began
  steptrace::PhaseSpan outer{2, 0, true, false, 11, 1'100'000, 1'900'000};
  steptrace::PhaseSpan inner{3, 1, true, false, 11, 1'200'000, 1'300'000};
  steptrace::PhaseSpan other{1, 0, false, false, 12, 900'000, 1'050'000};  // before the step: time zero
  s.spans = {outer, inner, other};
  s.records = {kernel(1'305'000, 1'405'000, 7, 1'215'000, 11, 3), kernel(1'405'000, 1'455'000, 7, 1'216'000, 11, 3)};
  s.records[1].name = 1;
  // Two records of stream 9 that overlap (graph branches): two lanes.
  s.records.push_back(kernel(1'500'000, 1'600'000, 9, 1'250'000, 13, 2));
  s.records.push_back(kernel(1'550'000, 1'650'000, 9, 1'250'000, 13, 2));
  const auto doc = json::parse(steptrace::make_chrome_trace(document({&s}, names)));
  const auto& ev = doc["traceEvents"];
  std::map<std::string, int> by_cat;
  std::vector<json> kernels, flows_s, flows_f;
  for (const auto& e : ev) {
    if (e["ph"] == "X") ++by_cat[e["cat"].get<std::string>()];
    if (e["ph"] == "X" && e["cat"] == "kernel") kernels.push_back(e);
    if (e["ph"] == "s") flows_s.push_back(e);
    if (e["ph"] == "f") flows_f.push_back(e);
  }
  CHECK(by_cat["step"] == 1);
  for (const auto& e : ev)
    if (e["ph"] == "X" && e["cat"] == "step") {
      CHECK(e["dur"].get<double>() == Approx(1000.0));  // to the next step's start
      CHECK(e["args"]["step_time_ms"].get<double>() == Approx(0.95));  // to its own end
    }
  CHECK(by_cat["phase"] == 3);
  CHECK(by_cat["kernel"] == 4);
  CHECK(by_cat["launch"] == 4);
  REQUIRE(flows_s.size() == 4);
  REQUIRE(flows_f.size() == 4);
  // Time zero is the earliest thing shown (the other thread's scope at 900 us).
  for (const auto& e : ev)
    if (e["ph"] == "X" && e["cat"] == "phase" && e["args"]["global_step"] == 7 && e["tid"] == 12) CHECK(e["ts"] == 0.0);
  // A kernel at GPU 1'305'000 is host 1'300'000: 400 us after time zero, 100 us long, named by the table.
  CHECK(kernels[0]["ts"].get<double>() == Approx(400.0));
  CHECK(kernels[0]["dur"].get<double>() == Approx(100.0));
  CHECK(kernels[0]["name"] == "gemm");
  CHECK(kernels[1]["name"] == "softmax");
  CHECK(kernels[0]["args"]["phase"] == "phase3");
  // The overlapping records of stream 9 are on different tracks.
  CHECK(kernels[2]["tid"] != kernels[3]["tid"]);
  CHECK(kernels[0]["tid"] == 7);
  // Each flow starts at its launch on the launching thread and ends where its record starts.
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(flows_s[i]["id"] == flows_f[i]["id"]);
    CHECK(flows_f[i]["bp"] == "e");
    CHECK(flows_f[i]["ts"].get<double>() >= flows_s[i]["ts"].get<double>());
  }
  CHECK(flows_s[0]["tid"] == 11);
  CHECK(flows_s[0]["ts"].get<double>() == Approx(310.0));  // 1'215'000 - 5'000 - 900'000 ns
  CHECK(doc["otherData"]["schema"] == "steptrace.trace/1");
  CHECK(doc["otherData"]["captured"] == json::array({7}));
  bool step_thread_named = false;
  for (const auto& e : ev)
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 11)
      step_thread_named = e["args"]["name"].get<std::string>().find("step thread") != std::string::npos;
  CHECK(step_thread_named);
}

namespace {

steptrace::StepRecord step_record(uint64_t i) {
  steptrace::StepRecord r;
  r.index = i;
  r.begin_ns = static_cast<int64_t>(i) * 1'000'000;
  r.end_ns = r.begin_ns + 1'000'000;
  return r;
}

steptrace::StepActivity activity(uint64_t i, int kernels) {
  steptrace::StepActivity a;
  static const char* name = "_Z4gemmPf";
  for (int k = 0; k < kernels; ++k) {
    steptrace::Placed<steptrace::KernelRecord> p;
    p.record.start_ns = static_cast<int64_t>(i) * 1'000'000 + k * 10;
    p.record.end_ns = p.record.start_ns + 5;
    p.record.name = name;
    p.phase = 2;
    a.kernels.push_back(p);
  }
  return a;
}

}  // namespace

TEST_CASE("the recorder: consecutive captures share a file with their neighbours; at most trace_max_files",
          "[flight]") {
  const std::string dir = steptrace_test::fresh_dir("flight_unit");
  steptrace::details::FlightRecorder::Settings s;
  s.keep_steps = 5;
  s.max_files = 2;
  s.dir = dir;
  s.trigger.trigger = 0;
  s.trigger.ranges = {{3, 4}, {5, 5}, {8, 8}, {12, 12}};
  steptrace::details::FlightRecorder fr(s);
  steptrace::details::Demangler demangle;
  std::map<uint64_t, steptrace::StepTrace> marks;
  for (uint64_t i = 0; i < 15; ++i) {
    marks[i] = fr.decide(i, 1.0, std::nullopt, false, "abcdef0123456789");
    auto a = activity(i, 3);
    fr.keep(step_record(i), &a, true, "", demangle);
    if (fr.has_due()) fr.write_due({});
  }
  fr.finish({});
  // 3, 4 and 5 are consecutive and fit (3 steps + 2 neighbours = 5): one file.
  REQUIRE(marks[3].captured);
  CHECK(marks[3].file == dir + "/trace-abcdef01-r0-s3.json");
  CHECK(marks[4].file == marks[3].file);
  CHECK(marks[5].file == marks[3].file);
  CHECK(marks[8].file == dir + "/trace-abcdef01-r0-s8.json");
  // The third capture is over trace_max_files: counted, not written.
  CHECK(marks[12].captured);
  CHECK(marks[12].file.empty());
  CHECK(marks[12].not_written.find("trace_max_files (2)") != std::string::npos);
  CHECK_FALSE(marks[6].captured);
  CHECK(marks[6].null_reason == "step not captured");
  const auto t = read_json(marks[3].file);
  CHECK(t["otherData"]["steps"] == json::array({2, 3, 4, 5, 6}));
  CHECK(t["otherData"]["captured"] == json::array({3, 4, 5}));
  const auto t8 = read_json(marks[8].file);
  CHECK(t8["otherData"]["steps"] == json::array({7, 8, 9}));
  int kernels = 0;
  for (const auto& e : t8["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "kernel") {
      ++kernels;
      CHECK(e["name"] == "gemm(float*)");
    }
  CHECK(kernels == 9);
  const auto& st = fr.stats();
  CHECK(st.captures == 2);
  CHECK(st.written == 2);
  CHECK(st.refused_max_files == 1);
  CHECK(st.steps_kept == 15);
}

TEST_CASE("the ring's byte bound: old steps go first; a step above it keeps the records that fit", "[flight]") {
  steptrace::details::FlightRecorder::Settings s;
  s.keep_steps = 8;
  s.max_bytes = 64 * 1024;
  s.trigger.trigger = 0;
  steptrace::details::FlightRecorder fr(s);
  steptrace::details::Demangler demangle;
  for (uint64_t i = 0; i < 6; ++i) {
    auto a = activity(i, 300);  // ~300 x 64 B = 19 KiB a step: three fit
    fr.keep(step_record(i), &a, true, "", demangle);
  }
  CHECK(fr.stats().steps_evicted_for_bytes >= 2);
  CHECK(fr.stats().bytes <= s.max_bytes);
  CHECK(fr.stats().records_left_out == 0);
  auto big = activity(6, 5000);
  fr.keep(step_record(6), &big, true, "", demangle);
  CHECK(fr.stats().records_left_out > 0);
  CHECK(fr.stats().bytes <= s.max_bytes);
  CHECK(fr.stats().bytes_peak <= s.max_bytes);
}

TEST_CASE("a run with a fake GPU: captured lines name their trace; its kernels sum to the line's", "[flight]") {
  using steptrace_test::FakeBackend;
  auto backend = std::make_unique<FakeBackend>();
  FakeBackend& gpu = *backend;
  steptrace::details::Session session(std::move(backend));
  const std::string dir = steptrace_test::fresh_dir("flight_run");
  steptrace::Config cfg;
  cfg.log_path = dir + "/steps.jsonl";
  cfg.summary = false;
  cfg.trace_every = 1;
  cfg.stall_after_s = 0;
  cfg.line_detail = steptrace::LineDetail::full;  // the lines' fields are compared with the traces
  REQUIRE(session.start(cfg, {{"STEPTRACE_CAPTURE_STEPS", "4"}}));
  for (int i = 0; i < 8; ++i) {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      for (int k = 0; k < 10; ++k) gpu.launch(10'000 + k * 100, 100, "_Z4gemmPf");
    }
    TRACE_PHASE(backward);
    for (int k = 0; k < 20; ++k) gpu.launch(7'000, 100, "_Z8gemm_bwdPf", 9);
    if (i == 1) steptrace::capture_steps(1);  // step 2
  }
  session.stop();
  const auto lines = steptrace_test::read_records(cfg.log_path);
  REQUIRE(lines.size() >= 9);
  std::map<int, json> by_step;
  json end;
  for (const auto& l : lines) {
    if (l.contains("global_step")) by_step[l["global_step"].get<int>()] = l;
    else if (l.value("event", "") == "end") end = l;
  }
  REQUIRE(by_step[2]["trace"].is_object());
  CHECK(by_step[2]["trace"]["reasons"] == json::array({"capture_steps"}));
  REQUIRE(by_step[4]["trace"].is_object());
  CHECK(by_step[4]["trace"]["reasons"] == json::array({"capture_steps_env"}));
  CHECK(by_step[3]["trace"].is_null());
  CHECK(by_step[3]["null_reasons"]["trace"] == "step not captured");
  const auto t = read_json(by_step[4]["trace"]["file"].get<std::string>());
  CHECK(t["otherData"]["steps"] == json::array({3, 4, 5}));
  std::map<std::pair<int, std::string>, double> sums;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "kernel")
      sums[{e["args"]["global_step"].get<int>(), e["args"]["phase"].get<std::string>()}] += e["dur"].get<double>() / 1000;
  for (int s : {3, 4, 5})
    for (const char* phase : {"forward", "backward"}) {
      INFO(s << " " << phase);
      CHECK(sums[{s, phase}] == Approx(by_step[s]["phases"][phase]["gpu"]["kernel_ms"].get<double>()).epsilon(1e-9));
    }
  REQUIRE(end.is_object());
  CHECK(end["traces"]["written"] == 2);
  CHECK(end["traces"]["captures"] == 2);
  CHECK(end["traces"]["ring"]["keep_steps"] == 8);
  CHECK(end["traces"]["ring"]["bytes"].get<uint64_t>() > 0);
}

TEST_CASE("off: trace_keep_steps=0 writes nothing, every line says why, capture_steps() refuses", "[flight]") {
  const std::string dir = steptrace_test::fresh_dir("flight_off");
  auto cfg = steptrace_test::host_config(dir + "/steps.jsonl");
  cfg.trace_keep_steps = 0;
  REQUIRE(steptrace::start(cfg));
  CHECK_FALSE(steptrace::capture_steps(2));
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
  steptrace::stop();
  for (const auto& l : steptrace_test::read_records(cfg.log_path)) {
    if (l.contains("global_step")) {
      CHECK(l["trace"].is_null());
      CHECK(l["null_reasons"]["trace"] == "flight recorder off (trace_keep_steps=0)");
    } else {
      CHECK(l["traces"].is_null());
    }
  }
}

TEST_CASE("an unusable log and no trace_dir: no trace file lands in the working directory, a warning says why",
          "[flight]") {
  auto cfg = steptrace_test::host_config("/nonexistent-dir/steps.jsonl");
  cfg.capture_steps = "0-2";  // would be written to the working directory before
  // In a directory of its own: CTest runs other tests beside this one in the build's, and their trace
  // files landing there meanwhile made this count move (seen once on a loaded 2-core machine).
  struct InDir {
    std::filesystem::path home = std::filesystem::current_path();
    explicit InDir(const std::string& dir) { std::filesystem::current_path(dir); }
    ~InDir() { std::filesystem::current_path(home); }
  } in_dir(steptrace_test::fresh_dir("flight_no_trace_dir"));
  const auto traces_here = [] {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("."))
      if (e.path().filename().string().rfind("trace-", 0) == 0) ++n;
    return n;
  };
  const std::size_t before = traces_here();
  REQUIRE(steptrace::start(cfg));
  CHECK_FALSE(steptrace::capture_steps(1));
  for (int i = 0; i < 4; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
  steptrace::stop();
  CHECK(traces_here() == before);
  CHECK(steptrace_test::captured_log().str().find("no trace files: the log is unusable and trace_dir is not set") !=
        std::string::npos);
}

TEST_CASE("without a GPU a captured step's trace holds its host phase scopes", "[flight]") {
  const std::string dir = steptrace_test::fresh_dir("flight_host");
  auto cfg = steptrace_test::host_config(dir + "/steps.jsonl");
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 4; ++i) {
    TRACE_STEP();
    if (i == 0) REQUIRE(steptrace::capture_steps(1));
    TRACE_PHASE(forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  steptrace::stop();
  std::string file;
  double step_time_ms = -1;
  for (const auto& l : steptrace_test::read_lines(cfg.log_path))
    if (l.value("global_step", -1) == 1) {
      file = l.at("trace").at("file").get<std::string>();
      step_time_ms = l.at("step_time_ms").get<double>();
    }
  REQUIRE_FALSE(file.empty());
  const auto t = read_json(file);
  int phases = 0, step_events = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "phase" && e["name"] == "forward") {
      ++phases;
      CHECK(e["dur"].get<double>() >= 1000.0);  // >= 1 ms, in us
    }
    if (e["ph"] == "X" && e["cat"] == "step" && e["args"]["global_step"] == 1) {
      ++step_events;
      CHECK(e["args"]["gpu_records"].get<std::string>().find("no GPU attribution") != std::string::npos);
      // args.step_time_ms is the step's own time, as its line's (the same nanoseconds: equal, not close).
      CHECK(e.at("args").at("step_time_ms").get<double>() == step_time_ms);
    }
  }
  CHECK(step_events == 1);
  CHECK(phases == 3);  // steps 0, 1, 2
}

TEST_CASE("scopes of one thread that overlap by a clock conversion's nanoseconds are made to nest", "[flight]") {
  steptrace::PhaseSpan a{0, 0, false, false, 5, 0, 1000};
  std::vector<steptrace::details::HostSpan> spans = {
      {0, 1000, &a, 0},      // back to back with the next, which starts 19 ns early
      {981, 2000, &a, 0},
      {1100, 1500, &a, 0},   // nested in the second
      {1600, 2003, &a, 0},   // nested in the second too, but ends 3 ns after it
  };
  steptrace::details::NestingFix fix;
  steptrace::details::make_nest(spans, fix);
  CHECK(fix.adjusted == 2);
  CHECK(fix.max_ns == 19);
  CHECK(spans[1].begin == 1000);
  CHECK(spans[1].end == 2000);
  CHECK(spans[3].begin == 1600);
  CHECK(spans[3].end == 2000);
}

TEST_CASE("a capture keeps its step and neighbours even when trace_keep_steps is smaller", "[flight]") {
  const std::string dir = steptrace_test::fresh_dir("flight_keep1");
  steptrace::details::FlightRecorder::Settings s;
  s.keep_steps = 1;
  s.dir = dir;
  s.trigger.trigger = 0;
  s.trigger.ranges = {{3, 3}};
  steptrace::details::FlightRecorder fr(s);
  steptrace::details::Demangler demangle;
  std::string file;
  for (uint64_t i = 0; i < 7; ++i) {
    const auto mark = fr.decide(i, 1.0, std::nullopt, false, "0123456789abcdef");
    if (mark.captured) file = mark.file;
    auto a = activity(i, 2);
    fr.keep(step_record(i), &a, true, "", demangle);
    if (fr.has_due()) fr.write_due({});
  }
  REQUIRE_FALSE(file.empty());
  const auto t = read_json(file);
  CHECK(t["otherData"]["steps"] == json::array({2, 3, 4}));
  CHECK(fr.stats().steps_kept == 7);
}

TEST_CASE("capture requests of a previous run are forgotten at the next start", "[flight]") {
  steptrace::details::CaptureRequests r;
  REQUIRE(r.add(1000, 1004));
  CHECK(r.covers(1002));
  r.clear();
  CHECK_FALSE(r.covers(1002));
}

TEST_CASE("the slow-step rule on noisy loops: the spread raises the bar, a rate limit bounds captures", "[flight]") {
  std::mt19937 rng(20261125);
  std::uniform_real_distribution<double> spread(-0.10, 0.10);
  // A host-bound loop whose steps spread +-10 % around 17 ms: no step is slow.
  TraceTrigger quiet({1.5, true, {}});
  int captures = 0;
  for (uint64_t i = 0; i < 2000; ++i) captures += !quiet.look(plain(i, 17 * (1 + spread(rng)))).reasons.empty();
  CHECK(captures == 0);
  // The same loop with a 1.8x step every 25 (a garbage collection, a logging call): the first is
  // captured, then at most one per gap, the gap doubling while they keep coming.
  TraceTrigger spiky({1.5, true, {}});
  std::vector<uint64_t> at;
  for (uint64_t i = 0; i < 2000; ++i) {
    const double ms = i % 25 == 24 ? 17 * 1.8 : 17 * (1 + spread(rng));
    if (!spiky.look(plain(i, ms)).reasons.empty()) at.push_back(i);
  }
  std::string where;
  for (uint64_t i : at) where += std::to_string(i) + " ";
  INFO("captured at " << where);
  REQUIRE(!at.empty());
  CHECK(at.front() == 24);
  CHECK(at.size() <= 6);  // 24, then gaps of 100, 200, 400, 800 (and 1600): not one every 25 steps
  for (std::size_t k = 1; k < at.size(); ++k) CHECK(at[k] - at[k - 1] >= TraceTrigger::kMinGapSteps);
  CHECK(spiky.slow_suppressed() >= 70);
  CHECK(spiky.gap_steps() > TraceTrigger::kMinGapSteps);
  // Steps alternating 10 and 20 ms: median 15, a robust spread of ~7.4 ms, so a 30 ms step (2x the
  // median) is within 5 spreads and not slow; 60 ms is.
  TraceTrigger wide({1.5, true, {}});
  int bimodal = 0;  // more than half alike makes the MAD 0: the 90th percentile keeps the habit from being news
  for (uint64_t i = 0; i < 64; ++i) bimodal += !wide.look(plain(i, i % 2 ? 20.0 : 10.0)).reasons.empty();
  CHECK(bimodal == 0);
  auto d = wide.look(plain(64, 30.0));
  CHECK(d.reasons.empty());
  REQUIRE(d.threshold_ms);
  CHECK(*d.threshold_ms > 40);
  d = wide.look(plain(65, 60.0));
  INFO("median " << d.median_ms.value_or(-1) << " threshold " << d.threshold_ms.value_or(-1));
  CHECK(d.reasons == std::vector<std::string>{"slow_step"});
  // A 0.1 ms loop: a 0.25 ms step is 2.5x the median but only 0.15 ms more, under kMinExcessMs.
  TraceTrigger tiny({1.5, true, {}});
  for (uint64_t i = 0; i < 30; ++i) tiny.look(plain(i, 0.1));
  CHECK(tiny.look(plain(30, 0.25)).reasons.empty());
  CHECK(tiny.look(plain(31, 1.5)).reasons == std::vector<std::string>{"slow_step"});
  // After a quiet gap the gap falls back to the shortest.
  TraceTrigger back({1.5, true, {}});
  for (uint64_t i = 0; i < 30; ++i) back.look(plain(i, 10));
  CHECK(!back.look(plain(30, 30)).reasons.empty());
  for (uint64_t i = 31; i < 60; ++i) back.look(plain(i, 10));
  CHECK(back.look(plain(60, 30)).slow_suppressed);  // within the gap
  for (uint64_t i = 61; i < 131; ++i) back.look(plain(i, 10));
  CHECK(!back.look(plain(131, 30)).reasons.empty());
  CHECK(back.gap_steps() == 2 * TraceTrigger::kMinGapSteps);  // one came during the gap: doubled
  for (uint64_t i = 132; i < 400; ++i) back.look(plain(i, 10));
  CHECK(!back.look(plain(400, 30)).reasons.empty());
  CHECK(back.gap_steps() == TraceTrigger::kMinGapSteps);  // none came: back to the shortest
}

TEST_CASE("the capture budget: step time earns credit, a capture spends its cost, debt holds automatic ones", "[flight]") {
  steptrace::CaptureBudget b(0.004);  // 25 % of 0.4 %: 0.001 ms of credit per ms of step time
  CHECK(b.limited());
  CHECK(b.affordable());
  b.spend(10);
  CHECK_FALSE(b.affordable());
  CHECK(b.steps_to_afford(100) == Approx(100));
  for (int i = 0; i < 99; ++i) b.earn(100);
  CHECK_FALSE(b.affordable());
  b.earn(100);
  CHECK(b.affordable());
  CHECK(b.fraction() == Approx(10.0 / 10000));
  for (int i = 0; i < 100000; ++i) b.earn(100);
  CHECK(b.credit_ms() == Approx(2 * 10));  // capped at two captures' worth
  b.earn(std::nan(""));
  b.spend(-1);
  CHECK(b.spent_ms() == 10);
  steptrace::CaptureBudget unlimited(0);
  unlimited.spend(1000);
  CHECK_FALSE(unlimited.limited());
  CHECK(unlimited.affordable());
}

TEST_CASE("the recorder refuses an automatic capture the budget cannot afford; a requested one goes out", "[flight]") {
  const std::string dir = steptrace_test::fresh_dir("flight_budget");
  steptrace::details::FlightRecorder::Settings s;
  s.keep_steps = 4;
  s.dir = dir;
  s.trigger.trigger = 1.5;
  s.budget = 1e-9;  // a capture costs far more CPU than this budget ever pays back
  steptrace::details::FlightRecorder fr(s);
  steptrace::details::Demangler demangle;
  std::map<uint64_t, steptrace::StepTrace> marks;
  for (uint64_t i = 0; i < 400; ++i) {
    const bool slow = i == 30 || i == 200;
    marks[i] = fr.decide(i, slow ? 40.0 : 10.0, std::nullopt, i == 300, "abcdef0123456789");
    auto a = activity(i, 3);
    fr.keep(step_record(i), &a, true, "", demangle);
    if (fr.has_due()) fr.write_due({});
  }
  fr.finish({});
  CHECK(marks[30].captured);  // no debt yet
  CHECK_FALSE(marks[200].captured);
  INFO(marks[200].null_reason);
  CHECK(marks[200].null_reason.find("overhead_budget") != std::string::npos);
  CHECK(marks[300].captured);  // the program asked: written, and charged
  CHECK(fr.stats().refused_budget == 1);
  CHECK(fr.stats().written == 2);
  CHECK(fr.stats().capture_cpu_ms > 0);
  CHECK(fr.budget().spent_ms() == Approx(fr.stats().capture_cpu_ms));
}
