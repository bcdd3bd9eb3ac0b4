#!/usr/bin/env python3
"""steptrace-report: one self-contained HTML page from steptrace's JSON lines.

  steptrace-report steps-*.jsonl [-o report.html] [--title TEXT] [--max-points N] [--jobs N] [--run ID|all]

Reads every file (one per rank, or any mix), and writes a page that opens offline: the data and the
code that draws it are inside the file (no request leaves the page). A log several runs appended to
holds several run_ids: the page shows one run, by default the latest (`--run ID` another, `--run all`
one series per run), and its header lists them all. Runs of many steps are downsampled for plotting
(the page says so); the numbers in the header are over every step shown. Lines are not trusted
(steptrace_report_guard: lines of the wrong types are skipped and counted, every value is escaped, the
per-phase charts and tables keep the 12 phases with the most time and fold the rest into `other`, trace
files are linked only inside the log's directory).
Needs Python 3 only.
"""
import argparse
import heapq
import html
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from multiprocessing import Pool

from steptrace_report_diagnosis import CARRIED_COLORS, LABEL_COLORS, NONE_COLOR, label_table, strip, verdict
from steptrace_report_guard import MAX_NAME, OTHER, TOP_KERNELS, TOP_N, embed, fold, resolve_traces, skipped_note
from steptrace_report_runs import MAX_EVENTS, UnknownRun, catalogue, choose, load_range, merge, runs_text, segments, split_points

MAX_POINTS = 1500
MAX_RANK_LINES = 8
MAX_HEAT_ROWS = 64    # ranks in the per-rank heat map at most: the slowest (the median is over every rank)
MAX_RUN_SERIES = 14   # runs drawn with --run all at most: the latest (one colour each)

MAX_MARKS = 400  # stall/resumed/end marks on a page (steptrace_report_runs.MAX_EVENTS per rank)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]


def buckets_for(n, max_points):
    """Bucket boundaries [(lo, hi)) over n rows: at most max_points buckets."""
    if n <= max_points:
        return [(i, i + 1) for i in range(n)]
    size = n / max_points
    return [(int(i * size), int((i + 1) * size)) for i in range(max_points)]


def reduce(values, buckets):
    """Mean, min, max of the non-null values per bucket (None where a bucket has none)."""
    mean, lo, hi = [], [], []
    for a, b in buckets:
        vals = [v for v in values[a:b] if v is not None]
        if vals:
            mean.append(sum(vals) / len(vals))
            lo.append(min(vals))
            hi.append(max(vals))
        else:
            mean.append(None)
            lo.append(None)
            hi.append(None)
    return mean, lo, hi


def rounded(xs, digits=6):
    return [None if v is None or not math.isfinite(v) else float(f"{v:.{digits}g}") for v in xs]


