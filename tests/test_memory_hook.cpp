// The allocator hook: called once per step on the step thread; its numbers land in the line.
#include <steptrace/steptrace.hpp>

#include <stdexcept>

#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;

TEST_CASE("allocator hook numbers appear in the line and drive peak_memory_allocated", "[memory]") {
  const auto log = fresh_log("memory_hook");
  auto cfg = steptrace_test::host_config(log);
  int calls = 0;
  set_allocator_stats_hook([&] {
    ++calls;
    AllocatorStats s;
    s.allocated_bytes = 1000 * calls;
    s.peak_allocated_bytes = 4096 * calls;
    s.reserved_bytes = 1 << 20;
    s.alloc_retries = 0;
    s.ooms = 0;
    return s;
  });
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) TRACE_STEP();
  stop();
  set_allocator_stats_hook(nullptr);
  CHECK(calls == 3);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(lines[i]["peak_memory_allocated"] == 4096 * (i + 1));
    CHECK(lines[i]["peak_memory_source"] == "allocator_hook");
    CHECK(lines[i]["memory"]["allocator"]["reserved_bytes"] == (1 << 20));
    CHECK(lines[i]["memory"]["allocator"]["peak_reserved_bytes"].is_null());
  }
}

TEST_CASE("a hook that throws is removed and the steps go on", "[memory]") {
  const auto log = fresh_log("memory_hook_throws");
  auto cfg = steptrace_test::host_config(log);
  int calls = 0;
  set_allocator_stats_hook([&]() -> AllocatorStats {
    ++calls;
    throw std::runtime_error("allocator unavailable");
  });
  REQUIRE(start(cfg));
  for (int i = 0; i < 3; ++i) TRACE_STEP();
  stop();
  CHECK(calls == 1);
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["memory"]["allocator"].is_null());
  CHECK(lines[0]["peak_memory_allocated"].is_null());
}
