#!/usr/bin/env python3
"""Turns benchmarks/run_all.sh's output directory into the markdown tables of benchmarks/README.md.

Ratios are taken run by run: each repeat's mode against the same repeat's baseline (the runs of one
repeat are adjacent in time), then the median and the min-max of those per-repeat ratios.
"""
import csv
import json
import os
import statistics
import sys
from collections import defaultdict

out = sys.argv[1]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def load_jsonl(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]


rows = []
if os.path.exists(os.path.join(out, "runs.csv")):
    with open(os.path.join(out, "runs.csv")) as f:
        for r in csv.DictReader(f):
            try:
                r["mean_ms"] = float(r["mean_ms"])
            except (TypeError, ValueError):
                continue
            rows.append(r)

device = open(os.path.join(out, "device.txt")).read().strip().replace("\n", ", ") if os.path.exists(
    os.path.join(out, "device.txt")) else "unknown device"
print(f"Device: {device}\n")

# ---- step time per mode ----------------------------------------------------------------------
BASE = {"transformer": "baseline", "launch": "baseline", "gpt": "off"}
ORDER = ["baseline", "compiled_out", "off", "host", "cupti_callbacks", "cupti_floor", "cupti_floor_callbacks",
         "attached_nocounters", "attached",
         "full_nocounters", "full_quiet", "full", "budget", "budget_nocounters", "budget_prom", "budget_keep", "sampled", "sampled_detach", "torch_profiler"]
by = defaultdict(dict)  # (workload, mode) -> repeat -> row
for r in rows:
    if r["repeat"].startswith("mem"):
        continue
    by[(r["workload"], r["mode"])][r["repeat"]] = r
for workload in ["transformer", "launch", "gpt"]:
    modes = [m for m in ORDER if (workload, m) in by]
    if not modes:
        continue
    base = by.get((workload, BASE[workload]), {})
    sample = next(iter(by[(workload, modes[0])].values()))
    lps = sample.get("launches_per_step") or "?"
    print(f"### {workload} (launches per step: {lps}; {sample.get('steps') or '?'} timed steps per run)\n")
    print("| mode | step ms, median of runs | min – max | ratio to " + BASE[workload] +
          ", median | ratio min – max | overhead % (median) | runs |")
    print("|---|---|---|---|---|---|---|")
    for m in modes:
        runs = by[(workload, m)]
        ms = [r["mean_ms"] for r in runs.values()]
        ratios = [runs[k]["mean_ms"] / base[k]["mean_ms"] for k in runs if k in base]
        every = next(iter(runs.values()))["every"]
        label = {"sampled": f"sampled (trace_every={every})",
                 "sampled_detach": f"sampled (trace_every={every}), CUPTI detached between traced steps", "cupti_floor": "raw CUPTI, same record kinds (floor)",
                 "host": "host (scopes, no CUPTI)", "full": "full attribution, trace_every=1 (+ PM sampling counters)",
                 "full_nocounters": "full attribution, counters off",
                 "budget": "defaults: overhead_budget 0.5 % chooses trace_every (and keep or detach)",
                 "budget_keep": "overhead_budget 0.5 %, untraced_cupti=keep (never detached)",
                 "budget_nocounters": "defaults with counters off",
                 "budget_prom": "defaults + Prometheus textfile every 100 ms + endpoint scraped every 0.2 s",
                 "attached": "CUPTI attached, records off (only step 0 traced), counters on",
                 "attached_nocounters": "CUPTI attached, records off (only step 0 traced), counters off", "off": "off (STEPTRACE_ENABLED=0)",
                 "compiled_out": "compiled out (STEPTRACE_DISABLE)", "baseline": "baseline (no steptrace)",
                 "torch_profiler": "torch.profiler (Kineto, CPU+CUDA)",
                 "cupti_callbacks": "raw CUPTI: empty callbacks on the launch sites, no records",
                 "cupti_floor_callbacks": "raw CUPTI: same record kinds + empty callbacks on the launch sites",
                 "full_quiet": "full attribution, counters off, memory sampled every 1 s"}.get(m, m)
        rmed = med(ratios)
        enq = [float(r["enqueue_mean_ms"]) for r in runs.values() if r.get("enqueue_mean_ms")]
        if enq:
            label += f" (enqueue {med(enq):.2f} ms)"
        print(f"| {label} | {med(ms):.3f} | {min(ms):.3f} – {max(ms):.3f} | {rmed:.4f} | "
              f"{min(ratios):.4f} – {max(ratios):.4f} | {100 * (rmed - 1):+.2f} | {len(ms)} |")
    for sm in ["sampled", "sampled_detach"]:
        if (workload, sm) not in by:
            continue
        runs = by[(workload, sm)].values()
        t = [float(r["traced_mean_ms"]) for r in runs if r.get("traced_mean_ms") and float(r["traced_mean_ms"]) > 0]
        u = [float(r["untraced_mean_ms"]) for r in runs if r.get("untraced_mean_ms") and float(r["untraced_mean_ms"]) > 0]
        if t and u:
            print(f"\n{sm}: traced steps {med(t):.3f} ms, the others {med(u):.3f} ms (medians over runs).")
    print()

