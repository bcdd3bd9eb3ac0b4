// Programs that end without stop(): no line is corrupted (issue #17). The process may die inside the
// background thread's write(2) of its last line (exit ends every thread; a write to a file can stop part
// way): that unterminated tail is the one thing allowed here, and is for issue #17's exit handling.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

TEST_CASE("returning from main without stop() writes no corrupt line", "[exit]") {
  int lines_seen = 0;
  for (int run = 0; run < 20; ++run) {
    const std::string log = steptrace_test::fresh_log("exit_without_stop_" + std::to_string(run));
    const std::string cmd = std::string(STEPTRACE_EXIT_PROGRAM) + " " + log + " 400";
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::stringstream whole;
    whole << std::ifstream(log).rdbuf();
    std::string content = whole.str();
    content.erase(content.rfind('\n') + 1);  // an unterminated tail: cut by the process's end
    std::istringstream in(content);
    std::string text;
    while (std::getline(in, text)) {
      INFO("run " << run << ": " << text.substr(0, 300));
      const auto line = nlohmann::json::parse(text);  // throws on a torn or invalid line
      ++lines_seen;
      for (const auto& [name, phase] : line["phases"].items()) {
        CHECK((name == "attention-with-a-long-name" || name == "unphased"));
        CHECK(phase["host_ms"].is_number());
      }
      CHECK(double(line["loss"]) == Approx(1.0 / (int(line["global_step"]) + 1)));
    }
  }
  CHECK(lines_seen > 0);
}

TEST_CASE("a log that fails part way keeps whole lines and counts what it lost", "[exit]") {
  const std::string log = steptrace_test::fresh_log("log_size_limit");
  const std::string cmd = std::string(STEPTRACE_SIZE_LIMIT_PROGRAM) + " " + log;
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::stringstream whole;
  whole << std::ifstream(log).rdbuf();
  const std::string content = whole.str();
  REQUIRE_FALSE(content.empty());
  CHECK(content.back() == '\n');  // no fragment left behind
  std::istringstream in(content);
  std::string text;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, text)) lines.push_back(nlohmann::json::parse(text));  // every line whole
  REQUIRE(lines.size() < 40);
  const uint64_t lost = lines.back()["dropped"]["lines_unwritten_total"];
  CHECK(lines.size() + lost == 40);  // every step either has its line or is counted
  CHECK(lines.front()["dropped"]["lines_unwritten_total"] == 0);
}
