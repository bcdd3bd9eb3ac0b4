#!/usr/bin/env python3
"""The Python tools against files anyone who can write to the trace directory can drop there (issue #49).

    hostile_files_check.py WORKDIR

steptrace-ctl list/capture/merge and the merge module must neither hang (a FIFO), nor exhaust memory
(a link to /dev/zero, world_size 10^12, a trace over the size bound), nor die with a traceback (nesting
100 000 deep, `ts` Infinity or NaN); a presence file's terminal escapes are printed as escapes; and
steptrace-report -o, steptrace-ctl merge -o replace only regular files, through a temporary nobody could
have planted (a FIFO or a symlink given as -o is refused, a link planted at the old temporary name is
left alone). Each tool runs as a subprocess with a timeout: a hang is a failure, not a stuck CI job.
"""
import json
import os
import shutil
import subprocess
import sys
import time

from _paths import SCRIPTS
from steptrace import files as steptrace_files  # noqa: E402
from steptrace import merge as steptrace_merge  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, timeout=120):  # a hang detector only: the tools answer in well under a second
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout} s", time.time() - t0
    return p.returncode, p.stdout, p.stderr, time.time() - t0


def presence(run_id, rank, world, host="node1", **extra):
    return dict({"schema": "steptrace.live/1", "run_id": run_id, "rank": rank, "world_size": world, "pid": os.getpid(),
                 "host": host, "exchange": "none", "written_unix_s": time.time()}, **extra)


def trace(run_id, rank, steps, ts_first=0.0):
    events = [{"ph": "X", "cat": "step", "name": f"step {s}", "pid": 1, "tid": -1, "ts": ts_first + i * 1000.0,
               "dur": 900.0, "args": {"global_step": s, "captured": True}} for i, s in enumerate(steps)]
    return {"traceEvents": events, "otherData": {"schema": "steptrace.trace/1", "run_id": run_id, "rank": rank,
                                                 "device": 0, "origin_unix_ns": 0, "steps": steps, "captured": steps}}


