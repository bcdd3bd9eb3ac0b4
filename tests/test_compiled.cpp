// Compiled mode (STEPTRACE_COMPILED_LIB): this program and the shared object it loads both link
// steptrace's runtime as one shared library and include steptrace.hpp, which declares the API and
// nothing of the runtime (compiled_header_check checks the headers). Both record into the one session.
#include <steptrace/steptrace.hpp>

#ifndef STEPTRACE_COMPILED_LIB
#error "built in compiled mode"
#endif

#include "host_config.hpp"
#include "support.hpp"

extern "C" double steptrace_test_plugin_work(int microseconds);  // compiled_plugin.cpp, another shared object

using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

TEST_CASE("compiled mode: the program and a shared object record into one session", "[compiled]") {
  const auto log = fresh_log("compiled");
  auto cfg = steptrace_test::host_config(log);
  cfg.tokens_per_step = 512;
  REQUIRE(steptrace::start(cfg));
  CHECK(steptrace::is_running());
  CHECK_FALSE(steptrace::start(cfg));  // one session per process, whichever object asks
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
    {
      TRACE_PHASE(forward);
      spin_for_us(1000);
      CHECK(steptrace_test_plugin_work(2000) >= 2.0);
    }
    TRACE_PHASE_NAMED("compiled_custom");
    steptrace::record("loss", 3.0 - i);
  }
  const auto summary = steptrace::stop();
  CHECK_FALSE(steptrace::is_running());
  CHECK(summary.started);
  CHECK(summary.lines_written == 3);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    INFO(l.dump());
    CHECK(l["global_step"] == i);
    CHECK(double(l["loss"]) == 3.0 - double(i));
    // Scopes read on the tick clock, calibrated against the steady_clock the spins use: 1 % allowed.
    CHECK(double(l["forward_time_ms"]) >= 3.0 * 0.99);  // the plugin's phase runs inside forward
    REQUIRE(l["phases"].contains("plugin"));     // registered by the shared object, in the same table
    CHECK(double(l["phases"]["plugin"]["host_ms"]) >= 2.0 * 0.99);
    CHECK(double(l["phases"]["plugin"]["host_ms"]) <= double(l["forward_time_ms"]));
    CHECK(l["phases"].contains("compiled_custom"));
    CHECK(l["device"].is_null());
  }
}

TEST_CASE("compiled mode: the program, the plugin and the library read one phase table", "[compiled]") {
  steptrace_test_plugin_work(1);  // the plugin registers "plugin" through its own call into the library
  const std::size_t before = steptrace::phase_count();
  const auto plugin = steptrace::register_phase_checked("plugin");
  CHECK(plugin.error.empty());
  CHECK(plugin.id < before);  // the program finds the plugin's name: found, not added
  CHECK(steptrace::phase_count() == before);
  CHECK(steptrace::phase_name(plugin.id) == "plugin");
  const auto checked = steptrace::register_phase_checked("compiled_table_check");
  REQUIRE(checked.id != steptrace::kNoPhase);
  CHECK(steptrace::phase_count() == before + 1);
  CHECK(steptrace::phase_name(checked.id) == "compiled_table_check");
  CHECK(steptrace::register_phase("compiled_table_check") == checked.id);
  const auto bad = steptrace::register_phase_checked("Bad Name!");
  CHECK_FALSE(bad.error.empty());
  CHECK(steptrace::phase_name(bad.id) == "bad_name_");
}
