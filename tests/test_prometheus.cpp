// The Prometheus exporter: the line reader, the metrics a line becomes (nulls absent, window means,
// counters, the cross-rank view kept), the text exposition checked by the real promtool, and the
// runtime writing the textfile and serving the endpoint. The end-to-end test against a real
// Prometheus is tests/checks/prometheus_e2e.py.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>
#include <steptrace/sink/prometheus.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "capture_log.hpp"
#include "fake_backend.hpp"
#include "host_config.hpp"
#include "support.hpp"

using namespace steptrace;
using steptrace_test::fresh_log;
using steptrace_test::read_lines;
using steptrace_test::spin_for_us;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
/// The value of the series `name{labels...}` whose label text contains `having` (nullopt: absent).
std::optional<double> series(const std::string& text, const std::string& name, const std::string& having = "") {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    if (!having.empty() && line.find(having) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}
std::string line_json(int step, const std::string& step_time, const std::string& extra = "") {
  return R"({"global_step":)" + std::to_string(step) + R"(,"rank":0,"local_rank":0,"world_size":1,"hostname":"h\"ost",)"
         R"("device":{"index":0,"name":"X"},"step_time_ms":)" + step_time + R"(,"gpu_utilization":null,"traced":true,)"
         R"("phases":{"forward":{"host_ms":20,"gpu":{"busy_ms":15,"h2d":{"ms":1}}},"my \"odd\"\nphase":{"host_ms":2}},)"
         R"("diagnosis":{"label":"COMPUTE-BOUND"},"dropped":{"steps_total":1,"phase_scopes":2,"scalars":0},)"
         R"("gpu":{"dropped_records":3,"excluded_records":0,"busy_ms":40,"nccl_exposed_ms":0})" + extra + "}";
}
/// `line` with its diagnosis object replaced by `diagnosis`.
std::string with_diagnosis(std::string line, const std::string& diagnosis) {
  const std::string old = R"("diagnosis":{"label":"COMPUTE-BOUND"})";
  return line.replace(line.find(old), old.size(), R"("diagnosis":)" + diagnosis);
}
bool promtool_accepts(const std::string& text, std::string& out) {
  const std::string path = fresh_log("promtool_input") + ".prom";
  std::ofstream(path) << text;
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return false;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  return ::pclose(p) == 0;
}
std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}
/// Starts a CPU session serving the endpoint on a free port and runs `steps` steps of `step_us`.
int start_listening(const std::string& log, int steps, int step_us) {
  const int port = free_port();
  auto cfg = steptrace_test::host_config(log);
  cfg.prometheus_listen = "127.0.0.1:" + std::to_string(port);
  REQUIRE(start(cfg));
  for (int i = 0; i < steps; ++i) {
    TRACE_STEP();
    spin_for_us(step_us);
  }
  return port;
}
}  // namespace

TEST_CASE("the line reader: leaves by JSON pointer, escapes undone, bad text refused", "[prometheus]") {
  FlatJson f;
  REQUIRE(flatten_json(R"({"a":{"b/c":[1,-2.5e3,true,null],"s":"x\"\n\u00e9\ud83d\ude00"},"e":{},"t~":false})", f) == "");
  CHECK(f.at("/a/b~1c/0").number == 1);
  CHECK(f.at("/a/b~1c/1").number == -2500);
  CHECK(f.at("/a/b~1c/2").kind == JsonLeaf::Kind::boolean);
  CHECK(f.at("/a/b~1c/3").kind == JsonLeaf::Kind::null);
  CHECK(f.at("/a/s").text == "x\"\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(f.at("/t~0").number == 0);
  CHECK(f.count("/e") == 0);
  for (const char* bad : {"", "{", R"({"a":1,})", R"({"a":tru})", R"({"a":1} x)", R"({"a":"\q"})", R"({"a":01x})"}) {
    INFO(bad);
    CHECK(flatten_json(bad, f) != "");
  }
  std::string deep(100, '[');
  CHECK(flatten_json(deep + std::string(100, ']'), f).find("nested too deeply") == 0);
}

