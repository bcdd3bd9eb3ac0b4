// Captures asked of a running job from outside (steptrace-ctl): the request file's rules, the
// agreement on the same steps through a simulated exchange of 2, 8 and 1024 ranks (requests on
// several ranks at once, a rank that never answers), and a host-only run that reads a request from
// its trace directory, answers it and writes the steps as a trace.
#include <steptrace/core/capture_request.hpp>
#include <steptrace/details/cross_rank_link.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/steptrace.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "fake_exchange.hpp"
#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;

namespace {
std::string request_text(const std::string& id, const std::string& run_id, int steps, double created) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"schema\": \"steptrace.request/1\", \"id\": \"%s\", \"run_ids\": [\"%s\"], \"steps\": %d, "
                "\"created_unix_s\": %.3f, \"by\": \"test@host\"}",
                id.c_str(), run_id.c_str(), steps, created);
  return buf;
}
constexpr double kNow = 1.8e9;
}  // namespace

TEST_CASE("remote captures: a hostile request file costs bounded memory whatever its shape", "[remote_captures]") {
  // A valid request padded with one field: a 64 000-byte key over an array of zeros, 128 KiB in all.
  // Every leaf used to be stored under its full path (~2 GB for this file, cost growing with the
  // square of the size, 8-15 s of the background thread): now the key is refused by its length.
  const std::string base = request_text("0123456789abcdef", "feedfacecafebeef", 5, kNow - 10);
  const auto padded = [&](std::size_t key_bytes) {
    std::string t = base.substr(0, base.size() - 1) + ", \"" + std::string(key_bytes, 'k') + "\": [";
    while (t.size() + 8 < kMaxRequestBytes) t += "0, ";
    return t + "0]}";
  };
  CaptureRequest r;
  const std::string hostile = padded(64000);
  REQUIRE(hostile.size() <= kMaxRequestBytes);
  const std::string why = parse_capture_request(hostile, kNow, r);
  CHECK(why.find("not a request (a key of 64000 bytes (at most 64)") == 0);
  // A short key over ~30 000 zeros: the request is read, its own leaves alone stored.
  const std::string wide = padded(5);
  REQUIRE(wide.size() <= kMaxRequestBytes);
  CHECK(parse_capture_request(wide, kNow, r) == "");
  CHECK(r.steps == 5);
  FlatJson j;
  JsonFlattenLimits limits;
  limits.keep = &request_leaf;
  REQUIRE(details::JsonFlattener(wide, j, limits).run() == "");
  CHECK(j.size() == 6);  // schema, id, run_ids/0, steps, created_unix_s, by
  CHECK(j.count("/run_ids/0") == 1);
  FlatJson all;
  REQUIRE(flatten_json(wide, all) == "");
  CHECK(all.size() > 20000);  // the same text unbounded: every zero kept
  // More leaves than a reader keeps: refused with that reason, not read on.
  FlatJson few;
  JsonFlattenLimits two;
  two.max_leaves = 2;
  details::JsonFlattener reader("[1, 2, 3]", few, two);
  CHECK(reader.run().find("more values than the reader keeps") == 0);
  CHECK(reader.limited());
  CHECK(few.size() == 2);
}

TEST_CASE("remote captures: a request file is read, or refused with the reason", "[remote_captures]") {
  CaptureRequest r;
  REQUIRE(parse_capture_request(request_text("0123456789abcdef", "feedfacecafebeef", 5, kNow - 10), kNow, r) == "");
  CHECK(r.id == "0123456789abcdef");
  CHECK(r.steps == 5);
  CHECK(r.by == "test@host");
  CHECK(r.for_run("feedfacecafebeef"));
  CHECK_FALSE(r.for_run("feedfacecafebeee"));
  auto why = [&](const std::string& text) { return parse_capture_request(text, kNow, r); };
  CHECK(why("not json").find("not JSON") == 0);
  CHECK(why("[1, 2]").find("schema") != std::string::npos);
  CHECK(why(request_text("0123456789ABCDEF", "feedfacecafebeef", 5, kNow)).find("id is not") == 0);
  CHECK(why(request_text("0123456789abcdef", "feedface", 5, kNow)).find("run_ids[0]") == 0);
  CHECK(why(request_text("0123456789abcdef", "feedfacecafebeef", 0, kNow)).find("steps") == 0);
  CHECK(why(request_text("0123456789abcdef", "feedfacecafebeef", kMaxRequestSteps + 1, kNow)).find("steps") == 0);
  CHECK(why(request_text("0123456789abcdef", "feedfacecafebeef", 5, kNow - kRequestStaleS - 1)).find("stale") == 0);
  CHECK(why(request_text("0123456789abcdef", "feedfacecafebeef", 5, kNow + kRequestFutureS + 1)).find("future") != std::string::npos);
  CHECK(why(std::string(kMaxRequestBytes + 1, ' ')).find("larger") == 0);
  CHECK(why("{\"schema\": \"steptrace.request/1\", \"id\": \"0123456789abcdef\", \"run_ids\": [], \"steps\": 1, "
            "\"created_unix_s\": 1.8e9}") == "run_ids names no run");
  CHECK(why("{\"schema\": \"steptrace.request/1\", \"id\": \"0123456789abcdef\", \"run_ids\": [\"feedfacecafebeef\"], "
            "\"steps\": 1.5, \"created_unix_s\": 1.8e9}").find("whole number") != std::string::npos);
}

