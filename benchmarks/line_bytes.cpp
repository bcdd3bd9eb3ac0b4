// Bytes per line in each tier, and what the compact tier costs the background thread.
//
//   line_bytes LOG.jsonl...        (logs of full lines, steptrace.step/1: e.g. the committed H100 lines)
//
// Per file: the full lines' bytes (median, max), the compact lines' made from them (median, max; the
// run's first line, which carries the reasons' sentences, counted apart), the run records' bytes, and
// per line the time to make the compact line and the run record's facts from the line's leaves read
// back, and the time the writer spends recording the line's leaves (what a run with the Prometheus
// exporter pays): the same line written by core/json_writer.hpp with and without record_leaves. Then
// the line rewritten through LineOut, as make_step_line writes it: its time (and with each value's row
// found and checked, as the runtime writes every line), and what the compact line
// (with the run record's facts) adds on two paths - from the line's leaves read back, or from the
// values LineOut took as it wrote them, finding each one's row (core/tier_leaves.hpp: the runtime's
// path) - and whether the two give the same compact line, run facts and run record. The runtime's
// path before the same pass (leaves recorded, then each matched against the rows one by one) is an
// older build's compact_us + leaves_us; this build's read-back finds the rows in the same tree.
// Medians of 200 repetitions per line. And every full line's and end record's leaves against their
// declaration (core/line_fields.hpp): the leaves checked and any a row does not declare or declares of
// another type, or a line that does not parse (the first 8 named, and how many lines had one). Read
// from text, a whole number reads as an integer: the check of integer rows against the writer's types
// is test_schema's. Exit status 1 when a file has such a line, so a script can use it as a check.
#include <steptrace/core/json_flat.hpp>
#include <steptrace/core/json_writer.hpp>
#include <steptrace/core/line_fields.hpp>
#include <steptrace/core/line_out.hpp>
#include <steptrace/core/line_tiers.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Rewrites a JSON text through JsonWriter (values as numbers, strings, bools, nulls), so the writer's
/// cost with and without leaf recording is timed on the line's own shape.
struct Rewriter {
  std::string_view s;
  std::size_t i = 0;
  steptrace::details::JsonWriter& w;
  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  }
  std::string string_at(std::size_t& at) {
    i = at;
    std::string out = string();
    at = i;
    return out;
  }
  std::string string() {
    std::string out;
    ++i;  // "
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') {
        out += s[i + 1] == 'n' ? '\n' : s[i + 1];
        i += 2;
        continue;
      }
      out += s[i++];
    }
    ++i;
    return out;
  }
  void value() {
    space();
    const char c = s[i];
    if (c == '{') {
      ++i;
      w.begin_object();
      space();
      if (s[i] == '}') {
        ++i;
        w.end_object();
        return;
      }
      while (true) {
        space();
        w.key(string());
        space();
        ++i;  // :
        value();
        space();
        if (s[i++] == '}') break;
      }
      w.end_object();
    } else if (c == '[') {
      ++i;
      w.begin_array();
      space();
      if (s[i] == ']') {
        ++i;
        w.end_array();
        return;
      }
      while (true) {
        value();
        space();
        if (s[i++] == ']') break;
      }
      w.end_array();
    } else if (c == '"') {
      w.value(string());
    } else if (s.compare(i, 4, "null") == 0) {
      i += 4;
      w.null();
    } else if (s.compare(i, 4, "true") == 0) {
      i += 4;
      w.value(true);
    } else if (s.compare(i, 5, "false") == 0) {
      i += 5;
      w.value(false);
    } else {
      char* end = nullptr;
      const double d = std::strtod(s.data() + i, &end);
      i = static_cast<std::size_t>(end - s.data());
      w.value(d);
    }
  }
};

