// Test helpers: run a session, read its JSON lines back with nlohmann-json.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <steptrace/core/line_fields.hpp>
#include <steptrace/core/measured.hpp>
#include <steptrace/core/reasons.hpp>
#include <steptrace/core/tier_leaves.hpp>

namespace steptrace_test {

#ifdef STEPTRACE_SOURCE_DIR
/// A file of the source tree, whole (relative to its root; tests/CMakeLists.txt says which tests know it).
inline std::string source_text(const std::string& relative) {
  std::ifstream in(std::string(STEPTRACE_SOURCE_DIR "/") + relative);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
#endif

/// A full step line's, an end record's, a stall or a resumed record's text against the line's declaration
/// (core/line_fields.hpp): every record read_records() reads back is checked, so every line the runtime
/// writes in the tests is (read from text, a whole number reads as an integer: the writer's types are
/// test_schema's check).
inline void check_declared_text(const std::string& line) {
  // The compact line and the run record: each null's reason is a row of the reasons' table too (the
  // compact line's by its code, whose sentence comes in `reason_text` the first time).
  const bool compact = line.find("\"schema\":\"steptrace.step/2\"") != std::string::npos;
  if (compact || line.find("\"schema\":\"steptrace.run/2\"") != std::string::npos) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("null_reasons") || !j["null_reasons"].is_object()) return;
    std::vector<std::string> sentences;
    if (!compact) {
      for (const auto& [key, why] : j["null_reasons"].items())
        if (why.is_string()) sentences.push_back(why.get<std::string>());
    } else if (j.contains("reason_text") && j["reason_text"].is_object()) {
      for (const auto& [key, code] : j["null_reasons"].items())
        if (code.is_string() && j["reason_text"].contains(code.get<std::string>()))
          sentences.push_back(j["reason_text"][code.get<std::string>()].get<std::string>());
    }
    for (const std::string& why : sentences)
      if (!steptrace::reason_of(why)) FAIL_CHECK("a null's reason with no row in core/reasons.hpp: " << why);
    return;
  }
  steptrace::Record record;
  if (line.find("\"schema\":\"steptrace.step/1\"") != std::string::npos) record = steptrace::Record::step;
  else if (line.find("\"schema\":\"steptrace.end/1\"") != std::string::npos) record = steptrace::Record::end;
  else if (line.rfind("{\"event\":\"stall\"", 0) == 0) record = steptrace::Record::stall;
  else if (line.rfind("{\"event\":\"resumed\"", 0) == 0) record = steptrace::Record::resumed;
  else return;
  steptrace::FlatJson leaves;
  const std::string error = steptrace::details::JsonFlattener(line, leaves).run();
  if (!error.empty()) FAIL_CHECK("core/json_flat.hpp cannot read it: " << error);
  for (const std::string& problem : steptrace::declaration_problems(leaves, record))
    FAIL_CHECK("not as core/line_fields.hpp declares it: " << problem);
  // Every reason given for a null is a row of the reasons' table (core/reasons.hpp), so that its code
  // stays when its sentence is reworded.
  for (const auto& [pointer, leaf] : leaves)
    if (pointer.rfind("/null_reasons/", 0) == 0 && leaf.kind == steptrace::JsonLeaf::Kind::string &&
        !steptrace::reason_of(leaf.text))
      FAIL_CHECK("a null's reason with no row in core/reasons.hpp: " << pointer << ": " << leaf.text);
}

