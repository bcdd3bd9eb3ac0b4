#!/usr/bin/env python3
"""What the flight recorder's ring costs: memory per kept step and step time, ring on against off,
side by side in one run (interleaved, 3 rounds).

  benchmarks/ring_cost.py BUILD_DIR [--torch GPT_TRAIN] [--rounds N]

Workloads: step_workloads --workload launch (10 000 tiny kernels a step, the worst case per byte of
GPU time), step_workloads --workload transformer, and with --torch the libtorch GPT example. Every
step is traced (STEPTRACE_TRACE_EVERY=1: the ring holds GPU records only for traced steps, so this is
its largest). Memory comes from the end record (traces.ring: bytes_peak, step_bytes_max), the step
time from the programs' own medians (step_workloads) or the lines (gpt_train).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def end_record(log):
    end = None
    for line in open(log):
        if line.startswith('{"event":"end"'):
            end = json.loads(line)
    return end


def line_median(log, key="step_time_ms", skip=5):
    vals = [json.loads(l)[key] for l in open(log) if l.startswith('{"schema":"steptrace.step')]
    return statistics.median(vals[skip:]) if len(vals) > skip else None


def run(cmd, env, log):
    if os.path.exists(log):
        os.remove(log)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"ring_cost: {' '.join(cmd)} failed:\n{out.stderr[-800:]}")
    m = re.search(r"median_ms=([0-9.]+)", out.stdout)
    return float(m.group(1)) if m else line_median(log), end_record(log)


def main(argv):
    build = argv[0]
    torch = argv[argv.index("--torch") + 1] if "--torch" in argv else None
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    sw = os.path.join(build, "benchmarks", "step_workloads")
    cases = [("launch (10 000 kernels/step)", [sw, "--workload", "launch", "--steps", "60", "--warmup", "5"]),
             ("transformer", [sw, "--workload", "transformer", "--steps", "60", "--warmup", "5"])]
    if torch:
        cases.append(("libtorch GPT example", [torch, "--steps", "60"]))
    with tempfile.TemporaryDirectory() as d:
        for name, cmd in cases:
            times = {8: [], 0: []}
            ring = None
            for _ in range(rounds):
                for keep in (8, 0):
                    log = os.path.join(d, f"ring{keep}.jsonl")
                    env = dict(os.environ, STEPTRACE_LOG=log, STEPTRACE_TRACE_EVERY="1", STEPTRACE_SUMMARY="0",
                               STEPTRACE_TRACE_KEEP_STEPS=str(keep), STEPTRACE_TRACE_TRIGGER="0",
                               STEPTRACE_TRACE_DIR=d)
                    c = list(cmd)
                    if "--log" not in c and c[0] == torch:
                        c += ["--log", log]
                    median, end = run(c, env, log)
                    times[keep].append(median)
                    if keep == 8:
                        ring = end["traces"]["ring"]
            on, off = statistics.median(times[8]), statistics.median(times[0])
            lines = [json.loads(l) for l in open(os.path.join(d, "ring8.jsonl")) if l.startswith('{"schema"')]
            records = statistics.median([(l.get("gpu") or {}).get("kernels", 0) +
                                         sum(c.get("count", 0) for p in l.get("phases", {}).values()
                                             for k, c in (p.get("gpu") or {}).items()
                                             if isinstance(c, dict) and "count" in c) for l in lines])
            print(f"ring_cost: {name}: records/step {records:.0f}, kept step max {ring['step_bytes_max'] / 1024:.1f} KiB "
                  f"({ring['step_bytes_max'] / max(1, records):.0f} B/record), ring peak {ring['bytes_peak'] / 2**20:.2f} MiB "
                  f"for {ring['keep_steps']} steps (bound {ring['bytes_max'] / 2**20:.0f} MiB); step median ring on "
                  f"{on:.3f} ms, off {off:.3f} ms, ratio {on / off:.4f} (rounds: on {times[8]}, off {times[0]})")


if __name__ == "__main__":
    main(sys.argv[1:])