def write(path, doc_or_text):
    with open(path, "w") as f:
        f.write(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    work = os.path.abspath(argv[1])
    shutil.rmtree(work, ignore_errors=True)
    d = os.path.join(work, "traces")
    os.makedirs(d)
    ctl = os.path.join(SCRIPTS, "steptrace_ctl.py")
    report = os.path.join(SCRIPTS, "steptrace_report.py")
    run_id = "0123456789abcdef"

    # The trace directory: one good presence file, then the hostile ones.
    write(os.path.join(d, f"steptrace-live-{run_id}-r0.json"), presence(run_id, 0, 2, host="node1\x1b]0;owned\x07\x1b[31m"))
    os.mkfifo(os.path.join(d, f"steptrace-live-{run_id}-r1.json"))
    os.symlink("/dev/zero", os.path.join(d, "steptrace-live-aaaaaaaaaaaaaaaa-r0.json"))
    write(os.path.join(d, "steptrace-live-bbbbbbbbbbbbbbbb-r0.json"), presence("bbbbbbbbbbbbbbbb", 0, 10 ** 12))
    write(os.path.join(d, "steptrace-live-cccccccccccccccc-r0.json"), "[" * 100000 + "]" * 100000)
    write(os.path.join(d, "steptrace-live-dddddddddddddddd-r0.json"),
          json.dumps(presence("dddddddddddddddd", 0, 1)).replace('"written_unix_s": ', '"written_unix_s": NaN, "x": '))
    rc, out, err, took = run([ctl, "list", "--dir", d])
    check(rc == 0, f"list ends (rc {rc}, {took:.1f} s) beside a FIFO, a link to /dev/zero, nesting 100 000 deep, NaN")
    check("Traceback" not in err, "list: no traceback")
    check("\x1b" not in out and "\x07" not in out, "list: no raw terminal escape printed")
    check("\\x1b]0;owned" in out, "list: the presence file's escapes are shown as escapes")
    check(out.count("\n") == 2 and run_id in out, "list: the one presence file steptrace wrote is listed")
    check("bbbbbbbbbbbbbbbb" not in out, "list: world_size 10^12 is not a presence file steptrace wrote")

    # Reading bounded: the module refuses what it must not read, with why.
    for name, want in (("steptrace-live-aaaaaaaaaaaaaaaa-r0.json", "not a regular file"),
                       (f"steptrace-live-{run_id}-r1.json", "not a regular file"),
                       ("steptrace-live-cccccccccccccccc-r0.json", "nested deeper"),
                       ("steptrace-live-dddddddddddddddd-r0.json", "non-finite")):
        try:
            steptrace_files.read_json(os.path.join(d, name))
            check(False, f"read_json refuses {name}")
        except steptrace_files.FileRefused as e:
            check(want in str(e), f"read_json refuses {name}: {e}")

    # Merge: a trace with ts Infinity, a FIFO and a link to /dev/zero under trace names, a trace past the bound.
    write(os.path.join(d, f"trace-{run_id[:8]}-r0-s5.json"), trace(run_id, 0, [5, 6]))
    write(os.path.join(d, f"trace-{run_id[:8]}-r1-s5.json"),
          json.dumps(trace(run_id, 1, [5, 6])).replace('"ts": 0.0', '"ts": Infinity'))
    os.mkfifo(os.path.join(d, f"trace-{run_id[:8]}-r2-s5.json"))
    os.symlink("/dev/zero", os.path.join(d, f"trace-{run_id[:8]}-r3-s5.json"))
    big = os.path.join(d, f"trace-{run_id[:8]}-r4-s5.json")
    with open(big, "wb") as f:
        f.truncate(steptrace_files.MAX_TRACE_FILE + 1)  # sparse: no disk used
    out_json = os.path.join(work, "merged.json")
    rc, out, err, took = run([ctl, "merge", "--dir", d, "--run", run_id, "--steps", "5-6", "-o", out_json])
    check(rc == 0 and "Traceback" not in err, f"merge ends (rc {rc}, {took:.1f} s) beside Infinity, a FIFO, /dev/zero, "
          f"a trace past {steptrace_files.MAX_TRACE_FILE >> 20} MiB: {err.strip()[-200:]}")
    if rc == 0:
        with open(out_json) as f:
            check(json.load(f)["otherData"]["ranks"] == 1, "merge: only the one well-formed trace merged")
    # Numbers no trace of steptrace holds (issue #58): ts 1.8e305 (overflowed to infinity when scaled:
    # a traceback), 1e999 (read as infinity by Python's json, written back as Infinity), a 400-digit dur.
    write(os.path.join(d, f"trace-{run_id[:8]}-r5-s5.json"),
          json.dumps(trace(run_id, 5, [5, 6])).replace('"ts": 0.0', '"ts": 1.8e305'))
    write(os.path.join(d, f"trace-{run_id[:8]}-r6-s5.json"),
          json.dumps(trace(run_id, 6, [5, 6])).replace('"ts": 0.0', '"ts": 1e999'))
    write(os.path.join(d, f"trace-{run_id[:8]}-r7-s5.json"),
          json.dumps(trace(run_id, 7, [5, 6])).replace('"dur": 900.0', '"dur": ' + "9" * 400, 1))
    rc, out, err, took = run([ctl, "merge", "--dir", d, "--run", run_id, "--steps", "5-6", "-o", out_json])
    check(rc == 0 and "Traceback" not in err, f"merge ends (rc {rc}) beside ts 1.8e305, 1e999, a 400-digit dur: {err[-300:]}")
    if rc == 0:
        with open(out_json) as f:
            text = f.read()
        def refuse(name):
            raise ValueError(name)
        try:
            merged = json.loads(text, parse_constant=refuse)
            check(True, "merge: no Infinity or NaN written")
        except ValueError as e:
            check(False, f"merge: {e} written")
            merged = json.loads(text)
        check(all(abs(e.get("ts", 0)) < 1e15 for e in merged["traceEvents"]), "merge: every ts written is a time")
        skipped = {s["file"] for s in merged["otherData"]["traces_skipped"]}
        check(f"trace-{run_id[:8]}-r6-s5.json" in skipped, f"merge: the 1e999 trace skipped and named: {skipped}")
    # The merge's memory bound: files past --max-trace-mb (all files together) are skipped and named.
    budget_dir = os.path.join(work, "budget")
    os.makedirs(budget_dir)
    for r in range(3):
        doc = trace(run_id, r, [5, 6])
        doc["traceEvents"] += [{"ph": "i", "name": "pad", "pid": 1, "tid": 1, "ts": 1.0, "args": {"global_step": 5}}] * 9000
        write(os.path.join(budget_dir, f"trace-{run_id[:8]}-r{r}-s5.json"), doc)  # ~0.8 MB each
    rc, out, err, took = run([ctl, "merge", "--dir", budget_dir, "--run", run_id, "--steps", "5-6", "-o", out_json,
                              "--max-trace-mb", "2"])
    check(rc == 0 and out.count("skipped trace-") == 1 and "merge's bound" in out,
          f"merge --max-trace-mb 2: two traces of ~0.8 MB read, the third skipped and named (rc {rc}): {out[-300:]} {err[-200:]}")

    # A world_size of 10^12 in an answer: bounded.
    doc = steptrace_merge.merge(d, [run_id], 5, 6, expected_ranks=range(1 << 20))
    o = doc["otherData"]
    check(o["ranks_missing_count"] == (1 << 20) - o["ranks"] and len(o["ranks_missing"]) == 64,
          "merge: a million expected ranks counted, 64 listed")

    # Writing: only regular files are replaced; a link planted at the old temporary name is left alone.
    victim = os.path.join(work, "victim.txt")
    write(victim, "keep")
    lines = os.path.join(work, "lines.jsonl")
    write(lines, json.dumps({"schema": "steptrace.step/1", "global_step": 0, "rank": 0, "step_time_ms": 10.0}) + "\n")
    page = os.path.join(work, "report.html")
    os.symlink(victim, page + ".tmp")
    rc, out, err, took = run([report, lines, "-o", page], timeout=120)
    check(rc == 0 and os.path.isfile(page), f"report writes its page (rc {rc}): {err.strip()[-200:]}")
    with open(victim) as f:
        check(f.read() == "keep", "report: the link planted at <page>.tmp is not written through")
    fifo_out = os.path.join(work, "out.fifo")
    os.mkfifo(fifo_out)
    rc, out, err, took = run([report, lines, "-o", fifo_out], timeout=120)
    check(rc != 0 and "not a regular file" in err and os.path.exists(fifo_out) and not os.path.isfile(fifo_out),
          f"report -o a FIFO: refused, the FIFO left as it was (rc {rc})")
    link_out = os.path.join(work, "link.json")
    os.symlink(victim, link_out)
    rc, out, err, took = run([ctl, "merge", "--dir", d, "--run", run_id, "--steps", "5-6", "-o", link_out])
    with open(victim) as f:
        check(rc != 0 and "not a regular file" in err and f.read() == "keep" and os.path.islink(link_out),
              f"merge -o a symlink: refused, its target untouched (rc {rc})")
    left = [n for n in os.listdir(work) if n.endswith(".tmp") and not os.path.islink(os.path.join(work, n))]
    check(not left, f"no temporary left behind: {left}")

    print(f"hostile_files_check: {'FAILED (' + str(len(failures)) + ' failures)' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
