#!/usr/bin/env python3
"""Step times by distance from the last traced step, from the lines of a run under the overhead budget.

    budget_profile.py WARMUP LINES.jsonl...
For each file: per distance d (0 = the traced step, 3 = three or more steps after one) the steps, the mean
and the median step_time_ms; then what the run cost against its own clean steps (mean of all timed
steps / mean of the steps >= 3 after a trace - 1), next to the estimate on the last line. This compares
within one run, free of the run-to-run spread that a comparison with a separate baseline run carries.
"""
import json
import statistics
import sys

warmup = int(sys.argv[1])
for path in sys.argv[2:]:
    lines = []
    with open(path) as f:
        for text in f:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if "global_step" in line:
                lines.append(line)
    by_distance, last_traced, timed = {}, None, []
    for line in lines:
        if line.get("traced"):
            last_traced = line["global_step"]
        if line["global_step"] < warmup or last_traced is None or line.get("step_time_ms") is None:
            continue
        timed.append(line["step_time_ms"])
        by_distance.setdefault(min(line["global_step"] - last_traced, 3), []).append(line["step_time_ms"])
    if 3 not in by_distance or not timed:
        print(f"{path}: no clean steps")
        continue
    parts = ", ".join(f"d={d}{'+' if d == 3 else ''}: {len(v)} steps, mean {statistics.mean(v):.3f}, median {statistics.median(v):.3f}"
                      for d, v in sorted(by_distance.items()))
    cost = statistics.mean(timed) / statistics.mean(by_distance[3]) - 1
    o = lines[-1].get("overhead", {})
    est = o.get("estimated_fraction")
    print(f"{path}: {parts}; cost against its clean steps {cost * 100:+.3f} %, "
          f"estimate on the last line {est * 100 if est is not None else float('nan'):.3f} % (trace_every {o.get('trace_every')})")
