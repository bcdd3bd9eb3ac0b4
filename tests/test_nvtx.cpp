// Scopes as an NVTX tool sees them: each step and phase scope is a range in the "steptrace" domain,
// pushed and popped in nesting order, named after its phase, a step's range carrying the step's index.
// CTest runs the [tool] case with NVTX_INJECTION64_PATH naming nvtx_tool.cpp's library, which NVTX
// loads itself, as it loads Nsight Systems; [no_tool] runs with none (scopes skip NVTX then).
#include <steptrace/steptrace.hpp>
#include <steptrace/backend/nvtx.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "host_config.hpp"
#include "support.hpp"

namespace {

void three_steps(const std::string& log) {
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP(64.0);
    {
      TRACE_PHASE(forward);
      TRACE_PHASE_NAMED("attention");
    }
    TRACE_PHASE(backward);
  }
  steptrace::stop();
}

}  // namespace

TEST_CASE("a tool receives every scope as a range in the steptrace domain", "[tool]") {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  REQUIRE(path != nullptr);
  const std::string log = steptrace_test::fresh_log("nvtx_tool");
  three_steps(log);
  void* tool = dlopen(path, RTLD_NOW | RTLD_NOLOAD);  // already loaded by NVTX, or not at all
  REQUIRE(tool != nullptr);
  const auto tool_log = reinterpret_cast<const char* (*)()>(dlsym(tool, "nvtx_tool_log"));
  REQUIRE(tool_log != nullptr);
  std::string expected = "domain steptrace\n";
  for (int i = 0; i < 3; ++i)
    expected += "push steptrace step " + std::to_string(i) +
                "\npush steptrace forward\npush steptrace attention\npop steptrace\npop steptrace\n"
                "push steptrace backward\npop steptrace\npop steptrace\n";
  CHECK(std::string(tool_log()) == expected);
  CHECK(steptrace_test::read_lines(log).size() == 3);
}

TEST_CASE("without a tool the scopes still make their lines", "[no_tool]") {
  REQUIRE(std::getenv("NVTX_INJECTION64_PATH") == nullptr);
  const std::string log = steptrace_test::fresh_log("nvtx_none");
  three_steps(log);
  const auto lines = steptrace_test::read_lines(log);
  REQUIRE(lines.size() == 3);
  for (const auto& line : lines) CHECK(line["phases"].contains("attention"));
  CHECK(steptrace::backend::nvtx::nvtx_off().load());  // the scopes found no tool and stopped asking
}
