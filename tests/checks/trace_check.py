#!/usr/bin/env python3
"""Checks the flight recorder's traces against the Trace Event Format and against the lines.

  trace_check.py check LOG.jsonl [--expect STEP:REASON ...]
        every trace a line of LOG names: the format (see check_format), and per step and phase the
        kernel durations sum to the line's phases.<phase>.gpu.kernel_ms
  trace_check.py gpu BUILD_DIR
        on a GPU: the example trainer (cuBLAS GEMMs), real_shapes' phases of 400 short kernels and its
        CUDA graph under sampled attribution, each with captured steps; their traces checked as above
        and for GPU content (kernels on streams, a flow per launch). TRACE_CHECK_KEEP=DIR keeps the files
  trace_check.py feed BUILD_DIR
        runs BUILD_DIR/tests/trace_feed (a fake GPU) and checks its traces as above, expecting the
        captures it provokes (the CPU test behind CTest `trace_format`)

Exit 0 when every check holds; each problem is printed.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import _paths  # noqa: F401  (python/ on sys.path)
from steptrace.lines import read_records, split_records

PHASES = {"X", "M", "s", "f"}


def read_lines(path):
    """{global_step: line}, [end records]; a fragment a killed run left is skipped."""
    steps, events = split_records(read_records(path, strict=False))
    return ({l["global_step"]: l for l in steps if "global_step" in l},
            [e for e in events if e.get("event") == "end"])


def check_format(doc):
    """Problems with one trace: the event format, nesting per track, flows, steps listed."""
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not an object with a traceEvents array"]
    other = doc.get("otherData", {})
    if other.get("schema") != "steptrace.trace/1":
        problems.append("otherData.schema is not steptrace.trace/1")
    listed = set(other.get("steps", []))
    for s in other.get("captured", []):
        if s not in listed:
            problems.append(f"captured step {s} is not among the trace's steps")
    tracks = defaultdict(list)
    flows = defaultdict(dict)
    named_threads = set()
    step_slices = set()
    for i, e in enumerate(doc["traceEvents"]):
        where = f"event {i} ({e.get('name')!r})"
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"{where}: ph {ph!r} not one of {sorted(PHASES)}")
            continue
        if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int):
            problems.append(f"{where}: name must be a string and pid an integer")
            continue
        if ph == "M":
            args = e.get("args", {})
            if e["name"] in ("process_name", "thread_name") and not isinstance(args.get("name"), str):
                problems.append(f"{where}: metadata without args.name")
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e.get("tid")))
            continue
        if not isinstance(e.get("tid"), int):
            problems.append(f"{where}: tid must be an integer")
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            problems.append(f"{where}: ts {ts!r} is not a finite number >= 0")
            continue
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
                problems.append(f"{where}: dur {dur!r} is not a finite number >= 0")
                continue
            tracks[(e["pid"], e["tid"])].append(e)
            if e.get("cat") == "step":
                step_slices.add(e["args"]["global_step"])
            elif e.get("cat") in ("kernel", "memcpy", "memset", "phase"):
                if e.get("args", {}).get("global_step") not in listed:
                    problems.append(f"{where}: global_step {e.get('args', {}).get('global_step')} not among the trace's steps")
        else:
            if "id" not in e:
                problems.append(f"{where}: flow event without id")
                continue
            if e["id"] in flows and ph in flows[e["id"]]:
                problems.append(f"{where}: flow id {e['id']} has two '{ph}' events")
            flows[e["id"]][ph] = e
    if step_slices != listed:
        problems.append(f"step slices {sorted(step_slices)} differ from otherData.steps {sorted(listed)}")
    # Complete events of one track nest (Perfetto draws nothing else): a stack over start order.
    eps = 1e-3  # microseconds: the writer's times are whole nanoseconds
    for key, events in tracks.items():
        if key not in named_threads:
            problems.append(f"track {key} has no thread_name")
        stack = []
        for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] + eps:
                stack.pop()
            end = e["ts"] + e["dur"]
            if stack and end > stack[-1] + eps:
                problems.append(f"track {key}: {e['name']!r} at {e['ts']} overlaps an enclosing event without nesting")
                break
            stack.append(end)
    # Flows: one start, one end; the record does not start before its launch; both bound to a slice.
    starts = {(e["pid"], e["tid"], e["ts"]) for evs in tracks.values() for e in evs}
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            problems.append(f"flow {fid}: has {sorted(pair)}, wants one 's' and one 'f'")
            continue
        s, f = pair["s"], pair["f"]
        if f.get("bp") != "e":
            problems.append(f"flow {fid}: the 'f' event does not bind to its enclosing slice (bp 'e')")
        if f["ts"] + eps < s["ts"]:
            problems.append(f"flow {fid}: the record starts {s['ts'] - f['ts']:.3f} us before its launch")
        for e in (s, f):
            if (e["pid"], e["tid"], e["ts"]) not in starts:
                problems.append(f"flow {fid}: no slice begins where its '{e['ph']}' event is")
    return problems


def kernel_ms(doc):
    """(step, phase) -> summed kernel duration in ms; steps whose records are complete."""
    sums = defaultdict(float)
    counts = defaultdict(int)
    complete = set()
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "step" and e["args"].get("traced") and e["args"].get("gpu_complete") \
                and not e["args"].get("records_left_out"):
            complete.add(e["args"]["global_step"])
        if e.get("cat") == "kernel":
            key = (e["args"]["global_step"], e["args"]["phase"])
            sums[key] += e["dur"] / 1000.0
            counts[key] += 1
    return sums, counts, complete


def check_log(log, expect=()):
    problems = []
    lines, ends = read_lines(log)
    base = os.path.dirname(os.path.abspath(log))
    files = defaultdict(list)
    captured = {}
    for step, line in lines.items():
        t = line.get("trace")
        if t is None:
            if "trace" not in line.get("null_reasons", {}):
                problems.append(f"step {step}: trace is null without a reason")
            continue
        captured[step] = t["reasons"]
        if t.get("file"):
            files[t["file"]].append(step)
    for step, reason in expect:
        if reason not in captured.get(step, []):
            problems.append(f"step {step}: expected a capture for {reason!r}, the line says {captured.get(step)}")
    checked_phases = 0
    for name, steps in sorted(files.items()):
        path = name if os.path.exists(name) else os.path.join(base, os.path.basename(name))
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{name}: {e}")
            continue
        problems += [f"{os.path.basename(name)}: {p}" for p in check_format(doc)]
        listed = set(doc.get("otherData", {}).get("steps", []))
        for s in steps:
            if s not in listed:
                problems.append(f"{os.path.basename(name)}: captured step {s} is missing")
        sums, counts, complete = kernel_ms(doc)
        for s in sorted(listed & complete):
            line = lines.get(s)
            if not line or not line.get("gpu") or not line["gpu"].get("complete"):
                continue
            for phase, p in line.get("phases", {}).items():
                want = (p.get("gpu") or {}).get("kernel_ms", 0.0)
                got = sums.get((s, phase), 0.0)
                checked_phases += 1
                if abs(got - want) > 1e-6 * max(1.0, counts.get((s, phase), 0)) + 1e-9 * abs(want):
                    problems.append(f"{os.path.basename(name)}: step {s} {phase}: kernels sum to {got:.6f} ms, "
                                    f"the line says {want:.6f} ms")
            extra = {ph for (st, ph) in sums if st == s} - set(line.get("phases", {}))
            if extra:
                problems.append(f"{os.path.basename(name)}: step {s}: kernels of phases {sorted(extra)} the line lacks")
    if ends:
        t = ends[-1].get("traces") or {}
        if t.get("written") != len(files):
            problems.append(f"end record: traces.written {t.get('written')} but the lines name {len(files)} files")
        if t.get("failed"):
            problems.append(f"end record: {t['failed']} traces failed")
    print(f"trace_check: {len(lines)} lines, {len(captured)} captured steps, {len(files)} traces, "
          f"{checked_phases} step-phase kernel sums compared")
    return problems


def gpu_content(log, step):
    """Problems with the GPU side of the trace holding `step`: kernels there, each with its flow."""
    lines, _ = read_lines(log)
    t = lines[step].get("trace") or {}
    path = os.path.join(os.path.dirname(log), os.path.basename(t.get("file") or "missing"))
    if not os.path.exists(path):
        return [f"step {step}: no trace file ({t})"]
    doc = json.load(open(path))
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
               and e["args"]["global_step"] == step]
    flows = [e for e in doc["traceEvents"] if e.get("ph") == "f"]
    streams = {e["tid"] for e in kernels}
    print(f"trace_check: step {step}: {len(kernels)} kernels on {len(streams)} stream track(s), "
          f"{len(flows)} flows in {os.path.basename(path)}")
    want = (lines[step].get("gpu") or {}).get("kernels")
    if not kernels or want != len(kernels):
        return [f"step {step}: {len(kernels)} kernels in the trace, the line counts {want}"]
    return []


def gpu_runs(build, d):
    problems = []
    runs = [
        ("mlp", [os.path.join(build, "examples", "mlp_train"), "--steps", "30"], "12-13",
         [(12, "capture_steps_env"), (13, "capture_steps_env")], [12]),
        ("phases", [os.path.join(build, "tests", "real_shapes"), "LOG", os.path.join(d, "truth_p.json"), "phases"],
         "3,8", [(3, "capture_steps_env"), (8, "capture_steps_env")], [3, 8]),
        ("graph", [os.path.join(build, "tests", "real_shapes"), "LOG", os.path.join(d, "truth_g.json"),
                   "graph_sampled"], "8-9", [(8, "capture_steps_env"), (9, "capture_steps_env")], [8]),
    ]
    for name, cmd, capture, expect, content in runs:
        sub = os.path.join(d, name)
        os.mkdir(sub)
        log = os.path.join(sub, "steps.jsonl")
        cmd = [log if c == "LOG" else c for c in cmd]
        env = dict(os.environ, STEPTRACE_LOG=log, STEPTRACE_CAPTURE_STEPS=capture, STEPTRACE_SUMMARY="0")
        if name == "mlp":
            env["STEPTRACE_TRACE_EVERY"] = "1"
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            problems.append(f"{name}: {' '.join(cmd)} failed: {out.stderr[-500:]}")
            continue
        print(f"trace_check: {name}:")
        problems += [f"{name}: {p}" for p in check_log(log, expect)]
        for step in content:
            problems += [f"{name}: {p}" for p in gpu_content(log, step)]
    return problems


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        expect = []
        if "--expect" in argv:
            for item in argv[argv.index("--expect") + 1:]:
                step, reason = item.split(":")
                expect.append((int(step), reason))
        problems = check_log(argv[1], expect)
    elif len(argv) == 2 and argv[0] == "gpu":
        keep = os.environ.get("TRACE_CHECK_KEEP")
        with tempfile.TemporaryDirectory() as d:
            problems = gpu_runs(argv[1], d)
            if keep:
                subprocess.run(["cp", "-r", d + "/.", keep], check=False)
    elif len(argv) == 2 and argv[0] == "feed":
        program = os.path.join(argv[1], "tests", "trace_feed")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([program, d, "60"], check=True, timeout=120)
            lines, _ = read_lines(os.path.join(d, "steps.jsonl"))
            # The slow step is 45. On a loaded machine an earlier step can be slow too: the rule then
            # captures that one and holds 45 back within its rate limit, and 45's line must say so.
            slow = 45
            earlier = [i for i in range(20, 45) if i in lines and lines[i].get("trace") and
                       "slow_step" in (lines[i]["trace"].get("reasons") or [])]
            if earlier and not lines[45].get("trace"):
                slow = earlier[0]
                why = lines[45]["null_reasons"].get("trace", "")
                if "rate limit" not in why:
                    print(f"trace_check: FAIL: step 45 (slow) neither captured nor held back by the rate limit: {why}")
                    return 1
                print(f"trace_check: step {slow} was slow on this machine and captured; 45 held back: {why}")
            problems = check_log(os.path.join(d, "steps.jsonl"),
                                 [(30, "capture_steps_env"), (31, "capture_steps_env"), (slow, "slow_step"),
                                  (51, "capture_steps")])
            if not problems:
                # One file for 30-31 (consecutive captures share it), one each for the slow step and 51.
                f30, f31 = lines[30]["trace"]["file"], lines[31]["trace"]["file"]
                if f30 != f31:
                    problems.append(f"steps 30 and 31 in different files: {f30}, {f31}")
                with open(os.path.join(d, os.path.basename(lines[slow]["trace"]["file"]))) as f:
                    doc = json.load(f)
                # slow-1 .. slow+1; more when steps next to it were slow too (a loaded machine), sharing the file.
                if not {slow - 1, slow, slow + 1} <= set(doc["otherData"]["steps"]):
                    problems.append(f"step {slow}'s trace holds steps {doc['otherData']['steps']}, wants {slow - 1}-{slow + 1}")
                names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
                if "gemm(float*, float*)" not in names:
                    problems.append(f"kernel names are not the line's (demangled): {sorted(names)[:5]}")
                threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
                if not any("step thread" in t for t in threads) or len([t for t in threads if "tid" in t]) < 3:
                    problems.append(f"host threads: {sorted(threads)} (wants the step thread, the loader, the "
                                    "launching thread)")
                if not any(e.get("name") == "prefetch" for e in doc["traceEvents"]):
                    problems.append("the loader thread's scopes are missing")
    else:
        print(__doc__)
        return 2
    for p in problems:
        print("trace_check: FAIL:", p)
    print("trace_check:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
