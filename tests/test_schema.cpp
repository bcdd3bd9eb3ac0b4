// docs/schema.md against the code: every key a line can carry is documented there. A line with every
// section present (hand-made input) and a line with every section absent are walked key by key.
#include <steptrace/core/step_line.hpp>

#include <fstream>
#include <set>
#include <string>
#include <vector>
#include <sstream>

#include "support.hpp"

using namespace steptrace;

namespace {

std::string schema_text() {
  std::ifstream in(STEPTRACE_SOURCE_DIR "/docs/schema.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Objects whose keys are names chosen at run time (phases, scalars, collectives, null reasons): their
// children are checked by the rule of the entries they hold, under the name "<name>".
bool keys_are_names(const std::string& path) {
  return path == "phases" || path == "scalars" || path == "null_reasons" || path == "gpu.nccl_collectives";
}

void collect(const nlohmann::json& j, const std::string& path, std::set<std::string>& out) {
  if (j.is_array()) {
    for (const auto& e : j) collect(e, path + "[]", out);
    return;
  }
  if (!j.is_object()) return;
  for (const auto& [k, v] : j.items()) {
    const std::string name = keys_are_names(path) ? "<name>" : k;
    const std::string child = path.empty() ? name : path + "." + name;
    out.insert(child);
    collect(v, child, out);
  }
}

// The first cells of docs/schema.md's table rows: the field names they document.
std::vector<std::string> first_cells(const std::string& schema) {
  std::vector<std::string> out;
  std::istringstream lines(schema);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("| `", 0) == 0) out.push_back(l.substr(0, l.find(" | ", 2)));
  return out;
}

// A top-level key is documented by a row naming it (`rank`, `local_rank`, ...) or rows of its fields
// (`memory.samples`). A nested key by its full path or its own name in backticks, the way the tables
// name them (`gpu.busy_ms`; `busy_ms` in the per-phase table; `{bytes, ms, ...}` in an object's row).
bool documented(const std::string& schema, const std::string& path) {
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos) {
    for (const auto& cell : first_cells(schema))
      if (cell.find("`" + path + "`") != std::string::npos || cell.find("`" + path + ".") != std::string::npos)
        return true;
    return false;
  }
  const std::string leaf = path.substr(dot + 1);
  if (leaf == "<name>" || leaf.find("[]") != std::string::npos) return true;  // the container is documented
  for (const std::string& form : {"`" + path + "`", "`" + leaf + "`", "{" + leaf + ",", " " + leaf + ",", " " + leaf + "}"})
    if (schema.find(form) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("docs/schema.md documents every key of a line with every section present, and of an empty one",
          "[schema]") {
  StepRecord r;
  r.begin_ns = 0;
  r.end_ns = 10'000'000;
  r.scope_end_ns = 9'000'000;
  r.tokens = 1000;
  r.samples = 8;
  r.spans = {{phase_tag::forward, 0, true, false, 1'000'000, 4'000'000}};
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
  v.culprit_phase = phase_tag::backward;
  v.lowest_scores = {RankScore{}};
  in.cross_rank = v;
  in.cross_rank_every = 2;
  DeviceStateSummary ds;
  ds.samples = 1;
  ds.power_w_mean = ds.power_w_max = ds.sm_clock_mhz_mean = ds.sm_clock_mhz_min = ds.temperature_c_max = 1;
  ds.clock_event_reasons = 1;
  in.device_state = ds;
  in.window = WindowSummary{10, 1, 1, 1, 1.0};
  in.warnings = {"w"};
  r.index = 1;  // a step after another: between_steps, with work launched between
  r.prev_scope_end_ns = -1'000'000;
  r.between_spans = {{phase_tag::forward, 0, true, false, -900'000, -100'000}};
  BetweenGpu bg;
  bg.kernels = 1;
  bg.top_kernels = {TopKernel{"k", 1000, 1, 1.0}};
  in.between_gpu = bg;

  StepRecord bare;
  bare.end_ns = 1'000'000;
  RunInfo nothing;
  nothing.device_null_reason = "no GPU";
  StepLineInput empty;
  empty.step = &bare;
  empty.run = &nothing;
  empty.host = compute_host_metrics(bare);
  empty.gpu_null_reason = empty.counters_null_reason = empty.cross_rank_null_reason = "off";
  empty.device_state_null_reason = "off";

  const std::string schema = schema_text();
  REQUIRE(schema.size() > 1000);
  std::set<std::string> paths;
  for (const auto* input : {&in, &empty}) collect(nlohmann::json::parse(make_step_line(*input)), "", paths);
  CHECK(paths.size() > 100);
  for (const auto& p : paths) {
    INFO("key " << p << " is not in docs/schema.md");
    CHECK(documented(schema, p));
  }
  // The rule can fail: a key nobody documented.
  CHECK_FALSE(documented(schema, "gpu.no_such_key"));
  CHECK_FALSE(documented(schema, "no_such_top_level_key"));
}
