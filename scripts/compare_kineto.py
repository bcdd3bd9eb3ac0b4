#!/usr/bin/env python3
"""Per-phase GPU kernel time: steptrace's lines vs a torch.profiler (Kineto) trace of the same program.

    scripts/compare_kineto.py STEPTRACE.jsonl KINETO_TRACE.json [--skip N]

Kineto side: each kernel is joined by its "correlation" id to the CUDA runtime/driver call that launched
it, and that call to the innermost "phase:<name>" user annotation around it on the same thread (the
annotations gpt_train adds beside its steptrace phases). Per-step means are compared phase by phase.
"""
import bisect
import collections
import json
import sys

import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from steptrace.lines import step_lines  # noqa: E402  (the package's log reader, from the source tree)


def steptrace_means(path, skip):
    lines = step_lines(path)[skip:]  # step lines
    if any(l.get("schema") == "steptrace.step/2" for l in lines):
        sys.exit(f"compare_kineto: {path} holds compact lines (steptrace.step/2), without the phases' kernel_ms: "
                 "write the log with line_detail=full (STEPTRACE_LINE_DETAIL=full)")
    if lines and not lines[-1]["step_time_basis"] == "next_step_start":
        lines = lines[:-1]  # the last step's line ends at stop(): not a steady step
    sums = collections.Counter()
    for l in lines:
        for name, p in l["phases"].items():
            sums[name] += p.get("gpu", {}).get("kernel_ms", 0.0)
    return {k: v / len(lines) for k, v in sums.items()}, len(lines)


def kineto_means(path):
    events = json.load(open(path))["traceEvents"]
    launches, kernels, phases = {}, [], collections.defaultdict(list)
    steps = 0
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            corr = e.get("args", {}).get("correlation")
            if corr is not None:
                launches[corr] = (e["tid"], e["ts"])
        elif cat == "kernel":
            kernels.append(e)
        elif cat == "user_annotation" and e["name"].startswith("phase:"):
            phases[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"][6:]))
            if e["name"] == "phase:forward":
                steps += 1
    for tid in phases:
        phases[tid].sort()
    # The step's thread: the one with the most phase annotations. A launch from a thread with no
    # annotation of its own (libtorch's autograd threads run backward) takes the phase open on the step
    # thread at that moment - the same rule steptrace applies.
    step_tid = max(phases, key=lambda t: len(phases[t])) if phases else None

    def innermost(tid, ts):
        spans = phases.get(tid, [])
        i = bisect.bisect_right(spans, (ts, float("inf"), "")) - 1
        while i >= 0:  # the latest-starting span that still contains ts
            b, e, name = spans[i]
            if b <= ts <= e:
                return name
            i -= 1
        return None

    sums = collections.Counter()
    for k in kernels:
        launch = launches.get(k.get("args", {}).get("correlation"))
        phase = None
        if launch:
            tid, ts = launch
            phase = innermost(tid, ts)
            if phase is None and tid != step_tid:
                phase = innermost(step_tid, ts)
        sums[phase or "unphased"] += k["dur"] / 1000.0
    return {k: v / max(steps, 1) for k, v in sums.items()}, steps


def main():
    skip = 10
    args = sys.argv[1:]
    if "--skip" in args:
        i = args.index("--skip")
        skip = int(args[i + 1])
        del args[i:i + 2]
    st, st_steps = steptrace_means(args[0], skip)
    kt, kt_steps = kineto_means(args[1])
    print(f"steptrace: {st_steps} steps; kineto: {kt_steps} steps (adjacent steps of the same run)")
    print(f"{'phase':12s} {'steptrace ms':>13s} {'kineto ms':>10s} {'diff %':>8s}")
    worst = 0.0
    for phase in sorted(set(st) | set(kt)):
        a, b = st.get(phase, 0.0), kt.get(phase, 0.0)
        if a < 0.01 and b < 0.01:
            continue
        diff = 100.0 * (a - b) / b if b else float("inf")
        worst = max(worst, abs(diff))
        print(f"{phase:12s} {a:13.3f} {b:10.3f} {diff:8.2f}")
    print(f"largest difference: {worst:.2f} %")


if __name__ == "__main__":
    main()
