// Configuration: environment overrides, validation, and one clear message per bad setting through
// the "steptrace" logger, with training going on.
#include <steptrace/steptrace.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "capture_log.hpp"
#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;

namespace {
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
          {"STEPTRACE_GPU", "off"}, {"STEPTRACE_RANK", "3"}, {"STEPTRACE_UNTRACED_CUPTI", "detach"}, {"HOME", "/root"},
          {"STEPTRACE_CMAKE_ARGS", "-DX=1"}});  // python/setup.py's variable: not a runtime setting, no warning
  CHECK(errors.empty());
  CHECK(c.log_path == "x-{rank}.jsonl");
  CHECK(expand_log_path(c.log_path, 3) == "x-3.jsonl");
  CHECK(c.log_every == 10);
  CHECK(c.tokens_per_step == 8192);
  CHECK(c.flops_per_token == 6e9);
  CHECK(c.dtype == Dtype::fp8);
  CHECK_FALSE(c.enabled);
  CHECK(c.gpu == Mode::off);
  CHECK(c.rank == 3);
  CHECK(c.untraced_cupti == UntracedCupti::detach);
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
  c.trace_every = -1;
  c.overhead_budget = 0.9;
  c.counters_interval_us = 5;
  c.memory_sample_ms = -1;
  c.world_size = 0;
  c.max_pending_steps = std::size_t(1) << 62;
  const auto errors = validate(c);
  std::vector<std::string> names;
  for (const auto& e : errors) names.push_back(e.setting);
  CHECK(names == std::vector<std::string>{"log_every", "tokens_per_step", "flops_per_token", "counters_interval_us",
                                          "trace_every", "overhead_budget", "memory_sample_ms", "world_size", "max_pending_steps"});
  CHECK(c.tokens_per_step == 0);
  CHECK(c.flops_per_token == 0);
  CHECK(c.log_every == 1);
  CHECK(c.trace_every == 0);  // the default: the budget decides
  CHECK(c.overhead_budget == 0.001);
  CHECK(c.counters_interval_us == 1000);
  CHECK(c.memory_sample_ms == 10);
  CHECK(c.world_size == -1);
  CHECK(c.max_pending_steps == 256);
  Config good;
  CHECK(validate(good).empty());
}

TEST_CASE("environment values outside their range or spelling are refused, naming the variable", "[config]") {
  Config c;
  const auto errors = apply_environment(c, {{"STEPTRACE_GPU", "yes"},
                                            {"STEPTRACE_CLOCK", "tsc"},
                                            {"STEPTRACE_UNTRACED_CUPTI", "finalize"},
                                            {"STEPTRACE_DTYPE", "bf17"},
                                            {"STEPTRACE_RANK", "99999999999"},
                                            {"STEPTRACE_LOG_EVERY", "4294967297"},
                                            {"STEPTRACE_MEMORY_SAMPLE_MS", "inf"},
                                            {"STEPTRACE_MEMORY_SAMPLE_MS", "1e300"},
                                            {"STEPTRACE_WORLD_SIZE", "-3"},
                                            {"STEPTRACE_MAX_PENDING_STEPS", "9223372036854775807"}});
  std::vector<std::string> names;
  for (const auto& e : errors) names.push_back(e.setting);
  CHECK(names == std::vector<std::string>{"STEPTRACE_GPU", "STEPTRACE_CLOCK", "STEPTRACE_UNTRACED_CUPTI", "STEPTRACE_DTYPE",
                                          "STEPTRACE_RANK", "STEPTRACE_LOG_EVERY", "STEPTRACE_MEMORY_SAMPLE_MS",
                                          "STEPTRACE_MEMORY_SAMPLE_MS", "STEPTRACE_WORLD_SIZE",
                                          "STEPTRACE_MAX_PENDING_STEPS"});
  REQUIRE(errors.size() == 10);
  CHECK(errors[0].message.find("`auto`, `off`") != std::string::npos);
  CHECK(errors[4].message.find("outside") != std::string::npos);
  // Every field kept its value: nothing truncated, nothing half-applied.
  const Config defaults;
  CHECK(c.gpu == defaults.gpu);
  CHECK(c.clock == defaults.clock);
  CHECK(c.untraced_cupti == defaults.untraced_cupti);
  CHECK(c.dtype == defaults.dtype);
  CHECK(c.rank == -1);
  CHECK(c.log_every == 1);
  CHECK(c.memory_sample_ms == 10);
  CHECK(c.world_size == -1);
  CHECK(c.max_pending_steps == 256);
  // Decimal only: strtod alone would read '0x10' as 16 and take 'nan'.
  Config d;
  const auto hex = apply_environment(d, {{"STEPTRACE_TOKENS_PER_STEP", "0x10"}, {"STEPTRACE_PEAK_FLOPS", "nan"},
                                         {"STEPTRACE_MEMORY_SAMPLE_MS", "0x1p4"}});
  REQUIRE(hex.size() == 3);
  CHECK(d.memory_sample_ms == defaults.memory_sample_ms);
  CHECK(d.tokens_per_step == defaults.tokens_per_step);
  CHECK(apply_environment(d, {{"STEPTRACE_TOKENS_PER_STEP", "1.5e3"}}).empty());
  CHECK(d.tokens_per_step == 1500);
  // The knobs that were compile-time macros are settings now.
  CHECK(apply_environment(c, {{"STEPTRACE_FLUSH_AFTER_MS", "50"}, {"STEPTRACE_COUNTERS_BUFFER_MIB", "8"}}).empty());
  CHECK(c.flush_after_ms == 50);
  // The dtype aliases parse_dtype knows (torch's spellings among them).
  CHECK(apply_environment(c, {{"STEPTRACE_DTYPE", "float16"}}).empty());
  CHECK(c.dtype == Dtype::fp16);
  CHECK(c.counters_buffer_mib == 8);
}