TEST_CASE("remote captures: the tag a request travels under, and the summary's wire format", "[remote_captures]") {
  CHECK(request_tag("0123456789abcdef") == 0x012345u);
  CHECK(request_tag("000000ffffffffff") == 1u);  // 0 means none
  CHECK(tag_hex(0x012345u) == "012345");
  CHECK(tag_hex(request_tag("abcdef0123456789")) == "abcdef");
  RankSummary s;
  s.valid = true;
  s.rank = 7;
  s.step = 40;
  s.ask_tag = 0xffffffu;
  s.ask_steps = 64;
  s.lag_steps = 3;
  float wire[kSummaryFloats];
  to_floats(s, wire);
  const RankSummary back = from_floats(wire, 40);
  CHECK(back.ask_tag == 0xffffffu);
  CHECK(back.ask_steps == 64);
  CHECK(back.lag_steps == 3);
}

namespace {
std::vector<RankSummary> quiet_view(int world, int64_t step) {
  std::vector<RankSummary> v(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    v[static_cast<std::size_t>(r)].valid = true;
    v[static_cast<std::size_t>(r)].rank = r;
    v[static_cast<std::size_t>(r)].step = step;
    v[static_cast<std::size_t>(r)].step_ms = 10;
    v[static_cast<std::size_t>(r)].every = 10;
  }
  return v;
}
}  // namespace

TEST_CASE("remote captures: one plan from a view; the lowest rank's request first; the margin covers the lag",
          "[remote_captures]") {
  for (int world : {2, 8, 1024}) {
    INFO("world " << world);
    std::vector<uint32_t> planned;
    auto v = quiet_view(world, 100);
    CHECK_FALSE(plan_capture(v, planned));  // nobody asked
    // Requests on several ranks at once: the last rank's and rank 1's.
    v[static_cast<std::size_t>(world - 1)].ask_tag = 0xbbbbbb;
    v[static_cast<std::size_t>(world - 1)].ask_steps = 3;
    v[1].ask_tag = 0xaaaaaa;
    v[1].ask_steps = 5;
    v[0].lag_steps = 4;
    auto p = plan_capture(v, planned);
    REQUIRE(p);
    CHECK(p->tag == 0xaaaaaau);
    CHECK(p->steps == 5);
    CHECK(p->asked_by_rank == 1);
    CHECK(p->margin == std::max<int64_t>(2 * 10, 2 * 4 + 10));
    CHECK(p->first_step == 100 + p->margin);
    CHECK(p->last_step() == p->first_step + 4);
    CHECK(p->absent_ranks.empty());
    planned.push_back(p->tag);
    // The next view: the other request (still carried by its rank); rank 1 no longer asks.
    auto v2 = quiet_view(world, 110);
    v2[static_cast<std::size_t>(world - 1)].ask_tag = 0xbbbbbb;
    v2[static_cast<std::size_t>(world - 1)].ask_steps = 3;
    v2[0].ask_tag = 0xaaaaaa;  // a rank that learned of the first request late: already planned
    v2[0].ask_steps = 5;
    auto p2 = plan_capture(v2, planned);
    REQUIRE(p2);
    CHECK(p2->tag == 0xbbbbbbu);
    CHECK(p2->asked_by_rank == world - 1);
  }
  // A rank that never answers and one that names another step: listed absent, the others plan all
  // the same; the view's step is the lowest valid rank's; a huge lag is capped.
  auto v = quiet_view(8, 50);
  v[0].valid = false;
  v[5].step = 49;
  v[2].ask_tag = 7;
  v[2].ask_steps = 2;
  v[3].lag_steps = 100000;
  auto p = plan_capture(v, {});
  REQUIRE(p);
  CHECK(p->view_step == 50);
  CHECK(p->absent_ranks == std::vector<int>{0, 5});
  CHECK(p->margin == kMaxCaptureMargin);
  CHECK(plan_capture(quiet_view(2, 0), {}) == std::nullopt);
  // The cadence is the largest any rank reports (ranks configured apart still agree).
  auto w = quiet_view(4, 20);
  w[3].every = 50;
  w[1].ask_tag = 9;
  w[1].ask_steps = 1;
  CHECK(plan_capture(w, {})->margin == 100);
}