def why_null(runs, field):
    c = Counter()
    for r in runs:
        c.update(r["nulls"].get(field, {}))
    return c.most_common(1)[0][0] if c else "no value in any line"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def build(paths, title, max_points, workers, wanted=None):
    """The page's data. wanted: the run to show (None: the latest; "all": every run, one series each)."""
    t0 = time.time()
    first = {}
    for p in paths:  # a file named twice is read once
        first.setdefault(os.path.realpath(p), p)
    paths = list(first.values())
    # Files, and large files in parts, read in parallel (JSON decoding is most of the time).
    tasks = [t for p in paths for t in split_points(p, workers)]
    if len(tasks) > 1 and workers > 1:
        with Pool(min(workers, len(tasks))) as pool:
            loaded = pool.map(load_range, tasks, chunksize=1)
    else:
        loaded = [load_range(t) for t in tasks]
    files = [merge([r for t, r in zip(tasks, loaded) if t[0] == p], p) for p in paths]
    segs = segments(files)  # one per (run_id, rank), every file's lines of it
    if not segs:
        bad = sum((f["malformed"] for f in files), Counter())
        raise SystemExit("steptrace-report: no step lines in " + ", ".join(paths) +
                         (" (" + skipped_note(bad) + ")" if bad else ""))
    # Runs: a log several runs appended to holds several run_ids, each with its own steps. One is shown
    # (or each as its own series): never one series whose steps go back.
    all_runs = catalogue(segs)
    shown_ids = choose(all_runs, wanted)
    every = len(shown_ids) > 1
    notes = []
    if len(shown_ids) > MAX_RUN_SERIES:
        notes.append(f"{len(shown_ids)} runs: the latest {MAX_RUN_SERIES} are drawn (one colour each); an older "
                     "one: --run ID.")
        shown_ids = shown_ids[-MAX_RUN_SERIES:]
    runs = [s for s in segs if s["run_id"] in shown_ids]
    color_of = {rid: PALETTE[i % len(PALETTE)] for i, rid in enumerate(shown_ids)}
    # One series per rank (of the run shown): its lines may come from several files.
    by_rank = {s["rank"]: s for s in runs}
    ranks = sorted({s["rank"] for s in runs})
    main = by_rank[ranks[0]] if not every else None
    # Each run shown, by its lowest rank: the series drawn.
    leads = [min((s for s in runs if s["run_id"] == rid), key=lambda s: s["rank"]) for rid in shown_ids]
    total_lines = sum(len(r["steps"]) for r in runs)
    charts = []
    malformed = sum((f["malformed"] for f in files), Counter())
    if malformed:
        notes.append(skipped_note(malformed))

    # The x axis: the lowest rank's steps, row by row (every run's steps, in order, with --run all);
    # downsampled into buckets.
    axis = main["steps"] if not every else sorted({st for s in leads for st in s["steps"]})
    n = len(axis)
    bks = buckets_for(n, max_points)
    x = [axis[a] for a, _ in bks]
    if len(bks) < n:
        notes.append(f"Downsampled for plotting: {n} steps of " + (f"rank {ranks[0]}" if not every else "the runs") +
                     f" into {len(bks)} points (the mean of each bucket of about {n / len(bks):.0f} steps; a shaded "
                     "band is its minimum to maximum). The header's numbers are over every step.")

    def column(run, key):
        """run's values of key, one per step of the axis (None where the run has no such step)."""
        if not every:
            return run["cols"][key]
        at = dict(zip(run["steps"], run["cols"][key]))
        return [at.get(s) for s in axis]

    def series(run, key, name, color, band=False, scale=1.0):
        mean, lo, hi = reduce(column(run, key), bks)
        s = {"name": name, "color": color, "y": rounded([None if v is None else v * scale for v in mean])}
        if band and len(bks) < n:
            s["lo"] = rounded([None if v is None else v * scale for v in lo])
            s["hi"] = rounded([None if v is None else v * scale for v in hi])
        return s

    def per_run(key, name, color, band=False, scale=1.0):
        """The run's series, or with --run all one per run, in the run's colour."""
        if not every:
            return [series(main, key, name, color, band, scale)]
        return [series(s, key, f"run {s['run_id']}", color_of[s["run_id"]], band, scale) for s in leads]

    def chart(cid, title_, unit, ss, kind="line", empty_field=None, ymax=None, note=None):
        c = {"id": cid, "title": title_ + (", one series per run" if every else ""), "unit": unit, "kind": kind,
             "x": x, "series": ss}
        if ymax is not None:
            c["ymax"] = ymax
        if note:
            c["note"] = note
        if not any(v is not None for s in ss for v in s["y"]):
            c["empty"] = f"null on every line: {why_null(runs, empty_field)}" if empty_field else "no data"
        else:  # a series null on every line gets no legend entry, only a word saying so
            blank = [s["name"] for s in ss if all(v is None for v in s["y"])]
            if blank:
                c["series"] = [s for s in ss if s["name"] not in blank]
                c["note"] = ((note + " ") if note else "") + "Null on every line, not drawn (the lines' null_reasons say why): " + ", ".join(blank) + "."
        charts.append(c)

    chart("step_time", "Step time", "ms", per_run("step_time_ms", "step time", PALETTE[0], band=True),
          empty_field="step_time_ms")
    chart("tokens", "Tokens per second (this rank)", "tokens/s",
          per_run("tokens_per_second", "tokens/s", PALETTE[2], band=True), empty_field="tokens_per_second")
    chart("mfu", "Estimated MFU", "fraction of peak",
          per_run("estimated_mfu", "estimated MFU", PALETTE[4]), empty_field="estimated_mfu")

    if every:  # one line per run: the first quantity of each chart below
        chart("utilization", "GPU utilization (busy share)", "fraction",
              per_run("gpu_utilization", "", None), empty_field="gpu_utilization", ymax=1.0)
        chart("memory", "Device memory used (peak in step)", "GiB",
              per_run("device_used_peak_bytes", "", None, scale=1.0 / (1 << 30)),
              empty_field="memory.device_used_peak_bytes")
        chart("nccl", "NCCL kernel time", "ms", per_run("nccl_time_ms", "", None), empty_field="nccl_time_ms")
        notes.append(f"{len(shown_ids)} runs, one series per run (each its own colour, never joined). Per-phase "
                     "time, SM activity, the allocator, the diagnosis over time and the per-rank views are drawn "
                     "for one run at a time: --run ID.")
    else:
        # Per-phase time, stacked: host (each phase's self time: its scopes less the phases nested in
        # them, so a nested phase is not stacked twice) and GPU (each phase's busy time). A phase
        # missing from a line took no time (0); on a line without GPU attribution (`gpu` null: not traced)
        # every GPU phase is unknown (None): a gap in the stack, never a zero.
        # At most TOP_N phases each (the most time over the run), the rest summed as one series `other`.
        if main["inclusive_rows"]:
            notes.append(f"Per-phase host time: {main['inclusive_rows']} lines were written before phases had "
                         "self_ms; their stack holds a nested phase's time twice (in itself and in its parent).")
        for cid, src, title_ in (("phases_host", "host", "Per-phase host self time (stacked)"),
                                 ("phases_gpu", "gpu", "Per-phase GPU busy time (stacked)")):
            keep, rest = fold({p: sum(rows.values()) for p, rows in main[src].items()})
            known = main["gpu_rows"] if src == "gpu" else [True] * n
            ss = []
            for i, p in enumerate(keep):
                col = [main[src][p].get(row, 0.0) if known[row] else None for row in range(n)]
                mean, _, _ = reduce(col, bks)
                ss.append({"name": p, "color": PALETTE[i % len(PALETTE)], "y": rounded(mean)})
            if rest:
                col = [0.0 if k else None for k in known]
                for p in rest:
                    for row, v in main[src][p].items():
                        if known[row]:
                            col[row] += v
                mean, _, _ = reduce(col, bks)
                ss.append({"name": f"{OTHER} ({len(rest)} phases)", "color": PALETTE[TOP_N % len(PALETTE)],
                           "y": rounded(mean)})
                notes.append(f"{title_[:-10]}: {len(keep) + len(rest)} phases; the {TOP_N} with the most "
                             f"{'GPU busy' if src == 'gpu' else 'host'} time over the run are drawn, the other {len(rest)} summed as one series "
                             f"'{OTHER}'.")
            chart(cid, title_, "ms", ss, kind="stacked",
                  empty_field=None if ss else ("gpu" if src == "gpu" else "phases"))
            if not ss:
                charts[-1]["empty"] = ("no phase had GPU records: " + why_null(runs, "gpu")) if src == "gpu" else \
                    "no phase scopes in these lines"

        chart("utilization", "GPU utilization and hardware counters", "fraction",
              [series(main, "gpu_utilization", "GPU utilization (busy share)", PALETTE[0]),
               series(main, "sm_activity", "SM activity", PALETTE[1]),
               series(main, "tensor_core_or_pipe_utilization", "tensor pipe", PALETTE[2]),
               series(main, "memory_bandwidth_utilization", "DRAM bandwidth", PALETTE[3])],
              empty_field="gpu_utilization", ymax=1.0,
              note="GPU utilization is the share of the step with any kernel or copy running (what nvidia-smi "
                   "shows); SM activity is how much of the SMs' time was busy. The gap between them is the "
                   "misleading-utilization gap.")
        gib = 1.0 / (1 << 30)
        chart("memory", "Memory", "GiB",
              [series(main, "device_used_peak_bytes", "device used (peak in step)", PALETTE[0], scale=gib),
               series(main, "allocated_bytes", "allocator: allocated", PALETTE[1], scale=gib),
               series(main, "reserved_bytes", "allocator: reserved", PALETTE[2], scale=gib)],
              empty_field="memory.device_used_peak_bytes")
        chart("nccl", "NCCL time and exposed communication", "ms",
              [series(main, "nccl_time_ms", "NCCL kernels", PALETTE[4]),
               series(main, "nccl_exposed_ms", "exposed (not overlapped)", PALETTE[3])],
              empty_field="nccl_time_ms")

        # Diagnosis over time: the most frequent label of each bucket, lighter where it was carried from the
        # last traced step, grey where nothing was known (basis none).
        shown_labels = {lab for lab, _, _ in label_table(Counter(zip(main["labels"], main["bases"])))[:TOP_N]}
        strip_labels, strip_shades = strip([lab if lab in shown_labels else OTHER for lab in main["labels"]],
                                           main["bases"], bks)
        charts.append({"id": "diagnosis", "title": "Diagnosis over time (most frequent label per point)",
                       "kind": "strip", "x": x, "labels": strip_labels, "shades": strip_shades,
                       "colors": LABEL_COLORS, "carried_colors": CARRIED_COLORS, "none_color": NONE_COLOR})

    # Ranks: step time per rank, and the slowest rank per window.
    if len(ranks) > 1 and not every:
        # Each rank's mean step time per bucket of the lowest rank's steps, from the rank's own lines only
        # (time and memory grow with the lines, not with ranks x steps).
        rows_of, bucket = defaultdict(list), [0] * n
        for row, st in enumerate(main["steps"]):
            rows_of[st].append(row)
        for j, (a, b) in enumerate(bks):
            bucket[a:b] = [j] * (b - a)
        per_rank, by_bucket = {}, defaultdict(dict)
        for rk in ranks:
            acc = defaultdict(lambda: [0.0, 0])
            for st, v in dict(zip(by_rank[rk]["steps"], by_rank[rk]["cols"]["step_time_ms"])).items():
                if v is None:
                    continue
                for row in rows_of.get(st, ()):
                    acc[bucket[row]][0] += v
                    acc[bucket[row]][1] += 1
            per_rank[rk] = {j: t / k for j, (t, k) in acc.items()}
            for j, v in per_rank[rk].items():
                by_bucket[j][rk] = v
        dense = lambda rk: [per_rank[rk].get(j) for j in range(len(bks))]
        if len(ranks) <= MAX_RANK_LINES:
            ss = [{"name": f"rank {rk}", "color": PALETTE[i % len(PALETTE)], "y": rounded(dense(rk))}
                  for i, rk in enumerate(ranks)]
            chart("ranks", "Step time per rank", "ms", ss)
        else:
            med = [statistics.median(by_bucket[j].values()) if by_bucket.get(j) else None for j in range(len(bks))]
            rows = ranks
            if len(ranks) > MAX_HEAT_ROWS:  # the slowest ranks: mean step time over the median, over their points
                score = {rk: statistics.fmean(v / med[j] for j, v in per_rank[rk].items() if med[j]) if
                         any(med[j] for j in per_rank[rk]) else 0.0 for rk in ranks}
                rows = sorted(sorted(ranks, key=lambda rk: -score[rk])[:MAX_HEAT_ROWS])
                notes.append(f"Step time per rank: {len(ranks)} ranks; the {MAX_HEAT_ROWS} slowest (step time over "
                             "the ranks' median, on average) are drawn, coloured against the median of every rank.")
            charts.append({"id": "ranks", "title": f"Step time per rank ({len(ranks)} ranks" +
                           (f", the {len(rows)} slowest" if len(rows) < len(ranks) else "") +
                           "), relative to the ranks' median", "kind": "heat", "x": x,
                           "rows": [f"rank {rk}" for rk in rows], "z": [rounded(dense(rk), 4) for rk in rows],
                           "med": rounded(med, 4)})
        slowest, excess = [], []
        for j in range(len(bks)):
            vals = by_bucket.get(j, {})
            if len(vals) < 2:
                slowest.append(None)
                excess.append(None)
                continue
            rk = max(vals, key=vals.get)
            med = statistics.median(vals.values())
            slowest.append(rk)
            excess.append(vals[rk] - med)
        chart("slowest", "Slowest rank per window: its step time above the ranks' median", "ms",
              [{"name": "slowest rank's excess over the median", "color": PALETTE[3], "y": rounded(excess),
                "tags": slowest}])
        counts = Counter(s for s in slowest if s is not None)
        slow_table = [{"rank": rk, "windows": c, "share": c / max(1, sum(counts.values()))}
                      for rk, c in counts.most_common(8)]
    else:
        slow_table = []
        if len(ranks) == 1:
            notes.append("One rank in these files: per-rank step time and the slowest rank need every rank's file.")

    # Top kernels per phase, over every line of every rank (each line lists its phase's top 5): the TOP_N
    # phases with the most kernel time, TOP_KERNELS kernels each; the other phases merged as one.
    totals = Counter()
    for r in runs:
        for phase, d in r["top"].items():
            totals[phase] += sum(v[0] for v in d.values())
    keep, rest = fold(totals)
    other = f"{OTHER} ({len(rest)} phases)"
    into = {p: p for p in keep}
    top = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for r in runs:
        for phase, d in r["top"].items():
            cells = top[into.get(phase, other)]
            for name, (ms, calls) in d.items():
                cell = cells[name]
                cell[0] += ms
                cell[1] += calls
    if rest:
        notes.append(f"Top kernels: {len(totals)} phases with kernels; the {TOP_N} with the most kernel time are "
                     f"listed, the other {len(rest)} merged as '{OTHER}'; {TOP_KERNELS} kernels each.")
    top_kernels = {p: heapq.nsmallest(TOP_KERNELS, ([k, v[0], v[1]] for k, v in top[p].items()),
                                      key=lambda t: (-t[1], t[0])) for p in keep + ([other] if rest else [])}

    # Header numbers, over every step of every rank of the run(s) shown.
    all_time = [v for r in runs for v in r["cols"]["step_time_ms"] if v is not None]
    all_mfu = [v for r in runs for v in r["cols"]["estimated_mfu"] if v is not None]
    all_tps = [v for r in runs for v in r["cols"]["tokens_per_second"] if v is not None]
    label_bases = Counter(pair for r in runs for pair in zip(r["labels"], r["bases"]))
    devices = Counter()
    for r in runs:
        devices.update(r["devices"])
    header = {
        "title": title,
        "run": (f"all {len(shown_ids)}: " if every else "") + ", ".join(shown_ids) +
               (f" (of {len(all_runs)} in these files)" if len(all_runs) > 1 and not every else ""),
        "run_count": len(all_runs),
        "shown": shown_ids,
        "runs_text": runs_text(all_runs, shown_ids, wanted),
        "gpus": [k for k, _ in devices.most_common(3) if k] or ["none (" + why_null(runs, "device") + ")"],
        "lines": total_lines,
        "lines_all": sum(r["lines"] for r in all_runs),
        "steps": n,
        "first_step": axis[0], "last_step": axis[-1],
        "ranks": len(ranks),
        "step_time_median_ms": median(all_time),
        "step_time_p95_ms": sorted(all_time)[int(0.95 * (len(all_time) - 1))] if all_time else None,
        "tokens_per_second_median": median(all_tps),
        "mfu_median": median(all_mfu),
        "mfu_null": None if all_mfu else why_null(runs, "estimated_mfu"),
        **verdict(label_bases),
        "labels": fold_labels(label_table(label_bases)),
        "unparsable": sum(f["unparsable"] for f in files),
        "malformed": sum(malformed.values()),
    }
    traces = [t for r in runs for t in r["traces"]]
    ends = [e for r in runs for e in r["ends"]]
    # Stall, resumed and end records: marks on every chart's step axis, and a summary in the header.
    marks = sorted(({**m, "rank": r["rank"]} for r in runs for m in r["events"]),
                   key=lambda m: (m["step"], m["rank"], m["kind"]))
    marks_left_out = sum(r["events_left_out"] for r in runs) + max(0, len(marks) - MAX_MARKS)
    marks = marks[:MAX_MARKS]  # the page's bound, whatever the ranks
    stalls = [m for m in marks if m["kind"] == "stall"]
    longest = max((m for m in marks if m["kind"] == "resumed"), default=None, key=lambda m: m["stalled_s"] or 0.0)
    header["stalls"] = (f"{len(stalls)} stall record(s) at step(s) " +
                        ", ".join(str(int(st)) for st in sorted({m['step'] for m in stalls})[:8]) +
                        (f"; longest {longest['text']}" if longest else "; not resumed") if stalls else "none")
    header["endings"] = ", ".join(sorted({m["text"][len("end: "):] for m in marks if m["kind"] == "end"})) or \
        "no end record (the run was still going, or was killed)"
    if marks_left_out:
        notes.append(f"{marks_left_out} stall/resumed/end record(s) are not marked (at most {MAX_EVENTS} per rank "
                     f"and {MAX_MARKS} per page; the earliest steps' are kept).")
    return {"header": header, "charts": charts, "notes": notes, "top_kernels": top_kernels,
            "slowest_ranks": slow_table, "traces": traces, "ends": len(ends),
            "marks": [{"x": m["step"], "kind": m["kind"], "rank": m["rank"], "text": m["text"]} for m in marks],
            "files": [f["path"] for f in files if any(s["steps"] for s in f["segments"].values())],
            "build_s": time.time() - t0}


