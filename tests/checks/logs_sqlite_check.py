#!/usr/bin/env python3
"""The JSON lines in SQLite, tested with the real sqlite3 CLI (examples/logs/).

    tests/checks/logs_sqlite_check.py BUILD_DIR
Runs the example on the CPU, loads its lines (and one line that is not JSON, which must be skipped) with
examples/logs/load_sqlite.sh, and checks what SQL says against the lines themselves: the number of steps,
each step's time and diagnosis, every phase's host time per step. Then that loading is idempotent: the
same file again, and the same lines written with other spacing, add no row. Then a second run (the lines
again under another run_id) in the same database: two runs, each with its own steps, phases and end
record, and loading it twice changes nothing. Then examples/logs/queries.sql on the two runs. Last, a compact
log (line_detail=compact: run records and steptrace.step/2 lines) through the same views.
"""
import json
import os
import subprocess
import sys
import tempfile

from _paths import ROOT
build = os.path.abspath(sys.argv[1])
failures = []


def sql(db, query):
    out = subprocess.run(["sqlite3", "-json", db, query], capture_output=True, text=True, check=True).stdout
    return json.loads(out) if out.strip() else []


def load(db, path):
    """load_sqlite.sh DB PATH; its report on the file ("F: N new lines, M already in DB, K skipped ...")."""
    out = subprocess.run([os.path.join(ROOT, "examples/logs/load_sqlite.sh"), db, path], check=True,
                         capture_output=True, text=True).stdout
    return next((l for l in out.splitlines() if l.startswith(f"steptrace: {os.path.basename(path)}: ")), out)


def counts(db):
    """Rows per run in the table and in each view: what a load that adds nothing must leave as it was."""
    return sql(db, "SELECT run_id, (SELECT count(*) FROM lines AS l WHERE l.run_id = r.run_id) AS lines, "
                   "(SELECT count(*) FROM steps AS s WHERE s.run_id = r.run_id) AS steps, "
                   "(SELECT count(*) FROM phases AS p WHERE p.run_id = r.run_id) AS phases, "
                   "(SELECT count(*) FROM ends AS e WHERE e.run_id = r.run_id) AS ends FROM runs AS r ORDER BY run_id")


def write_lines(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, indent=None) + "\n")  # spaced as Python writes it, not as steptrace does


