// The compact line (steptrace.step/2) and the run record (core/line_tiers.hpp): made from H100 lines
// committed in tests/data (a torch.compile GPT-2 trainer, an eager PyTorch GPT, a C++ transformer, each
// with steptrace's defaults) and from leaves built here; and a host-only run with line_detail=compact.
#include <steptrace/core/line_tiers.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/steptrace.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fake_exchange.hpp"
#include "host_config.hpp"
#include "support.hpp"

using steptrace::FlatJson;
using steptrace::JsonLeaf;
using nlohmann::json;

namespace {

std::vector<std::string> committed(const char* file) {
  std::vector<std::string> out;
  std::ifstream in(std::string(STEPTRACE_SOURCE_DIR "/tests/data/") + file);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

FlatJson flatten(const std::string& text) {
  FlatJson f;
  const std::string err = steptrace::details::JsonFlattener(text, f).run();
  REQUIRE(err.empty());
  return f;
}

void flatten_json(const json& j, const std::string& pointer, std::vector<std::pair<std::string, json>>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) {
      std::string seg;
      for (char c : k) seg += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
      flatten_json(v, pointer + "/" + seg, out);
    }
  } else {
    out.emplace_back(pointer, j);
  }
}

std::string without_digits(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c < '0' || c > '9') out += c;
  return out;
}

JsonLeaf number(double v) { return JsonLeaf{JsonLeaf::Kind::number, v, {}}; }
JsonLeaf text(const std::string& s) { return JsonLeaf{JsonLeaf::Kind::string, 0, s}; }

/// A host-only session's settings with the compact line (the default, said here for the reader).
steptrace::Config compact_config(const std::string& log) {
  steptrace::Config cfg = steptrace_test::host_config(log);
  cfg.line_detail = steptrace::LineDetail::compact;
  return cfg;
}

}  // namespace

TEST_CASE("a compact line holds the full line's verdicts, rounded, in at most 1.5 KB", "[line_tiers]") {
  steptrace::ReasonBook book;
  std::size_t traced = 0, sized = 0;
  for (const std::string& text : committed("h100_default_lines.jsonl")) {
    const FlatJson full = flatten(text);
    const json whole = json::parse(text);
    const std::string compact_text = steptrace::make_compact_line(full, book);
    INFO(compact_text);
    const json c = json::parse(compact_text);
    CHECK(c["schema"] == "steptrace.step/2");
    if (!c.contains("reason_text")) {  // the run's first line carries the sentences too
      CHECK(compact_text.size() <= 1536);
      CHECK(compact_text.size() * 4 < text.size());
      ++sized;
    }
    traced += whole["traced"].get<bool>();
    // Every value is the full line's, to 6 significant digits (integers exact).
    std::vector<std::pair<std::string, json>> leaves;
    flatten_json(c, "", leaves);
    std::size_t compared = 0;
    for (const auto& [pointer, v] : leaves) {
      if (pointer.rfind("/null_reasons", 0) == 0 || pointer.rfind("/reason_text", 0) == 0 || pointer == "/schema")
        continue;
      if (pointer == "/diagnosis/reason") {  // an UNKNOWN line's: the code of the full line's sentence
        CHECK(whole["diagnosis"]["label"] == "UNKNOWN");
        CHECK(v == steptrace::details::reason_code(whole["diagnosis"]["reason"].get<std::string>()));
        CHECK(book.written.count(v.get<std::string>()) == 1);
        continue;
      }
      const json::json_pointer p(pointer);
      REQUIRE(whole.contains(p));
      const json& w = whole[p];
      if (v.is_number()) {
        REQUIRE(w.is_number());
        const double a = v.get<double>(), b = w.get<double>();
        CHECK(std::fabs(a - b) <= std::max(5e-6 * std::fabs(b), 0.5 * (std::floor(b) == b ? 0 : 1)));
      } else {
        CHECK(v == w);
      }
      ++compared;
    }
    CHECK(compared >= 20);
    // The phases' host and GPU time, the verdicts and MFU are there.
    for (const char* must : {"/step_time_ms", "/tokens_per_second", "/estimated_mfu", "/gpu_utilization",
                             "/diagnosis/label", "/diagnosis/basis", "/overhead/estimated_fraction", "/run_id"})
      CHECK(c.contains(json::json_pointer(must)));
    for (const auto& [name, ph] : whole["phases"].items())
      if (ph.contains("host_ms")) CHECK(c["phases"][name]["host_ms"].is_number());
    // Each null has a code, and each code's sentence came with this line or an earlier one.
    for (const auto& [pointer, v] : leaves) {
      if (!v.is_null() || pointer.rfind("/null_reasons", 0) == 0) continue;
      std::string dotted = pointer.substr(1);
      for (char& ch : dotted) ch = ch == '/' ? '.' : ch;
      INFO(dotted);
      REQUIRE(c["null_reasons"].contains(dotted));
      const std::string code = c["null_reasons"][dotted];
      REQUIRE(book.written.count(code) == 1);
      // The run's first sentence of this code: the same words, its numbers perhaps others.
      CHECK(without_digits(book.written[code]) == without_digits(whole["null_reasons"][dotted]));
    }
    // The full line's constant facts are not in it: they are the run record's.
    CHECK_FALSE(c.contains("device"));
    CHECK_FALSE(c.contains("mfu_inputs"));
    CHECK_FALSE(c.contains("hostname"));
  }
  CHECK(traced >= 1);
  CHECK(sized >= 2);
}