TEST_CASE("a line becomes metrics: units, nulls absent, phases, diagnosis, counters", "[prometheus]") {
  sink::PrometheusModel m("job-7", 4, {});
  REQUIRE(m.add_line(line_json(0, "50")) == "");
  REQUIRE(m.add_line(line_json(1, "70", R"(,"loss":2.5)")) == "");
  const std::string t = m.render(true);
  INFO(t);
  CHECK(series(t, "steptrace_up") == 1.0);
  CHECK(series(t, "steptrace_step_time_seconds") == Approx(0.070));
  CHECK(series(t, "steptrace_window_step_time_seconds") == Approx(0.060));
  CHECK(series(t, "steptrace_gpu_busy_seconds") == Approx(0.040));
  CHECK_FALSE(series(t, "steptrace_gpu_utilization_ratio"));  // null: no series, never 0
  CHECK_FALSE(series(t, "steptrace_mfu_ratio"));              // absent from the line
  CHECK(series(t, "steptrace_loss") == 2.5);
  CHECK(series(t, "steptrace_window_loss") == 2.5);  // the mean over the steps that had it
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="host")") == Approx(0.020));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="gpu")") == Approx(0.015));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="my \"odd\"\nphase",source="host")") == Approx(0.002));
  CHECK(series(t, "steptrace_diagnosis", R"(label="COMPUTE-BOUND")") == 1.0);
  CHECK(series(t, "steptrace_diagnosis", R"(label="INPUT-BOUND")") == 0.0);
  CHECK(series(t, "steptrace_steps_total") == 2.0);
  CHECK(series(t, "steptrace_dropped_steps_total") == 1.0);       // cumulative in the line
  CHECK(series(t, "steptrace_dropped_phase_scopes_total") == 4.0);  // per line: summed
  CHECK(series(t, "steptrace_dropped_gpu_records_total") == 6.0);
  CHECK(series(t, "steptrace_traced_steps_total") == 2.0);
  CHECK(t.find(R"(steptrace_step_time_seconds{rank="0",local_rank="0",world_size="1",Hostname="h\"ost",cuda_device="0",steptrace_job="job-7"} )") !=
        std::string::npos);
  CHECK(t.find(",job=") == std::string::npos);  // Prometheus's own label: the scrape job names it
  CHECK(t.find("{job=") == std::string::npos);
  // Each way out names itself, so two scraped ways are told apart (and a sum selects one).
  CHECK(m.render(true, "endpoint").find(R"(steptrace_job="job-7",sink="endpoint"} )") != std::string::npos);
  CHECK(m.add_line("{not json").find("line not read") == 0);
  CHECK(series(m.render(true), "steptrace_steps_total") == 2.0);  // a bad line changes nothing

  // The window holds the last 4 steps; the cross-rank view stays until the next one.
  m.add_line(line_json(2, "10", R"(,"cross_rank":{"step":2,"reporting":2,"missing_count":0,"step_time_ms":{"median":9,"min":8,"max":12},"work_ms":{"median":5,"min":4,"max":6},"slowest_rank":1,"step_skew":0.1,"wait_share":0.3,"balanced":false,"gap_ms":1.5},"rank_wait":{"step":2,"wait_ms":7.5,"work_ms":2.5})"));
  m.add_line(line_json(3, "10", R"(,"cross_rank":null,"rank_wait":null)"));
  m.add_line(line_json(4, "10"));
  const std::string u = m.render(false);
  CHECK(series(u, "steptrace_up") == 0.0);
  CHECK(series(u, "steptrace_window_step_time_seconds") == Approx((0.070 + 0.010 * 3) / 4));
  CHECK(series(u, "steptrace_window_lines") == 4.0);
  CHECK(series(u, "steptrace_cross_rank_slowest_rank") == 1.0);
  CHECK(series(u, "steptrace_cross_rank_balanced") == 0.0);
  CHECK(series(u, "steptrace_cross_rank_gap_seconds") == Approx(0.0015));
  CHECK(series(u, "steptrace_cross_rank_wait_share_ratio") == Approx(0.3));
  // This rank's own wait and work stay until its next summary, as the view does.
  CHECK(series(u, "steptrace_rank_wait_seconds") == Approx(0.0075));
  CHECK(series(u, "steptrace_rank_own_work_seconds") == Approx(0.0025));
  CHECK(series(u, "steptrace_cross_rank_step_time_seconds", R"(stat="max")") == Approx(0.012));
  CHECK(series(u, "steptrace_window_diagnosis_share", R"(label="COMPUTE-BOUND")") == 1.0);
  CHECK(series(u, "steptrace_window_loss") == 2.5);  // steps 1-4: step 1's loss is in the window
  m.add_line(line_json(5, "10"));
  CHECK_FALSE(series(m.render(true), "steptrace_window_loss"));  // steps 2-5: it aged out
}

