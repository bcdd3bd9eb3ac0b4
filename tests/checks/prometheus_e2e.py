#!/usr/bin/env python3
"""End to end against a real Prometheus and node_exporter (Debian's): steptrace's metrics as a user's
stack sees them.

    tests/checks/prometheus_e2e.py BUILD_DIR

Starts node_exporter (textfile collector on a temporary directory) and Prometheus (dashboards/prometheus.yml
with the test's ports, 1 s scrapes) on 127.0.0.1 with free ports, then feeds them:
  live   the example (mlp_train --cpu) with both expositions on: endpoint and textfile;
  cross  a CPU run whose rank 0 gathers a simulated 4-rank exchange (tests/prometheus_feed.cpp);
  gpu    lines written by the example on an H100 (tests/data/h100_mlp_lines.jsonl) through the exporter;
  budget a GPU-bound H100 run under the default overhead budget (15 of 80 lines traced), replayed at
         20 lines a second (tests/data/h100_transformer_budget_lines.jsonl);
  carried the same lines with `diagnosis.basis` (issue #31): untraced lines carry the last traced
         step's label, a few decided from host times, the first ones none;
  marked lines of a DDP run on 2 H200s (tests/data/h200x2_ddp_rank1_slowed-0.jsonl) with stream markers
         on most of them.
Then asks Prometheus's HTTP API: every metric of docs/prometheus.md, at every scrape, carries the common
labels and equals what its kind says of the lines (the line of the scraped step for `last`, the window
mean, the sum, the step-time histogram's buckets...), is absent where the field is null, and appears in
at least one source; the scrape job's own `job` label is left alone (no honor_labels); the textfile
ends with steptrace_up 0; every query of dashboards/steptrace.json returns a series, and none returns
two series for one rank although the live run is scraped both ways (its `sink` variable selects one);
promtool accepts the textfiles. Everything it started is stopped at the end, also on failure; the whole test is bounded.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from report_check import with_basis  # the same new-schema lines the report check builds
from _paths import ROOT
from steptrace.report.diagnosis import line_basis
from steptrace.lines import step_lines as read_lines  # step lines, not the end record

BUILD = os.path.abspath(sys.argv[1])
DEADLINE = time.monotonic() + 240
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, check, seconds):
    end = min(time.monotonic() + seconds, DEADLINE)
    while time.monotonic() < end:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(0.2)
    fail(f"timed out waiting for {what}")
    return False


def field(line, path):
    v = line
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    return v if isinstance(v, (int, float)) else None


def documented_metrics():
    """(name, kind, path, scale) for every row of docs/prometheus.md's table."""
    rows = []
    for row in open(os.path.join(ROOT, "docs/prometheus.md")):
        if not row.startswith("| `steptrace_"):
            continue
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        name, kind, source = cells[0].strip("`"), cells[4], cells[5]
        m = re.match(r"`([a-z_.<>]+)`(?: ([÷×]) ([0-9]+))?", source)
        path, scale = (m.group(1), 1.0) if m else (None, 1.0)
        if m and m.group(2):
            scale = 1.0 / float(m.group(3)) if m.group(2) == "÷" else float(m.group(3))
        rows.append((name, kind, path, scale))
    return rows


ABSENT_UNTIL_SEEN = {"steptrace_tokens_total", "steptrace_samples_total"}  # a count nobody gave is not 0


def histogram_expected(lines, step, suffix, le):
    """steptrace_step_duration_seconds<suffix>{le} when the last line is `step`: every step line (no
    `window`) up to it."""
    times = [l["step_time_ms"] * 1e-3 for l in lines[: step + 1] if "window" not in l and l.get("step_time_ms") is not None]
    if not times:
        return None
    if suffix == "_count":
        return float(len(times))
    if suffix == "_sum":
        return sum(times)
    bound = float("inf") if le == "+Inf" else float(le)
    return float(sum(1 for t in times if t <= bound))


def basis_of(line):
    """diagnosis.basis, with the report's rule for lines written before it (issue #31)."""
    return line_basis(line, line["diagnosis"])


BASES = ["traced", "markers", "carried", "carried_scaled", "host_only", "none"]
WINDOW = 32
LABELS = ["INPUT-BOUND", "H2D-BOUND", "COMM-BOUND", "HOST/LAUNCH-BOUND", "LOW-SM-EFFICIENCY", "COMPUTE-BOUND", "UNKNOWN"]