with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "steps.jsonl")
    subprocess.run([os.path.join(build, "examples/mlp_train"), "--cpu", "--steps", "40", "--log", log],
                   check=True, capture_output=True, env=dict(os.environ, STEPTRACE_SUMMARY="0"))
    records = [json.loads(l) for l in open(log)]
    lines = [r for r in records if "event" not in r]
    with open(log, "a") as f:
        f.write('{"torn": \n')  # what a killed writer could leave: skipped by the loader
    db = os.path.join(tmp, "steps.db")
    first = load(db, log)
    if not first.endswith(f": {len(records)} new lines, 0 already in {db}, 1 skipped (not a JSON object)"):
        failures.append(f"first load: {first}")
    rows = sql(db, "SELECT step, step_time_ms, diagnosis, loss, traced FROM steps ORDER BY step")
    if len(rows) != len(lines):
        failures.append(f"{len(rows)} steps in SQLite, {len(lines)} lines")
    for row, line in zip(rows, lines):
        if row["step"] != line["global_step"] or row["step_time_ms"] != line["step_time_ms"] or \
           row["diagnosis"] != line["diagnosis"]["label"] or row["loss"] != line["loss"]:
            failures.append(f"step {line['global_step']}: SQLite {row}, line {line['step_time_ms']} {line['diagnosis']['label']}")
    phases = sql(db, "SELECT step, phase, host_ms FROM phases")
    want = {(l["global_step"], p): v["host_ms"] for l in lines for p, v in l["phases"].items()}
    got = {(r["step"], r["phase"]): r["host_ms"] for r in phases}
    if got != want:
        failures.append(f"phases differ: {len(got)} rows in SQLite, {len(want)} in the lines")
    ends = sql(db, "SELECT reason, last_step FROM ends")
    if ends != [{"reason": "stop", "last_step": lines[-1]["global_step"]}]:
        failures.append(f"ends view: {ends}")

    # Idempotent: the same file again, and the same lines with other bytes (the key is run_id, rank and
    # global_step, or event and timestamp, not the text), add nothing.
    run_id = records[0].get("run_id")
    if not (isinstance(run_id, str) and len(run_id) == 16 and set(run_id) <= set("0123456789abcdef")
            and all(r.get("run_id") == run_id for r in records)):
        failures.append(f"the example's lines do not share one 16-hex-digit run_id: {run_id!r}")
        run_id = "0" * 16
    one_run = [{"run_id": run_id, "lines": len(records), "steps": len(lines), "phases": len(want), "ends": 1}]
    if counts(db) != one_run:
        failures.append(f"after one load: {counts(db)}, want {one_run}")
    again = load(db, log)
    if not again.endswith(f": 0 new lines, {len(records)} already in {db}, 1 skipped (not a JSON object)"):
        failures.append(f"the same file loaded again: {again}")
    respaced = os.path.join(tmp, "respaced.jsonl")
    write_lines(respaced, records)
    load(db, respaced)
    if counts(db) != one_run:
        failures.append(f"the same file loaded again, then respaced: {counts(db)}, want {one_run}")

    # A second run (another run_id, the same steps) in the same database: two runs, never merged.
    other_id = format(int(run_id, 16) ^ (2**64 - 1), "016x")
    second = os.path.join(tmp, "second-run.jsonl")
    write_lines(second, [dict(r, run_id=other_id) for r in records])
    load(db, second)
    load(db, second)
    two_runs = sorted(one_run + [dict(one_run[0], run_id=other_id)], key=lambda r: r["run_id"])
    if counts(db) != two_runs:
        failures.append(f"two runs, the second loaded twice: {counts(db)}, want {two_runs}")
    runs = sql(db, "SELECT run_id, ranks, step_lines, first_step, last_step, ranks_ended FROM runs ORDER BY run_id")
    want_runs = [{"run_id": i, "ranks": 1, "step_lines": len(lines), "first_step": lines[0]["global_step"],
                  "last_step": lines[-1]["global_step"], "ranks_ended": 1} for i in sorted([run_id, other_id])]
    if runs != want_runs:
        failures.append(f"runs view: {runs}, want {want_runs}")
    per_run = sql(db, "SELECT run_id, step, step_time_ms FROM steps ORDER BY run_id, step")
    want_steps = [{"run_id": i, "step": l["global_step"], "step_time_ms": l["step_time_ms"]}
                  for i in sorted([run_id, other_id]) for l in lines]
    if per_run != want_steps:
        failures.append("steps of the two runs differ from the lines")

    q = subprocess.run(["sqlite3", db], stdin=open(os.path.join(ROOT, "examples/logs/queries.sql")),
                       capture_output=True, text=True)
    if q.returncode != 0 or "forward" not in q.stdout or q.stderr or run_id not in q.stdout or other_id not in q.stdout:
        failures.append(f"queries.sql: rc {q.returncode}, {q.stderr}, both run ids shown: "
                        f"{run_id in q.stdout and other_id in q.stdout}")
    print(q.stdout[:1500])

    # A compact log (line_detail=compact): run records, steptrace.step/2 lines. The same views read it:
    # steps with the lines' own values, the hostname from the run record, phases, the end record; a
    # second load adds nothing.
    compact_log = os.path.join(tmp, "compact.jsonl")
    subprocess.run([os.path.join(build, "examples/mlp_train"), "--cpu", "--steps", "30", "--log", compact_log],
                   check=True, capture_output=True,
                   env=dict(os.environ, STEPTRACE_SUMMARY="0", STEPTRACE_LINE_DETAIL="compact"))
    crecords = [json.loads(l) for l in open(compact_log)]
    clines = [r for r in crecords if "event" not in r]
    run_records = [r for r in crecords if r.get("event") == "run"]
    if not clines or any(l.get("schema") != "steptrace.step/2" for l in clines) or not run_records:
        failures.append(f"the compact run wrote {len(clines)} step lines, {len(run_records)} run records")
    else:
        cdb = os.path.join(tmp, "compact.db")
        load(cdb, compact_log)
        again = load(cdb, compact_log)
        if not again.endswith(f": 0 new lines, {len(crecords)} already in {cdb}, 0 skipped (not a JSON object)"):
            failures.append(f"the compact file loaded again: {again}")
        rows = sql(cdb, "SELECT step, schema, hostname, step_time_ms, diagnosis, timestamp FROM steps ORDER BY step")
        host = run_records[0]["hostname"]
        want = [{"step": l["global_step"], "schema": "steptrace.step/2", "hostname": host,
                 "step_time_ms": l["step_time_ms"], "diagnosis": l["diagnosis"]["label"]} for l in clines]
        got = [{k: v for k, v in r.items() if k != "timestamp"} for r in rows]
        if got != want:
            failures.append(f"compact steps: {got[:2]} ..., want {want[:2]} ...")
        if any(not (r["timestamp"] or "").endswith("Z") for r in rows):
            failures.append(f"compact steps without a timestamp: {rows[:1]}")
        cphases = sql(cdb, "SELECT step, phase, host_ms FROM phases")
        cwant = {(l["global_step"], p): v["host_ms"] for l in clines for p, v in l["phases"].items()}
        if {(r["step"], r["phase"]): r["host_ms"] for r in cphases} != cwant:
            failures.append(f"compact phases differ: {len(cphases)} rows in SQLite, {len(cwant)} in the lines")
        if sql(cdb, "SELECT count(*) AS n FROM ends") != [{"n": 1}]:
            failures.append("compact: no end record in the ends view")
    # A log without its run record (cut or rotated: issue #58, the steps view was quadratic in the run's
    # lines): each line's record is one index probe. Checked by the plan, not by a clock; the time of
    # 20 000 such lines is printed (10^6: docs/usage.md).
    cut = os.path.join(tmp, "cut.jsonl")
    write_lines(cut, [dict(l, run_id="cafecafecafecafe") for l in clines for _ in range(1)] +
                [{"schema": "steptrace.step/2", "run_id": "cafecafecafecafe", "rank": 0, "global_step": 1000 + i,
                  "step_time_ms": 1.0} for i in range(20000)])
    # A forged line first, repeating run_id to take a real line's key (issue #58: SQLite reads the first
    # value, Python the last; 936 real lines were dropped so): skipped, the real line kept.
    with open(cut) as f:
        real = f.read()
    with open(cut, "w") as f:
        f.write('{"run_id": "0000000000000000", "run_id": "cafecafecafecafe", "rank": 0, "global_step": 1000, '
                '"schema": "steptrace.step/2", "step_time_ms": 999}\n' + real)
    cutdb = os.path.join(tmp, "cut.db")
    said = load(cutdb, cut)
    if not said.endswith("1 skipped (not a JSON object)"):
        failures.append(f"the line with a repeated key was not skipped: {said}")
    if sql(cutdb, "SELECT step_time_ms FROM steps WHERE step = 1000") != [{"step_time_ms": 1.0}]:
        failures.append("the real line of step 1000 lost to a forged one")
    plan = subprocess.run(["sqlite3", cutdb, "EXPLAIN QUERY PLAN SELECT count(hostname) FROM steps"],
                          capture_output=True, text=True, check=True).stdout
    if "USING INDEX lines_run_records" not in plan:
        failures.append(f"the steps view does not find run records by index: {plan}")
    import time
    t0 = time.monotonic()
    n = sql(cutdb, "SELECT count(hostname) AS h, count(*) AS n FROM steps")
    print(f"steps view over {n[0]['n']} lines without a run record: {time.monotonic() - t0:.2f} s")
    if n != [{"h": 0, "n": len(clines) + 20000}]:
        failures.append(f"the cut log's steps: {n}")