namespace {
/// An in-process all-gather of N ranks: a round completes once every living rank posted it; a dead
/// rank never posts and its slot reads as invalid (zeros).
struct Hub {
  int world;
  std::set<int> dead;
  std::map<int64_t, std::vector<std::vector<float>>> rounds;  // round -> summaries by rank
  std::vector<int64_t> posted, polled;
  explicit Hub(int n) : world(n), posted(static_cast<std::size_t>(n), 0), polled(static_cast<std::size_t>(n), 0) {}
  bool complete(int64_t round) const {
    auto it = rounds.find(round);
    if (it == rounds.end()) return false;
    for (int r = 0; r < world; ++r)
      if (!dead.count(r) && it->second[static_cast<std::size_t>(r)].empty()) return false;
    return true;
  }
};
class HubMember : public steptrace::CrossRankExchange {
 public:
  HubMember(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world; }
  std::string post(const std::vector<float>& summary) override {
    auto& round = hub_->rounds[hub_->posted[static_cast<std::size_t>(rank_)]++];
    round.resize(static_cast<std::size_t>(hub_->world));
    round[static_cast<std::size_t>(rank_)] = summary;
    return {};
  }
  bool poll(std::vector<float>& out) override {
    const int64_t round = hub_->polled[static_cast<std::size_t>(rank_)];
    if (!hub_->complete(round)) return false;
    ++hub_->polled[static_cast<std::size_t>(rank_)];
    out.assign(static_cast<std::size_t>(hub_->world * kSummaryFloats), 0.f);
    const auto& all = hub_->rounds[round];
    for (int r = 0; r < hub_->world; ++r)
      if (!all[static_cast<std::size_t>(r)].empty())
        std::copy(all[static_cast<std::size_t>(r)].begin(), all[static_cast<std::size_t>(r)].end(),
                  out.begin() + r * kSummaryFloats);
    return true;
  }

 private:
  std::shared_ptr<Hub> hub_;
  int rank_;
};
StepRecord closed_step(uint64_t index) {
  StepRecord r;
  r.index = index;
  r.begin_ns = static_cast<int64_t>(index) * 10'000'000;
  r.end_ns = r.begin_ns + 10'000'000;
  return r;
}
}  // namespace