TEST_CASE("hostile environment text: ids bounded, control characters and leading blanks refused", "[config]") {
  Config c;
  const auto errors = apply_environment(c, {{"STEPTRACE_JOB_ID", std::string(100'000, 'x')},
                                            {"STEPTRACE_JOB_NAME", "a\nb"},
                                            {"STEPTRACE_LOG_EVERY", " 5"},
                                            {"STEPTRACE_MEMORY_SAMPLE_MS", " 2"},
                                            {"STEPTRACE_LOG", std::string(5000, 'p')}});
  REQUIRE(errors.size() == 5);
  CHECK(errors[0].setting == "STEPTRACE_JOB_ID");
  CHECK(errors[0].message.find("longer than 256 bytes") != std::string::npos);
  CHECK(errors[1].message.find("control character") != std::string::npos);
  CHECK(errors[2].setting == "STEPTRACE_LOG_EVERY");
  CHECK(errors[3].setting == "STEPTRACE_MEMORY_SAMPLE_MS");
  CHECK(errors[4].setting == "STEPTRACE_LOG");
  const Config defaults;
  CHECK(c.job_id == defaults.job_id);
  CHECK(c.job_name == defaults.job_name);
  CHECK(c.log_every == defaults.log_every);
  CHECK(c.log_path == defaults.log_path);
  CHECK(apply_environment(c, {{"STEPTRACE_JOB_ID", std::string(256, 'j')}, {"STEPTRACE_LOG_EVERY", "5"}}).empty());
  CHECK(c.job_id.size() == 256);
  CHECK(c.log_every == 5);
}

TEST_CASE("bad config at start(): one message naming the setting, training goes on", "[config]") {
  auto& out = steptrace_test::captured_log();
  const auto log = fresh_log("config_bad");
  auto cfg = steptrace_test::host_config(log);
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
  auto& out = steptrace_test::captured_log();
  auto cfg = steptrace_test::host_config("/nonexistent-dir/steps.jsonl");
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
  cfg.gpu = steptrace::Mode::off;
  CHECK_FALSE(start(cfg));
  CHECK_FALSE(is_running());
  unsetenv("STEPTRACE_ENABLED");
}

TEST_CASE("environment reaches start(): STEPTRACE_LOG and a bad STEPTRACE_DTYPE", "[config]") {
  auto& out = steptrace_test::captured_log();
  const auto log = fresh_log("config_env");
  setenv("STEPTRACE_LOG", log.c_str(), 1);
  setenv("STEPTRACE_DTYPE", "fp7", 1);
  Config cfg;
  cfg.log_path = "not-this.jsonl";
  cfg.summary = false;
  cfg.gpu = steptrace::Mode::off;
  REQUIRE(start(cfg));
  { TRACE_STEP(); }
  stop();
  unsetenv("STEPTRACE_LOG");
  unsetenv("STEPTRACE_DTYPE");
  CHECK(read_lines(log).size() == 1);
  CHECK(out.str().find("dtype") != std::string::npos);
  CHECK(out.str().find("fp7") != std::string::npos);
}

namespace {
/// docs/configuration.md's settings table as the settings table says it must read.
std::string expected_readme_table() {
  std::string t = "| field | variable | default | accepted | meaning |\n|---|---|---|---|---|\n";
  const Config defaults;
  for (const auto& s : settings()) {
    const std::string shown = s.text(defaults);
    t += "| `" + s.name + "` | `" + s.variable + "` | `" + (shown.empty() ? "\"\"" : shown) + "` | " + s.range + " | " +
         s.doc + " |\n";
  }
  return t;
}
}  // namespace

TEST_CASE("docs/configuration.md's settings table is the settings table", "[config]") {
  std::ifstream in(std::string(STEPTRACE_SOURCE_DIR) + "/docs/configuration.md");
  REQUIRE(in);
  std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The other docs name variables too: every one of them must be a setting.
  for (const char* doc : {"/README.md", "/docs/usage.md", "/docs/python.md", "/docs/build.md", "/docs/gpu.md",
                          "/docs/guarantees.md", "/docs/architecture.md"}) {
    std::ifstream other(std::string(STEPTRACE_SOURCE_DIR) + doc);
    REQUIRE(other);
    readme += std::string((std::istreambuf_iterator<char>(other)), std::istreambuf_iterator<char>());
  }
  const std::string header = "| field | variable | default | accepted | meaning |\n";
  const auto begin = readme.find(header);
  REQUIRE(begin != std::string::npos);
  const auto end = readme.find("\n\n", begin);
  const std::string actual = readme.substr(begin, end - begin + 1);
  const std::string expected = expected_readme_table();
  if (actual != expected) {
    std::ofstream("settings_table.md") << expected;
    FAIL("docs/configuration.md's table differs from settings.hpp; the table settings.hpp gives is in "
         "build/tests/settings_table.md");
  }
  // Every variable the docs name elsewhere is a setting.
  for (auto p = readme.find("STEPTRACE_"); p != std::string::npos; p = readme.find("STEPTRACE_", p + 1)) {
    std::size_t q = p + 10;
    while (q < readme.size() && (std::isupper(static_cast<unsigned char>(readme[q])) || readme[q] == '_' ||
                                 std::isdigit(static_cast<unsigned char>(readme[q]))))
      ++q;
    const std::string name = readme.substr(p, q - p);
    if (p > 0 && (std::isalnum(static_cast<unsigned char>(readme[p - 1])) || readme[p - 1] == '_'))
      continue;  // inside another identifier (the link check's symbol), not a variable
    // Macros (STEPTRACE_STEP(...)), compile switches and CMake options are not settings; the old
    // compile-time knob is named once, where the README says it became a setting.
    static const std::vector<std::string> not_settings = {"STEPTRACE_",         "STEPTRACE_DISABLE",
                                                          "STEPTRACE_NO_SHORT_MACROS", "STEPTRACE_INSTALL",
                                                          "STEPTRACE_PM_BUFFER_MIB", "STEPTRACE_STEP",
                                                          "STEPTRACE_PHASE", "STEPTRACE_PHASE_NAMED",
                                                          "STEPTRACE_COMPILED_LIB", "STEPTRACE_IMPLEMENTATION",
                                                          "STEPTRACE_CMAKE_ARGS"};  // python/setup.py's
    if (std::find(not_settings.begin(), not_settings.end(), name) != not_settings.end() ||
        name.rfind("STEPTRACE_BUILD_", 0) == 0 || (q < readme.size() && readme[q] == '('))
      continue;
    bool known = false;
    for (const auto& s : settings()) known = known || s.variable == name;
    INFO(name);
    CHECK(known);
  }
}

TEST_CASE("the launcher's rank and world size: out of range or not an integer is warned once, never used", "[config]") {
  auto& out = steptrace_test::captured_log();
  struct Var {
    const char* name;
    const char* value;
  };
  const Var vars[] = {{"RANK", "99999999999"}, {"LOCAL_RANK", "x1"}, {"WORLD_SIZE", "-3"}};
  for (const auto& v : vars) ::setenv(v.name, v.value, 1);
  const auto log = fresh_log("config_launcher");
  auto cfg = steptrace_test::host_config(log);
  REQUIRE(start(cfg));
  for (int i = 0; i < 2; ++i) TRACE_STEP();
  stop();
  ::setenv("WORLD_SIZE", "0", 1);
  REQUIRE(start(cfg));
  stop();
  for (const auto& v : vars) ::unsetenv(v.name);
  const std::string text = out.str();
  CHECK(count(text, "configuration error in RANK: cannot use value '99999999999'") == 1);
  CHECK(count(text, "configuration error in LOCAL_RANK: cannot use value 'x1'") == 1);
  CHECK(count(text, "configuration error in WORLD_SIZE: cannot use value '-3'") == 1);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["rank"] == 0);
  CHECK(lines[0]["world_size"] == 1);
}

// PyTorch Lightning's launcher sets LOCAL_RANK, NODE_RANK and WORLD_SIZE, no RANK: both processes of a
// devices=2 job said "rank 0" (issue #59). One node: the local rank; node N with LOCAL_WORLD_SIZE:
// torchrun's rule; node N without it: not known, warned, never silent.
TEST_CASE("a launcher without RANK: the rank from LOCAL_RANK and NODE_RANK, or a warning", "[config]") {
  for (const char* v : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "GROUP_RANK", "LOCAL_WORLD_SIZE"}) ::unsetenv(v);
  auto& out = steptrace_test::captured_log();
  const auto rank_with = [&](const char* local, const char* node, const char* local_world) {
    ::setenv("WORLD_SIZE", "8", 1);
    ::setenv("LOCAL_RANK", local, 1);
    if (node) ::setenv("NODE_RANK", node, 1);
    if (local_world) ::setenv("LOCAL_WORLD_SIZE", local_world, 1);
    const auto log = fresh_log("config_no_rank");
    REQUIRE(start(steptrace_test::host_config(log)));
    { TRACE_STEP(); }
    stop();
    for (const char* v : {"WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE"}) ::unsetenv(v);
    const auto lines = read_lines(log);
    REQUIRE(lines.size() == 1);
    return lines[0]["rank"].get<int>();
  };
  CHECK(rank_with("1", "0", nullptr) == 1);      // Lightning, one node (NODE_RANK 0)
  CHECK(rank_with("1", nullptr, "8") == 1);      // one node holding the whole world
  CHECK(rank_with("1", "1", "4") == 5);          // node 1 of 4 processes each
  CHECK(count(out.str(), "the global rank is not known here") == 0);
  CHECK(rank_with("1", nullptr, nullptr) == 1);  // LOCAL_RANK alone: not known, said
  CHECK(count(out.str(), "set LOCAL_RANK 1 but neither RANK nor NODE_RANK: the global rank is not known here") == 1);
  CHECK(rank_with("1", "1", nullptr) == 1);      // node 1, its size unknown: said
  CHECK(count(out.str(), "LOCAL_RANK 1 and NODE_RANK 1 but no RANK: the global rank is not known here") == 1);
  ::setenv("RANK", "3", 1);                      // a launcher's RANK wins
  CHECK(rank_with("1", "0", nullptr) == 3);
  ::unsetenv("RANK");
}

