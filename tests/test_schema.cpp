// The line's declaration (core/line_fields.hpp) against the code, both ways: every value a step line
// or an end record carries (nested too) is declared by a row of its type, and every row is carried by
// some record — a step line with every section present (hand-made input), one with every section
// absent, two the line checks left values out of, the committed H100 lines (tests/data), the end record
// filled and empty; and the other outputs read declared fields of types they can read.
// docs/schema.md's field tables are rendered from the rows: tests/test_schema_doc.cpp.
#include <steptrace/core/end_line.hpp>
#include <steptrace/core/line_invariants.hpp>
#include <steptrace/core/line_fields.hpp>
#include <steptrace/core/line_tiers.hpp>
#include <steptrace/core/stall.hpp>
#include <steptrace/core/step_line.hpp>
#include <steptrace/settings.hpp>
#include <steptrace/sink/prometheus_metrics.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <sstream>

#include "support.hpp"

using namespace steptrace;

namespace {


// A name as one step of a null_reasons path (docs/schema.md): `\` and `.` escaped with `\`.
std::string path_step(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '\\' || c == '.') out += '\\';
    out += c;
  }
  return out;
}

// A null_reasons path's steps, the escapes undone.
std::vector<std::string> path_steps(const std::string& path) {
  std::vector<std::string> steps(1);
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '\\' && i + 1 < path.size()) steps.back() += path[++i];
    else if (path[i] == '.') steps.emplace_back();
    else steps.back() += path[i];
  }
  return steps;
}

// Every null of a record (its path, array elements by index: `a.0.b`), null_reasons left aside.
void null_paths(const nlohmann::json& j, const std::string& path, std::vector<std::string>& out) {
  if (j.is_null()) out.push_back(path);
  const auto child = [&](const std::string& k) { return path.empty() ? path_step(k) : path + "." + path_step(k); };
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) null_paths(j[i], child(std::to_string(i)), out);
  if (j.is_object())
    for (const auto& [k, v] : j.items())
      if (!(path.empty() && k == "null_reasons")) null_paths(v, child(k), out);
}

// The rule `null_reasons` states (docs/schema.md): every null has its reason, and every reason names a
// null of the record, or a value a check left out.
void check_null_reasons(const std::string& text, const std::map<std::string, std::string>& left_out = {}) {
  const auto j = nlohmann::json::parse(text);
  REQUIRE(j.contains("null_reasons"));
  std::vector<std::string> nulls;
  null_paths(j, "", nulls);
  for (const auto& path : nulls) {
    INFO("null without a reason: " << path << " in " << text.substr(0, 200));
    CHECK(j["null_reasons"].contains(path));  // (its text is the producer's: hand-made inputs leave some empty)
  }
  for (const auto& [path, why] : j["null_reasons"].items()) {
    INFO("a reason for a value that is not null: " << path);
    CHECK((std::find(nulls.begin(), nulls.end(), path) != nulls.end() || left_out.count(path)));
  }
  // A value a check left out is null, with the check's reason, or lies inside something left out.
  for (const auto& [path, why] : left_out) {
    INFO("left out by a check: " << path);
    const nlohmann::json* v = &j;
    bool under_null = false;
    for (const std::string& key : path_steps(path)) {
      if (!v) break;
      if (v->is_null()) under_null = true;
      v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
    }
    if (under_null) continue;
    REQUIRE(v);
    CHECK(v->is_null());
    CHECK(j["null_reasons"][path] == why);
  }
}

std::vector<nlohmann::json> committed_lines(const char* file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(std::string(STEPTRACE_SOURCE_DIR "/tests/data/") + file);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(nlohmann::json::parse(l));
  return out;
}

// Whether a JSON value fits its row (core/line_fields.hpp's value_fits: "" if so, else what is wrong);
// from nlohmann's reading, a whole number reads as an integer.
std::string type_error(const LineField& f, const nlohmann::json& v) {
  const ValueKind kind = v.is_null()      ? ValueKind::null
                         : v.is_boolean() ? ValueKind::boolean
                         : v.is_number()  ? ValueKind::number
                         : v.is_string()  ? ValueKind::string
                         : v.is_object()  ? ValueKind::object
                                          : ValueKind::array;
  if (value_fits(f, kind, v.is_number_integer())) return "";
  return v.is_null() ? "null, declared never null" : "of another type: " + v.dump().substr(0, 80);
}
std::string type_error(const char* pointer, const nlohmann::json& v) {
  const LineField* f = line_field_at(pointer);
  REQUIRE(f);
  return type_error(*f, v);
}

// Every value of a step line (objects, arrays and their elements too) is declared by a row of its type;
// `used` collects the rows met. null_reasons' entries are strings under the row `/null_reasons/*`.
void check_declared(Record record, const nlohmann::json& v, std::vector<std::string>& segs,
                    std::set<const LineField*>& used) {
  std::vector<std::string_view> views(segs.begin(), segs.end());
  const LineField* f = segs.empty() ? nullptr : record_field_at(record, views);
  if (!segs.empty()) {
    std::string pointer;
    for (const auto& s : segs) pointer += "/" + s;
    INFO("field " << pointer);
    REQUIRE(f);
    CHECK(type_error(*f, v) == "");
    used.insert(f);
  }
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      segs.push_back(k);
      check_declared(record, x, segs, used);
      segs.pop_back();
    }
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      segs.push_back(std::to_string(i));
      check_declared(record, v[i], segs, used);
      segs.pop_back();
    }
  }
}
void check_declared(const nlohmann::json& line, std::set<const LineField*>& used, Record record = Record::step) {
  std::vector<std::string> segs;
  check_declared(record, line, segs, used);
}