TEST_CASE("every marked step's GPU view: its phases' marker spans and the held share", "[prometheus]") {
  sink::PrometheusModel m("", 3, {});
  auto marked = [](int step, const char* markers) {
    return R"({"global_step":)" + std::to_string(step) + R"(,"rank":0,"local_rank":0,"world_size":1,"hostname":"h",)"
           R"("step_time_ms":20,"traced":false,"gpu":null,"phases":{"forward":{"host_ms":5}},"gpu_markers":)" +
           markers + R"(,"diagnosis":{"label":"COMPUTE-BOUND","basis":"markers"}})";
  };
  m.add_line(marked(0, R"({"pending_share":0.75,"span_ms":19,"phases":{"forward":{"span_ms":12.5,"scopes":1},"my/phase":{"span_ms":3}}})"));
  std::string t = m.render(true);
  INFO(t);
  CHECK(series(t, "steptrace_gpu_held_ratio") == 0.75);
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="gpu_markers")") == Approx(0.0125));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="my/phase",source="gpu_markers")") == Approx(0.003));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="host")") == Approx(0.005));
  CHECK_FALSE(series(t, "steptrace_phase_seconds", R"(phase="forward",source="gpu")"));  // never traced
  m.add_line(marked(1, "null"));  // a step whose markers were not read: its spans are gone, not carried
  t = m.render(true);
  CHECK_FALSE(series(t, "steptrace_gpu_held_ratio"));
  CHECK_FALSE(series(t, "steptrace_phase_seconds", R"(phase="forward",source="gpu_markers")"));
}

TEST_CASE("between traced steps the GPU attribution stays the last traced step's", "[prometheus]") {
  sink::PrometheusModel m("", 3, {});
  auto untraced = [](int step) {
    return R"({"global_step":)" + std::to_string(step) + R"(,"rank":0,"local_rank":0,"world_size":1,"hostname":"h",)"
           R"("step_time_ms":20,"gpu_utilization":null,"nccl_time_ms":null,"traced":false,"gpu":null,)"
           R"("phases":{"forward":{"host_ms":5}},"diagnosis":{"label":"UNKNOWN"}})";
  };
  m.add_line(line_json(0, "50", R"(,"gpu_utilization":0.5,"nccl_time_ms":2)"));
  m.add_line(untraced(1));
  m.add_line(untraced(2));
  std::string t = m.render(true);
  INFO(t);
  CHECK(series(t, "steptrace_step_time_seconds") == Approx(0.020));          // the last line's
  CHECK(series(t, "steptrace_gpu_utilization_ratio") == 0.5);               // the last traced line's
  CHECK(series(t, "steptrace_gpu_busy_seconds") == Approx(0.040));
  CHECK(series(t, "steptrace_nccl_seconds") == Approx(0.002));
  CHECK(series(t, "steptrace_last_traced_step") == 0.0);
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="gpu")") == Approx(0.015));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="host")") == Approx(0.005));
  CHECK_FALSE(series(t, "steptrace_phase_seconds", R"(phase="my)"));  // not in the last line
  CHECK(series(t, "steptrace_window_step_time_seconds") == Approx((0.050 + 0.020 + 0.020) / 3));
  CHECK(series(t, "steptrace_window_gpu_utilization_ratio") == 0.5);  // over traced lines: one so far
  m.add_line(line_json(3, "50", R"(,"gpu_utilization":0.7)"));
  t = m.render(true);
  CHECK(series(t, "steptrace_window_gpu_utilization_ratio") == Approx(0.6));
  CHECK_FALSE(series(t, "steptrace_nccl_seconds"));  // a traced line without it: null, absent
  CHECK(series(t, "steptrace_last_traced_step") == 3.0);
}

