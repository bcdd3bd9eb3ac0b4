#!/usr/bin/env python3
"""The JSON lines in SQLite, tested with the real sqlite3 CLI (examples/logs/).

    scripts/logs_sqlite_check.py BUILD_DIR
Runs the example on the CPU, loads its lines (and one line that is not JSON, which must be skipped) with
examples/logs/load_sqlite.sh, and checks what SQL says against the lines themselves: the number of steps,
each step's time and diagnosis, every phase's host time per step; then runs examples/logs/queries.sql.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1])
failures = []


def sql(db, query):
    out = subprocess.run(["sqlite3", "-json", db, query], capture_output=True, text=True, check=True).stdout
    return json.loads(out) if out.strip() else []


with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "steps.jsonl")
    subprocess.run([os.path.join(build, "examples/mlp_train"), "--cpu", "--steps", "40", "--log", log],
                   check=True, capture_output=True, env=dict(os.environ, STEPTRACE_SUMMARY="0"))
    records = [json.loads(l) for l in open(log)]
    lines = [r for r in records if "event" not in r]
    with open(log, "a") as f:
        f.write('{"torn": \n')  # what a killed writer could leave: skipped by the loader
    db = os.path.join(tmp, "steps.db")
    subprocess.run([os.path.join(ROOT, "examples/logs/load_sqlite.sh"), db, log], check=True, capture_output=True)
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
    q = subprocess.run(["sqlite3", db], stdin=open(os.path.join(ROOT, "examples/logs/queries.sql")),
                       capture_output=True, text=True)
    if q.returncode != 0 or "forward" not in q.stdout or q.stderr:
        failures.append(f"queries.sql: rc {q.returncode}, {q.stderr}")
    print(q.stdout[:1500])
for f in failures:
    print("FAIL:", f)
print("logs_sqlite:", "FAILED" if failures else f"passed ({len(lines)} lines)")
sys.exit(1 if failures else 0)