TEST_CASE("a compact line carries the step's GPU view from its markers", "[line_tiers]") {
  // Real lines of a DDP run on 2 H200s (most of them untraced, with markers): the compact line holds the
  // markers' busy lower bound, the step's GPU span and each top-level phase's, as the full line has them.
  steptrace::ReasonBook book;
  int marked = 0;
  for (const std::string& text : committed("h200x2_ddp_rank1_slowed-0.jsonl")) {
    const json whole = json::parse(text);
    if (!whole.contains("global_step") || !whole["gpu_markers"].is_object()) continue;
    const json c = json::parse(steptrace::make_compact_line(flatten(text), book));
    INFO(c.dump());
    const json& w = whole["gpu_markers"];
    for (const char* f : {"pending_ms", "pending_share", "span_ms"})
      if (w[f].is_number()) CHECK(c["gpu_markers"][f].get<double>() == Approx(w[f].get<double>()).epsilon(1e-5));
    if (w["phases"].empty()) continue;  // the first marked step: armed in its middle
    for (const auto& [name, ph] : w["phases"].items()) {
      CHECK(c["gpu_markers"]["phases"][name]["span_ms"].get<double>() == Approx(ph["span_ms"].get<double>()).epsilon(1e-5));
      CHECK_FALSE(c["gpu_markers"]["phases"][name].contains("scopes"));  // the full line's detail
    }
    ++marked;
  }
  CHECK(marked >= 10);
}

TEST_CASE("a compact UNKNOWN line says why by code; another label carries no reason", "[line_tiers]") {
  steptrace::ReasonBook book;
  const std::string why = "no GPU attribution and no host-side wait past its threshold (input 3 % < 30 %)";
  const auto line = [&](const char* label) {
    FlatJson f;
    f["/schema"] = text("steptrace.step/1");
    f["/global_step"] = number(1);
    f["/step_time_ms"] = number(12.5);
    f["/diagnosis/label"] = text(label);
    f["/diagnosis/reason"] = text(why);
    return json::parse(steptrace::make_compact_line(f, book));
  };
  const json first = line("UNKNOWN");
  const std::string code = steptrace::details::reason_code(why);
  CHECK(first["diagnosis"]["reason"] == code);
  CHECK(first["reason_text"][code] == why);
  const json second = line("UNKNOWN");
  CHECK(second["diagnosis"]["reason"] == code);
  CHECK_FALSE(second.contains("reason_text"));  // the sentence once per run
  const json other = line("INPUT-BOUND");
  CHECK(other["diagnosis"]["label"] == "INPUT-BOUND");
  CHECK_FALSE(other["diagnosis"].contains("reason"));
}