def fold_labels(table):
    """The label table's TOP_N labels; the rest as one row `other`."""
    if len(table) <= TOP_N:
        return table
    by = Counter()
    for _, _, b in table[TOP_N:]:
        by.update(b)
    return table[:TOP_N] + [[f"{OTHER} ({len(table) - TOP_N} labels)", sum(by.values()), dict(by)]]


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#fafafa;color:#222}
header{background:#1d2733;color:#eee;padding:14px 24px}
header h1{font-size:20px;margin:0 0 6px}
header .kv{display:flex;flex-wrap:wrap;gap:6px 22px}
header .kv b{color:#fff}
header .runs{margin-top:6px;font-size:13px;color:#c9d3de}
header .runs.several{color:#ffd58a}
main{padding:12px 24px;max-width:1400px}
.verdict{background:#fff;border-left:6px solid #888;padding:10px 14px;margin:12px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(620px,1fr));gap:14px}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:10px 12px}
.card h2{font-size:15px;margin:0 0 6px}
.card canvas{width:100%;height:220px;display:block}
.legend{font-size:12px;color:#444;margin-top:4px}
.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.note{font-size:12px;color:#666}
.empty{color:#a33;font-size:13px}
table{border-collapse:collapse;font-size:12px;width:100%}
td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
td:first-child{word-break:break-all}
td.n{text-align:right;font-variant-numeric:tabular-nums}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:12px;padding:4px 6px;border-radius:3px;display:none;white-space:pre}
#self-check{display:none}
</style></head><body>
<header><h1 id="title"></h1><div class="kv" id="kv"></div><div class="runs" id="runs"></div></header>
<main>
<div class="verdict" id="verdict"></div>
<div id="notes"></div>
<div class="grid" id="charts"></div>
<div class="grid" style="margin-top:14px">
<div class="card"><h2>Top kernels per phase</h2><div class="note">GPU time summed over each line's top 5 kernels of each phase (every rank's lines).</div><div id="top"></div></div>
<div class="card"><h2>Diagnosis labels</h2><div id="labels"></div><h2 style="margin-top:12px">Slowest ranks</h2><div id="slowranks"></div></div>
<div class="card"><h2>Stalls and endings</h2><div class="note">The stall watchdog's records (a step that did not end in time, and when it resumed) and the end records (docs/schema.md), dashed on every step chart (S, R, E).</div><div id="marks"></div></div>
<div class="card"><h2>Traces of the steps that matter</h2><div class="note">Written by the flight recorder (docs/schema.md). Open one in chrome://tracing or ui.perfetto.dev.</div><div id="traces"></div></div>
</div>
<p class="note" id="footer"></p>
</main>
<div id="tip"></div>
<pre id="self-check"></pre>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
(function () {
const errors = [];
window.addEventListener("error", e => errors.push(String(e.message)));
const D = JSON.parse(document.getElementById("data").textContent);
const $ = id => document.getElementById(id);
// Every text from the lines goes into the DOM through esc() (or textContent); colours by own key only.
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined;
const fmt = (v, d) => v === null || v === undefined ? "null" :
  Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : (+v.toFixed(d === undefined ? 3 : d)).toString();

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * p).find(s => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

function frame(cv, c) {
  const dpr = window.devicePixelRatio || 1, w = cv.clientWidth, h = cv.clientHeight;
  cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  const g = cv.getContext("2d");
  g.scale(dpr, dpr);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  return c.frame = {g, w, h, L: 62, R: 12, T: 10, B: 26};
}

function axes(f, xs, ylo, yhi, unit, noYTicks) {
  const {g, w, h, L, R, T, B} = f;
  const x0 = xs[0], x1 = xs[xs.length - 1] === x0 ? x0 + 1 : xs[xs.length - 1];
  const X = v => L + (v - x0) / (x1 - x0) * (w - L - R);
  const Y = v => h - B - (v - ylo) / (yhi - ylo) * (h - T - B);
  g.font = "11px system-ui,sans-serif"; g.strokeStyle = "#e6e6e6"; g.fillStyle = "#666"; g.lineWidth = 1;
  if (!noYTicks) for (const t of niceTicks(ylo, yhi, 4)) {
    g.beginPath(); g.moveTo(L, Y(t)); g.lineTo(w - R, Y(t)); g.stroke();
    g.textAlign = "right"; g.fillText(fmt(t), L - 4, Y(t) + 4);
  }
  for (const t of niceTicks(x0, x1, 6).filter(Number.isInteger)) {  // steps: whole numbers only
    g.textAlign = "center"; g.fillText(String(t), X(t), h - B + 14);
  }
  g.strokeStyle = "#999"; g.beginPath(); g.moveTo(L, T); g.lineTo(L, h - B); g.lineTo(w - R, h - B); g.stroke();
  g.save(); g.translate(12, (h - B + T) / 2); g.rotate(-Math.PI / 2); g.textAlign = "center"; g.fillText(unit, 0, 0); g.restore();
  g.textAlign = "right"; g.fillText("global_step", w - R, h - 2);
  return {X, Y};
}

function range(c, stacked) {
  let lo = Infinity, hi = -Infinity;
  const n = c.x.length;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (const s of c.series) {
      const v = s.y[i];
      if (v === null) continue;
      if (stacked) { sum += v; continue; }
      lo = Math.min(lo, v, s.lo && s.lo[i] !== null ? s.lo[i] : v);
      hi = Math.max(hi, v, s.hi && s.hi[i] !== null ? s.hi[i] : v);
    }
    if (stacked) { lo = Math.min(lo, 0); hi = Math.max(hi, sum); }
  }
  if (lo >= 0) lo = 0;
  // A few outliers (the first step's warm-up) would flatten the rest: the axis stops at 1.5 x the
  // 95th percentile when the maximum is above 3 x it; the points above are drawn as marks on the top edge.
  {
    const vals = [];
    if (stacked) c.x.forEach((_, i) => { if (!gap(c, i)) vals.push(c.series.reduce((a, s) => a + (s.y[i] || 0), 0)); });
    else for (const s of c.series) for (const v of s.y) if (v !== null) vals.push(v);
    vals.sort((a, b) => a - b);
    const p95 = vals.length ? vals[Math.floor(0.95 * (vals.length - 1))] : 0;
    if (p95 > 0 && hi > 3 * p95) { hi = 1.5 * p95; c.clippedAt = hi; }
  }
  if (c.ymax !== undefined) hi = Math.max(c.ymax, hi);
  if (!(hi > lo)) hi = lo + 1;
  return [lo, hi * 1.04];
}

// A point where every series is null: a step without the value (e.g. not traced), never a zero.
const gap = (c, i) => c.series.every(s => s.y[i] === null);

// Runs of consecutive non-null indices of ys, as [first, last].
function runs(ys) {
  const out = [];
  ys.forEach((v, i) => {
    if (v === null) return;
    if (out.length && out[out.length - 1][1] === i - 1) out[out.length - 1][1] = i; else out.push([i, i]);
  });
  return out;
}

function drawLine(cv, c) {
  const f = frame(cv, c), g = f.g, stacked = c.kind === "stacked";
  const [lo, hi] = range(c, stacked);
  const axis = axes(f, c.x, lo, hi, c.unit), X = axis.X;
  const Y = v => axis.Y(Math.min(v, hi));
  const base = c.x.map(() => 0);
  // A point alone between gaps has no segment to draw: it gets a bar (stacked) or a dot (lines).
  const dx = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 12;
  const barW = Math.max(1, Math.min(6, 0.5 * dx));  // half the spacing: a gap stays visible beside it
  for (const s of c.series) {
    if (s.lo) {  // min..max band of downsampled buckets, broken where a bucket had no value
      g.fillStyle = s.color + "33";
      for (const [a, b] of runs(s.lo)) {
        g.beginPath();
        for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(s.hi[i])) : g.lineTo(X(c.x[i]), Y(s.hi[i]));
        for (let i = b; i >= a; i--) g.lineTo(X(c.x[i]), Y(s.lo[i]));
        g.fill();
      }
    }
    if (stacked) {  // one polygon per run of known points; a null leaves its stack empty
      const top = c.x.map((_, i) => s.y[i] === null || base[i] === null ? null : base[i] + s.y[i]);
      g.fillStyle = s.color + "cc";
      for (const [a, b] of runs(top)) {
        if (a === b) { g.fillRect(X(c.x[a]) - barW / 2, Y(top[a]), barW, Y(base[a]) - Y(top[a])); continue; }
        g.beginPath();
        for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(top[i])) : g.lineTo(X(c.x[i]), Y(top[i]));
        for (let i = b; i >= a; i--) g.lineTo(X(c.x[i]), Y(base[i]));
        g.closePath(); g.fill();
      }
      top.forEach((v, i) => base[i] = v);
      continue;
    }
    g.strokeStyle = s.color; g.lineWidth = 1.6; g.beginPath();
    const spans = runs(s.y);
    for (const [a, b] of spans) for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(s.y[i])) : g.lineTo(X(c.x[i]), Y(s.y[i]));
    g.stroke();
    g.fillStyle = s.color;
    if (c.clippedAt !== undefined) c.x.forEach((xv, i) => {
      if (s.y[i] === null || s.y[i] <= c.clippedAt) return;
      g.beginPath(); g.moveTo(X(xv) - 4, f.T + 7); g.lineTo(X(xv) + 4, f.T + 7); g.lineTo(X(xv), f.T); g.fill();
    });
    if (c.x.length < 200) c.x.forEach((xv, i) => { if (s.y[i] !== null) g.fillRect(X(xv) - 1.5, Y(s.y[i]) - 1.5, 3, 3); });
    else for (const [a, b] of spans) if (a === b) g.fillRect(X(c.x[a]) - 1.5, Y(s.y[a]) - 1.5, 3, 3);
  }
  drawMarks(f, c, X);
  return X;
}

// Stall, resumed and end records: a dashed line at their step, a letter on top (S, R, E).
// Greys (and letters), so that a mark is never taken for a series or counted as a chart's data.
const MARK = {stall: ["#111111", "S"], resumed: ["#666666", "R"], end: ["#999999", "E"]};
function drawMarks(f, c, X) {
  const {g, h, T, B} = f, lo = c.x[0], hi = c.x[c.x.length - 1];
  c.marks = D.marks.filter(m => m.x >= lo && m.x <= hi);
  g.save(); g.setLineDash([4, 3]); g.lineWidth = 1.2; g.font = "bold 10px system-ui,sans-serif"; g.textAlign = "center";
  for (const m of c.marks) {
    const [color, letter] = own(MARK, m.kind) || ["#999", "?"], x = X(m.x);
    g.strokeStyle = color; g.fillStyle = color;
    g.beginPath(); g.moveTo(x, T + 10); g.lineTo(x, h - B); g.stroke();
    g.fillText(letter, x, T + 9);
  }
  g.restore();
}

// The label's colour for its own (traced or host-only) diagnosis, a lighter one when carried, grey for none.
const stripColor = (c, lab, shade) =>
  shade === "none" ? c.none_color : own(shade === "carried" ? c.carried_colors : c.colors, lab) || "#999";
const shadeName = (lab, shade) => shade === "none" ? "nothing known (" + lab + ")" : shade === "carried" ? lab + " (carried)" : lab;

function drawStrip(cv, c) {
  const f = frame(cv, c), g = f.g;
  f.B = 26;
  const {X} = axes(f, c.x, 0, 1, "", true);
  const w = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 20;
  c.labels.forEach((lab, i) => {
    if (lab === null) return;
    g.fillStyle = stripColor(c, lab, c.shades[i]);
    g.fillRect(X(c.x[i]) - w / 2, f.T + 20, Math.max(1, w + 0.5), f.h - f.T - f.B - 40);
  });
  return X;
}

function drawHeat(cv, c) {
  const f = frame(cv, c), g = f.g;
  const {X} = axes(f, c.x, 0, c.rows.length, "ranks", true);
  // Colour: a rank's step time over the ranks' median at that point (1 = blue, >= 1.3 = red), so a
  // straggler shows whatever the run's phases do to everyone's step time.
  const med = c.med || c.x.map((_, i) => {
    const v = c.z.map(row => row[i]).filter(v => v !== null).sort((a, b) => a - b);
    return v.length ? v[Math.floor((v.length - 1) / 2)] : null;
  });
  const lo = 1, hi = 1.3;
  const rh = (f.h - f.T - f.B) / c.rows.length;
  const w = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 20;
  c.z.forEach((row, r) => row.forEach((v, i) => {
    if (v === null || !med[i]) return;
    v = v / med[i];
    const t = hi > lo ? Math.min(1, Math.max(0, (v - lo) / (hi - lo))) : 0.5;
    g.fillStyle = `rgb(${Math.round(40 + 215 * t)},${Math.round(90 + 60 * (1 - t))},${Math.round(200 * (1 - t))})`;
    g.fillRect(X(c.x[i]) - w / 2, f.T + r * rh, Math.max(1, w + 0.5), Math.max(1, rh));
  }));
  c.legendText = "colour: the rank's step time over the ranks' median at that point: blue ≤ 1, red ≥ 1.3";
  return X;
}

// Saturated pixels: series colours (axes, grid and text are grey); and pixels of `grey` (#rrggbb), a
// data colour that is grey (the strip's basis none).
function dataPixels(cv, grey) {
  const g = cv.getContext("2d"), img = g.getImageData(0, 0, cv.width, cv.height).data;
  const k = grey ? [1, 3, 5].map(i => parseInt(grey.slice(i, i + 2), 16)) : null;
  let n = 0;
  for (let i = 0; i < img.length; i += 4) {
    const mx = Math.max(img[i], img[i + 1], img[i + 2]), mn = Math.min(img[i], img[i + 1], img[i + 2]);
    if (mx - mn > 40 || (k && img[i] === k[0] && img[i + 1] === k[1] && img[i + 2] === k[2])) n++;
  }
  return n;
}

function tooltip(cv, c, X) {
  const tip = $("tip");
  cv.addEventListener("mousemove", ev => {
    const r = cv.getBoundingClientRect(), px = ev.clientX - r.left;
    let best = 0;
    c.x.forEach((xv, i) => { if (Math.abs(X(xv) - px) < Math.abs(X(c.x[best]) - px)) best = i; });
    let text = "global_step " + c.x[best];
    if (c.series) for (const s of c.series) text += "\\n" + s.name + ": " + fmt(s.y[best]) + (s.tags && s.tags[best] !== null ? " (rank " + s.tags[best] + ")" : "");
    if (c.labels) text += "\\n" + c.labels[best];
    if (c.rows) text += "\\n" + c.rows.map((r, k) => r + ": " + fmt(c.z[k][best])).slice(0, 12).join("\\n");
    tip.textContent = text; tip.style.display = "block";
    tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px";
  });
  cv.addEventListener("mouseleave", () => tip.style.display = "none");
}

const H = D.header;
document.title = H.title;
$("title").textContent = H.title;
const kv = [["run", H.run], ["GPU", H.gpus.join(", ")], ["ranks", H.ranks],
  ["steps", H.steps + " (" + H.first_step + "–" + H.last_step + ")"], ["lines", H.lines],
  ["step time", fmt(H.step_time_median_ms, 2) + " ms median, " + fmt(H.step_time_p95_ms, 2) + " ms p95"],
  ["tokens/s", fmt(H.tokens_per_second_median, 0) + " median"],
  ["MFU", H.mfu_median === null ? "null (" + H.mfu_null + ")" : fmt(H.mfu_median * 100, 1) + " % median"],
  ["stalls", H.stalls], ["ended", H.endings]];
$("kv").innerHTML = kv.map(([k, v]) => `<span>${esc(k)}: <b>${esc(v)}</b></span>`).join("");
$("runs").textContent = H.runs_text;
if (H.run_count > 1) $("runs").className = "runs several";
const vb = $("verdict");
vb.style.borderLeftColor = own((D.charts.find(c => c.kind === "strip") || {colors: {}}).colors, H.dominant) || "#888";
vb.innerHTML = `<b>${esc(H.dominant)}</b> (${esc(H.basis_text)}). ${esc(H.advice)}`;
$("notes").innerHTML = D.notes.map(n => `<p class="note">${esc(n)}</p>`).join("");

const drawn = {}, pending = [];
for (const c of D.charts) {
  const card = document.createElement("div");
  card.className = "card";
  card.innerHTML = `<h2>${esc(c.title)}</h2>`;
  $("charts").appendChild(card);
  if (c.empty) {
    const p = document.createElement("p");
    p.className = "empty"; p.textContent = c.empty;
    card.appendChild(p);
    drawn[c.id] = {empty: c.empty};
    continue;
  }
  const cv = document.createElement("canvas");
  cv.id = "chart-" + c.id;
  card.appendChild(cv);
  const lg = document.createElement("div");
  lg.className = "legend";
  if (c.series) lg.innerHTML = c.series.map(s => `<span><i style="background:${esc(s.color)}"></i>${esc(s.name)}</span>`).join("");
  if (c.kind === "strip") lg.innerHTML = [...new Set(c.labels.map((l, i) => l === null ? "" : JSON.stringify([l, c.shades[i]])))]
    .filter(k => k).map(k => JSON.parse(k)).map(([l, sh]) => `<span><i style="background:${stripColor(c, l, sh)}"></i>${esc(shadeName(l, sh))}</span>`).join("");
  card.appendChild(lg);
  if (c.note) { const p = document.createElement("p"); p.className = "note"; p.textContent = c.note; card.appendChild(p); }
  pending.push([c, cv, lg]);
}
// Drawn once every card is in place: a canvas takes its size from the laid-out page.
for (const [c, cv, lg] of pending) {
  const X = c.kind === "strip" ? drawStrip(cv, c) : c.kind === "heat" ? drawHeat(cv, c) : drawLine(cv, c);
  tooltip(cv, c, X);
  if (c.legendText) lg.textContent = c.legendText;
  if (c.clippedAt !== undefined) lg.innerHTML += ` <span class="note">(axis cut at ${fmt(c.clippedAt)} ${esc(c.unit)}: ▲ marks points above)</span>`;
  if (c.marks && c.marks.length) lg.innerHTML += ` <span class="note">dashed: ` + [...new Set(c.marks.map(m => m.kind))]
    .map(k => `<b style="color:${own(MARK, k)[0]}">${own(MARK, k)[1]}</b> ${esc(k)}`).join(", ") + ` record (list below the charts)</span>`;
  const r = cv.getBoundingClientRect(), f = c.frame, left = r.left + scrollX, top = r.top + scrollY;
  // plot: the data area on the page, and the x range it maps (report_check finds a step's column).
  drawn[c.id] = {pixels: dataPixels(cv, c.none_color), rect: [left, top, r.width, r.height],
                 plot: [left + f.L, top + f.T, left + f.w - f.R, top + f.h - f.B], x: [c.x[0], c.x[c.x.length - 1]]};
}

const phases = Object.keys(D.top_kernels);
$("top").innerHTML = phases.length ? phases.map(p => `<h3 style="font-size:13px;margin:8px 0 2px">${esc(p)}</h3><table><tr><th>kernel</th><th>ms</th><th>calls</th></tr>` +
  D.top_kernels[p].map(([n, ms, calls]) => `<tr><td>${esc(n)}</td><td class="n">${esc(fmt(ms, 2))}</td><td class="n">${esc(calls)}</td></tr>`).join("") + "</table>").join("")
  : '<p class="empty">no kernels in these lines (no GPU attribution)</p>';
const bases = ["traced", "carried", "host_only", "none"];
$("labels").innerHTML = "<table><tr><th>label</th><th>lines</th><th>share</th><th>basis</th></tr>" + H.labels.map(([l, k, by]) =>
  `<tr><td><i style="display:inline-block;width:10px;height:10px;background:${own((D.charts.find(c => c.kind === "strip") || {colors: {}}).colors, l) || "#999"}"></i> ${esc(l)}</td>` +
  `<td class="n">${esc(k)}</td><td class="n">${esc(fmt(k / H.lines * 100, 1))} %</td><td>${esc(bases.filter(b => by[b]).map(b => b + " " + by[b]).join(", "))}</td></tr>`).join("") + "</table>";
$("slowranks").innerHTML = D.slowest_ranks.length ? "<table><tr><th>rank</th><th>windows slowest</th><th>share</th></tr>" +
  D.slowest_ranks.map(s => `<tr><td>${esc(s.rank)}</td><td class="n">${esc(s.windows)}</td><td class="n">${esc(fmt(s.share * 100, 1))} %</td></tr>`).join("") + "</table>"
  : '<p class="note">one rank: nothing to compare</p>';
$("traces").innerHTML = D.traces.length ? "<table><tr><th>rank</th><th>steps</th><th>why</th><th>file</th></tr>" +
  D.traces.map(t => `<tr><td>${esc(t.rank)}</td><td>${esc(t.steps.join(", ") + (t.more_steps ? " and " + t.more_steps + " more" : ""))}</td>` +
    `<td>${esc(t.reasons.join(", "))}</td><td>` +  // a link only to a checked relative path (steptrace_report_guard)
    (t.href && /^\.\.?\//.test(t.href) ? `<a href="${esc(t.href)}">${esc(t.name)}</a>` : `${esc(t.name)} (${esc(t.why)})`) + "</td></tr>").join("") + "</table>"
  : '<p class="note">no trace in these lines (no step was captured)</p>';
$("marks").innerHTML = D.marks.length ? "<table><tr><th>step</th><th>rank</th><th>record</th><th>what it says</th></tr>" +
  D.marks.map(m => `<tr><td class="n">${esc(m.x)}</td><td class="n">${esc(m.rank)}</td><td>${esc(m.kind)}</td><td>${esc(m.text)}</td></tr>`).join("") + "</table>"
  : '<p class="note">no stall, resumed or end record in these lines</p>';
$("footer").textContent = `steptrace-report: ${D.files.length} file(s), ${H.lines} lines` +
  (H.lines_all !== H.lines ? ` shown of ${H.lines_all} (runs not shown: --run)` : "") +
  (H.unparsable ? `, ${H.unparsable} unparsable line(s) skipped` : "") +
  (H.malformed ? `, ${H.malformed} line(s) skipped: malformed` : "") + `, built in ${fmt(D.build_s, 2)} s.`;

$("self-check").textContent = JSON.stringify({charts: D.charts.length, drawn, errors,
  resources: performance.getEntriesByType("resource").length, height: document.documentElement.scrollHeight});
})();
</script></body></html>
"""


def render(data):
    head, tail = PAGE.split("__DATA__")  # neither the title nor the data is searched for the other's mark
    return head.replace("__TITLE__", html.escape(data["header"]["title"])) + embed(data) + tail


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="steptrace-report", description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 the page was written; 2 a bad option, a file that does not exist, or a --run "
               "that names no run in the files (the message lists their ids); 1 no step line in the files.")
    ap.add_argument("lines", nargs="+", metavar="LINES.jsonl",
                    help="steptrace JSON lines files (one per rank, any order; a file named twice is read once)")
    ap.add_argument("-o", "--output", default="steptrace-report.html", metavar="FILE",
                    help="the HTML page to write (replaced whole, through FILE.tmp). Default: %(default)s")
    ap.add_argument("--title", default=None, metavar="TEXT",
                    help="the page's title. Default: 'steptrace report: ' and the first three files' names")
    ap.add_argument("--max-points", type=int, default=MAX_POINTS, metavar="N",
                    help="points per series at most: longer runs are downsampled for plotting (at least 10). "
                         "Default: %(default)s")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="processes reading the files (and parts of large files) in parallel. "
                         "Default: the CPU count (%(default)s)")
    ap.add_argument("--run", default=None, metavar="ID|all",
                    help="the run to show when the files hold several run_ids (several runs appended to one log): "
                         "its id or a prefix naming one run; 'all': one series per run. Default: the latest run")
    a = ap.parse_args(argv)
    missing = [p for p in a.lines if not os.path.isfile(p)]
    if missing:
        ap.error("no such file: " + ", ".join(missing))
    title = a.title or "steptrace report: " + ", ".join(os.path.basename(p) for p in a.lines[:3]) + \
        (f" and {len(a.lines) - 3} more" if len(a.lines) > 3 else "")
    try:
        data = build(a.lines, title, max(10, a.max_points), a.jobs, a.run)
    except UnknownRun as e:
        print(f"steptrace-report: {e}", file=sys.stderr)
        return 2
    resolve_traces(data, a.output)
    page = render(data)
    tmp = a.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, a.output)
    print(f"steptrace-report: {a.output} ({len(page) / 1e6:.2f} MB) from {data['header']['lines']} lines "
          f"of {data['header']['ranks']} rank(s) in {data['build_s']:.2f} s")
    if data["header"]["run_count"] > 1:
        print("steptrace-report: " + data["header"]["runs_text"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
