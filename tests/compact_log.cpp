// compact_log FULL COMPACT - a log of full lines (steptrace.step/1) written again as the default line
// detail writes it: a run record whenever the run's facts change, then each step's compact line
// (steptrace.step/2), by the same calls as the background thread (details/worker_lines.hpp). The run
// record's settings are the defaults' (a full line does not carry the settings its run had; the report
// reads only trace_dir from them). Records that are not step lines (the end record) are copied as they
// are. For report_check: the report of a default log made from GPU lines recorded on H200s.
#include <steptrace/core/json_flat.hpp>
#include <steptrace/core/line_tiers.hpp>
#include <steptrace/config.hpp>
#include <steptrace/settings.hpp>

#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: compact_log FULL COMPACT\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  if (!in || !out) {
    std::cerr << "compact_log: cannot open " << (in ? argv[2] : argv[1]) << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::string>> settings;
  for (const steptrace::Setting& s : steptrace::settings()) settings.emplace_back(s.name, s.text(steptrace::Config{}));
  steptrace::ReasonBook book;
  std::string facts_written;
  int lines = 0;
  for (std::string text; std::getline(in, text);) {
    if (text.empty()) continue;
    if (text.find("\"schema\":\"steptrace.step/1\"") == std::string::npos) {
      out << text << '\n';  // an end or stall record
      continue;
    }
    steptrace::FlatJson full;
    if (const std::string err = steptrace::details::JsonFlattener(text, full).run(); !err.empty()) {
      std::cerr << "compact_log: line " << lines << ": " << err << "\n";
      return 1;
    }
    std::string facts;
    std::string compact = steptrace::make_compact_line(full, book, &facts);
    if (facts != facts_written) {
      out << steptrace::make_run_record(full, settings, true) << '\n';
      facts_written = std::move(facts);
      book = steptrace::ReasonBook{};
      compact = steptrace::make_compact_line(full, book);
    }
    out << compact << '\n';
    ++lines;
  }
  std::cerr << "compact_log: " << lines << " lines\n";
  return lines > 0 ? 0 : 1;
}
