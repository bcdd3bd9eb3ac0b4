#!/usr/bin/env python3
"""The tables of benchmarks/default_cost.sh (issue #31): what the defaults cost, against the targets.

    default_cost_summary.py OUT_DIR        writes OUT_DIR/table.md and prints it

Reads OUT_DIR/runs.csv (one row per run), OUT_DIR/setup.txt and the runs' lines under OUT_DIR/lines/.
Step time is each program's mean over its timed steps: a mode that traces one step in N pays its cost on
those steps only, and the mean carries it at its rate (a median would leave it out). Ratios are taken
repeat by repeat against the same repeat's `off` run of the same workload (the runs of a repeat are
adjacent in time, in a shuffled order); then the median and the min - max over repeats. A difference in
points is 100 x (ratio of one mode - ratio of the other), per repeat, then median and min - max.
A verdict reads the median; "spread crosses" says the min - max reaches the other side of the threshold.
"""
import csv
import json
import os
import statistics
import sys
from collections import defaultdict

WORKLOADS = [("transformer", "(a) GPU-bound transformer step (cuBLAS)"),
             ("python_gpt", "(b) PyTorch eager GPT through the Python package"),
             ("launch", "(c) launch-bound C++ step")]
MODES = [("off", "off (no steptrace)"),
         ("floor", "raw CUPTI floor"),
         ("default", "**default** (no setting)"),
         ("full", "full (`trace_every=1`)"),
         ("full_nocounters", "full, counters off"),
         ("default_nocounters", "default, counters off"),
         ("disabled", "instrumented, `enabled=0`"),
         ("host", "steptrace without CUPTI (`cupti=off`)"),
         ("callbacks", "raw CUPTI callbacks, no records"),
         ("attached", "CUPTI attached, no tracing after step 0"),
         ("default_detach", "default, `untraced_cupti=detach`"),
         ("host_slowpoll", "without CUPTI, memory/NVML read once a minute"),
         ("host_logevery", "without CUPTI, a line per 100 steps"),
         ("default_slowpoll", "default, memory/NVML read once a minute"),
         ("default_norecorder", "default without the flight recorder")]
ESTIMATE_TOLERANCE_POINTS = 0.15


# ---- reading --------------------------------------------------------------------------------------

def read_runs(out):
    """(workload, mode) -> {repeat: row}, and every row (failed ones too)."""
    by, rows = defaultdict(dict), []
    path = os.path.join(out, "runs.csv")
    if not os.path.exists(path):
        return by, rows
    with open(path) as f:
        for row in csv.DictReader(f):
            rows.append(row)
            if not (row.get("status") or "").startswith("ok"):  # ok, or ok_rcN / ok_timeout: measured, then a bad exit
                continue
            try:
                row["mean_ms"] = float(row["mean_ms"])
            except (TypeError, ValueError):
                continue
            by[(row["workload"], row["mode"])][int(row["repeat"])] = row
    return by, rows


def read_lines(path):
    """Step lines and the last end record of one JSONL file; unreadable lines are skipped."""
    steps, end = [], None
    try:
        with open(path) as f:
            for text in f:
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if not isinstance(line, dict):
                    continue
                if line.get("event") == "end":
                    end = line
                elif "event" not in line:
                    steps.append(line)
    except OSError:
        return None, None
    return steps, end


# ---- numbers --------------------------------------------------------------------------------------

def spread(values):
    """(median, min, max) or None."""
    values = [v for v in values if v is not None]
    return (statistics.median(values), min(values), max(values)) if values else None


def ratios(by, workload, mode):
    """repeat -> mean step time of `mode` / that of `off` in the same repeat."""
    off, this = by.get((workload, "off"), {}), by.get((workload, mode), {})
    return {r: this[r]["mean_ms"] / off[r]["mean_ms"] for r in sorted(this) if r in off and off[r]["mean_ms"] > 0}


def difference_points(by, workload, a, b):
    """repeat -> 100 x (ratio of a - ratio of b); b == "off" gives a's cost in points."""
    ra = ratios(by, workload, a)
    rb = {r: 1.0 for r in ra} if b == "off" else ratios(by, workload, b)
    return {r: 100 * (ra[r] - rb[r]) for r in ra if r in rb}


def overhead_of(line):
    return (line or {}).get("overhead") or {}