// The row declaring a dotted path as the tables and readers name it (`gpu.busy_ms`,
// `phases.<name>.host_ms`). nullptr: none.
const LineField* declared(const std::string& dotted, Record record = Record::step) {
  std::vector<std::string> segs(1);
  for (std::size_t i = 0; i < dotted.size(); ++i) {
    if (dotted[i] == '.') segs.emplace_back();
    else if (dotted.compare(i, 2, "[]") == 0) segs.emplace_back("*"), ++i;  // an array's element
    else segs.back() += dotted[i];
  }
  for (auto& s : segs)
    if (s == "<name>") s = "*";
  return record_field_at(record, std::vector<std::string_view>(segs.begin(), segs.end()));
}

}  // namespace

TEST_CASE("every value of a step line is declared with its type, and every row is carried",
          "[schema]") {
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 10'000'000;
  r.scope_end_ns = 9'000'000;
  r.tokens = 1000;
  r.samples = 8;
  r.spans = {{phase_tag::forward, 0, true, false, 0, 1'000'000, 4'000'000},
             {phase_tag::input, 0, false, false, 7, 2'000'000, 3'000'000}};  // a loader thread's
  r.scalars = {{"loss", 2.5}};
  AllocatorStats a;
  a.allocated_bytes = a.reserved_bytes = a.peak_allocated_bytes = a.peak_reserved_bytes = 1 << 20;
  a.alloc_retries = a.ooms = 0;
  r.allocator = a;
  RunInfo run;
  DeviceInfo dev;
  dev.name = "GPU";
  dev.sm_count = 132;
  run.device = dev;
  StepLineInput in;
  in.step = &r;
  in.run = &run;
  in.host = compute_host_metrics(r);
  in.flops_per_token = 6e9;
  in.peak.flops_per_second = 1e15;
  in.mfu = compute_mfu(in.flops_per_token, in.host.tokens_per_second, in.peak);
  in.memory.device_used_peak_bytes = in.memory.device_total_bytes = 1 << 30;
  StepGpu g;
  g.kernels = 2;
  g.kernel_ns = g.busy_ns = 2'000'000;
  g.nccl_ns = 1'000'000;
  g.nccl_collectives["AllReduce"] = {1'000'000, 1};
  g.before_first_step_ns = 1000;
  g.before_first_step_records = 1;
  PhaseGpu pg;
  pg.kernels = 2;
  pg.kernel_ns = pg.busy_ns = 2'000'000;
  pg.busy = {{1'000'000, 3'000'000}};
  for (auto& c : pg.copies) c = CopyTotals{4096, 1000, 1};
  pg.top_kernels = {TopKernel{"k", 2'000'000, 2, 1.0}};
  g.phases[phase_tag::forward] = pg;
  in.gpu = g;
  CounterSummary c;
  c.sm_active = c.tensor_active = c.dram = c.occupancy = 0.5;
  c.samples = 2;
  c.sample_ns = 2'000'000;
  in.counters = c;
  in.phase_counters[phase_tag::forward] = c;
  in.counters_interval_us = 1000;
  CrossRankView v;
  v.step = 0;
  v.world_size = v.reporting = 2;
  v.missing_ranks = {1};
  v.slowest_rank = 1;
  v.culprit_phase = "backward";
  v.waits_measured = true;
  v.step_ms_median = 10;
  v.lowest_scores = {RankScore{}};
  in.cross_rank = std::move(v);
  in.cross_rank_every = 2;
  RankSummary own;
  own.step = 0;
  own.steps = own.wait_steps = 2;
  own.wait_basis = WaitBasis::trace;
  in.rank_wait = own;
  DeviceStateSummary ds;
  ds.samples = 1;
  ds.power_w_mean = ds.power_w_max = ds.sm_clock_mhz_mean = ds.sm_clock_mhz_min = ds.temperature_c_max = 1;
  ds.clock_event_reasons = 1;
  in.device_state = ds;
  in.window = WindowSummary{10, 1, 1, 1, 1.0};
  in.warnings = {"w"};
  in.diagnosis.warnings = {"data-loader wait 12 % of the step (>= 10 %)"};
  OverheadLine& o = in.overhead;  // an estimate, the budget and every part
  o.estimate.fraction = o.estimate.fraction_low = o.estimate.fraction_high = 0.004;
  o.estimate.floor_fraction = 0.0002;
  o.estimate.within_budget = false;  // over the budget, which the floor fits: over_budget_by "interval"
  o.estimate.method = EstimateMethod::measured;
  o.estimate.traced_extra_ms = o.estimate.traced_extra_se_ms = o.estimate.clean_step_ms = 1.5;
  o.estimate.residual_ms = o.estimate.residual_low_ms = o.estimate.launches_per_step = 0.25;
  o.budget = 0.003;
  o.markers_every = 4;
  o.parts.present = true;
  for (OverheadPart* p : {&o.parts.tracing, &o.parts.attached, &o.parts.counters, &o.parts.host_api, &o.parts.background,
                          &o.parts.captures})
    p->fraction = 0.001, p->basis = PartBasis::measured;
  o.parts.background_memory = o.parts.background_device_state = o.parts.background_counters = o.parts.high = 0.0005;
  o.parts.host_api_high = 0.0012;
  StepMarkers sm;
  sm.points = 4;
  sm.pending_ns = sm.pending_own_ns = 500'000;
  sm.span_ns = 900'000;
  sm.end_lag_ns = 100'000;
  sm.phases[phase_tag::forward] = PhaseMarkers{400'000, 50'000, 1};
  in.markers = sm;
  in.markers_agree = true;
  r.index = 1;  // a step after another: between_steps, with work launched between
  r.prev_scope_end_ns = -1'000'000;
  r.between_spans = {{phase_tag::forward, 0, true, false, 0, -900'000, -100'000}};
  BetweenGpu bg;
  bg.kernels = 1;
  bg.top_kernels = {TopKernel{"k", 1000, 1, 1.0}};
  in.between_gpu = bg;
  in.trace.captured = true;  // captured and written
  in.trace.file = "trace-0-r0-s1.json";
  in.trace.reasons = {"slow_step"};
  in.trace.capture_first = 1;

  StepRecord bare;
  bare.end_ns = 1'000'000;
  RunInfo nothing;
  nothing.device_null_reason = "no GPU";
  StepLineInput empty;
  empty.step = &bare;
  empty.run = &nothing;
  empty.host = compute_host_metrics(bare);
  empty.counters.unknown("off");
  empty.gpu.unknown("off");
  empty.cross_rank.unknown("off");
  empty.device_state.unknown("off");
  empty.trace.captured = true;  // captured, not written
  empty.trace.reasons = {"capture_steps"};
  empty.trace.not_written = "over trace_max_files";

  // The fields a sink reads are the line's: the leaves the writer recorded equal those read back from
  // the text (names with '/', '~', a byte that is not UTF-8, a non-finite scalar among them).
  r.scalars.push_back({"a/b~c", 1.5});
  r.scalars.push_back({std::string("bad\xff", 4), 2.0});
  r.scalars.push_back({"diverged", std::numeric_limits<double>::infinity()});
  for (const auto* input : {&in, &empty}) {
    FlatJson recorded, read_back;
    const std::string text = make_step_line(*input, &recorded);
    REQUIRE(flatten_json(text, read_back).empty());
    CHECK(text == make_step_line(*input));  // recording changes nothing in the text
    CHECK(recorded.size() == read_back.size());
    CHECK(recorded.size() > 50);
    for (const auto& [pointer, leaf] : read_back) {
      INFO(pointer);
      const auto it = recorded.find(pointer);
      REQUIRE(it != recorded.end());
      CHECK(int(it->second.kind) == int(leaf.kind));
      CHECK(it->second.text == leaf.text);
      CHECK((it->second.number == leaf.number));  // exactly: the text is the shortest round trip
    }
    // The exporter reads the fields as it read the text.
    sink::PrometheusModel from_fields("j", 64, {}), from_text("j", 64, {});
    CHECK(from_fields.add_fields(recorded).empty());
    CHECK(from_text.add_line(text).empty());
    CHECK(from_fields.render(true) == from_text.render(true));
    CHECK(from_fields.render(true).find("steptrace_step_time_seconds{") != std::string::npos);
    // The leaves the writer recorded hold to the declaration (what benchmarks/line_bytes checks on
    // logs), an integer row's from an integer type (a double written whole would read as one).
    for (const std::string& problem : declaration_problems(recorded)) FAIL_CHECK(problem);
    FlatJson wrong = recorded;
    wrong["/gpu/no_such_key"] = JsonLeaf{JsonLeaf::Kind::number, 1, {}};
    wrong["/gpu/kernels"] = JsonLeaf{JsonLeaf::Kind::number, 1.5, {}};
    wrong["/step_time_ms"] = JsonLeaf{};
    wrong["/traced"] = JsonLeaf{JsonLeaf::Kind::string, 0, "yes"};
    const auto problems = declaration_problems(wrong);
    CHECK(problems.size() == 4);
    CHECK(declaration_problems(wrong, Record::step, 2).back() == "and 2 more");
    FlatJson whole_double = recorded;  // a whole double on an integer row: its text reads as an integer
    whole_double["/gpu/kernels"] = JsonLeaf{JsonLeaf::Kind::number, 2.0, {}};
    REQUIRE(declaration_problems(whole_double).size() == 1);
    CHECK(declaration_problems(whole_double)[0].find("not written as an integer") != std::string::npos);
  }
  CHECK(nlohmann::json::parse(make_step_line(in))["scalars"].contains("a/b~c"));

  // Every null with its reason: the two lines, and the full one after the checks left values out.
  for (const auto* input : {&in, &empty}) check_null_reasons(make_step_line(*input));
  StepLineInput odd = in;
  odd.gpu->busy_ns = 50'000'000;  // busier than its window: gpu_utilization, gpu.idle_ms left out
  odd.gpu->sm_efficiency = 1.5;
  odd.gpu->phases[phase_tag::forward].occupancy = 3;
  odd.gpu->phases[phase_tag::forward].busy_ns = 60'000'000;  // busier than its step: the phase's gpu left out
  odd.counters->sm_active = 1.2;
  odd.shares.comm_exposed = 4;
  odd.cross_rank->step_skew = std::numeric_limits<double>::quiet_NaN();
  odd.markers->end_lag_ns.reset();  // markers summarized without the step's end marker
  check_line_invariants(odd);
  CHECK(odd.excluded.size() >= 6);
  FlatJson odd_leaves;
  const std::string odd_text = make_step_line(odd, &odd_leaves);
  for (const std::string& problem : declaration_problems(odd_leaves)) FAIL_CHECK(problem);
  check_null_reasons(odd_text, odd.excluded);
  const auto odd_line = nlohmann::json::parse(odd_text);
  CHECK(odd_line["phases"]["forward"]["gpu"].is_null());
  CHECK(odd_line["null_reasons"]["phases.forward.gpu"].get<std::string>().find("more than its step's") != std::string::npos);
  CHECK(odd_line["null_reasons"]["cross_rank.step_skew"] == "not a finite number (NaN)");
  CHECK(odd_line["gpu_markers"]["end_lag_ms"].is_null());
  CHECK(odd_line["null_reasons"]["gpu_markers.end_lag_ms"] == "the step's end was not marked");
  // Inside the phase's gpu object, left out whole, nothing is in the line: no reason names its occupancy.
  REQUIRE(odd.excluded.count("phases.forward.gpu.occupancy"));
  CHECK_FALSE(odd_line["null_reasons"].contains("phases.forward.gpu.occupancy"));

  // Names with a dot stay one step of a path: a phase `attn.qkv` busier than its step on the GPU (its
  // gpu object left out by the check, written null by LineOut itself), a scalar `loss.train` not finite.
  const PhaseId dotted = register_phase_checked("attn.qkv").id;
  StepRecord dotted_record = r;
  dotted_record.scalars.push_back({"loss.train", std::numeric_limits<double>::quiet_NaN()});
  StepLineInput dots = in;
  dots.step = &dotted_record;
  dots.host.phases[dotted] = dots.host.phases[phase_tag::forward];
  dots.gpu->phases[dotted] = dots.gpu->phases[phase_tag::forward];
  dots.gpu->phases[dotted].busy_ns = dots.gpu->busy_ns + 1;
  check_line_invariants(dots);
  REQUIRE(dots.excluded.count("phases.attn\\.qkv.gpu"));
  const auto before = details::line_out_unbalanced().load();
  FlatJson dots_leaves;
  const std::string dots_text = make_step_line(dots, &dots_leaves);
  for (const std::string& problem : declaration_problems(dots_leaves)) FAIL_CHECK(problem);
  CHECK(details::line_out_unbalanced().load() == before);
  check_null_reasons(dots_text, dots.excluded);
  const auto dots_line = nlohmann::json::parse(dots_text);
  CHECK(dots_line["phases"]["attn.qkv"]["gpu"].is_null());
  CHECK(dots_line["phases"]["attn.qkv"]["host_ms"].is_number());
  CHECK(dots_line["null_reasons"]["phases.attn\\.qkv.gpu"].get<std::string>().find("more than its step's") != std::string::npos);
  CHECK(dots_line["null_reasons"]["scalars.loss\\.train"].get<std::string>().find("NaN") != std::string::npos);
  CHECK_FALSE(dots_line["null_reasons"].contains("scalars.loss.train"));

  // Every field of the four lines is declared, with its type (core/line_fields.hpp); below, the other way.
  std::set<const LineField*> used;
  for (const auto* input : {&in, &empty, &odd, &dots}) check_declared(nlohmann::json::parse(make_step_line(*input)), used);
  CHECK(used.size() > 150);
  // The writer finds each value's row as it writes (core/tier_leaves.hpp): the same row the
  // declaration's pointer lookup finds for each leaf, nothing undeclared, and the compact line and run
  // record it makes in the same pass are those made from the full line read back.
  const uint64_t undeclared_before = details::line_out_undeclared().load();
  // Two scalars whose names are one once made valid UTF-8: the full line carries the key twice, and
  // reading it back keeps the last - so must the same pass.
  StepRecord dup_step = *in.step;
  dup_step.scalars.push_back({"x\xff", std::numeric_limits<double>::quiet_NaN()});
  dup_step.scalars.push_back({"x\xfe", 1.0});
  StepLineInput dup = in;
  dup.step = &dup_step;
  // The rows' tree has no name beside a "*" (it would take the name and never try the "*").
  for (std::size_t n = 0; n < details::RowTree::step().size(); ++n) {
    const auto* node = details::RowTree::step().node(static_cast<int32_t>(n));
    CHECK((node->children.empty() || node->any < 0));
  }
  // The row of each tier a value belongs to, by the rule written out: the first row of the tier, in
  // the table's order, whose pattern matches its path - or, for a null, lies below it.
  const auto first_tier_row = [](const std::vector<std::string_view>& segs, bool null, uint8_t tier) {
    const auto& patterns = details::line_field_segments();
    for (std::size_t i = 0; i < patterns.size(); ++i)
      if ((line_fields()[i].tiers & tier) &&
          (details::segments_match(patterns[i], segs) || (null && details::segments_prefix(patterns[i], segs))))
        return static_cast<int32_t>(i);
    return int32_t{-1};
  };
  for (const auto* input : {&in, &empty, &odd, &dots, &dup}) {
    FlatJson leaves;
    TierLeaves tiers;
    const std::string text = make_step_line(*input, &leaves, &tiers);
    CHECK(text == make_step_line(*input));
    std::vector<std::string_view> segs;
    for (const auto& [pointer, leaf] : leaves) {
      if (pointer.rfind("/null_reasons/", 0) == 0) continue;
      details::pointer_segments_into(pointer, segs);
      const LineField* by_pointer = line_field_at(segs);
      const auto* node = details::RowTree::step().node(details::RowTree::step().find(segs));
      INFO(pointer);
      REQUIRE(by_pointer != nullptr);
      REQUIRE(node != nullptr);
      CHECK(&line_fields()[static_cast<std::size_t>(node->row)] == by_pointer);
      const bool null = leaf.kind == JsonLeaf::Kind::null;
      const int32_t n = details::RowTree::step().find(segs);
      CHECK(details::RowTree::step().tier_row(n, LineTier::compact, null) == first_tier_row(segs, null, line_field::kCompact));
      CHECK(details::RowTree::step().tier_row(n, LineTier::run, null) == first_tier_row(segs, null, line_field::kRun));
    }
    // A null object standing for the rows below it (`gpu_markers` absent whole), by the same rule.
    const std::vector<std::string_view> absent{"gpu_markers"};
    CHECK(details::RowTree::step().tier_row(details::RowTree::step().find(absent), LineTier::compact, true) ==
          first_tier_row(absent, true, line_field::kCompact));
    CHECK(tiers.leaves.size() > 10);
    FlatJson read_back;
    flatten_json(text, read_back);
    ReasonBook same_pass, from_text;
    std::string facts_same_pass, facts_from_text;
    CHECK(make_compact_line(tiers, same_pass, &facts_same_pass) == make_compact_line(read_back, from_text, &facts_from_text));
    CHECK(facts_same_pass == facts_from_text);
    CHECK(same_pass.written == from_text.written);
    std::vector<std::pair<std::string, std::string>> settings;  // the defaults' settings, as the worker lists them
    for (const Setting& setting : steptrace::settings()) settings.emplace_back(setting.name, setting.text(Config{}));
    CHECK(make_run_record(tiers, settings) == make_run_record(read_back, settings));
  }
  CHECK(details::line_out_undeclared().load() == undeclared_before);
  // Between them, every row is carried by a line this code writes (a row carried only by a committed
  // line, written by an older build, could be one the writer no longer writes).
  for (const LineField& f : line_fields()) {
    INFO("core/line_fields.hpp declares " << f.path << "; no line this code writes carries it");
    CHECK(used.count(&f));
  }
  // The committed H100 lines, written by real runs, are declared too.
  for (const char* file : {"h100_mlp_lines.jsonl", "h100_transformer_budget_lines.jsonl", "h100_default_lines.jsonl"})
    for (const auto& line : committed_lines(file))
      if (!line.contains("event") && line.value("schema", "") == "steptrace.step/1") check_declared(line, used);
  // The rules can fail: a field nobody declared, one of the wrong type, a never-null field null.
  CHECK(line_field_at("/gpu/no_such_key") == nullptr);
  CHECK(line_field_at("/last_global_step") == nullptr);  // the end record's
  CHECK(type_error("/gpu/kernels", nlohmann::json(1.5)) != "");
  CHECK(type_error("/step_time_ms", nlohmann::json()) != "");
  CHECK(type_error("/local_rank", nlohmann::json()) != "");  // shown with `rank`, never null like it
  CHECK(type_error("/gpu/kernels", nlohmann::json(3)) == "");
  CHECK(type_error("/phases/forward/host_ms", nlohmann::json(2)) == "");  // a whole number is a number
}