TEST_CASE("a reason's sentence is written once per run, its code on every line", "[line_tiers]") {
  const std::vector<std::string> lines = committed("h100_default_lines.jsonl");
  steptrace::ReasonBook book;
  const json first = json::parse(steptrace::make_compact_line(flatten(lines[0]), book));
  const json again = json::parse(steptrace::make_compact_line(flatten(lines[0]), book));
  REQUIRE(first.contains("reason_text"));
  CHECK_FALSE(again.contains("reason_text"));
  CHECK(book.last_added.empty());
  // A line the log could not take: its sentences come with the next one.
  steptrace::ReasonBook lost;
  const json unwritten = json::parse(steptrace::make_compact_line(flatten(lines[0]), lost));
  REQUIRE(!lost.last_added.empty());
  lost.unwrite_last();
  const json next = json::parse(steptrace::make_compact_line(flatten(lines[0]), lost));
  CHECK(next["reason_text"] == unwritten["reason_text"]);
  CHECK(first["null_reasons"] == again["null_reasons"]);
  CHECK(!first["null_reasons"].empty());
  // A code names the reason, not its numbers.
  using steptrace::details::reason_code;
  CHECK(reason_code("3 of 12 samples inside the window") == reason_code("4 of 10 samples inside the window"));
  CHECK(reason_code("3 of 12 samples inside the window") != reason_code("3 of 12 samples outside the window"));
  CHECK(reason_code("x").size() == 8);
}

