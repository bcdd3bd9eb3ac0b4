"""What the overhead budget said it cost, from a run's lines: one CSV row for benchmarks/run_all.sh.

    budget_estimate.py LINES.jsonl WORKLOAD REPEAT WARMUP [MODE]
prints: workload,repeat,trace_every,estimated_fraction,method,within_budget,traced_steps,steps,mode,untraced_cupti
over the lines of the timed steps (global_step >= WARMUP): the interval in force on the last line, the
median estimate, the last method and whether it was within the budget, and how many steps were traced.
"""
import json
import statistics
import sys

path, workload, repeat, warmup = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4] or 0)
mode = sys.argv[5] if len(sys.argv) > 5 else "budget"
lines = []
with open(path) as f:
    for text in f:
        try:
            lines.append(json.loads(text))
        except ValueError:
            pass
timed = [l for l in lines if l.get("global_step", -1) >= warmup]
est = [l["overhead"]["estimated_fraction"] for l in timed if l["overhead"]["estimated_fraction"] is not None]
last = timed[-1]["overhead"] if timed else {}
print(",".join(str(x) for x in [
    workload, repeat, last.get("trace_every", ""), f"{statistics.median(est):.6f}" if est else "",
    last.get("method") or "", last.get("within_budget"), sum(1 for l in timed if l.get("traced")), len(timed),
    mode, last.get("untraced_cupti") or ""]))