/// Rewrites a full step line's text through LineOut (core/line_out.hpp), as make_step_line writes a
/// line: members by name, nulls with their reasons (`reasons`: the line's null_reasons), its own
/// null_reasons left to LineOut. With the declaration's rows and TierLeaves, the compact line's and
/// the run record's values are taken in the same pass.
struct LineRewriter {
  std::string_view s;
  std::size_t i = 0;
  steptrace::LineOut& out;
  const steptrace::FlatJson& reasons;
  std::vector<std::string> path;  // the open names, for a null's reason
  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  }
  std::string string() { return Rewriter{s, i, dummy}.string_at(i); }
  steptrace::details::JsonWriter dummy;
  std::string reason(const std::string& name) const {
    std::string pointer = "/null_reasons/";
    for (const std::string& p : path) pointer += steptrace::details::path_segment(p) + ".";
    pointer += steptrace::details::path_segment(name);
    const auto it = reasons.find(pointer);
    return it == reasons.end() ? std::string("no reason") : it->second.text;
  }
  void record() {
    space();
    ++i;  // {
    out.begin();
    members(true);
  }
  void members(bool top = false) {
    space();
    if (s[i] == '}') {
      ++i;
      return;
    }
    while (true) {
      space();
      const std::string k = string();
      space();
      ++i;  // :
      if (top && k == "null_reasons") skip();
      else member(k);
      space();
      if (s[i++] == '}') break;
    }
  }
  void skip() {  // a value not rewritten (LineOut writes its own null_reasons)
    steptrace::details::JsonWriter w;
    Rewriter r{s, i, w};
    r.value();
    i = r.i;
  }
  void member(const std::string& k) {
    space();
    const char c = s[i];
    if (c == '{') {
      ++i;
      out.begin_object(k);
      path.push_back(k);
      members();
      path.pop_back();
      out.end_object();
    } else if (c == '[') {
      ++i;
      out.begin_array(k);
      path.push_back(k);
      elements();
      path.pop_back();
      out.end_array();
    } else if (c == '"') {
      out.field(k, string());
    } else if (s.compare(i, 4, "null") == 0) {
      i += 4;
      out.null(k, reason(k));
    } else if (s.compare(i, 4, "true") == 0) {
      i += 4;
      out.field(k, true);
    } else if (s.compare(i, 5, "false") == 0) {
      i += 5;
      out.field(k, false);
    } else {
      const std::size_t from = i;
      char* end = nullptr;
      const double d = std::strtod(s.data() + i, &end);
      i = static_cast<std::size_t>(end - s.data());
      if (s.substr(from, i - from).find_first_of(".eE") == std::string_view::npos) out.field(k, static_cast<int64_t>(d));
      else out.field(k, d);
    }
  }
  void elements() {
    space();
    if (s[i] == ']') {
      ++i;
      return;
    }
    for (std::size_t n = 0;; ++n) {
      space();
      if (s[i] == '{') {
        ++i;
        out.begin_element();
        path.push_back(std::to_string(n));
        members();
        path.pop_back();
        out.end_object();
      } else if (s[i] == '"') {
        out.element(string());
      } else {
        char* end = nullptr;
        const double d = std::strtod(s.data() + i, &end);
        i = static_cast<std::size_t>(end - s.data());
        out.element(static_cast<int64_t>(d));
      }
      space();
      if (s[i++] == ']') break;
    }
  }
};

/// The line rewritten through LineOut: `how` 0 plain, 1 with the FlatJson leaves and the compact line
/// made from them (the path before the same pass), 2 with the rows and the compact line made from the
/// same pass's TierLeaves, 3 with the rows only (each value's row found and checked: a full line's
/// cost in the runtime). Medians of `reps`, in us; `text` (optional): the last compact line.
double lineout_us(const std::string& line, const steptrace::FlatJson& reasons, int how, const steptrace::ReasonBook& book,
                  int reps, std::string* text = nullptr) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    steptrace::ReasonBook warm = book;
    const auto t0 = Clock::now();
    steptrace::FlatJson f;
    steptrace::TierLeaves tiers;
    steptrace::LineOut out(nullptr, how == 1 ? &f : nullptr, how >= 2 ? &steptrace::details::RowTree::step() : nullptr,
                           how == 2 ? &tiers : nullptr);
    LineRewriter{line, 0, out, reasons, {}, {}}.record();
    const std::string full = out.finish();
    std::string facts, compact;
    if (how == 1) compact = steptrace::make_compact_line(f, warm, &facts);
    if (how == 2) compact = steptrace::make_compact_line(tiers, warm, &facts);
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (full.empty() || ((how == 1 || how == 2) && facts.empty())) std::printf("?");
    if (text) *text = compact;
  }
  return median(t);
}

