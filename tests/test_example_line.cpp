// Runs the example training program and checks its JSON lines: on the CPU ([cpu], everywhere) and on
// the GPU ([gpu], label gpu, the device machine).
#include <cstdlib>
#include <string>

#include "support.hpp"

using steptrace_test::fresh_log;
using steptrace_test::read_lines;

namespace {
std::vector<nlohmann::json> run_example(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(STEPTRACE_EXAMPLE_PATH) + " " + args + " --log " + log;
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  return read_lines(log);
}
void check_common(const std::vector<nlohmann::json>& lines, int steps) {
  REQUIRE(lines.size() == static_cast<std::size_t>(steps));
  for (const auto& l : lines) {
    for (const auto& name : steptrace_test::minimal_log_set()) {
      INFO("field " << name);
      CHECK(l.contains(name));
    }
    steptrace_test::require_null_reasons(l);
    for (const char* f : {"dataloader_wait_ms", "h2d_time_ms", "forward_time_ms", "backward_time_ms",
                          "optimizer_time_ms", "tokens_per_second", "samples_per_second", "loss"}) {
      INFO("field " << f);
      CHECK(l[f].is_number());
    }
    CHECK(l["phases"].contains("softmax"));
  }
  // It trains: the mean loss of the last three steps is below that of the first three.
  const std::size_t n = lines.size();
  const double first = double(lines[0]["loss"]) + double(lines[1]["loss"]) + double(lines[2]["loss"]);
  const double last = double(lines[n - 1]["loss"]) + double(lines[n - 2]["loss"]) + double(lines[n - 3]["loss"]);
  CHECK(last < first);
}
}  // namespace

TEST_CASE("example on the CPU", "[cpu]") {
  const auto log = fresh_log("example_cpu");
  const auto lines = run_example("--cpu --steps 12 --slow-loader-ms 2", log);
  check_common(lines, 12);
  CHECK(double(lines[3]["dataloader_wait_ms"]) >= 2.0);
  CHECK(lines[0]["estimated_mfu"].is_null());  // the CPU has no peak-FLOPs entry
}

TEST_CASE("example on the GPU", "[gpu]") {
  const auto log = fresh_log("example_gpu");
  const auto lines = run_example("--steps 30", log);
  check_common(lines, 30);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    REQUIRE(l["device"].is_object());
    CHECK(int(l["device"]["sm_count"]) > 0);
    CHECK(l["peak_memory_allocated"].is_number());  // the example's allocator hook
    // Device memory is sampled every 10 ms: the first, short steps may end before the first reading.
    if (i >= 10) CHECK(int64_t(l["memory"]["device_total_bytes"]) > 0);
    // The example runs with the defaults: overhead_budget chooses which steps are traced. The first 8
    // are; later, steps left untraced say so.
    CHECK(l["overhead"]["decided_by"] == "overhead_budget");
    if (i < 8) CHECK(l["traced"] == true);
    if (!l["traced"].get<bool>()) {
      CHECK(l["null_reasons"]["gpu"].get<std::string>().find("overhead_budget") != std::string::npos);
      continue;
    }
    // Attribution: the example's naive softmax runs one block, so its phase shows SM efficiency 1/SMs.
    REQUIRE(l["gpu"].is_object());
    CHECK(l["gpu"]["complete"] == true);
    const auto& softmax = l["phases"]["softmax"]["gpu"];
    CHECK(double(softmax["sm_efficiency"]) == Approx(1.0 / int(l["device"]["sm_count"])));
    CHECK(softmax["top_kernels"][0]["name"].get<std::string>().find("naive_softmax_xent") != std::string::npos);
    CHECK(double(l["gpu_utilization"]) > 0);
  }
  // By the last line the cost has an estimate (measured once untraced steps exist).
  CHECK(lines.back()["overhead"]["estimated_fraction"].is_number());
  const std::string name = lines[0]["device"]["name"];
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    // A known GPU: MFU is a number in (0, 1].
    CHECK(double(lines.back()["estimated_mfu"]) > 0);
    CHECK(double(lines.back()["estimated_mfu"]) <= 1);
  }
}