// The reasons' table (core/reasons.hpp): each row's code stays when its sentence is reworded; a kPrefix
// row's detail makes a code of its own (its sentence goes into reason_text under it), continued from the
// row's code.
TEST_CASE("a reason of the table is written as its row's code", "[line_tiers][reasons]") {
  using steptrace::Reason;
  using steptrace::reason_rows;
  using steptrace::reason_text;
  using steptrace::details::reason_code;
  using steptrace::details::reason_hash;
  std::set<std::string> codes, names;
  for (const steptrace::ReasonRow& r : reason_rows()) {
    INFO(r.name << " " << r.code);
    CHECK(std::string(r.code).size() == 8);
    CHECK(std::string(r.code).find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(codes.insert(r.code).second);  // one code per row
    CHECK(names.insert(r.name).second);
    CHECK(&r == &reason_rows()[static_cast<std::size_t>(r.id)]);  // the id indexes its row
    CHECK(reason_code(r.sentence) == r.code);                      // a whole sentence, a prefix with no detail
    // Each code is its sentence's hash as first worded (the code it had before the table): a row whose
    // sentence is reworded later goes into `reworded`, its code kept.
    static const std::set<std::string> reworded = {};
    if (!reworded.count(r.name)) CHECK(reason_hash(r.sentence) == r.code);
    CHECK(steptrace::reason_of(r.sentence) == &r);
  }
  CHECK(codes.size() > 25);
  // A whole row: its code whatever the text hashes to (the row, not the words, names it).
  CHECK(reason_code(reason_text(Reason::tokens_unknown)) == std::string(reason_rows()[0].code));
  // A prefix row: one code per detail, numbers aside, from the row's code on.
  const std::string a = reason_text(Reason::cupti_unavailable, "cuptiSubscribe: CUPTI_ERROR_NOT_INITIALIZED (15)");
  const std::string b = reason_text(Reason::cupti_unavailable, "cuptiSubscribe: CUPTI_ERROR_NOT_INITIALIZED (16)");
  const std::string c = reason_text(Reason::cupti_unavailable, "cuptiSubscribe: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");
  CHECK(reason_code(a) == reason_code(b));
  CHECK(reason_code(a) != reason_code(c));
  const std::string row_code = reason_rows()[static_cast<std::size_t>(Reason::cupti_unavailable)].code;
  CHECK(reason_code(a) == reason_hash("cuptiSubscribe: CUPTI_ERROR_NOT_INITIALIZED ()",
                                      static_cast<uint32_t>(std::stoul(row_code, nullptr, 16))));
  CHECK(reason_code(a) != row_code);
  // A counted prefix row (the markers' pace): its count is part of the code, so that a compact log,
  // which carries a code's sentence once, says each pace (with the digits left out, every later pace
  // read as the first: 1 in 16 where the lines ran at 1 in 2, an H200 run, session 70).
  const std::string p16 = reason_text(Reason::markers_thinned, "16 (traced steps always): marking every step costs 0.107 %");
  const std::string p2 = reason_text(Reason::markers_thinned, "2 (traced steps always): marking every step costs 0.107 %");
  const std::string p16_other = reason_text(Reason::markers_thinned, "16 (traced steps always): marking every step costs 0.311 %");
  CHECK(reason_code(p16) != reason_code(p2));
  CHECK(reason_code(p16) == reason_code(p16_other));  // the count, not the other numbers: one code per pace
  CHECK(reason_code(p16) != reason_rows()[static_cast<std::size_t>(Reason::markers_thinned)].code);
  // The hold at 1 in 2 (until the in-run comparison has measured, or while its upper end is over) reads
  // otherwise than the cost's 1 in 2: three codes, each with its own sentence.
  const std::string held = reason_text(Reason::markers_thinned, "2 (traced steps always) until marked and unmarked steps "
                                                               "have been compared in this run (16 blocks of 32 steps)");
  const std::string over = reason_text(Reason::markers_thinned, "2 (traced steps always) while marked steps compared with "
                                                               "unmarked ones in this run leave marking every step at up to 0.2 %");
  CHECK(reason_code(held) != reason_code(p2));
  CHECK(reason_code(over) != reason_code(p2));
  CHECK(reason_code(over) != reason_code(held));
  // ... so that a compact log says each pace: two lines left unmarked at 1 in 16, then at 1 in 2.
  {
    steptrace::ReasonBook pace_book;
    std::map<std::string, std::string> said;  // what a reader keeps from the lines' reason_text
    std::vector<std::string> read;
    for (const std::string& why : {p16, p16_other, p2}) {
      steptrace::FlatJson l;
      l.emplace("/schema", steptrace::JsonLeaf{steptrace::JsonLeaf::Kind::string, 0, "steptrace.step/1"});
      l.emplace("/gpu_markers", steptrace::JsonLeaf{});
      l.emplace("/null_reasons/gpu_markers", steptrace::JsonLeaf{steptrace::JsonLeaf::Kind::string, 0, why});
      const json c = json::parse(steptrace::make_compact_line(l, pace_book));
      if (c.contains("reason_text"))
        for (const auto& [code, text] : c["reason_text"].items()) said.emplace(code, text.get<std::string>());
      read.push_back(said[c["null_reasons"]["gpu_markers"].get<std::string>()]);
    }
    CHECK(read[0].rfind(reason_text(Reason::markers_thinned) + std::string("16 "), 0) == 0);
    CHECK(read[1] == read[0]);  // the same pace: its sentence as first said
    CHECK(read[2].rfind(reason_text(Reason::markers_thinned) + std::string("2 "), 0) == 0);
  }
  // The untraced steps' interval is counted the same way: a compact log read "trace_every=8" from the
  // probe's first sentence on steps that ran at 1 in 291 (GPT-2 on an H200, session 73).
  const std::string e8 = reason_text(Reason::not_traced_interval, "8 (chosen by overhead_budget=0.001) attributes one step in 8");
  const std::string e291 = reason_text(Reason::not_traced_interval, "291 (chosen by overhead_budget=0.001) attributes one step in 291");
  const std::string e8_other = reason_text(Reason::not_traced_interval, "8 (chosen by overhead_budget=0.003) attributes one step in 8");
  CHECK(reason_code(e8) != reason_code(e291));
  CHECK(reason_code(e8) == reason_code(e8_other));
  // A sentence without a row: hashed whole, as before the table.
  CHECK(steptrace::reason_of("a reason nobody declared") == nullptr);
  CHECK(reason_code("a reason nobody declared") == reason_hash("a reason nobody declared"));
  // The compact line writes the row's code for a null whose reason is the row's sentence.
  steptrace::ReasonBook book;
  steptrace::FlatJson leaves;
  leaves.emplace("/schema", steptrace::JsonLeaf{steptrace::JsonLeaf::Kind::string, 0, "steptrace.step/1"});
  leaves.emplace("/tokens", steptrace::JsonLeaf{});
  leaves.emplace("/null_reasons/tokens",
                      steptrace::JsonLeaf{steptrace::JsonLeaf::Kind::string, 0, reason_text(Reason::tokens_unknown)});
  const json compact = json::parse(steptrace::make_compact_line(leaves, book));
  INFO(compact.dump());
  CHECK(compact["null_reasons"]["tokens"] == reason_rows()[static_cast<std::size_t>(Reason::tokens_unknown)].code);
  CHECK(compact["reason_text"][compact["null_reasons"]["tokens"].get<std::string>()] == reason_text(Reason::tokens_unknown));
}

// mfu_inputs.tokens_per_second_per_gpu is a step's value (no run tier) beside the run's mfu_inputs: its
// null reason on a step without tokens made a new, identical run record every time it flipped.
TEST_CASE("a step value's null reason beside run fields changes no run record", "[line_tiers]") {
  const std::vector<std::string> lines = committed("h100_default_lines.jsonl");
  FlatJson with = flatten(lines[0]), without = flatten(lines[0]);
  with["/mfu_inputs/tokens_per_second_per_gpu"] = number(1234.5);
  with.erase("/null_reasons/mfu_inputs.tokens_per_second_per_gpu");
  without["/mfu_inputs/tokens_per_second_per_gpu"] = JsonLeaf{JsonLeaf::Kind::null, 0, {}};
  without["/null_reasons/mfu_inputs.tokens_per_second_per_gpu"] = text("tokens unknown");
  steptrace::ReasonBook a, b;
  std::string facts_with, facts_without;
  (void)steptrace::make_compact_line(with, a, &facts_with);
  (void)steptrace::make_compact_line(without, b, &facts_without);
  CHECK(facts_with == facts_without);
  // A run field's reason is a fact: it does change the record.
  without["/null_reasons/mfu_inputs.data_parallel_size"] = text("the sizes do not divide world_size");
  std::string facts_reason;
  (void)steptrace::make_compact_line(without, b, &facts_reason);
  CHECK(facts_reason != facts_without);
}

TEST_CASE("a compact line keeps 16 phases and 32 scalars; the rest are summed and counted", "[line_tiers]") {
  FlatJson full;
  full["/schema"] = text("steptrace.step/1");
  full["/global_step"] = number(7);
  double folded_host = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "p" + std::to_string(100 + i);
    full["/phases/" + name + "/host_ms"] = number(1.0 + i);  // p139 the largest
    full["/phases/" + name + "/count"] = number(2);
    if (i < 24) folded_host += 1.0 + i;
  }
  for (int i = 0; i < 50; ++i) full["/scalars/s" + std::to_string(100 + i)] = number(i);
  steptrace::ReasonBook book;
  const json c = json::parse(steptrace::make_compact_line(full, book));
  const json& phases = c["phases"];
  CHECK(phases.size() == 17);
  CHECK(phases.contains("p139"));
  CHECK_FALSE(phases.contains("p123"));
  CHECK(phases["(other)"]["phases"] == 24);
  CHECK(phases["(other)"]["count"] == 48);
  CHECK(std::fabs(phases["(other)"]["host_ms"].get<double>() - folded_host) < 1e-9);
  CHECK(c["scalars"].size() == 32);
  CHECK(c["scalars_left_out"] == 18);
  CHECK(c["global_step"] == 7);
}