TEST_CASE("the diagnosis basis: the last line's, carried_from_step only when carried, old lines by rule", "[prometheus]") {
  sink::PrometheusModel m("", 4, {});
  const char* bases[] = {"traced", "markers", "carried", "carried_scaled", "host_only", "none"};
  // The five series, 1 for `want` and 0 for the others; carried_from_step's value or absence.
  auto holds = [&](const std::string& want, std::optional<double> carried_from) {
    const std::string t = m.render(true);
    INFO(t);
    for (const char* b : bases) CHECK(series(t, "steptrace_diagnosis_basis", std::string("basis=\"") + b + "\"") == (want == b ? 1.0 : 0.0));
    CHECK(series(t, "steptrace_diagnosis_carried_from_step") == carried_from);
  };
  auto untraced = [](int step, const std::string& diagnosis) {
    return R"({"global_step":)" + std::to_string(step) + R"(,"rank":0,"step_time_ms":20,"traced":false,"gpu":null,"diagnosis":)" +
           diagnosis + "}";
  };
  CHECK_FALSE(series(m.render(true), "steptrace_diagnosis_basis", "traced"));  // no line yet: nothing to say
  REQUIRE(m.add_line(with_diagnosis(line_json(10, "50"), R"({"label":"COMPUTE-BOUND","basis":"traced","carried_from_step":null})")) == "");
  holds("traced", std::nullopt);
  REQUIRE(m.add_line(untraced(11, R"({"label":"COMPUTE-BOUND","basis":"carried","carried_from_step":10})")) == "");
  holds("carried", 10.0);
  REQUIRE(m.add_line(untraced(11, R"({"label":"COMPUTE-BOUND","basis":"carried_scaled","carried_from_step":9})")) == "");
  holds("carried_scaled", 9.0);
  REQUIRE(m.add_line(untraced(11, R"({"label":"COMPUTE-BOUND","basis":"carried","carried_from_step":10})")) == "");
  holds("carried", 10.0);
  const std::string t = m.render(true);
  CHECK(series(t, "steptrace_diagnosis", R"(label="COMPUTE-BOUND")") == 1.0);  // the carried label is the label
  CHECK(series(t, "steptrace_window_diagnosis_share", R"(label="COMPUTE-BOUND")") == 1.0);  // and counts
  REQUIRE(m.add_line(untraced(12, R"({"label":"INPUT-BOUND","basis":"host_only","carried_from_step":null})")) == "");
  holds("host_only", std::nullopt);
  REQUIRE(m.add_line(untraced(13, R"({"label":"UNKNOWN","basis":"none","carried_from_step":null})")) == "");
  holds("none", std::nullopt);
  const std::string u = m.render(true);
  CHECK(series(u, "steptrace_window_diagnosis_share", R"(label="COMPUTE-BOUND")") == 0.5);  // traced + carried of 4
  CHECK(series(u, "steptrace_window_diagnosis_share", R"(label="INPUT-BOUND")") == 0.25);
  CHECK(series(u, "steptrace_window_diagnosis_share", R"(label="UNKNOWN")") == 0.25);
  // Lines written before the field: a `gpu` object is traced; without one, UNKNOWN is none, a label host_only.
  REQUIRE(m.add_line(line_json(14, "50")) == "");
  holds("traced", std::nullopt);
  REQUIRE(m.add_line(untraced(15, R"({"label":"INPUT-BOUND"})")) == "");
  holds("host_only", std::nullopt);
  REQUIRE(m.add_line(untraced(16, R"({"label":"UNKNOWN"})")) == "");
  holds("none", std::nullopt);
  REQUIRE(m.add_line(untraced(17, R"({"label":"COMPUTE-BOUND","basis":"carried","carried_from_step":null})")) == "");
  holds("carried", std::nullopt);  // carried without its step: the step is absent, never 0
}

TEST_CASE("promtool accepts the exposition", "[prometheus]") {
  sink::PrometheusModel m("", 8, {});
  std::string out;
  INFO("install Debian's prometheus package (scripts/test.sh does)");
  REQUIRE(std::system("command -v promtool >/dev/null") == 0);
  CHECK(promtool_accepts(m.render(true), out));  // before any line: steptrace_up alone
  INFO(out);
  for (int i = 0; i < 5; ++i)
    m.add_line(line_json(i, "12.5", R"(,"cross_rank":{"step":0,"reporting":2,"missing_count":0,"step_time_ms":{"median":9,"min":8,"max":12},"work_ms":{"median":5,"min":4,"max":6},"slowest_rank":1,"step_skew":0.1,"balanced":true,"gap_ms":1.5})"));
  m.add_line(with_diagnosis(line_json(5, "12.5"), R"({"label":"COMPUTE-BOUND","basis":"carried","carried_from_step":4})"));
  const std::string t = m.render(true);
  INFO(t);
  CHECK(promtool_accepts(t, out));
  INFO(out);
  CHECK(out.empty());  // no lint complaint either
}