TEST_CASE("a value written through its row's handle goes under the row's key; a handle written elsewhere is counted",
          "[schema]") {
  const uint64_t before = details::line_out_undeclared().load();
  LineOut out(nullptr, nullptr, &details::RowTree::step());
  out.begin();
  out.begin_object(STEPTRACE_ROW("/overhead")).field(STEPTRACE_ROW("/overhead/trace_every"), 4);
  out.field(STEPTRACE_ROW("/overhead/within_budget"), std::optional<bool>(), "no budget");
  out.end_object();
  CHECK(details::line_out_undeclared().load() == before);  // each in its row's place
  out.begin_object(STEPTRACE_ROW("/gpu_markers")).field(STEPTRACE_ROW("/overhead/trace_every"), 5).end_object();
  out.field(STEPTRACE_END_ROW("/lines_written"), uint64_t{3});  // an end-record row in a step line
  CHECK(details::line_out_undeclared().load() - before == 4);  // each counted by the handle and as a value with no row
  // A key that is declared where it is written, through another row's handle: only the handle tells.
  out.begin_object(STEPTRACE_ROW("/gpu")).field(STEPTRACE_ROW("/phases/*/gpu/kernel_ms"), 1.0).end_object();
  CHECK(details::line_out_undeclared().load() - before == 5);
  const auto line = nlohmann::json::parse(out.finish());
  CHECK(line["overhead"]["trace_every"] == 4);
  CHECK(line["overhead"]["within_budget"].is_null());
  CHECK(line["null_reasons"]["overhead.within_budget"] == "no budget");
  CHECK(line["gpu"]["kernel_ms"] == 1.0);
  // The end record is checked as it is written too: its `after_last_step.gpu` holds step rows (its tree
  // links to the step line's `between_steps.gpu`), anything else of the step line's is counted there.
  const uint64_t before_end = details::line_out_undeclared().load();
  LineOut end(nullptr, nullptr, &details::RowTree::end());
  end.begin();
  end.field(STEPTRACE_END_ROW("/lines_written"), uint64_t{3});
  end.begin_object(STEPTRACE_END_ROW("/after_last_step")).field(STEPTRACE_END_ROW("/after_last_step/host_ms"), 1.0);
  end.begin_object(STEPTRACE_END_ROW("/after_last_step/gpu")).field(STEPTRACE_ROW("/between_steps/gpu/kernels"), 2);
  end.begin_array(STEPTRACE_ROW("/between_steps/gpu/top_kernels"))
      .begin_element()
      .field(STEPTRACE_ROW("/between_steps/gpu/top_kernels/*/name"), "k")
      .end_object()
      .end_array();
  CHECK(details::line_out_undeclared().load() == before_end);  // each in its row's place
  end.field("kernel_ms", "text");  // a declared key of another type
  end.end_object().end_object();
  CHECK(details::line_out_undeclared().load() - before_end == 1);
  end.field(STEPTRACE_ROW("/step_time_ms"), 1.0);  // a step line's row at the end record's top
  end.field("no_such_field", 1.0);
  CHECK(details::line_out_undeclared().load() - before_end == 4);  // the handle's record, its value, the name
  const auto end_line = nlohmann::json::parse(end.finish());
  CHECK(end_line["after_last_step"]["gpu"]["kernels"] == 2);
  CHECK(end_line["after_last_step"]["gpu"]["top_kernels"][0]["name"] == "k");
  details::line_out_undeclared().store(before);  // this test's own (support.hpp holds it at 0)
  static_assert(decltype(STEPTRACE_ROW("/overhead/trace_every"))::name() == "trace_every");
  static_assert(decltype(STEPTRACE_ROW("/overhead/trace_every"))::field().type == FieldType::integer);
  // The compile-time index is the row's place in record_fields(), for every row of every record (the
  // first of a path declared twice, as the lookups take).
  for (const Record r : kRecords) {
    const auto& rows = record_fields(r);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      using namespace line_field::rows;
      const std::string_view path = rows[i].path;
      const int32_t at = r == Record::step ? step_index(path) : r == Record::end ? end_index(path)
                         : r == Record::stall ? stall_index(path) : resumed_index(path);
      INFO(rows[i].path);
      REQUIRE(at >= 0);
      CHECK(std::string_view(rows[static_cast<std::size_t>(at)].path) == rows[i].path);
      CHECK(static_cast<std::size_t>(at) <= i);
      const LineField f = r == Record::step ? step_at(at) : r == Record::end ? end_at(at)
                          : r == Record::stall ? stall_at(at) : resumed_at(at);
      CHECK(std::string_view(f.path) == rows[i].path);
      // What the handles' static checks read is what the runtime reads (a row shown with the one above
      // takes its nullability in both).
      CHECK(f.nulls == rows[static_cast<std::size_t>(at)].nulls);
      CHECK(f.type == rows[static_cast<std::size_t>(at)].type);
    }
  }
}