TEST_CASE("job_id from the setting or the scheduler, run_id new at every start()", "[config]") {
  for (const char* v : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "KUBERNETES_SERVICE_HOST", "STEPTRACE_JOB_ID"}) ::unsetenv(v);
  const auto log = fresh_log("config_job_id");
  auto cfg = steptrace_test::host_config(log);
  auto one_step = [&] {
    REQUIRE(start(cfg));
    { TRACE_STEP(); }
    stop();
  };
  one_step();                                 // nothing known
  ::setenv("TORCHELASTIC_RUN_ID", "elastic-7", 1);
  one_step();                                 // torchrun's
  ::setenv("SLURM_JOB_ID", "123456", 1);
  one_step();                                 // Slurm's first
  ::setenv("STEPTRACE_JOB_ID", "mine", 1);
  one_step();                                 // the setting wins
  for (const char* v : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "STEPTRACE_JOB_ID"}) ::unsetenv(v);
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("HOSTNAME", "trainer-pod-0", 1);
  one_step();                                 // the pod's name
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0]["job_id"].is_null());
  CHECK(lines[0]["null_reasons"]["job_id"].get<std::string>().find("SLURM_JOB_ID") != std::string::npos);
  CHECK(lines[1]["job_id"] == "elastic-7");
  CHECK(lines[2]["job_id"] == "123456");
  CHECK(lines[3]["job_id"] == "mine");
  CHECK(lines[4]["job_id"] == "trainer-pod-0");
  std::set<std::string> run_ids;
  for (const auto& l : lines) {
    const std::string id = l["run_id"];
    CHECK(id.size() == 16);
    CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
    run_ids.insert(id);
  }
  CHECK(run_ids.size() == 5);
}