TEST_CASE("remote captures: every rank's link agrees on the same steps (2, 8 and 1024 ranks, one dead)",
          "[remote_captures]") {
  for (int world : {2, 8, 1024}) {
    INFO("world " << world);
    auto hub = std::make_shared<Hub>(world);
    const int dead = world > 2 ? world / 2 : -1;  // never posts: its summary is missing from every view
    if (dead >= 0) hub->dead.insert(dead);
    std::vector<std::unique_ptr<details::CrossRankLink>> links;
    for (int r = 0; r < world; ++r) {
      links.push_back(std::make_unique<details::CrossRankLink>());
      links.back()->set(std::make_unique<HubMember>(hub, r), 4);
    }
    // Two ranks read two different request files at once, before step 8's exchange.
    links[static_cast<std::size_t>(world - 1)]->ask(0x00beef, 3);
    links[0]->ask(0x00cafe, 2);
    std::vector<std::vector<CapturePlan>> plans(static_cast<std::size_t>(world));
    for (uint64_t step = 0; step < 40; ++step) {
      for (int r = 0; r < world; ++r) {
        if (r == dead) continue;
        links[static_cast<std::size_t>(r)]->post(closed_step(step));
        // Ranks collect at different moments: odd ranks one step later (a lag of 1).
        links[static_cast<std::size_t>(r)]->collect(static_cast<int64_t>(step) + (r % 2));
        for (auto& p : links[static_cast<std::size_t>(r)]->take_plans()) plans[static_cast<std::size_t>(r)].push_back(p);
      }
    }
    const auto& first = plans[0];
    REQUIRE(first.size() == 2);
    CHECK(first[0].tag == 0x00cafeu);  // rank 0 is the lowest rank asking
    CHECK(first[0].view_step == 0);
    CHECK(first[1].tag == 0x00beefu);  // carried until planned: the next exchange
    CHECK(first[1].view_step == 4);
    CHECK(first[1].first_step >= first[0].last_step());
    for (int r = 0; r < world; ++r) {
      if (r == dead) continue;
      const auto& mine = plans[static_cast<std::size_t>(r)];
      REQUIRE(mine.size() == first.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        CHECK(mine[i].tag == first[i].tag);
        CHECK(mine[i].first_step == first[i].first_step);
        CHECK(mine[i].steps == first[i].steps);
        CHECK(mine[i].absent_ranks == first[i].absent_ranks);
      }
    }
    if (dead >= 0) CHECK(first[0].absent_ranks == std::vector<int>{dead});
    // The second plan's margin holds the lag the odd ranks reported (1 step) and the cadence.
    CHECK(first[1].margin == std::max<int64_t>(kMinCaptureMargin, std::max<int64_t>(2 * 4, 2 * 1 + 4)));
  }
}

TEST_CASE("remote captures: a rank that learns a request's plan from the exchange before it reads the file takes "
          "the plan, not a refusal", "[remote_captures]") {
  // Two H200s, session 75: rank 1 read the request first and asked; the exchange agreed; rank 0 then read
  // the file while the plan waited in its link, and refused it ("planned already"), so steptrace-ctl
  // reported a refusal for a rank that captured the steps.
  auto hub = std::make_shared<Hub>(2);
  std::vector<std::unique_ptr<details::CrossRankLink>> links;
  for (int r = 0; r < 2; ++r) {
    links.push_back(std::make_unique<details::CrossRankLink>());
    links.back()->set(std::make_unique<HubMember>(hub, r), 4);
  }
  REQUIRE(links[1]->ask(0x00beef, 3));
  bool agreed = false;
  for (uint64_t step = 0; step < 12 && !agreed; ++step)
    for (int r = 0; r < 2; ++r) {
      links[static_cast<std::size_t>(r)]->post(closed_step(step));
      links[static_cast<std::size_t>(r)]->collect(static_cast<int64_t>(step));
      if (r == 0) agreed = links[0]->plan_pending(0x00beef);
    }
  REQUIRE(agreed);                           // rank 0 holds the agreed plan, not taken yet
  CHECK_FALSE(links[0]->ask(0x00beef, 3));   // asking again is refused by the link ...
  CHECK(links[0]->plan_pending(0x00beef));   // ... which is how RemoteCaptures tells to wait for the plan
  CHECK_FALSE(links[0]->plan_pending(0x00cafe));
  const auto taken = links[0]->take_plans();
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].tag == 0x00beefu);
  CHECK_FALSE(links[0]->plan_pending(0x00beef));  // taken: a later request under the tag is refused
  CHECK_FALSE(links[0]->ask(0x00beef, 3));
}

namespace {
/// The files named prefix*.json (not the temporaries steptrace writes them through).
std::vector<std::string> files_in(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(prefix, 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
        out.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}
/// As steptrace-ctl writes a request: whole (a temporary renamed), so no reader sees half of it.
void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}
Config host_run(const std::string& dir) {
  auto cfg = steptrace_test::host_config(dir + "/steps.jsonl");
  cfg.max_lag_steps = steptrace::Config{}.max_lag_steps;  // lines lag as a program's that sets nothing
  cfg.trace_trigger = 0;  // no slow-step captures: only what is asked for
  return cfg;
}
void steps_until(const std::function<bool()>& done, int max_steps, int& step_count) {
  for (int i = 0; i < max_steps && !done(); ++i, ++step_count) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}
}  // namespace

