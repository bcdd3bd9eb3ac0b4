#!/usr/bin/env python3
"""How long steptrace-report takes on large runs, and how large the page gets.

  benchmarks/report_scale.py [STEPS_PER_RANK RANKS ...]   default: 100000 1, 1563 64, 10000 64

Lines are the H100 lines of tests/data repeated (global_step renumbered, each rank's step time scaled
slightly), one file per rank. Prints lines, input MB, build seconds, page MB.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_ranks(d, steps, ranks):
    src = [l for l in open(os.path.join(ROOT, "tests", "data", "h100_mlp_lines.jsonl")) if '"event"' not in l[:20]]
    objs = [json.loads(l) for l in src]
    paths, size = [], 0
    for r in range(ranks):
        p = os.path.join(d, f"steps-{r}.jsonl")
        with open(p, "w") as f:
            for i in range(steps):
                o = dict(objs[i % len(objs)], global_step=i, rank=r, world_size=ranks)
                o["step_time_ms"] = o["step_time_ms"] * (1 + 0.01 * r)
                f.write(json.dumps(o) + "\n")
        size += os.path.getsize(p)
        paths.append(p)
    return paths, size


def main(argv):
    cases = [(int(argv[i]), int(argv[i + 1])) for i in range(0, len(argv), 2)] or [(100000, 1), (1563, 64), (10000, 64)]
    for steps, ranks in cases:
        with tempfile.TemporaryDirectory() as d:
            paths, size = write_ranks(d, steps, ranks)
            out = os.path.join(d, "report.html")
            t = time.time()
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "steptrace_report.py"), *paths, "-o", out],
                           check=True, capture_output=True)
            dt = time.time() - t
            print(f"report_scale: {steps * ranks} lines ({steps} steps x {ranks} ranks, {size / 1e6:.0f} MB): "
                  f"{dt:.1f} s, page {os.path.getsize(out) / 1e6:.2f} MB, {os.cpu_count()} cores")


if __name__ == "__main__":
    main(sys.argv[1:])
