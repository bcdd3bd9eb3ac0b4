#!/usr/bin/env python3
"""The table of benchmarks/scope_ab.sh's runs: scope_cost before and after, ns per open + close.

   scope_ab_summary.py OUT_DIR

Per run, the scope's cost is the median over its batches (one step of 1000 scopes each: a batch that
the host or the background thread interrupted does not move it), beside the median of its floor (two
bare tick reads, measured in alternating batches). The host's state moves the floor between runs; the
runs whose floor is within 5 % of the lowest seen are listed apart ("quiet")."""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from steptrace.lines import read_records  # noqa: E402  (the package's JSONL reader)

out = Path(sys.argv[1])


def runs(name):
    path = out / f"{name}.jsonl"
    if not path.exists():
        return []
    return [r for r in read_records(path) if "batches" in r]  # lines of a scope_cost without batches are left out


def cell(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f} - {max(values):.1f}, n={len(values)})"


series = {name: runs(name) for name in ("before", "after", "before_1core", "after_1core")}
floors = [r["batches"]["two_tick_reads"]["ns_median"] for rows in series.values() for r in rows]
if not floors:
    sys.exit(f"no scope_cost lines with batches in {out}")
quiet = min(floors) * 1.05
rows = [
    ("TRACE_PHASE in its steps, median of batches", lambda r: r["batches"]["phase_scope_in_step"]["ns_median"], False),
    ("the same, runs with a quiet floor", lambda r: r["batches"]["phase_scope_in_step"]["ns_median"], True),
    ("two tick reads (the floor), median of batches", lambda r: r["batches"]["two_tick_reads"]["ns_median"], False),
    ("scope minus floor, per run", lambda r: r["batches"]["phase_scope_in_step"]["ns_median"] - r["batches"]["two_tick_reads"]["ns_median"], False),
    ("what a TRACE_PHASE adds around ~100 ns of work", lambda r: r["batches"].get("scope_added_to_work_ns"), False),
    ("the same, runs with a quiet floor", lambda r: r["batches"].get("scope_added_to_work_ns"), True),
    ("the work alone, median of batches", lambda r: (r["batches"].get("work_alone") or {}).get("ns_median"), False),
    ("TRACE_PHASE in its steps, mean of the run", lambda r: r["phase_scope_in_step_ns"], False),
    ("TRACE_PHASE with the step boundary's share", lambda r: r["phase_scope_ns"], False),
    ("nested TRACE_PHASE, per scope", lambda r: r["nested_phase_scope_ns"], False),
    ("TRACE_PHASE, no session", lambda r: r["phase_scope_not_running_ns"], False),
]
print(f"quiet floor: two tick reads <= {quiet:.1f} ns (5 % over the lowest run's)\n")
print("| what | " + " | ".join(series) + " |")
print("|---" * (len(series) + 1) + "|")
for label, get, only_quiet in rows:
    cells = []
    for name, data in series.items():
        picked = [r for r in data if not only_quiet or r["batches"]["two_tick_reads"]["ns_median"] <= quiet]
        cells.append(cell([v for v in (get(r) for r in picked) if v is not None]))
    print(f"| {label} | " + " | ".join(cells) + " |")
reasons = {r["batches"].get("counters_null_reason") or "counted" for rows_ in series.values() for r in rows_}
print(f"\nhardware counters: {', '.join(sorted(reasons))}")
if (out / "instructions.txt").exists():
    print((out / "instructions.txt").read_text().rstrip())