TEST_CASE("remote captures: a host-only run finds a request in its trace directory, answers it, captures the steps",
          "[remote_captures]") {
  const std::string dir = steptrace_test::fresh_dir("remote_captures_own");
  REQUIRE(steptrace::start(host_run(dir)));
  int steps = 0;
  // The presence file names the run (steptrace-ctl's way to find it).
  std::vector<std::string> live;
  REQUIRE(steptrace_test::wait_for([&] { return !(live = files_in(dir, "steptrace-live-")).empty(); }));
  const auto presence = read_json(live[0]);
  CHECK(presence["schema"] == "steptrace.live/1");
  CHECK(presence["rank"] == 0);
  const std::string run_id = presence["run_id"];
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // A good request, a malformed one, a stale one and another run's.
  write_file(dir + "/steptrace-request-00aa000000000001.json", request_text("00aa000000000001", run_id, 3, now));
  write_file(dir + "/steptrace-request-00bb000000000002.json", "{\"schema\": \"steptrace.request/1\"");
  write_file(dir + "/steptrace-request-00cc000000000003.json", request_text("00cc000000000003", run_id, 3, now - 3600));
  write_file(dir + "/steptrace-request-00dd000000000004.json", request_text("00dd000000000004", "0000000000000000", 3, now));
  // One written an hour in the future (a clock ahead, or planted): read as it stands (refused here: not
  // JSON), not left "still being written" with the directory re-listed at every scan for good.
  const std::string future = dir + "/steptrace-request-00ee000000000005.json";
  write_file(future, "{\"schema\":");
  const timespec times[2] = {{static_cast<time_t>(now) + 3600, 0}, {static_cast<time_t>(now) + 3600, 0}};
  REQUIRE(::utimensat(AT_FDCWD, future.c_str(), times, 0) == 0);
  const std::string answer = dir + "/steptrace-answer-00aa000000000001-r0.json";
  steps_until([&] { return files_in(dir, "steptrace-answer-00aa000000000001").size() == 1; }, 5000, steps);
  const auto a = read_json(answer);
  INFO(a.dump());
  CHECK(a["status"] == "planned");
  CHECK(a["id"] == "00aa000000000001");
  CHECK(a["aligned"] == false);
  CHECK(std::string(a["how"]).find("no cross-rank exchange") != std::string::npos);
  const int64_t first = a["first_step"];
  CHECK(int64_t(a["last_step"]) == first + 2);
  // (Where the training thread stood when the answer was written is the machine's speed: not checked.)
  // Another request under the same tag (the id's first 6 hex digits travel in the exchange): refused.
  write_file(dir + "/steptrace-request-00aa00ffffffffff.json", request_text("00aa00ffffffffff", run_id, 1, now));
  steps_until([&] { return files_in(dir, "steptrace-answer-00aa00ffffffffff").size() == 1; }, 5000, steps);
  CHECK(std::string(read_json(dir + "/steptrace-answer-00aa00ffffffffff-r0.json")["reason"]).find("its tag 00aa00") == 0);
  steps_until([] { return false; }, static_cast<int>(first) + 6 - steps, steps);
  steptrace::stop();
  CHECK(files_in(dir, "steptrace-live-").empty());  // gone at stop()
  const auto refused = read_json(dir + "/steptrace-answer-00bb000000000002-r0.json");
  CHECK(refused["status"] == "refused");
  CHECK(std::string(refused["reason"]).find("not JSON") == 0);
  CHECK(files_in(dir, "steptrace-answer-00cc00").empty());  // stale: refused with a warning, not answered
  CHECK(files_in(dir, "steptrace-answer-00dd00").empty());  // not this run's: no answer
  const auto ahead = read_json(dir + "/steptrace-answer-00ee000000000005-r0.json");
  CHECK(ahead["status"] == "refused");
  // The asked steps are in one trace, captured.
  std::set<int64_t> captured;
  for (const auto& t : files_in(dir, "trace-")) {
    const auto doc = read_json(t);
    for (const auto& s : doc["otherData"]["captured"]) captured.insert(int64_t(s));
  }
  CHECK(captured == std::set<int64_t>{first, first + 1, first + 2});
  const auto end = steptrace_test::read_events(dir + "/steps.jsonl").back();
  CHECK(end["traces"]["requests"]["read"] == 2);
  CHECK(end["traces"]["requests"]["refused"] == 4);  // not JSON (2: one written in the future), stale, the tag
  CHECK(end["traces"]["requests"]["planned"] == 1);
}