TEST_CASE("the run writes the textfile atomically and ends it with steptrace_up 0", "[prometheus]") {
  const std::string dir = fresh_log("prom_dir");
  ::mkdir(dir.c_str(), 0755);
  const std::string log = fresh_log("prom_run");
  auto cfg = steptrace_test::host_config(log);
  cfg.prometheus_textfile = dir + "/steptrace-{rank}.prom";
  cfg.prometheus_every_ms = 100;
  cfg.job_name = "unit";
  REQUIRE(start(cfg));
  CHECK(series(read_file(dir + "/steptrace-0.prom"), "steptrace_up") == 1.0);  // at once, before any step
  for (int i = 0; i < 20; ++i) {
    TRACE_STEP();
    TRACE_PHASE(forward);
    spin_for_us(10'000);
  }
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 20);
  const std::string t = read_file(dir + "/steptrace-0.prom");
  INFO(t);
  CHECK(series(t, "steptrace_up") == 0.0);
  CHECK(series(t, "steptrace_global_step") == 19.0);
  CHECK(series(t, "steptrace_step_time_seconds") == Approx(double(lines.back()["step_time_ms"]) / 1000).epsilon(1e-12));
  CHECK(series(t, "steptrace_phase_seconds", R"(phase="forward",source="host")") ==
        Approx(double(lines.back()["phases"]["forward"]["host_ms"]) / 1000).epsilon(1e-12));
  CHECK(t.find(R"(Hostname=")") != std::string::npos);
  CHECK(t.find(R"(steptrace_job="unit",sink="textfile"})") != std::string::npos);
  CHECK(t.find("UUID=") == std::string::npos);  // no GPU: no GPU identity labels
  CHECK(t.find("cuda_device=") == std::string::npos);
  CHECK_FALSE(series(t, "steptrace_gpu_busy_seconds"));  // no GPU: absent
  CHECK(std::system(("ls -a " + dir + " | grep -q tmp").c_str()) != 0);  // no temporary file left
}

TEST_CASE("with a GPU every series carries dcgm-exporter's UUID and pci_bus_id labels", "[prometheus]") {
  steptrace::details::Session session(std::make_unique<steptrace_test::FakeBackend>());
  const std::string prom = fresh_log("prom_uuid") + ".prom";
  Config cfg;
  cfg.log_path = "";
  cfg.summary = false;
  cfg.prometheus_textfile = prom;
  cfg.job_name = "unit";
  REQUIRE(session.start(cfg, {}));
  for (int i = 0; i < 3; ++i) {
    TRACE_STEP();
  }
  session.stop();
  const std::string t = read_file(prom);
  INFO(t);
  const std::string labels =
      R"(cuda_device="0",UUID="GPU-00000000-1111-2222-3333-444444444444",pci_bus_id="00000000:3B:00.0",steptrace_job="unit",sink="textfile")";
  CHECK(t.find("steptrace_up{rank=\"0\",local_rank=\"0\",world_size=\"1\",Hostname=") != std::string::npos);
  std::istringstream in(t);
  int series_lines = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    ++series_lines;
    CHECK(l.find(labels) != std::string::npos);
  }
  CHECK(series_lines > 5);
}

TEST_CASE("an unusable textfile or address warns once and training goes on", "[prometheus]") {
  const std::string log = fresh_log("prom_bad");
  auto cfg = steptrace_test::host_config(log);
  cfg.prometheus_textfile = "/nonexistent-dir/steptrace.prom";
  cfg.prometheus_listen = "no-port-here";
  REQUIRE(start(cfg));
  for (int i = 0; i < 5; ++i) {
    TRACE_STEP();
    spin_for_us(1000);
  }
  stop();
  CHECK(read_lines(log).size() == 5);
  const std::string w = steptrace_test::captured_log().str();
  CHECK(w.find("prometheus_textfile") != std::string::npos);
  CHECK(w.find("/nonexistent-dir/steptrace.prom") != std::string::npos);
  CHECK(w.find("'no-port-here' is not host:port") != std::string::npos);
}