def interval_of(overhead):
    """The estimate's interval: [`estimated_fraction`, `estimated_fraction_high`] (the step-time estimate,
    and the same with the background thread's CPU time charged in full and the stream markers at their
    measured upper end: docs/schema.md); None where either is null (the high end is until the markers'
    in-run comparison has measured)."""
    low, high = overhead.get("estimated_fraction"), overhead.get("estimated_fraction_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return low, high
    return None


def run_facts(out, row):
    """What one steptrace run's lines say: the last line's estimate, how many steps were traced, traces."""
    if not row.get("lines"):
        return None
    steps, end = read_lines(os.path.join(out, row["lines"]))
    if steps is None:
        return {"missing": True}
    warmup = int(row.get("warmup") or 0)
    timed = [l for l in steps if (l.get("global_step") if l.get("global_step") is not None else -1) >= warmup]
    last = steps[-1] if steps else {}
    o = overhead_of(last)
    files = {(l.get("trace") or {}).get("file") for l in steps} - {None}
    written = ((end or {}).get("traces") or {}).get("written")
    parts = o.get("parts") if isinstance(o.get("parts"), dict) else None
    return {
        "missing": False,
        "lines": len(steps),
        "timed": len(timed),
        "traced": sum(1 for l in steps if l.get("gpu") is not None),
        "traced_timed": sum(1 for l in timed if l.get("gpu") is not None),
        "counters": sum(1 for l in steps if l.get("counters") is not None),
        "incomplete": sum(1 for l in steps if (l.get("gpu") or {}).get("complete") is False),
        "estimate": o.get("estimated_fraction"),
        "interval": interval_of(o),
        "method": o.get("method"),
        "trace_every": o.get("trace_every"),
        "untraced_cupti": o.get("untraced_cupti"),
        "parts": parts,
        "traces_written": written if written is not None else len(files),
        "traces_from": "end record" if written is not None else "lines",
        "end": end is not None,
    }


# ---- formatting -----------------------------------------------------------------------------------

def fmt(v, digits=3, sign=False):
    if v is None:
        return "—"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def fmt_spread(s, digits=3, sign=False):
    return ("—", "—") if s is None else (fmt(s[0], digits, sign), f"{fmt(s[1], digits, sign)} – {fmt(s[2], digits, sign)}")


def verdict(s, threshold, lower_is_better=True):
    """pass / FAIL on the median; notes when the spread reaches the other side."""
    if s is None:
        return "n/a (no paired runs)"
    ok = s[0] <= threshold if lower_is_better else s[0] >= threshold
    crosses = (s[2] > threshold) if ok else (s[1] <= threshold)
    return ("pass" if ok else "**FAIL**") + (" (spread crosses)" if crosses else "")


# ---- the tables -----------------------------------------------------------------------------------

def summarize(out):
    by, rows = read_runs(out)
    md = []
    setup = {}
    if os.path.exists(os.path.join(out, "setup.txt")):
        for text in open(os.path.join(out, "setup.txt")):
            if "=" in text:
                k, v = text.rstrip("\n").split("=", 1)
                setup[k] = v
    repeats = sorted({int(r["repeat"]) for r in rows if r.get("repeat", "").isdigit()})
    failed = [r for r in rows if not (r.get("status") or "").startswith("ok")]
    bad_exit = [r for r in rows if (r.get("status") or "").startswith("ok_")]
    md.append("## The default, held to account (issue #31): results\n")
    md.append(f"Device: {setup.get('device') or 'unknown'}, {setup.get('cpus', '?')} CPUs; commit {setup.get('commit', '?')}; "
              f"{setup.get('date', '?')}; CPUs pinned: {setup.get('pinned_cpus', 'none')}; {len(repeats)} repeats (asked {setup.get('repeats', '?')}), seed {setup.get('seed', '?')}; "
              f"{len(rows) - len(failed)} runs ok, {len(failed)} not" +
              (": " + ", ".join(f"r{r['repeat']} {r['workload']}/{r['mode']} ({r['status']})" for r in failed) if failed else "") +
              ("; measured, then a bad exit (kept): " + ", ".join(f"r{r['repeat']} {r['workload']}/{r['mode']} ({r['status']})"
                                                               for r in bad_exit) if bad_exit else "") + ".\n")
    for w, _ in WORKLOADS:
        if setup.get(w):
            md.append(f"- {w}: {setup[w]}")
    if setup.get("python"):
        md.append(f"- python: {setup['python']}")
    md.append("")

    # Step time per workload and mode.
    for w, title in WORKLOADS:
        present = [(m, label) for m, label in MODES if by.get((w, m))]
        if not present:
            continue
        md.append(f"### {title}\n")
        md.append("| mode | runs | step ms (mean of timed steps), median of runs | min – max | ratio to off, median | min – max | cost % | launches per step |")
        md.append("|---|---|---|---|---|---|---|---|")
        for m, label in present:
            runs = by[(w, m)]
            ms = fmt_spread(spread([r["mean_ms"] for r in runs.values()]))
            rs = spread(list(ratios(by, w, m).values()))
            ratio = fmt_spread(rs, 4)
            cost = "—" if rs is None else fmt(100 * (rs[0] - 1), 2, sign=True)
            launches = sorted({r.get("launches_per_step") for r in runs.values() if r.get("launches_per_step") not in (None, "", "?")})
            md.append(f"| {label} | {len(runs)} | {ms[0]} | {ms[1]} | {ratio[0]} | {ratio[1]} | {cost} | {', '.join(launches) or '?'} |")
        md.append("")

    # The differences the targets name.
    md.append("### Differences, points of step time (per repeat, then median and min – max)\n")
    md.append("| workload | difference | median | min – max | repeats |")
    md.append("|---|---|---|---|---|")
    diffs = {}
    for w, _ in WORKLOADS:
        for a, b, what in (("default", "off", "default − off (the default's cost)"),
                           ("floor", "off", "floor − off (CUPTI alone)"),
                           ("full", "floor", "full − floor (steptrace above CUPTI)"),
                           ("full", "full_nocounters", "full − full without counters (the counters)"),
                           ("default", "default_nocounters", "default − default without counters (the counters, default)"),
                           ("default_nocounters", "off", "default without counters − off"),
                           ("disabled", "off", "instrumented, disabled − off (the binary)"),
                           ("host", "off", "steptrace without CUPTI − off (the host side)"),
                           ("callbacks", "off", "raw callbacks − off (staying attached, raw)"),
                           ("attached", "host", "attached, not tracing − without CUPTI (staying attached)"),
                           ("default", "attached", "default − attached (the traced steps)"),
                           ("default_detach", "off", "default, detached between traces − off"),
                           ("host", "host_slowpoll", "host − host polling once a minute (memory/NVML reads)"),
                           ("host", "host_logevery", "host − host writing a line per 100 steps (lines)"),
                           ("default", "default_slowpoll", "default − default polling once a minute (memory/NVML reads)"),
                           ("default", "default_norecorder", "default − default without the recorder (the ring)")):
            d = difference_points(by, w, a, b)
            diffs[(w, a, b)] = spread(list(d.values()))
            if d:
                s = fmt_spread(diffs[(w, a, b)], 2, sign=True)
                md.append(f"| {w} | {what} | {s[0]} | {s[1]} | {len(d)} |")
    md.append("")

    # What the lines say.
    facts = {}
    for w, _ in WORKLOADS:
        for m in ("default", "full", "full_nocounters", "default_nocounters"):
            facts[(w, m)] = {int(r["repeat"]): run_facts(out, r) for r in rows
                             if r["workload"] == w and r["mode"] == m and (r.get("status") or "").startswith("ok") and r.get("lines")}
    md.append("### The default runs' lines: the estimate on the last line against the measured cost\n")
    md.append("| workload | estimate %, last line (median; per run) | interval % | measured cost %, median | estimate − measured, points | method, trace_every, untraced_cupti (last run) | traced steps: timed (all) per run | traces written per run |")
    md.append("|---|---|---|---|---|---|---|---|")
    estimates = {}
    for w, _ in WORKLOADS:
        runs = {r: f for r, f in facts[(w, "default")].items() if f and not f["missing"]}
        if not runs:
            continue
        est = [f["estimate"] for f in runs.values() if f["estimate"] is not None]
        est_s = spread([100 * e for e in est])
        ivs = [f["interval"] for f in runs.values() if f["interval"]]
        iv = (statistics.median(100 * i[0] for i in ivs), statistics.median(100 * i[1] for i in ivs)) if ivs else None
        measured = diffs.get((w, "default", "off"))
        estimates[w] = (est_s, iv, measured)
        per_run = ", ".join(fmt(100 * f["estimate"], 3) if f["estimate"] is not None else "null" for _, f in sorted(runs.items()))
        last = runs[max(runs)]
        md.append(f"| {w} | {fmt(est_s[0] if est_s else None)} ({per_run}) | "
                  f"{'—' if iv is None else fmt(iv[0]) + ' – ' + fmt(iv[1])} | {fmt(measured[0] if measured else None, 3, True)} | "
                  f"{fmt(est_s[0] - measured[0], 3, True) if est_s and measured else '—'} | "
                  f"{', '.join('—' if last[k] is None else str(last[k]) for k in ('method', 'trace_every', 'untraced_cupti'))} | "
                  f"{', '.join(str(f['traced_timed']) + '/' + str(f['timed']) + ' (' + str(f['traced']) + '/' + str(f['lines']) + ')' for _, f in sorted(runs.items()))} | "
                  f"{', '.join(str(f['traces_written']) for _, f in sorted(runs.items()))} |")
    md.append("")
    parts_rows = []
    for w, _ in WORKLOADS:
        runs = [f for f in facts[(w, "default")].values() if f and f.get("parts")]
        names = sorted({n for f in runs for n in f["parts"]})
        for n in names:
            fr = [100 * p["fraction"] for f in runs for k, p in f["parts"].items()
                  if k == n and isinstance(p, dict) and isinstance(p.get("fraction"), (int, float))]
            bases = sorted({str(p.get("basis")) for f in runs for k, p in f["parts"].items() if k == n and isinstance(p, dict)})
            s = fmt_spread(spread(fr))
            parts_rows.append(f"| {w} | {n} | {s[0]} | {s[1]} | {', '.join(bases)} |")
    if parts_rows:
        md.append("The estimate's parts (`overhead.parts` on the last line), % of step time over the default runs:\n")
        md.append("| workload | part | median % | min – max | basis |")
        md.append("|---|---|---|---|---|")
        md += parts_rows
        md.append("")

    md.append("Full-attribution runs, from their lines: traced lines / lines, lines with counters, lines with `gpu.complete: false`:\n")
    md.append("| workload | mode | per run |")
    md.append("|---|---|---|")
    counters_ran, traced_any = {}, {}
    for w, _ in WORKLOADS:
        for m in ("full", "full_nocounters"):
            runs = {r: f for r, f in facts[(w, m)].items() if f and not f["missing"]}
            if not runs:
                continue
            if m == "full":
                counters_ran[w] = any(f["counters"] for f in runs.values())
                traced_any[w] = any(f["traced"] for f in runs.values())
            md.append(f"| {w} | {m} | " + "; ".join(f"{f['traced']}/{f['lines']} traced, {f['counters']} with counters, "
                                                    f"{f['incomplete']} incomplete" for _, f in sorted(runs.items())) + " |")
    md.append("")

    # Targets.
    md.append("### Against the targets (issue #31)\n")
    md.append("| target | measured (median; min – max), points | verdict |")
    md.append("|---|---|---|")

    def row(name, s, threshold, workload=None):
        t = fmt_spread(s, 2, sign=True)
        note = ""
        if workload and traced_any.get(workload) is False:  # a full run that traced nothing measured no attribution
            note = "; but no full-mode line was traced (CUPTI unavailable?): not a measurement of attribution"
        md.append(f"| {name} | {t[0]} ({t[1]}) | {verdict(s, threshold)}{note} |")

    row("(a) default − off ≤ 0.3 %, counters included", diffs.get(("transformer", "default", "off")), 0.3)
    row("(b) default − off ≤ 1 %", diffs.get(("python_gpt", "default", "off")), 1.0)
    row("(c) default − off ≤ 1 %", diffs.get(("launch", "default", "off")), 1.0)
    row("(a) full − floor ≤ +0.2 points", diffs.get(("transformer", "full", "floor")), 0.2, "transformer")
    for w, _ in WORKLOADS:
        s = diffs.get((w, "full", "full_nocounters"))
        name = f"({'abc'[[x for x, _ in WORKLOADS].index(w)]}) counters: full − full without counters ≤ +0.1 points"
        if counters_ran.get(w) is False:
            md.append(f"| {name} | — | n/a (no full-mode line carried counters: they did not run) |")
        elif s is not None:
            row(name, s, 0.1, w)
    for w, letter in (("transformer", "a"), ("python_gpt", "b")):
        est_s, iv, measured = estimates.get(w, (None, None, None))
        name = f"({letter}) estimate within ±{ESTIMATE_TOLERANCE_POINTS} points of the measured cost, or an interval that holds it"
        if est_s is None or measured is None:
            md.append(f"| {name} | — | n/a (no estimate or no paired runs) |")
            continue
        gap = est_s[0] - measured[0]
        inside = iv is not None and iv[0] <= measured[0] <= iv[1]
        ok = abs(gap) <= ESTIMATE_TOLERANCE_POINTS or inside
        md.append(f"| {name} | estimate {fmt(est_s[0], 3)} %, measured {fmt(measured[0], 3, True)} %: {fmt(gap, 3, True)} "
                  f"(measured spread {fmt(measured[1], 2, True)} – {fmt(measured[2], 2, True)})"
                  f"{'' if iv is None else f'; interval {fmt(iv[0])} – {fmt(iv[1])}'} | "
                  f"{'pass' if ok else '**FAIL**'}{' (interval)' if inside and abs(gap) > ESTIMATE_TOLERANCE_POINTS else ''} |")
    md.append("")
    return "\n".join(md)


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[0]
    if not os.path.isdir(out):
        print(f"default_cost_summary: no directory {out}", file=sys.stderr)
        return 2
    text = summarize(out)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