TEST_CASE("a value written where no row declares it, or of another type than its row's, is counted as it is written",
          "[schema]") {
  const uint64_t before = details::line_out_undeclared().load();
  TierLeaves tiers;
  LineOut out(nullptr, nullptr, &details::RowTree::step(), &tiers);
  out.begin();
  out.field("global_step", int64_t{3});                           // its row: an integer, compact
  out.field("no_such_field", 1.0);                                // no row
  out.begin_object("gpu").field("kernels", 1.5).end_object();     // an integer row written from a double
  out.null("gpu_markers", "why");                                 // a null object standing for its rows
  out.begin_object("phases").begin_object("fwd").field("host_ms", 2.0).end_object().end_object();
  out.finish();
  CHECK(details::line_out_undeclared().load() - before == 2);
  details::line_out_undeclared().store(before);  // the two were this test's own (support.hpp holds it at 0)
  // The tiers' values, each under its row: global_step, the null gpu_markers (standing for its compact
  // rows), phases.fwd.host_ms; gpu.kernels (the full line's only) and no_such_field are in no tier.
  std::vector<std::string> paths;
  for (const TierLeaf& t : tiers.leaves) {
    std::string p;
    for (const std::string& n : t.names) p += "/" + n;
    paths.push_back(p);
    CHECK(t.row[static_cast<int>(LineTier::compact)] >= 0);
  }
  CHECK(paths == std::vector<std::string>{"/global_step", "/gpu_markers", "/phases/fwd/host_ms"});
  CHECK(tiers.reasons.at("gpu_markers") == "why");
  CHECK((tiers.global_step && tiers.global_step->number == 3));  // the run record's stamp
}