TEST_CASE("whole numbers are written whole, others to 6 significant digits", "[line_tiers]") {
  FlatJson full;
  full["/schema"] = text("steptrace.step/1");
  full["/global_step"] = number(100000);
  full["/tokens"] = number(1048576);
  full["/start_unix_ms"] = number(1795766135488.6672);
  full["/step_time_ms"] = number(143.56789012345678);
  full["/tokens_per_second"] = number(400000);
  full["/estimated_mfu"] = number(1.234567890123e-7);
  full["/nccl_time_ms"] = number(-2.5000001);
  steptrace::ReasonBook book;
  const std::string line = steptrace::make_compact_line(full, book);
  INFO(line);
  for (const char* want : {"\"global_step\":100000,", "\"tokens\":1048576,", "\"start_unix_ms\":1795766135488,",
                           "\"step_time_ms\":143.568,", "\"tokens_per_second\":400000,",
                           "\"estimated_mfu\":1.23457e-07,", "\"nccl_time_ms\":-2.5,"})
    CHECK(line.find(want) != std::string::npos);
}

TEST_CASE("no compact line is over 16 000 bytes, whatever the names", "[line_tiers]") {
  FlatJson full;
  full["/schema"] = text("steptrace.step/1");
  full["/step_time_ms"] = number(12.5);
  for (int i = 0; i < 16; ++i)
    full["/phases/" + std::string(2000, static_cast<char>('a' + i)) + "/host_ms"] = number(1.0 + i);
  steptrace::ReasonBook book;
  const std::string line = steptrace::make_compact_line(full, book);
  CHECK(line.size() <= steptrace::kMaxLineBytes);
  const json c = json::parse(line);
  CHECK(c.contains("cut"));
  CHECK_FALSE(c.contains("phases"));
  CHECK(c["step_time_ms"] == 12.5);
  // The reasons of what the cut line keeps come with it; those of what it left out are not booked as
  // written, so a later line that carries them brings their sentences.
  FlatJson nulls = full;
  nulls["/gpu_utilization"] = JsonLeaf{};
  nulls["/null_reasons/gpu_utilization"] = text("no GPU measured");
  nulls["/phases/" + std::string(2000, 'a') + "/self_ms"] = JsonLeaf{};
  nulls["/null_reasons/phases." + std::string(2000, 'a') + ".self_ms"] = text("a phase reason");
  steptrace::ReasonBook fresh;
  const json cut = json::parse(steptrace::make_compact_line(nulls, fresh));
  REQUIRE(cut.contains("cut"));
  const std::string code = cut["null_reasons"]["gpu_utilization"];
  CHECK(cut["reason_text"][code] == "no GPU measured");
  CHECK(fresh.written.size() == 1);
  CHECK(fresh.written.count(steptrace::details::reason_code("a phase reason")) == 0);
}