/// A fresh log path in the test's working directory (removed first).
/// Test cases tagged [tsc] need the CPU tick counter; CTest runs them on their own (`<name>_tsc`, with
/// SKIP_RETURN_CODE 77), so a machine without a usable counter reports a skip, not a pass.
inline void skip_test(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

inline std::string fresh_log(const std::string& name) {
  const std::string path = name + ".jsonl";
  std::remove(path.c_str());
  return path;
}

/// A fresh, empty directory in the test's working directory.
inline std::string fresh_dir(const std::string& name) {
  std::filesystem::remove_all(name);
  std::filesystem::create_directories(name);
  return name;
}

/// Every record of a JSONL file, each parsed; a line that does not parse fails the test.
inline std::vector<nlohmann::json> read_records(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    INFO("line: " << line);
    REQUIRE_NOTHROW(lines.push_back(nlohmann::json::parse(line)));
    check_declared_text(line);
    CHECK(line.find(steptrace::details::kNoReasonGiven) == std::string::npos);  // every null came with its reason
  }
  // Every value this process's writers wrote (the compact lines' too: the writer checks them against
  // their rows as it writes, core/tier_leaves.hpp) has its row, of its row's type, null only where the
  // row may be. (A runtime linked from the compiled library keeps its own counter: not this one.)
#ifndef STEPTRACE_COMPILED_LIB
  CHECK(steptrace::details::line_out_undeclared().load() == 0);
#endif
  return lines;
}

/// The complete records of a JSONL file the background thread may be writing right now: a last line
/// without its newline yet is left out (a reader can see a write half done), the rest must parse.
inline std::vector<nlohmann::json> read_records_live(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<nlohmann::json> records;
  std::size_t begin = 0;
  for (std::size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const std::string line = text.substr(begin, end - begin);
    INFO("line: " << line);
    REQUIRE_NOTHROW(records.push_back(nlohmann::json::parse(line)));
  }
  return records;
}

/// The step lines among records (an end record, {"event": ...}, left out).
inline std::vector<nlohmann::json> step_records(std::vector<nlohmann::json> records) {
  records.erase(std::remove_if(records.begin(), records.end(), [](const nlohmann::json& r) { return r.contains("event"); }),
                records.end());
  return records;
}

/// The step lines written so far (read_records_live), for checks while the program runs.
inline std::vector<nlohmann::json> read_lines_live(const std::string& path) { return step_records(read_records_live(path)); }

/// Polls `done` every millisecond until it holds or `timeout_ms` have passed; returns its last answer.
/// For what the background thread does "soon": a loaded machine may run it late, never wrongly, so a
/// test waits for it (with a deadline far above any scheduling delay) instead of sleeping a fixed time.
template <class Predicate>
bool wait_for(Predicate done, int timeout_ms = 10'000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// The step lines of a JSONL file (an end record, {"event": ...}, left out: read_events).
inline std::vector<nlohmann::json> read_lines(const std::string& path) { return step_records(read_records(path)); }

/// The event records ({"event": "end", ...}) of a JSONL file.
inline std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> events;
  for (auto& r : read_records(path))
    if (r.contains("event")) events.push_back(std::move(r));
  return events;
}

inline void spin_for_us(int us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

/// The top-level names issue #2 promises on every line.
inline const std::vector<std::string>& minimal_log_set() {
  static const std::vector<std::string> names = {
      "global_step", "tokens_per_second", "samples_per_second", "step_time_ms", "forward_time_ms",
      "backward_time_ms", "optimizer_time_ms", "dataloader_wait_ms", "gpu_utilization", "sm_activity",
      "memory_bandwidth_utilization", "tensor_core_or_pipe_utilization", "peak_memory_allocated", "nccl_time_ms",
      "estimated_mfu", "loss", "grad_norm", "overflow_count", "h2d_time_ms", "timestamp", "rank", "world_size",
      "hostname", "device", "phases", "diagnosis", "gpu"};
  return names;
}

/// Every null top-level field has a reason in null_reasons.
inline void require_null_reasons(const nlohmann::json& line) {
  for (auto it = line.begin(); it != line.end(); ++it) {
    if (!it.value().is_null() || it.key() == "peak_memory_source") continue;
    INFO("null field without reason: " << it.key());
    REQUIRE(line["null_reasons"].contains(it.key()));
    REQUIRE(!line["null_reasons"][it.key()].get<std::string>().empty());
  }
}

}  // namespace steptrace_test