# ---- the budget's estimate against the measured cost ------------------------------------------------
if os.path.exists(os.path.join(out, "budget.csv")):
    est = defaultdict(list)
    with open(os.path.join(out, "budget.csv")) as f:
        for row in csv.reader(f):
            if len(row) >= 8:
                est[(row[0], row[8] if len(row) > 8 else "budget")].append(row)
    if est:
        print("### overhead_budget (defaults): its estimate against the cost measured side by side\n")
        print("| workload | mode | trace_every chosen | traced / timed steps, each run | estimated % (median of runs) | measured % vs baseline "
              "(median, min – max) | measured / estimated | method | within budget | untraced_cupti (last line) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for (workload, mode), rs in est.items():
            runs = by.get((workload, mode), {})
            base = by.get((workload, BASE.get(workload, "baseline")), {})
            meas = [100 * (runs[k]["mean_ms"] / base[k]["mean_ms"] - 1) for k in runs if k in base]
            e = [100 * float(r[3]) for r in rs if r[3]]
            ratio = f"{med(meas) / med(e):.2f}" if meas and e and med(e) > 0 else "—"
            traced = ", ".join(f"{r[6]}/{r[7]}" for r in rs)
            print(f"| {workload} | {mode} | {', '.join(sorted(set(r[2] for r in rs)))} | {traced} | "
                  f"{med(e):.3f} | " + (f"{med(meas):+.3f} ({min(meas):+.3f} – {max(meas):+.3f})" if meas else "—") +
                  f" | {ratio} | {', '.join(sorted(set(r[4] for r in rs)))} | {', '.join(sorted(set(r[5] for r in rs)))} | "
                  f"{', '.join(sorted(set(r[9] for r in rs if len(r) > 9))) or '—'} |")
        print()

# ---- added host cost per kernel ------------------------------------------------------------------
lc = load_jsonl("launch_cost.jsonl")
if lc:
    per = defaultdict(list)
    for r in lc:
        per[r["mode"]].append(r["host_ns_per_launch"])
    print("### Host ns per kernel launch (`launch_cost`, 50 000 empty kernels)\n")
    print("| mode | median | min – max | runs |")
    print("|---|---|---|---|")
    for m in ["none", "activity", "activity_api", "activity_callbacks", "steptrace_host", "steptrace", "steptrace_untraced",
              "activity_disabled", "subscribed_disabled", "finalized"]:
        if per[m]:
            print(f"| {m} | {med(per[m]):.0f} | {min(per[m]):.0f} – {max(per[m]):.0f} | {len(per[m])} |")
    by_repeat = defaultdict(dict)
    for r in lc:
        by_repeat[r.get("repeat")][r["mode"]] = r["host_ns_per_launch"]
    over_floor = [v["steptrace"] - v["activity"] for v in by_repeat.values() if "steptrace" in v and "activity" in v]
    floor = [v["activity"] - v["none"] for v in by_repeat.values() if "activity" in v and "none" in v]
    if over_floor:
        print(f"\nRaw CUPTI floor (activity − none): {med(floor) / 1000:.2f} µs per launch (median of runs, "
              f"{min(floor) / 1000:.2f} – {max(floor) / 1000:.2f}); steptrace full above that floor: "
              f"{med(over_floor) / 1000:+.2f} µs ({min(over_floor) / 1000:+.2f} – {max(over_floor) / 1000:+.2f}).")
    handler = [v["steptrace"] - v["activity_callbacks"] for v in by_repeat.values()
               if "steptrace" in v and "activity_callbacks" in v]
    dispatch = [v["activity_callbacks"] - v["activity"] for v in by_repeat.values()
                if "activity_callbacks" in v and "activity" in v]
    if handler:
        print(f"Of that, CUPTI's callback dispatch (empty callbacks on the same sites − activity): "
              f"{med(dispatch) / 1000:+.2f} µs ({min(dispatch) / 1000:+.2f} – {max(dispatch) / 1000:+.2f}); "
              f"steptrace's own handler (steptrace − empty callbacks): {med(handler) / 1000:+.2f} µs "
              f"({min(handler) / 1000:+.2f} – {max(handler) / 1000:+.2f}).")
    print()
launch = {m: by.get(("launch", m), {}) for m in ORDER}
if launch["full"] and launch["host"]:
    lps = float(next(iter(launch["full"].values()))["launches_per_step"])
    added = [(launch["full"][k]["mean_ms"] - launch["host"][k]["mean_ms"]) * 1e3 / lps
             for k in launch["full"] if k in launch["host"]]
    print(f"Launch-bound step: full attribution adds {med(added):.2f} µs per launch over scopes-only "
          f"({min(added):.2f} – {max(added):.2f}), CUPTI's floor included.")
    if launch["cupti_floor"]:
        base = launch["baseline"]
        floor = [(launch["cupti_floor"][k]["mean_ms"] - base[k]["mean_ms"]) * 1e3 / lps
                 for k in launch["cupti_floor"] if k in base]
        above = [(launch["full"][k]["mean_ms"] - launch["cupti_floor"][k]["mean_ms"]) * 1e3 / lps
                 for k in launch["full"] if k in launch["cupti_floor"]]
        print(f"Raw CUPTI (same record kinds) costs {med(floor):.2f} µs per launch over the baseline "
              f"({min(floor):.2f} – {max(floor):.2f}); steptrace's full attribution costs {med(above):+.2f} µs per "
              f"launch above that floor ({min(above):+.2f} – {max(above):+.2f}).")
    print()

# ---- host cost of a scope -------------------------------------------------------------------------
sc = load_jsonl("scope_cost.jsonl")
if sc:
    # Columns: (build, clock). The compiled build does not see the runtime's clock choice: null unless
    # STEPTRACE_CLOCK=steady forced it (then it chose what the header-only build chose on this machine).
    def column(r):
        return (r.get("mode", "header_only"), r.get("scope_clock") or "automatic")
    names = {("header_only", "ticks"): "header-only, tick counter", ("header_only", "steady_clock"): "header-only, steady_clock",
             ("compiled", "automatic"): "compiled, clock automatic", ("compiled", "steady_clock"): "compiled, steady_clock"}
    cols = [c for c in names if any(column(r) == c for r in sc)]
    print("### Host ns per scope (`scope_cost`, 2 000 000 iterations), median (min – max) of runs\n")
    print("| what | " + " | ".join(names[c] for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for key, what in [("phase_scope_not_running_ns", "TRACE_PHASE, no session"),
                      ("phase_scope_ns", "TRACE_PHASE, running (steps of 1000 scopes)"),
                      ("phase_scope_in_step_ns", "TRACE_PHASE, running, timed inside its steps (without the step boundary)"),
                      ("nested_phase_scope_ns", "nested TRACE_PHASE (per scope)"),
                      ("step_scope_ns", "TRACE_STEP"),
                      ("clock_read_ns", "its parts: one steady_clock::now()"),
                      ("ticks_read_ns", "its parts: one tick-counter read (rdtsc)"),
                      ("nvtx_push_pop_ns", "its parts: NVTX push + pop (no tool attached)"),
                      ("mutex_lock_unlock_ns", "its parts: uncontended std::mutex lock + unlock")]:
        cells = []
        for c in cols:
            xs = [r[key] for r in sc if r.get(key) is not None and column(r) == c]
            cells.append(f"{med(xs):.1f} ({min(xs):.1f} – {max(xs):.1f})" if xs else "—")
        if any(cell != "—" for cell in cells):
            print(f"| {what} | " + " | ".join(cells) + " |")
    print()

# ---- host memory ----------------------------------------------------------------------------------
mem = defaultdict(dict)
for r in rows:
    if r["repeat"].startswith("mem"):
        mem[r["repeat"]][r["mode"]] = r
if mem:
    print("### Peak host memory (VmHWM), launch-bound workload, full attribution vs baseline\n")
    print("| timed steps | kernels traced | baseline MiB | full MiB | steptrace's share MiB |")
    print("|---|---|---|---|---|")
    for k in sorted(mem, key=lambda s: int(s[3:])):
        b, f = mem[k].get("baseline"), mem[k].get("full")
        if b and f:
            hb, hf = int(b["rss_hwm_kib"]) / 1024, int(f["rss_hwm_kib"]) / 1024
            n = int(f["steps"]) * int(f["launches_per_step"])
            print(f"| {f['steps']} | {n:,} | {hb:.1f} | {hf:.1f} | {hf - hb:.1f} |")
    print()