def expected(name, kind, path, scale, lines, step, labels, up):
    """What series `name{labels}` must read when the last line is `step` (None: absent)."""
    upto = lines[: step + 1]
    line = upto[-1]
    traced = [l for l in upto if l.get("traced")]
    window, traced_window = upto[-WINDOW:], traced[-WINDOW:]
    if name in ("steptrace_phase_seconds", "steptrace_window_phase_seconds"):
        gpu = labels.get("source") == "gpu"
        marked = labels.get("source") == "gpu_markers"

        def phase_value(l):
            if marked:  # the phase's span between its stream markers: this line's own, when marked
                ph = ((l.get("gpu_markers") or {}).get("phases") or {}).get(labels.get("phase"))
                v = ph.get("span_ms") if ph else None
                return None if v is None else v * 1e-3
            ph = (l.get("phases") or {}).get(labels.get("phase"))
            if ph is None:
                return None
            v = (ph.get("gpu") or {}).get("busy_ms") if gpu else ph.get("self_ms" if labels.get("source") == "host_self" else "host_ms")
            return None if v is None else v * 1e-3
        if name == "steptrace_phase_seconds":
            if gpu and not line.get("traced"):
                return phase_value(traced[-1]) if traced else None
            return phase_value(line)
        vals = [v for v in map(phase_value, traced_window if gpu else window) if v is not None]
        return sum(vals) / len(vals) if vals else None
    if kind == "special":
        if name == "steptrace_up":
            return up
        if name == "steptrace_window_lines":
            return float(len(window))
        if name == "steptrace_last_traced_step":
            return float(traced[-1]["global_step"]) if traced else None
        if name == "steptrace_steps_total":
            return float(line["global_step"] + 1)
        if name == "steptrace_lines_total":
            return float(step + 1)
        if name == "steptrace_diagnosis":
            return 1.0 if line["diagnosis"]["label"] == labels.get("label") else 0.0
        if name == "steptrace_diagnosis_basis":
            return 1.0 if basis_of(line) == labels.get("basis") else 0.0
        if name == "steptrace_diagnosis_carried_from_step":
            at = line["diagnosis"].get("carried_from_step")
            return float(at) if basis_of(line) in ("carried", "carried_scaled", "markers") and at is not None else None
        if name == "steptrace_window_diagnosis_share":
            return sum(1 for l in window if l["diagnosis"]["label"] == labels.get("label")) / len(window)
    if kind in ("last", "traced"):
        source = line if kind == "last" or line.get("traced") else (traced[-1] if traced else None)
        v = field(source, path) if source else None
        return None if v is None else v * scale
    if kind in ("window", "traced window"):
        over = window if kind == "window" else traced_window
        vals = [field(l, path) * scale for l in over if field(l, path) is not None]
        return sum(vals) / len(vals) if vals else None
    if kind == "sum":
        return float(sum(field(l, path) or 0 for l in upto))
    if kind == "cumulative":  # the last line that had it
        vals = [field(l, path) for l in upto if field(l, path) is not None]
        return float(vals[-1]) if vals else (None if name in ABSENT_UNTIL_SEEN else 0.0)
    if kind == "view":  # the last line with the object (cross_rank, or the rank's own rank_wait): kept till the next
        views = [l for l in upto if l.get(path.split(".")[0])]
        if not views:
            return None
        if path.endswith(".<stat>"):
            path = path.replace("<stat>", labels.get("stat", ""))
        v = field(views[-1], path)
        return None if v is None else v * scale
    raise ValueError(f"unknown kind {kind} for {name}")