TEST_CASE("remote captures: with the exchange on, the steps are agreed through it (aligned)", "[remote_captures]") {
  const std::string dir = steptrace_test::fresh_dir("remote_captures_exchange");
  Config cfg = host_run(dir);
  cfg.rank = 0;
  cfg.world_size = 4;
  REQUIRE(steptrace::start(cfg));
  REQUIRE(details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 2));
  int steps = 0;
  std::vector<std::string> live;
  // The presence file under rank 0's run_id (the simulated exchange's).
  REQUIRE(steptrace_test::wait_for([&] {
    live = files_in(dir, "steptrace-live-feedfacecafebeef");
    return !live.empty();
  }));
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_file(dir + "/steptrace-request-0abc000000000009.json", request_text("0abc000000000009", "feedfacecafebeef", 2, now));
  steps_until([&] {
    auto f = files_in(dir, "steptrace-answer-0abc000000000009");
    return !f.empty() && read_json(f[0])["status"] == "planned";
  }, 5000, steps);
  const auto a = read_json(dir + "/steptrace-answer-0abc000000000009-r0.json");
  INFO(a.dump());
  CHECK(a["aligned"] == true);
  CHECK(std::string(a["how"]).find("agreed through the cross-rank exchange") == 0);
  const int64_t first = a["first_step"];
  CHECK(first == int64_t(a["last_step"]) - 1);
  // Whether the plan came before step `first` began depends on how far the background thread lags
  // (the machine's load): the answer says which, and what is captured follows from it.
  const bool late = a["late"];
  steps_until([] { return false; }, static_cast<int>(first) + 6 - steps, steps);
  steptrace::stop();
  std::set<int64_t> captured;
  for (const auto& t : files_in(dir, "trace-")) {
    const auto doc = read_json(t);
    for (const auto& s : doc["otherData"]["captured"]) captured.insert(int64_t(s));
  }
  if (!late) CHECK(captured == std::set<int64_t>{first, first + 1});
  for (int64_t c : captured) CHECK((c == first || c == first + 1));  // never a step not asked for
}

TEST_CASE("remote captures: a request read while its agreed plan waits in the link is planned under its id, not refused",
          "[remote_captures]") {
  // Rank 1 read the request first and asked; the exchange agreed; rank 0 reads the file while the plan
  // is not yet taken from its link (two H200s, session 75: rank 0 answered "refused", then captured the
  // steps anyway, and steptrace-ctl exited 1).
  const std::string dir = steptrace_test::fresh_dir("remote_captures_agreed_first");
  const std::string id = "00beef0000000001", run_id = "feedfacecafebeef";
  auto hub = std::make_shared<Hub>(2);
  details::CrossRankLink link0, link1;
  REQUIRE(link0.set(std::make_unique<HubMember>(hub, 0), 4));
  REQUIRE(link1.set(std::make_unique<HubMember>(hub, 1), 4));
  REQUIRE(link1.ask(request_tag(id), 3));
  for (uint64_t step = 0; step < 12 && !link0.plan_pending(request_tag(id)); ++step)
    for (details::CrossRankLink* l : {&link0, &link1}) {
      l->post(closed_step(step));
      l->collect(static_cast<int64_t>(step));
    }
  REQUIRE(link0.plan_pending(request_tag(id)));
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string path = dir + "/steptrace-request-" + id + ".json";
  write_file(path, request_text(id, run_id, 3, now));
  const timespec settled[2] = {{static_cast<time_t>(now) - 2, 0}, {static_cast<time_t>(now) - 2, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), settled, 0) == 0);  // older than the settle time: read now
  details::RemoteCaptures::Settings s;
  s.on = true;
  s.dir = dir;
  s.world_size = 2;
  details::CaptureRequests captures;
  details::StepRecorder recorder;
  details::RemoteCaptures rc(s, &link0, &captures, &recorder);
  rc.poll(run_id);
  CHECK(rc.stats().refused == 0);
  CHECK(rc.stats().requests == 1);
  const auto a = read_json(dir + "/steptrace-answer-" + id + "-r0.json");
  INFO(a.dump());
  CHECK(a["status"] == "planned");
  CHECK(a["aligned"] == true);
  CHECK(std::string(a["how"]).find("agreed through the cross-rank exchange") == 0);
}