TEST_CASE("a number read without a fraction or an exponent is integral; one the writer wrote from a double is not",
          "[schema]") {
  FlatJson read;
  REQUIRE(details::JsonFlattener(R"({"a":1,"b":-0,"c":1.0,"d":1e3,"e":1E3,"f":-12})", read).run().empty());
  CHECK(read["/a"].integral);
  CHECK(read["/b"].integral);
  CHECK_FALSE(read["/c"].integral);
  CHECK_FALSE(read["/d"].integral);
  CHECK_FALSE(read["/e"].integral);
  CHECK(read["/f"].integral);
  FlatJson written;
  details::JsonWriter w;
  w.record_leaves(&written);
  w.begin_object();
  w.key("i").value(int64_t{2});
  w.key("u").value(uint64_t{2});
  w.key("d").value(2.0);
  w.end_object();
  CHECK(w.release() == R"({"i":2,"u":2,"d":2})");  // the same text
  CHECK(written["/i"].integral);
  CHECK(written["/u"].integral);
  CHECK_FALSE(written["/d"].integral);  // what the text cannot tell
}

TEST_CASE("every value of the end record is declared with its type, and every row is carried", "[schema]") {
  EndRecord full;
  full.reason = "stop";
  full.unix_ns = 1'700'000'000'000'000'000;
  full.last_global_step = 9;
  full.lines_written = 10;
  full.stall_records = uint64_t{2};
  full.traces.on = true;
  full.after_last_step_ns = 1'000'000;
  BetweenGpu bg;
  bg.kernels = 1;
  bg.top_kernels = {TopKernel{"k", 1000, 1, 1.0}};
  full.after_last_step_gpu = bg;
  RunInfo run;
  DeviceInfo dev;
  dev.uuid = "GPU-0";
  run.device = dev;
  run.job_id = "j";
  EndRecord bare;  // flight recorder off, nothing after the last step, no GPU
  bare.reason = "SIGTERM";
  RunInfo nothing;
  nothing.device_null_reason = "no GPU";

  const auto unbalanced_before = details::line_out_unbalanced().load();
  const auto undeclared_before = details::line_out_undeclared().load();
  check_null_reasons(make_end_line(full, run));
  check_null_reasons(make_end_line(bare, nothing));
  // The stall and resumed records follow the same rule (a stall with nothing known, and one whose last
  // GPU record carried no name).
  StallReport stall;
  stall.threads.emplace_back();
  stall.threads.back().phases.emplace_back();
  check_null_reasons(make_stall_line(stall, nothing));
  stall.last_gpu_activity_s = 0.5;
  stall.open_step_launches = stall.open_step_outstanding = 1;
  const std::string named_nothing = make_stall_line(stall, run);
  check_null_reasons(named_nothing);
  CHECK_FALSE(nlohmann::json::parse(named_nothing)["null_reasons"]["gpu.last_activity"].get<std::string>().empty());
  check_null_reasons(make_resumed_line(1, 2, 3.0, 1, 3, run));
  CHECK(details::line_out_unbalanced().load() == unbalanced_before);  // every writer closed what it opened
  CHECK(details::line_out_undeclared().load() == undeclared_before);  // the end record's rows, found as written

  // The end record's values declared, with their types (core/line_fields_end.hpp), and every row carried.
  std::set<const LineField*> used;
  for (const auto& [record, info] : {std::pair<const EndRecord*, const RunInfo*>{&full, &run}, {&bare, &nothing}}) {
    FlatJson leaves;  // as written: an integer row's value from an integer type
    check_declared(nlohmann::json::parse(make_end_line(*record, *info, &leaves)), used, Record::end);
    for (const std::string& problem : declaration_problems(leaves, Record::end)) FAIL_CHECK(problem);
  }
  for (const LineField& f : record_fields(Record::end)) {
    INFO("core/line_fields_end.hpp declares " << f.path << "; no end record carries it");
    CHECK(used.count(&f));
  }
  CHECK(used.count(line_field_at("/between_steps/gpu/top_kernels/0/name")));  // after_last_step.gpu's
  CHECK(record_field_at(Record::end, details::pointer_segments("/step_time_ms")) == nullptr);  // the step line's
  CHECK(declared("after_last_step.gpu.kernels", Record::end) == declared("between_steps.gpu.kernels"));
}