TEST_CASE("the run record holds the run's constant facts, their reasons and the settings", "[line_tiers]") {
  const FlatJson full = flatten(committed("h100_default_lines.jsonl")[0]);
  const json whole = json::parse(committed("h100_default_lines.jsonl")[0]);
  const json r = json::parse(steptrace::make_run_record(full, {{"line_detail", "compact"}, {"log_every", "1"}}));
  CHECK(r["event"] == "run");
  CHECK(r["schema"] == "steptrace.run/2");
  CHECK(r["run_id"] == whole["run_id"]);
  CHECK(r["device"] == whole["device"]);
  CHECK(r["hostname"] == whole["hostname"]);
  CHECK(r["mfu_inputs"]["peak_flops"] == whole["mfu_inputs"]["peak_flops"]);
  CHECK(r["mfu_inputs"]["peak_source"] == whole["mfu_inputs"]["peak_source"]);
  CHECK(r["settings"]["line_detail"] == "compact");
  REQUIRE(whole["job_id"].is_null());
  CHECK(r["job_id"].is_null());
  CHECK(r["null_reasons"]["job_id"] == whole["null_reasons"]["job_id"]);
  CHECK(r["from_step"] == whole["global_step"]);
  CHECK(r["timestamp"] == whole["timestamp"]);
  const json facts = json::parse(steptrace::make_run_record(full, {}, false));
  CHECK_FALSE(facts.contains("from_step"));
  CHECK(facts["device"] == whole["device"]);
}

TEST_CASE("the default line is the compact one", "[line_tiers]") {
  CHECK(steptrace::Config{}.line_detail == steptrace::LineDetail::compact);
  const std::string log = steptrace_test::fresh_log("default_detail");
  steptrace::Config cfg;
  cfg.log_path = log;
  cfg.gpu = steptrace::Mode::off;
  cfg.summary = false;
  cfg.max_lag_steps = 0;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 3; ++i) TRACE_STEP();
  steptrace::stop();
  const std::vector<json> records = steptrace_test::read_records(log);
  REQUIRE(records.size() == 5);
  CHECK(records[0]["event"] == "run");
  CHECK(records[1]["schema"] == "steptrace.step/2");
  CHECK(records[4]["event"] == "end");
}