def main():
    prom, node = shutil.which("prometheus"), shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if not prom or not node or not shutil.which("promtool"):
        print("needs Debian's prometheus and prometheus-node-exporter (scripts/test.sh installs them)")
        return 1
    example, feed = os.path.join(BUILD, "examples/mlp_train"), os.path.join(BUILD, "tests/prometheus_feed")
    tmp = tempfile.mkdtemp(prefix="steptrace-prom-")
    textdir = os.path.join(tmp, "textfile")
    os.mkdir(textdir)
    procs = []
    try:
        p_node, p_prom, p_live = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([node, f"--web.listen-address=127.0.0.1:{p_node}", "--collector.disable-defaults",
                                       "--collector.textfile", f"--collector.textfile.directory={textdir}"],
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "node.log"), "w")))
        config = open(os.path.join(ROOT, "dashboards/prometheus.yml")).read()
        config = config.replace("localhost:9464", f"127.0.0.1:{p_live}").replace("localhost:9100", f"127.0.0.1:{p_node}")
        config = config.replace("scrape_interval: 15s", "scrape_interval: 1s")
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write(config)
        procs.append(subprocess.Popen([prom, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                                       f"--web.listen-address=127.0.0.1:{p_prom}", "--log.level=warn"],
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prometheus.log"), "w")))
        api = f"http://127.0.0.1:{p_prom}/api/v1/"
        if not wait_for("Prometheus ready", lambda: "Ready" in get(f"http://127.0.0.1:{p_prom}/-/ready"), 60):
            return 1

        def query(q, at=None):
            params = {"query": q}
            if at is not None:
                params["time"] = repr(at)
            out = json.loads(get(api + "query?" + urllib.parse.urlencode(params)))
            if out.get("status") != "success":
                raise RuntimeError(f"query {q}: {out}")
            return out["data"]["result"]

        # Prometheus hands new targets to its scrapers a few seconds after it starts (its discovery
        # manager batches updates): wait until node_exporter was scraped, so the live run is scraped too.
        if not wait_for("the first scrape", lambda: query('up{job="node"}'), 30):
            return 1

        # The three sources.
        sources = {}
        live_log, cross_log = os.path.join(tmp, "live.jsonl"), os.path.join(tmp, "cross.jsonl")
        env = dict(os.environ, STEPTRACE_PROMETHEUS_TEXTFILE=os.path.join(textdir, "steptrace-{rank}.prom"),
                   STEPTRACE_PROMETHEUS_LISTEN=f"127.0.0.1:{p_live}", STEPTRACE_PROMETHEUS_EVERY_MS="300",
                   STEPTRACE_JOB_NAME="e2e-live", STEPTRACE_SUMMARY="0")
        run = subprocess.run([example, "--cpu", "--steps", "250", "--slow-loader-ms", "15", "--log", live_log], env=env,
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            fail(f"the example failed: {run.stderr[-2000:]}")
            return 1
        sources["e2e-live"] = read_lines(live_log)
        r = subprocess.run([feed, "cross_rank", cross_log, os.path.join(textdir, "steptrace-cross.prom"), "e2e-cross", "60"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"prometheus_feed cross_rank: {r.stderr}")
        sources["e2e-cross"] = read_lines(cross_log)
        gpu_lines = os.path.join(ROOT, "tests/data/h100_mlp_lines.jsonl")
        r = subprocess.run([feed, "replay", gpu_lines, os.path.join(textdir, "steptrace-gpu.prom"), "e2e-gpu"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"prometheus_feed replay: {r.stderr}")
        sources["e2e-gpu"] = read_lines(gpu_lines)
        # A GPU-bound run under the default budget: 80 lines, 15 traced, replayed over 4 s so that
        # Prometheus sees the GPU values kept between traced lines and windows longer than a trace interval.
        budget_lines = os.path.join(ROOT, "tests/data/h100_transformer_budget_lines.jsonl")
        r = subprocess.run([feed, "replay", budget_lines, os.path.join(textdir, "steptrace-budget.prom"), "e2e-budget", "50"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"prometheus_feed replay (budget): {r.stderr}")
        sources["e2e-budget"] = read_lines(budget_lines)
        carried_lines = with_basis(budget_lines, os.path.join(tmp, "carried.jsonl"))
        r = subprocess.run([feed, "replay", carried_lines, os.path.join(textdir, "steptrace-carried.prom"), "e2e-carried", "50"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"prometheus_feed replay (carried): {r.stderr}")
        sources["e2e-carried"] = read_lines(carried_lines)
        # Stream markers on most lines (a DDP run on 2 H200s, rank 0): the held share and the phases'
        # marker spans on every marked line, traced or not.
        marked_lines = os.path.join(tmp, "marked.jsonl")  # its step lines (the log ends with its end record)
        with open(marked_lines, "w") as out:
            for l in read_lines(os.path.join(ROOT, "tests/data/h200x2_ddp_rank1_slowed-0.jsonl")):
                out.write(json.dumps(l) + "\n")
        r = subprocess.run([feed, "replay", marked_lines, os.path.join(textdir, "steptrace-marked.prom"), "e2e-marked", "50"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"prometheus_feed replay (marked): {r.stderr}")
        sources["e2e-marked"] = read_lines(marked_lines)

        # The textfiles' last writes (steptrace_up 0 for the runs that stopped) must have been scraped.
        for job in sources:
            wait_for(f"{job}'s final textfile scraped",
                     lambda: any(float(s["value"][1]) == 0 for s in query(f'steptrace_up{{steptrace_job="{job}",instance="127.0.0.1:{p_node}"}}')), 30)
        for name in ("steptrace-0.prom", "steptrace-cross.prom", "steptrace-gpu.prom", "steptrace-budget.prom",
                     "steptrace-carried.prom", "steptrace-marked.prom"):
            r = subprocess.run(["promtool", "check", "metrics"], stdin=open(os.path.join(textdir, name)), capture_output=True, text=True)
            if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                fail(f"promtool check metrics {name}: {r.stdout}{r.stderr}")

        # Every documented metric, at every scrape of every source.
        metrics = documented_metrics()
        present = set()
        now = time.time()
        checked = 0
        for job, lines in sources.items():
            by_step = {l["global_step"]: i for i, l in enumerate(lines)}
            for instance in ([f"127.0.0.1:{p_live}"] if job == "e2e-live" else []) + [f"127.0.0.1:{p_node}"]:
                sel = f'steptrace_job="{job}",instance="{instance}"'
                endpoint = instance == f"127.0.0.1:{p_live}"
                scrape_job, sink = ("steptrace", "endpoint") if endpoint else ("node", "textfile")
                steps = {}   # scrape time -> step
                ups = {}
                for s in query(f'steptrace_global_step{{{sel}}}[10m]', now):
                    for t, v in s["values"]:
                        steps[t] = int(float(v))
                for s in query(f'steptrace_up{{{sel}}}[10m]', now):
                    for t, v in s["values"]:
                        ups[t] = float(v)
                if not steps:
                    fail(f"{job} via {instance}: no scrape holds steptrace_global_step")
                    continue
                for name, kind, path, scale in metrics:
                    if kind == "histogram":
                        for suffix in ("_bucket", "_sum", "_count"):
                            for s in query(f'{name}{suffix}{{{sel}}}[10m]', now):
                                for t, v in s["values"]:
                                    if t not in steps:
                                        continue
                                    want = histogram_expected(lines, by_step[steps[t]], suffix, s["metric"].get("le"))
                                    checked += 1
                                    present.add(name)
                                    if want is None or abs(float(v) - want) > 1e-9 * max(1.0, abs(want)):
                                        fail(f"{name}{suffix}{{le={s['metric'].get('le')}}} ({job}, {instance}, step {steps[t]}): {v}, the lines say {want}")
                        continue
                    series = query(f'{name}{{{sel}}}[10m]', now)
                    seen_at = {}
                    for s in series:
                        labels = s["metric"]
                        for t, v in s["values"]:
                            seen_at.setdefault(t, []).append((labels, float(v)))
                    for t, step in steps.items():
                        line = lines[by_step[step]]
                        got = seen_at.get(t, [])
                        if kind != "special" and "phase" not in name and "stat" not in (path or ""):
                            want = expected(name, kind, path, scale, lines, by_step[step], {}, ups.get(t))
                            if want is None and got:
                                fail(f"{name} ({job}, {instance}, step {step}): present but the line's field is null")
                            elif want is not None and not got:
                                fail(f"{name} ({job}, {instance}, step {step}): absent, the line says {want}")
                        if name == "steptrace_diagnosis_carried_from_step" and not got and \
                                expected(name, kind, path, scale, lines, by_step[step], {}, ups.get(t)) is not None:
                            fail(f"{name} ({job}, {instance}, step {step}): absent, the line carried a step")
                        if name == "steptrace_diagnosis_basis" and sorted(l.get("basis") for l, _ in got) != sorted(BASES):
                            fail(f"{name} ({job}, {instance}, step {step}): bases {[l.get('basis') for l, _ in got]}, want all four")
                        for labels, v in got:
                            device = line.get("device") or {}
                            for key, value in (("rank", str(line["rank"])), ("local_rank", str(line["local_rank"])),
                                               ("world_size", str(line["world_size"])), ("Hostname", line["hostname"]),
                                               ("cuda_device", str(device["index"]) if device else None),
                                               ("steptrace_job", job), ("sink", sink), ("job", scrape_job)):
                                if labels.get(key) != value:
                                    fail(f"{name} ({job}, step {step}): label {key}={labels.get(key)!r}, want {value!r}")
                            for key, field in (("UUID", "uuid"), ("pci_bus_id", "pci_bus_id")):  # dcgm-exporter's names
                                value = (line.get("device") or {}).get(field) or None
                                if labels.get(key) != value:
                                    fail(f"{name} ({job}, step {step}): label {key}={labels.get(key)!r}, want {value!r}")
                            want = expected(name, kind, path, scale, lines, by_step[step], labels, ups.get(t))
                            checked += 1
                            if want is None or abs(v - want) > 1e-9 * max(1.0, abs(want)):
                                fail(f"{name}{{{labels}}} ({job}, {instance}, step {step}): {v}, the lines say {want}")
                        if got:
                            present.add(name)
        print(f"prometheus_e2e: {checked} values checked against the lines")
        for name, _, _, _ in metrics:
            if name not in present:
                fail(f"{name}: documented, but no source exposed it")

        # The live run was scraped both ways: each of its series twice, told apart by `sink` alone.
        # (over the run: the endpoint's series went stale when the program ended)
        both = query('count by (rank, steptrace_job) (last_over_time(steptrace_up{steptrace_job="e2e-live"}[10m]))')
        sinks = sorted(s["metric"].get("sink") for s in query('last_over_time(steptrace_up{steptrace_job="e2e-live"}[10m])'))
        if sinks != ["endpoint", "textfile"]:
            fail(f"the live run's series: sink {sinks}, want endpoint and textfile")
        if [s["value"][1] for s in both] != ["2"]:
            fail(f"the live run scraped both ways: {both}, want one rank with 2 series (endpoint, textfile)")

        # The dashboard: every query returns at least one series, and never two for one rank and job.
        dash = json.load(open(os.path.join(ROOT, "dashboards/steptrace.json")))

        def dashboard_query(expr, sink):
            return (expr.replace("$job", ".+").replace("$rank", ".+").replace("$sink", sink)
                    .replace("$__rate_interval", "1m"))
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                m = re.match(r"label_values\((.*), (\w+)\)", var["definition"])
                q = dashboard_query(m.group(1), "textfile")
                vals = json.loads(get(api + f"label/{m.group(2)}/values?" + urllib.parse.urlencode({"match[]": q})))["data"]
                if not vals:
                    fail(f"dashboard variable {var['name']}: {var['definition']} has no value")
                if var["name"] == "sink" and sorted(vals) != ["endpoint", "textfile"]:
                    fail(f"dashboard variable sink: {vals}, want endpoint and textfile")
        for panel in dash["panels"]:
            for target in panel["targets"]:
                for sink in ("textfile", "endpoint"):
                    result = query(dashboard_query(target["expr"], sink))
                    if sink == "textfile" and not result:  # every source writes a textfile
                        fail(f"dashboard panel '{panel['title']}': {target['expr']} returns no series")
                    # One rank's series twice (the same but for the way out or the scrape): a sum would double.
                    keys = [tuple(sorted((k, v) for k, v in s["metric"].items() if k not in ("instance", "job", "sink")))
                            for s in result]
                    if len(keys) != len(set(keys)):
                        fail(f"dashboard panel '{panel['title']}' (sink {sink}): {target['expr']} returns a series twice")
                if 'sink="$sink"' not in target["expr"]:  # an aggregate without it doubles with no series twice
                    fail(f"dashboard panel '{panel['title']}': {target['expr']} does not select one sink")
        print(f"prometheus_e2e: {sum(len(p['targets']) for p in dash['panels'])} dashboard queries run for each sink")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if failures:
            for name in ("prometheus.log", "node.log"):
                path = os.path.join(tmp, name)
                if os.path.exists(path):
                    print(f"--- {name}:\n" + open(path).read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("prometheus_e2e:", "FAILED" if failures else "passed", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