TEST_CASE("every value of the stall and resumed records is declared with its type, and every row is carried",
          "[schema]") {
  RunInfo run;
  DeviceInfo dev;
  dev.uuid = "GPU-0";
  run.device = dev;
  run.job_id = "j";
  RunInfo nothing;
  nothing.device_null_reason = "no GPU";
  StallReport full;  // everything known: two threads, a phase whose clock could not be read
  full.unix_ns = 1'700'000'000'000'000'000;
  full.open_step = 20;
  full.stalled_s = 61.5;
  full.threshold_s = 60;
  full.median_step_ms = 12.5;
  full.report = 2;
  full.next_report_s = 240;
  full.step_scope_open = false;
  full.step_scope_closed_s = 1.25;
  full.threads = {{7, "train", true, {{"forward", 3.5}, {"attn", std::nullopt}}}, {9, "loader", false, {{"input", 0.5}}}};
  full.threads_untracked = 1;
  full.last_gpu_activity_s = 0.75;
  full.last_gpu_activity_name = "gemm";
  full.open_step_launches = 26;
  full.open_step_outstanding = 26;
  full.outstanding_by_phase = {{"forward", 20}, {"unphased", 6}};
  full.sm_active_recent = 0.9;
  full.sm_active_sample_age_s = 0.1;
  StallReport bare;  // nothing read: no thread, no GPU reading

  const auto unbalanced_before = details::line_out_unbalanced().load();
  const auto undeclared_before = details::line_out_undeclared().load();
  std::set<const LineField*> stall_used, resumed_used;
  for (const auto& [report, info] : {std::pair<const StallReport*, const RunInfo*>{&full, &run}, {&bare, &nothing}}) {
    const std::string text = make_stall_line(*report, *info);
    check_null_reasons(text);
    check_declared(nlohmann::json::parse(text), stall_used, Record::stall);
    FlatJson leaves;
    REQUIRE(details::JsonFlattener(text, leaves).run().empty());
    for (const std::string& problem : declaration_problems(leaves, Record::stall)) FAIL_CHECK(problem);
  }
  for (const RunInfo* info : {&run, &nothing}) {
    const std::string text = make_resumed_line(1'700'000'000'000'000'000, 20, 95.0, 2, 21, *info);
    check_null_reasons(text);
    check_declared(nlohmann::json::parse(text), resumed_used, Record::resumed);
  }
  CHECK(details::line_out_unbalanced().load() == unbalanced_before);
  CHECK(details::line_out_undeclared().load() == undeclared_before);  // each value at its row, as written
  for (const auto& [record, used] : {std::pair<Record, const std::set<const LineField*>*>{Record::stall, &stall_used},
                                     {Record::resumed, &resumed_used}})
    for (const LineField& f : record_fields(record)) {
      INFO("core/line_fields_events.hpp declares " << f.path << "; no record written here carries it");
      CHECK(used->count(&f));
    }
  // The records are their own: the end record's fields are not theirs, nor the stall's the resumed's.
  CHECK(record_field_at(Record::stall, details::pointer_segments("/lines_written")) == nullptr);
  CHECK(record_field_at(Record::resumed, details::pointer_segments("/threads")) == nullptr);
  CHECK(declared("threads[].open_phases[].open_s", Record::stall) != nullptr);
  // A value the stall record's rows do not hold is counted as it is written.
  LineOut out(nullptr, nullptr, &details::RowTree::stall());
  out.begin();
  out.field(STEPTRACE_STALL_ROW("/open_step"), int64_t{3});
  out.field(STEPTRACE_RESUMED_ROW("/stalled_step"), int64_t{3});  // another record's row
  out.field("lines_written", int64_t{3});                          // no row
  out.finish();
  CHECK(details::line_out_undeclared().load() - undeclared_before == 3);  // the handle, its value, the name
  details::line_out_undeclared().store(undeclared_before);  // this test's own (support.hpp holds it at 0)
}


// The line is declared once, in core/line_fields.hpp (held to what the writers write, both ways, above,
// rendered into docs/schema.md and shipped as python/steptrace/schema.json by tests/test_schema_doc.cpp):
// the Prometheus exporter's tables (numbers, booleans) read rows of a type they can read. The SQLite
// views and the report read the shipped declaration (python/tests/test_report.py).
TEST_CASE("every field another output reads is a declared field of a type it reads", "[schema]") {
  const auto scalar = [](const LineField* f) {
    return f && (f->type == FieldType::number || f->type == FieldType::integer || f->type == FieldType::boolean);
  };
  std::size_t checked = 0;
  for (const auto& g : sink::prom_gauges()) {
    INFO("Prometheus gauge " << g.name << " reads " << g.pointer);
    CHECK(scalar(line_field_at(g.pointer)));
    ++checked;
  }
  for (const auto& c : sink::prom_counters()) {
    INFO("Prometheus counter " << c.name << " reads " << c.pointer);
    CHECK(scalar(line_field_at(c.pointer)));
    ++checked;
  }
  CHECK(checked > 30);
  CHECK_FALSE(declared("gpu.no_such_field"));  // the rule can fail
  CHECK_FALSE(scalar(declared("gpu")));        // an object is no gauge
}