double rewrite_us(const std::string& line, bool leaves, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    steptrace::FlatJson f;
    steptrace::details::JsonWriter w;
    if (leaves) w.record_leaves(&f);
    const auto t0 = Clock::now();
    Rewriter{line, 0, w}.value();
    const std::string out = w.release();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (out.empty()) std::printf("?");
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: line_bytes LOG.jsonl...\n");
    return 2;
  }
  constexpr int kReps = 200;
  int bad = 0;  // files with a leaf the declaration does not hold
  std::printf("%-44s %6s %9s %9s %9s %9s %9s %9s %10s %10s %10s\n", "file", "lines", "full_med", "full_max",
              "cmp_med", "cmp_max", "cmp_first", "run_rec", "compact_us", "leaves_us", "write_us");
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a]);
    std::vector<double> full_b, cmp_b, cmp_us, leaf_us, plain_us, via_leaves_us, same_pass_us, lineout_plain_us,
        rows_checked_us;
    std::size_t same_pass_differs = 0;
    double first_b = 0, run_b = 0;
    steptrace::ReasonBook book;
    std::vector<std::pair<std::string, std::string>> settings;
    std::size_t checked = 0, lines_with_problems = 0;
    std::vector<std::string> problems;  // the first 8 named
    // A full step line's or an end record's leaves against the declaration; false: not such a line.
    const auto check = [&](const std::string& line, steptrace::FlatJson& f) {
      const bool end = line.find("\"schema\":\"steptrace.end/1\"") != std::string::npos;
      if (!end && line.find("\"schema\":\"steptrace.step/1\"") == std::string::npos) return false;
      std::vector<std::string> found;
      const std::string parse_error = steptrace::details::JsonFlattener(line, f).run();
      if (!parse_error.empty()) found.push_back("a line that does not parse: " + parse_error);
      else found = steptrace::declaration_problems(f, end ? steptrace::Record::end : steptrace::Record::step);
      checked += f.size();
      lines_with_problems += !found.empty();
      for (std::string& p : found)
        if (problems.size() < 8) problems.push_back(std::move(p));
      return parse_error.empty() && !end;  // a full step line, read
    };
    for (std::string line; std::getline(in, line);) {
      steptrace::FlatJson f;
      if (!check(line, f)) continue;
      full_b.push_back(static_cast<double>(line.size()));
      const std::string compact = steptrace::make_compact_line(f, book);
      if (run_b == 0) {
        run_b = static_cast<double>(steptrace::make_run_record(f, settings).size());
        first_b = static_cast<double>(compact.size());
      } else {
        cmp_b.push_back(static_cast<double>(compact.size()));
      }
      std::vector<double> t;
      for (int r = 0; r < kReps; ++r) {
        steptrace::ReasonBook warm = book;  // as on a run's later lines: every code met already
        const auto t0 = Clock::now();
        std::string facts;  // what the worker compares with the last run record's
        const std::string c = steptrace::make_compact_line(f, warm, &facts);
        t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (c.empty() || facts.empty()) std::printf("?");
      }
      cmp_us.push_back(median(t));
      leaf_us.push_back(rewrite_us(line, true, kReps));
      plain_us.push_back(rewrite_us(line, false, kReps));
      // The line as make_step_line writes it (LineOut), then the compact line: from its leaves read
      // back against the rows, or from the values the same pass took (the runtime's path).
      std::string same_pass;
      const double line_us = lineout_us(line, f, 0, book, kReps);
      via_leaves_us.push_back(lineout_us(line, f, 1, book, kReps) - line_us);
      same_pass_us.push_back(lineout_us(line, f, 2, book, kReps, &same_pass) - line_us);
      lineout_plain_us.push_back(line_us);
      rows_checked_us.push_back(lineout_us(line, f, 3, book, kReps) - line_us);
      // Rewritten, a whole number reads back as an integer: the same pass's compact line, run facts and
      // run record compared with those made from the rewrite's own leaves, so that only the path differs.
      steptrace::FlatJson rewritten;
      steptrace::TierLeaves tiers;
      {
        steptrace::LineOut out(nullptr, &rewritten, &steptrace::details::RowTree::step(), &tiers);
        LineRewriter{line, 0, out, f, {}, {}}.record();
        out.finish();
      }
      steptrace::ReasonBook warm = book, warm_read = book;
      std::string facts, facts_read;
      const std::string same = steptrace::make_compact_line(tiers, warm, &facts);
      if (same != same_pass || same != steptrace::make_compact_line(rewritten, warm_read, &facts_read) ||
          facts != facts_read ||
          steptrace::make_run_record(tiers, settings) != steptrace::make_run_record(rewritten, settings)) {
        ++same_pass_differs;
        if (problems.size() < 8) problems.push_back("the same pass's compact line, run facts or run record differ from those read back: " + same);
      }
    }
    std::string name = argv[a];
    if (name.size() > 44) name = "…" + name.substr(name.size() - 43);
    if (!full_b.empty())
      std::printf("%-44s %6zu %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %10.1f %10.1f %10.1f\n", name.c_str(), full_b.size(),
                median(full_b), *std::max_element(full_b.begin(), full_b.end()), median(cmp_b),
                cmp_b.empty() ? 0.0 : *std::max_element(cmp_b.begin(), cmp_b.end()), first_b, run_b, median(cmp_us),
                median(leaf_us) - median(plain_us), median(plain_us));
    else
      std::printf("%-44s: no full step line\n", name.c_str());
    if (!full_b.empty())
      std::printf("  LineOut: the line %.1f us (%.1f us more with each value's row found and checked); its compact "
                  "line (and the run facts) %.1f us more from its leaves read back against the rows, %.1f us more from "
                  "the values the same pass took; %zu of %zu compact lines differ between the two\n",
                  median(lineout_plain_us), median(rows_checked_us), median(via_leaves_us), median(same_pass_us),
                  same_pass_differs, full_b.size());
    lines_with_problems += same_pass_differs;
    std::printf("  declared (core/line_fields.hpp): %zu leaves checked, %s\n", checked,
                problems.empty() ? "every one declared, of its type" : "not all:");
    for (const std::string& p : problems) std::printf("    %s\n", p.c_str());
    if (lines_with_problems) std::printf("    (%zu lines with a problem)\n", lines_with_problems);
    bad += lines_with_problems != 0;
  }
  return bad ? 1 : 0;
}