# The stream markers' view (a GPU run's lines: a DDP run on 2 H200s, committed): every marked step's
# busy share's lower bound and span, and each phase's marker span, as the lines give them.
with tempfile.TemporaryDirectory() as tmp:
    gpu_log = os.path.join(ROOT, "tests", "data", "h200x2_ddp_rank1_slowed-0.jsonl")
    glines = [json.loads(l) for l in open(gpu_log) if l.strip()]
    glines = [l for l in glines if "event" not in l]
    gdb = os.path.join(tmp, "gpu.db")
    load(gdb, gpu_log)
    srows = {r["step"]: r for r in sql(gdb, "SELECT step, gpu_held_share, gpu_marker_span_ms FROM steps")}
    marked = 0
    for l in glines:
        m = l.get("gpu_markers") or {}
        r = srows.get(l["global_step"], {})
        if r.get("gpu_held_share") != m.get("pending_share") or r.get("gpu_marker_span_ms") != m.get("span_ms"):
            failures.append(f"markers of step {l['global_step']}: SQLite {r}, line {m}")
        marked += bool(m.get("phases"))
    prow = {(r["step"], r["phase"]): r["gpu_marker_span_ms"] for r in sql(gdb, "SELECT step, phase, gpu_marker_span_ms FROM phases")}
    pwant = {(l["global_step"], p): ((l.get("gpu_markers") or {}).get("phases") or {}).get(p, {}).get("span_ms")
             for l in glines for p in l["phases"]}
    if prow != pwant or marked < 10:
        failures.append(f"phases' marker spans differ ({marked} marked lines): {sorted(set(prow.items()) ^ set(pwant.items()))[:4]}")

for f in failures:
    print("FAIL:", f)
print("logs_sqlite:", "FAILED" if failures else f"passed ({len(lines)} lines)")
sys.exit(1 if failures else 0)