TEST_CASE("a run with line_detail=compact writes a run record, then compact lines", "[line_tiers]") {
  const std::string log = steptrace_test::fresh_log("compact");
  steptrace::Config cfg = compact_config(log);
  cfg.tokens_per_step = 1024;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 5; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
  }
  steptrace::stop();
  const std::vector<json> records = steptrace_test::read_records(log);
  REQUIRE(records.size() >= 7);
  CHECK(records[0]["event"] == "run");
  CHECK(records[0]["settings"]["line_detail"] == "compact");
  CHECK(records[0]["device"].is_null());
  CHECK(records[0]["from_step"] == 0);
  CHECK(!records[0]["null_reasons"]["device"].get<std::string>().empty());
  std::size_t steps = 0, runs = 0;
  for (const json& r : records) {
    runs += r.value("event", "") == "run";
    if (r.contains("event")) continue;
    ++steps;
    CHECK(r["schema"] == "steptrace.step/2");
    CHECK(r["run_id"] == records[0]["run_id"]);
    CHECK(r["tokens"] == 1024);
    CHECK(r["phases"]["forward"]["count"] == 1);
    if (!r.contains("reason_text")) CHECK(r.dump().size() <= 1536);  // the first carries the sentences
  }
  CHECK(steps == 5);
  CHECK(runs == 1);  // nothing constant changed: written once
  CHECK(records.back()["event"] == "end");
}

TEST_CASE("a compact line keeps the window of log_every", "[line_tiers]") {
  const std::string log = steptrace_test::fresh_log("compact_window");
  steptrace::Config cfg = compact_config(log);
  cfg.log_every = 2;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 4; ++i) TRACE_STEP();
  steptrace::stop();
  std::size_t windows = 0;
  for (const json& r : steptrace_test::read_records(log))
    if (!r.contains("event")) windows += r["window"]["steps"] == 2;
  CHECK(windows == 2);
}

TEST_CASE("a run_id taken from rank 0 mid-run: a new run record, the sentences again", "[line_tiers]") {
  const std::string log = steptrace_test::fresh_log("compact_adopted");
  steptrace::Config cfg = compact_config(log);
  cfg.rank = 0;
  cfg.world_size = 4;
  REQUIRE(steptrace::start(cfg));
  for (int i = 0; i < 3; ++i) TRACE_STEP();
  // Two lines written under the rank's own run_id (a step's line waits for the next step to begin),
  // then the exchange (rank 0's run_id adopted).
  REQUIRE(steptrace_test::wait_for([&] { return steptrace_test::read_lines_live(log).size() >= 2; }));
  REQUIRE(steptrace::details::Session::current().set_exchange(std::make_unique<steptrace_test::FakeExchange>(), 2));
  steptrace_test::run_input_nccl_steps(3);
  steptrace::stop();
  const std::vector<json> records = steptrace_test::read_records(log);
  std::vector<json> runs, steps;
  for (const json& r : records) {
    if (r.value("event", "") == "run") runs.push_back(r);
    else if (!r.contains("event")) steps.push_back(r);
  }
  REQUIRE(runs.size() == 2);
  CHECK(runs[0]["run_id"] != "feedfacecafebeef");
  CHECK(runs[1]["run_id"] == "feedfacecafebeef");
  REQUIRE(steps.size() == 6);
  // The lines before the exchange under the rank's own run_id (at least the two waited for), the rest
  // under rank 0's; the first of those brings its sentences again.
  std::size_t first = 0;
  while (first < steps.size() && steps[first]["run_id"] != "feedfacecafebeef") ++first;
  CHECK(first >= 2);
  REQUIRE(first < steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) CHECK((steps[i]["run_id"] == "feedfacecafebeef") == (i >= first));
  CHECK(steps[first].contains("reason_text"));
  // Each run's first line carries the sentences of its codes: a reader keeping them per run_id finds
  // every code of every line.
  std::map<std::string, std::map<std::string, std::string>> texts;  // run_id -> code -> sentence
  for (const json& l : steps) {
    auto& book = texts[l["run_id"].get<std::string>()];
    if (l.contains("reason_text"))
      for (const auto& [code, sentence] : l["reason_text"].items()) book[code] = sentence;
    for (const auto& [path, code] : l["null_reasons"].items()) {
      INFO(l["run_id"] << " " << path);
      CHECK(book.count(code) == 1);
    }
  }
}