TEST_CASE("listening on every interface is a warning, a local address is not", "[prometheus]") {
  const std::string log = fresh_log("prom_every");
  for (const char* address : {"127.0.0.1:0", "0.0.0.0:0"}) {
    steptrace_test::captured_log().str("");
    auto cfg = steptrace_test::host_config(log);
    cfg.prometheus_listen = address;
    REQUIRE(start(cfg));
    { TRACE_STEP(); }
    stop();
    const bool warned = steptrace_test::captured_log().str().find("serves /metrics on every network interface") != std::string::npos;
    INFO(address);
    CHECK(warned == (std::string(address) == "0.0.0.0:0"));
  }
}

namespace {
std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("a file is replaced only where a regular file or nothing stands, never through a planted name",
          "[prometheus]") {
  using steptrace::sink::replace_file_atomically;
  using steptrace::sink::temporary_name;
  const std::string dir = "replace_hostile";
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  // A FIFO, a directory and a symbolic link at the target: refused, each left what it was.
  const std::string fifo = dir + "/metrics.prom";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string e1 = replace_file_atomically(fifo, "x 1\n");
  CHECK(e1.find("a FIFO") != std::string::npos);
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  const std::string sub = dir + "/subdir";
  REQUIRE(::mkdir(sub.c_str(), 0755) == 0);
  CHECK(replace_file_atomically(sub, "x 1\n").find("a directory") != std::string::npos);
  const std::string victim = dir + "/victim.txt", link = dir + "/link.prom";
  std::ofstream(victim) << "precious\n";
  REQUIRE(::symlink("victim.txt", link.c_str()) == 0);
  CHECK(replace_file_atomically(link, "x 1\n").find("a symbolic link") != std::string::npos);
  REQUIRE(::lstat(link.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(file_text(victim) == "precious\n");
  // Symbolic links planted at the temporary names: never written through; a free name is used.
  const std::string target = dir + "/steptrace.prom";
  for (unsigned a = 0; a < 3; ++a) REQUIRE(::symlink("victim.txt", temporary_name(target, a).c_str()) == 0);
  CHECK(replace_file_atomically(target, "x 1\n").empty());
  CHECK(file_text(target) == "x 1\n");
  CHECK(file_text(victim) == "precious\n");
  // Every name taken: refused, nothing written anywhere.
  const std::string other = dir + "/other.prom";
  for (unsigned a = 0; a < steptrace::sink::kTemporaryAttempts; ++a)
    REQUIRE(::symlink("victim.txt", temporary_name(other, a).c_str()) == 0);
  CHECK(replace_file_atomically(other, "x 1\n").find("names are taken") != std::string::npos);
  CHECK(file_text(victim) == "precious\n");
  CHECK(::access(other.c_str(), F_OK) != 0);
  // A regular file is replaced.
  CHECK(replace_file_atomically(target, "x 2\n").empty());
  CHECK(file_text(target) == "x 2\n");
}

TEST_CASE("the exporter asked to write its textfile over a FIFO refuses, naming the setting; the FIFO stays",
          "[prometheus]") {
  const std::string fifo = "prom_fifo_target.prom";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  steptrace::sink::PrometheusSink sink;
  steptrace::sink::PrometheusSink::Options o;
  o.textfile = fifo;
  const auto problems = sink.open(o);  // what start() warns (once per setting: not asserted from the log)
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].setting == "prometheus_textfile");
  CHECK(problems[0].message.find("is a FIFO") != std::string::npos);
  CHECK(problems[0].message.find("training continues") != std::string::npos);
  CHECK(sink.write_line(R"({"global_step":0,"rank":0,"step_time_ms":1})").empty());  // lines go on, nothing written
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  ::unlink(fifo.c_str());
}

TEST_CASE("the scrape endpoint serves the same metrics while the run is live", "[prometheus]") {
  const std::string log = fresh_log("prom_http");
  const int port = start_listening(log, 5, 2000);
  // Lines come from the background thread: wait for the one of step 3 (step 4 is still open).
  std::string body;
  for (int tries = 0; tries < 200; ++tries) {
    body = http_get(port, "/metrics");
    if (series(body, "steptrace_global_step") == 3.0) break;
    spin_for_us(10'000);
  }
  INFO(body);
  CHECK(body.find("200 OK") != std::string::npos);
  CHECK(series(body, "steptrace_up") == 1.0);
  CHECK(series(body, "steptrace_global_step") == 3.0);
  stop();
  const auto lines = read_lines(log);
  REQUIRE(lines.size() == 5);
  CHECK(series(body, "steptrace_step_time_seconds") == Approx(double(lines[3]["step_time_ms"]) / 1000).epsilon(1e-12));
  CHECK(http_get(port, "/metrics").empty());  // closed at stop()
}

// A flood of scrapes rendered the exposition each time under the writer's mutex, and the writer dropped
// lines (issue #58): a scrape now serves what was rendered at the last change.
TEST_CASE("scrapes render the exposition once per change, not once per scrape", "[prometheus]") {
  steptrace::sink::PrometheusSink sink;
  steptrace::sink::PrometheusSink::Options o;
  o.listen = "127.0.0.1:0";
  REQUIRE(sink.open(o).empty());
  REQUIRE(sink.write_line(R"({"global_step":0,"rank":0,"step_time_ms":1})").empty());
  const std::string first = http_get(sink.port(), "/metrics");
  REQUIRE(first.find("200 OK") != std::string::npos);
  for (int i = 0; i < 50; ++i) CHECK(http_get(sink.port(), "/metrics") == first);
  CHECK(sink.endpoint_renders() == 1);
  REQUIRE(sink.write_line(R"({"global_step":1,"rank":0,"step_time_ms":2})").empty());
  const std::string second = http_get(sink.port(), "/metrics");
  CHECK(series(second, "steptrace_global_step") == 1.0);
  CHECK(sink.endpoint_renders() == 2);
  sink.close_endpoint();
}

TEST_CASE("docs/prometheus.md lists exactly the families the exporter writes", "[prometheus]") {
  std::ifstream doc(std::string(STEPTRACE_SOURCE_DIR) + "/docs/prometheus.md");
  REQUIRE(doc.good());
  std::set<std::string> documented, written;
  std::string row;
  while (std::getline(doc, row))
    if (row.rfind("| `steptrace_", 0) == 0) documented.insert(row.substr(3, row.find('`', 3) - 3));
  sink::PrometheusModel m("", 4, {});
  // Every field non-null: one line with a cross-rank view and every gauge's field.
  std::string extra = R"(,"cross_rank":{"step":0,"reporting":2,"missing_count":0,"step_time_ms":{"median":9,"min":8,"max":12},"work_ms":{"median":5,"min":4,"max":6},"slowest_rank":1,"step_skew":0.1,"wait_share":0.2,"balanced":true,"gap_ms":1.5},"rank_wait":{"step":0,"wait_ms":2,"work_ms":7})";
  for (const auto& g : sink::prom_gauges()) {
    const std::string p = g.pointer;
    if (p == "/step_time_ms" || p == "/global_step" || p.rfind("/cross_rank/", 0) == 0 || p.rfind("/gpu/", 0) == 0 ||
        p.rfind("/rank_wait/", 0) == 0)
      continue;
    const auto slash = p.find('/', 1);
    extra += slash == std::string::npos ? ",\"" + p.substr(1) + "\":1" : ",\"" + p.substr(1, slash - 1) + "\":{\"" + p.substr(slash + 1) + "\":1}";
  }
  extra += R"(,"tokens_total":64,"samples_total":2)";  // the counters absent until a line has them
  // A carried diagnosis, so that steptrace_diagnosis_carried_from_step has its series too.
  REQUIRE(m.add_line(with_diagnosis(line_json(0, "5", extra), R"({"label":"COMPUTE-BOUND","basis":"carried","carried_from_step":3})")) == "");
  for (const auto& f : m.families(true)) {
    INFO(f.name);
    CHECK_FALSE(f.samples.empty());
    written.insert(f.name);
  }
  CHECK(documented == written);
}

TEST_CASE("idle or slow clients delay neither a scrape nor stop()", "[prometheus]") {
  const int port = start_listening(fresh_log("prom_slow"), 3, 1000);
  // 20 connections that send half a request and then nothing (more than the server keeps at once).
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    (void)!::write(fd, "GET /met", 8);
    idle.push_back(fd);
  }
  const std::string body = http_get(port, "/metrics");
  CHECK(body.find("200 OK") != std::string::npos);
  // Answered while idle clients were still connected: had the scrape waited for them, their 2 s
  // would have run out and the server closed every one (an order of events, not a clock reading).
  int still_open = 0;
  for (int fd : idle) {
    char b = 0;
    still_open += ::recv(fd, &b, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  CHECK(still_open >= 1);
  const auto t1 = std::chrono::steady_clock::now();
  stop();
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  CHECK(stop_s < 1.0);  // the endpoint's thread ends within a poll period, whatever the clients do
  for (int fd : idle) ::close(fd);
}

TEST_CASE("the step-time histogram counts every step line in cumulative buckets", "[prometheus]") {
  sink::PrometheusModel m("h", 4, {});
  // 0.5 ms (below the first bound), 1 ms (on it), 3 ms, 70 ms, 500 s (only +Inf).
  const std::vector<std::string> times = {"0.5", "1", "3", "70", "500000"};
  for (std::size_t i = 0; i < times.size(); ++i) REQUIRE(m.add_line(line_json(static_cast<int>(i), times[i])) == "");
  const std::string t = m.render(true);
  INFO(t);
  CHECK(t.find("# TYPE steptrace_step_duration_seconds histogram") != std::string::npos);
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="0.001")") == 2.0);  // le: less or equal
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="0.0025")") == 2.0);
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="0.004")") == 3.0);
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="0.1")") == 4.0);
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="100")") == 4.0);
  CHECK(series(t, "steptrace_step_duration_seconds_bucket", R"(le="+Inf")") == 5.0);
  CHECK(series(t, "steptrace_step_duration_seconds_count") == 5.0);
  CHECK(series(t, "steptrace_step_duration_seconds_sum") == Approx(0.0005 + 0.001 + 0.003 + 0.070 + 500));
  // Buckets never decrease from one bound to the next (what histogram_quantile() needs).
  double previous = 0;
  int buckets = 0;
  std::istringstream in(t);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("steptrace_step_duration_seconds_bucket{", 0) == 0) {
      const double v = std::stod(l.substr(l.rfind(' ') + 1));
      CHECK(v >= previous);
      previous = v, ++buckets;
    }
  CHECK(buckets == static_cast<int>(sink::prom_step_time_buckets().size()) + 1);
  // A log_every window's line is not one step: not in the histogram.
  REQUIRE(m.add_line(line_json(5, "9", R"(,"window":{"steps":4,"step_time_ms_mean":9})")) == "");
  CHECK(series(m.render(true), "steptrace_step_duration_seconds_count") == 5.0);
  // No step line at all: no histogram (absent, not zeros).
  sink::PrometheusModel w("h", 4, {});
  REQUIRE(w.add_line(line_json(0, "9", R"(,"window":{"steps":4})")) == "");
  CHECK_FALSE(series(w.render(true), "steptrace_step_duration_seconds_count"));
}

TEST_CASE("tokens_total and samples_total are the lines' running totals, absent until a line has one", "[prometheus]") {
  sink::PrometheusModel m("h", 4, {});
  REQUIRE(m.add_line(line_json(0, "10", R"(,"tokens_total":null,"samples_total":null)")) == "");
  std::string t = m.render(true);
  CHECK_FALSE(series(t, "steptrace_tokens_total"));  // nobody gave a count: not 0
  CHECK_FALSE(series(t, "steptrace_samples_total"));
  REQUIRE(m.add_line(line_json(1, "10", R"(,"tokens_total":4096,"samples_total":8)")) == "");
  REQUIRE(m.add_line(line_json(4, "10", R"(,"tokens_total":16384,"samples_total":32)")) == "");  // steps 2-3 not written
  t = m.render(true);
  INFO(t);
  CHECK(t.find("# TYPE steptrace_tokens_total counter") != std::string::npos);
  CHECK(series(t, "steptrace_tokens_total") == 16384.0);  // the field itself: steps without a line are in it
  CHECK(series(t, "steptrace_samples_total") == 32.0);
}
