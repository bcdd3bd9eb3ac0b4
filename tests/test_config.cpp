// Configuration: environment overrides, validation, and one clear message per bad setting through
// the "steptrace" logger, with training going on.
#include <spdlog/sinks/ostream_sink.h>
#include <steptrace/steptrace.hpp>

#include <sstream>

#include "support.hpp"

using namespace steptrace;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;

namespace {
// Installed before anything logs, so steptrace picks it up as its named logger.
std::ostringstream& captured() {
  static std::ostringstream out;
  static bool installed = [] {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    spdlog::register_logger(std::make_shared<spdlog::logger>("steptrace", sink));
    return true;
  }();
  (void)installed;
  return out;
}
// Before any test case runs, whatever the order: steptrace keeps the first logger it finds.
const bool capture_installed = (captured(), true);
std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("environment variables override fields", "[config]") {
  Config c;
  const auto errors = apply_environment(
      c, {{"STEPTRACE_LOG", "x-{rank}.jsonl"}, {"STEPTRACE_LOG_EVERY", "10"}, {"STEPTRACE_TOKENS_PER_STEP", "8192"},
          {"STEPTRACE_FLOPS_PER_TOKEN", "6e9"}, {"STEPTRACE_DTYPE", "fp8"}, {"STEPTRACE_ENABLED", "false"},
          {"STEPTRACE_GPU", "off"}, {"STEPTRACE_RANK", "3"}, {"STEPTRACE_UNTRACED_CUPTI", "detach"}, {"HOME", "/root"}});
  CHECK(errors.empty());
  CHECK(c.log_path == "x-{rank}.jsonl");
  CHECK(expand_log_path(c.log_path, 3) == "x-3.jsonl");
  CHECK(c.log_every == 10);
  CHECK(c.tokens_per_step == 8192);
  CHECK(c.flops_per_token == 6e9);
  CHECK(c.dtype == "fp8");
  CHECK_FALSE(c.enabled);
  CHECK(c.gpu == "off");
  CHECK(c.rank == 3);
  CHECK(c.untraced_cupti == "detach");
}

TEST_CASE("bad environment values and unknown names are named in the error", "[config]") {
  Config c;
  const auto errors = apply_environment(c, {{"STEPTRACE_LOG_EVERY", "ten"}, {"STEPTRACE_TOKENS_PER_STEP", "12abc"},
                                            {"STEPTRACE_ENABLED", "maybe"}, {"STEPTRACE_LOGG", "typo.jsonl"}});
  REQUIRE(errors.size() == 4);
  CHECK(errors[0].setting == "STEPTRACE_LOG_EVERY");
  CHECK(errors[0].message.find("'ten'") != std::string::npos);
  CHECK(errors[1].setting == "STEPTRACE_TOKENS_PER_STEP");
  CHECK(errors[2].setting == "STEPTRACE_ENABLED");
  CHECK(errors[3].setting == "STEPTRACE_LOGG");
  CHECK(errors[3].message.find("unknown") != std::string::npos);
  CHECK(c.log_every == 1);  // kept
  CHECK(c.tokens_per_step == 0);
  CHECK(c.enabled);
}

TEST_CASE("validate fixes out-of-range values and names each setting", "[config]") {
  Config c;
  c.tokens_per_step = -5;
  c.flops_per_token = std::nan("");
  c.log_every = 0;
  c.trace_every = 0;
  c.dtype = "bf17";
  c.gpu = "yes";
  c.clock = "tsc";
  c.untraced_cupti = "finalize";
  c.memory_sample_ms = -1;
  const auto errors = validate(c);
  std::vector<std::string> names;
  for (const auto& e : errors) names.push_back(e.setting);
  CHECK(names == std::vector<std::string>{"tokens_per_step", "flops_per_token", "log_every", "trace_every", "dtype", "gpu",
                                          "clock", "untraced_cupti", "memory_sample_ms"});
  CHECK(c.clock == "auto");
  CHECK(c.untraced_cupti == "keep");
  CHECK(c.tokens_per_step == 0);
  CHECK(c.flops_per_token == 0);
  CHECK(c.log_every == 1);
  CHECK(c.trace_every == 1);
  CHECK(c.dtype == "bf16");
  CHECK(c.gpu == "auto");
  CHECK(c.memory_sample_ms > 0);
  Config good;
  CHECK(validate(good).empty());
}

TEST_CASE("bad config at start(): one message naming the setting, training goes on", "[config]") {
  auto& out = captured();
  const auto log = fresh_log("config_bad");
  Config cfg;
  cfg.log_path = log;
  cfg.summary = false;
  cfg.gpu = "off";
  cfg.tokens_per_step = -1;
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) TRACE_STEP();
  stop();
  REQUIRE(start(cfg));  // the same mistake again: not repeated
  stop();
  const std::string text = out.str();
  CHECK(count(text, "tokens_per_step") == 1);
  CHECK(read_lines(log).size() == 3);  // the second session ran no step
}

TEST_CASE("an unwritable log path disables lines but not the session", "[config]") {
  auto& out = captured();
  Config cfg;
  cfg.log_path = "/nonexistent-dir/steps.jsonl";
  cfg.summary = false;
  cfg.gpu = "off";
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
  const auto s = stop();
  CHECK(s.started);
  CHECK(s.steps == 3);
  CHECK(s.lines_written == 0);
  CHECK(s.log_path.empty());
  const std::string text = out.str();
  CHECK(text.find("log_path") != std::string::npos);
  CHECK(text.find("/nonexistent-dir/steps.jsonl") != std::string::npos);
}

TEST_CASE("STEPTRACE_ENABLED=0 keeps steptrace off", "[config]") {
  setenv("STEPTRACE_ENABLED", "0", 1);
  Config cfg;
  cfg.gpu = "off";
  CHECK_FALSE(start(cfg));
  CHECK_FALSE(is_running());
  unsetenv("STEPTRACE_ENABLED");
}

TEST_CASE("environment reaches start(): STEPTRACE_LOG and a bad STEPTRACE_DTYPE", "[config]") {
  auto& out = captured();
  const auto log = fresh_log("config_env");
  setenv("STEPTRACE_LOG", log.c_str(), 1);
  setenv("STEPTRACE_DTYPE", "fp7", 1);
  Config cfg;
  cfg.log_path = "not-this.jsonl";
  cfg.summary = false;
  cfg.gpu = "off";
  REQUIRE(start(cfg));
  { TRACE_STEP(); }
  stop();
  unsetenv("STEPTRACE_LOG");
  unsetenv("STEPTRACE_DTYPE");
  CHECK(read_lines(log).size() == 1);
  CHECK(out.str().find("dtype") != std::string::npos);
  CHECK(out.str().find("fp7") != std::string::npos);
}
