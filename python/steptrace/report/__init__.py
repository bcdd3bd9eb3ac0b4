"""steptrace-report: one self-contained HTML page from steptrace's JSON lines.

  steptrace-report steps-*.jsonl [-o report.html] [--title TEXT] [--max-points N] [--jobs N] [--run ID|all]

`python -m steptrace report` and `python -m steptrace.report` are the same command. Reads every file (one per rank, or any mix), and writes a page that opens offline: the data and the
code that draws it are inside the file (no request leaves the page). A log several runs appended to
holds several run_ids: the page shows one run, by default the latest (`--run ID` another, `--run all`
one series per run), and its header lists them all. Runs of many steps are downsampled for plotting
(the page says so); the numbers in the header are over every step shown. Lines are not trusted
(steptrace.report.guard: lines of the wrong types are skipped and counted, every value is escaped, the
per-phase charts and tables keep the 12 phases with the most time and fold the rest into `other`, trace
files are linked only inside the log's directory). The page's HTML, CSS and script: steptrace.report.page.
Needs Python 3 only.
"""
import argparse
import heapq
import html
import os
import sys
import time
from collections import Counter, defaultdict
from multiprocessing import Pool

from ..files import FileRefused, replace_file
from .diagnosis import CARRIED_COLORS, LABEL_COLORS, NONE_COLOR, label_table, strip, verdict
from .guard import MAX_NAME, MAX_TRACES, OTHER, TOP_KERNELS, TOP_N, embed, fold, resolve_traces, skipped_note
from .numbers import OTHER_COLOR, PALETTE, median, p90, phase_color, rounded
from .page import PAGE
from .ranks import held_back, rank_charts, rank_phase_table
from .runs import MAX_EVENTS, UnknownRun, catalogue, choose, load_range, merge, runs_text, segments, split_points
from .traces import kernels_from_traces, traces_beside

MAX_POINTS = 1500
MAX_RUN_SERIES = 14   # runs drawn with --run all at most: the latest (one colour each)

MAX_MARKS = 400  # stall/resumed/end marks on a page (runs.MAX_EVENTS per rank)


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


def _bare_code(why):
    """A compact line's reason code (8 hex digits) whose sentence no line read carried (the lines were
    read from a log's middle, or the line with it was lost): said so, not shown bare."""
    if len(why) == 8 and all(ch in "0123456789abcdef" for ch in why):
        return f"reason code {why} (its sentence is on an earlier line of the run, not among these)"
    return why


def why_null(runs, field):
    c = Counter()
    for r in runs:
        for why, k in r["nulls"].get(field, {}).items():  # a compact line's code: its sentence
            c[r["reasons"].get(why, _bare_code(why))] += k
    return c.most_common(1)[0][0] if c else "no value in any line"


def read(paths, workers):
    """Every file's lines (a file named twice is read once), and their segments: one per (run_id, rank)."""
    first = {}
    for p in paths:
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
    segs = segments(files)  # every file's lines of each (run_id, rank)
    if not segs:
        bad = sum((f["malformed"] for f in files), Counter())
        raise SystemExit("steptrace-report: no step lines in " + ", ".join(paths) +
                         (" (" + skipped_note(bad) + ")" if bad else ""))
    return files, segs


class View:
    """The run(s) a page shows, the step axis its charts share, and the charts and notes made so far."""

    def __init__(self, files, segs, wanted, max_points):
        self.charts, self.notes = [], []
        # Runs: a log several runs appended to holds several run_ids, each with its own steps. One is shown
        # (or each as its own series): never one series whose steps go back.
        self.all_runs = catalogue(segs)
        ids = choose(self.all_runs, wanted)
        self.every = len(ids) > 1
        if len(ids) > MAX_RUN_SERIES:
            self.notes.append(f"{len(ids)} runs: the latest {MAX_RUN_SERIES} are drawn (one colour each); an older "
                              "one: --run ID.")
            ids = ids[-MAX_RUN_SERIES:]
        self.shown_ids = ids
        self.runs = [s for s in segs if s["run_id"] in ids]
        self.color_of = {rid: PALETTE[i % len(PALETTE)] for i, rid in enumerate(ids)}
        # One series per rank (of the run shown): its lines may come from several files.
        self.by_rank = {s["rank"]: s for s in self.runs}
        self.ranks = sorted({s["rank"] for s in self.runs})
        self.main = self.by_rank[self.ranks[0]] if not self.every else None
        # Each run shown, by its lowest rank: the series drawn.
        self.leads = [min((s for s in self.runs if s["run_id"] == rid), key=lambda s: s["rank"]) for rid in ids]
        self.malformed = sum((f["malformed"] for f in files), Counter())
        if self.malformed:
            self.notes.append(skipped_note(self.malformed))
        # The x axis: the lowest rank's steps, row by row (every run's steps, in order, with --run all);
        # downsampled into buckets.
        self.axis = self.main["steps"] if not self.every else sorted({st for s in self.leads for st in s["steps"]})
        n = self.n = len(self.axis)
        self.bks = buckets_for(n, max_points)
        self.x = [self.axis[a] for a, _ in self.bks]
        if len(self.bks) < n:
            self.notes.append(f"Downsampled for plotting: {n} steps of " +
                              (f"rank {self.ranks[0]}" if not self.every else "the runs") +
                              f" into {len(self.bks)} points (the mean of each bucket of about {n / len(self.bks):.0f} "
                              "steps; a shaded band is its minimum to maximum). The header's numbers are over every "
                              "step.")

    def column(self, run, key):
        """run's values of key, one per step of the axis (None where the run has no such step)."""
        if not self.every:
            return run["cols"][key]
        at = dict(zip(run["steps"], run["cols"][key]))
        return [at.get(s) for s in self.axis]

    def series(self, run, key, name, color, band=False, scale=1.0):
        mean, lo, hi = reduce(self.column(run, key), self.bks)
        s = {"name": name, "color": color, "y": rounded([None if v is None else v * scale for v in mean])}
        if band and len(self.bks) < self.n:
            s["lo"] = rounded([None if v is None else v * scale for v in lo])
            s["hi"] = rounded([None if v is None else v * scale for v in hi])
        return s

    def per_run(self, key, name, color, band=False, scale=1.0):
        """The run's series, or with --run all one per run, in the run's colour."""
        if not self.every:
            return [self.series(self.main, key, name, color, band, scale)]
        return [self.series(s, key, f"run {s['run_id']}", self.color_of[s["run_id"]], band, scale) for s in self.leads]

    def chart(self, cid, title, unit, ss, kind="line", empty_field=None, ymax=None, note=None):
        c = {"id": cid, "title": title + (", one series per run" if self.every else ""), "unit": unit, "kind": kind,
             "x": self.x, "series": ss}
        if ymax is not None:
            c["ymax"] = ymax
        if note:
            c["note"] = note
        if not any(v is not None for s in ss for v in s["y"]):
            c["empty"] = f"null on every line: {why_null(self.runs, empty_field)}" if empty_field else "no data"
        else:  # a series null on every line gets no legend entry, only a word saying so
            blank = [s["name"] for s in ss if all(v is None for v in s["y"])]
            if blank:
                c["series"] = [s for s in ss if s["name"] not in blank]
                c["note"] = ((note + " ") if note else "") + "Null on every line, not drawn (the lines' null_reasons say why): " + ", ".join(blank) + "."
        self.charts.append(c)


def build(paths, title, max_points, workers, wanted=None):
    """The page's data. wanted: the run to show (None: the latest; "all": every run, one series each)."""
    t0 = time.time()
    files, segs = read(paths, workers)
    view = View(files, segs, wanted, max_points)
    step_charts(view)
    if view.every:
        run_charts(view)
    else:
        phase_charts(view)
        device_charts(view)
        diagnosis_chart(view)
    slow_table = rank_charts(view)
    held = held_back(view)
    rank_phases = rank_phase_table(view)
    top_kernels = top_kernel_table(view)
    header = header_of(view, files, title, wanted)
    marks = mark_records(view, header)
    runs = view.runs
    traces = [t for r in runs for t in r["traces"]] + traces_beside(runs, MAX_TRACES)
    if not top_kernels and traces:  # lines without kernel names (compact): the traced steps' own files
        from_traces, n_files, n_steps = kernels_from_traces(traces)
        if from_traces:
            top_kernels = top_kernel_table(view, [from_traces])
            view.notes.append(f"Top kernels per phase: from the kernel events of {n_steps} captured steps in "
                              f"{n_files} trace files (these lines carry no kernel names: compact lines).")
    return {"header": header, "charts": view.charts, "notes": view.notes, "top_kernels": top_kernels,
            "slowest_ranks": slow_table, "held_back": held, "rank_phases": rank_phases,
            "traces": traces,
            "ends": sum(len(r["ends"]) for r in runs), "marks": marks,
            "files": [f["path"] for f in files if any(s["steps"] for s in f["segments"].values())],
            "build_s": time.time() - t0}


def step_charts(view):
    """Step time, tokens per second and MFU: one series, or one per run with --run all."""
    view.chart("step_time", "Step time", "ms", view.per_run("step_time_ms", "step time", PALETTE[0], band=True),
               empty_field="step_time_ms")
    view.chart("tokens", "Tokens per second (this rank)", "tokens/s",
               view.per_run("tokens_per_second", "tokens/s", PALETTE[2], band=True), empty_field="tokens_per_second")
    view.chart("mfu", "Estimated MFU", "fraction of peak",
               view.per_run("estimated_mfu", "estimated MFU", PALETTE[4]), empty_field="estimated_mfu")


def run_charts(view):
    """With --run all: one line per run, of the first quantity of each single-run chart below."""
    view.chart("utilization", "GPU utilization (busy share)", "fraction",
               view.per_run("gpu_utilization", "", None), empty_field="gpu_utilization", ymax=1.0)
    view.chart("memory", "Device memory used (peak in step)", "GiB",
               view.per_run("device_used_peak_bytes", "", None, scale=1.0 / (1 << 30)),
               empty_field="memory.device_used_peak_bytes")
    view.chart("nccl", "NCCL kernel time", "ms", view.per_run("nccl_time_ms", "", None), empty_field="nccl_time_ms")
    view.notes.append(f"{len(view.shown_ids)} runs, one series per run (each its own colour, never joined). Per-phase "
                      "time, SM activity, the allocator, the diagnosis over time and the per-rank views are drawn "
                      "for one run at a time: --run ID.")


def phase_charts(view):
    """Per-phase time, stacked: host (each phase's self time: its scopes less the phases nested in them, so
    a nested phase is not stacked twice) and GPU (each phase's busy time)."""
    if view.main["inclusive_rows"]:
        view.notes.append(f"Per-phase host time: {view.main['inclusive_rows']} lines were written before phases "
                          "had self_ms; their stack holds a nested phase's time twice (in itself and in its parent).")
    for cid, src, title in (("phases_host", "host", "Per-phase host self time (stacked)"),
                            ("phases_gpu", "gpu", "Per-phase GPU busy time, traced lines (stacked)"),
                            ("phases_markers", "markers", "Per-phase GPU span from stream markers, every marked "
                             "line (stacked)")):
        ss = phase_series(view, src, title)
        view.chart(cid, title, "ms", ss, kind="stacked",
                   note="From the CUDA events steptrace records on the program's stream at each top-level "
                        "phase's begin and end: the GPU time from a phase's begin marker to its end marker "
                        "(idle gaps included), on traced and untraced lines alike." if src == "markers" else None)
        if not ss:
            view.charts[-1]["empty"] = {
                "gpu": lambda: "no phase had GPU records: " + why_null(view.runs, "gpu"),
                "markers": lambda: "no phase had stream markers (null on every line: " + why_null(view.runs, "gpu_markers") + ")",
                "host": lambda: "no phase scopes in these lines"}[src]()


def phase_series(view, src, title):
    """One stack's series (src "host" or "gpu"): the TOP_N phases with the most time over the run, the rest
    summed as one series `other`. A phase missing from a line took no time (0); on a line without GPU
    attribution (`gpu` null: not traced) every GPU phase is unknown (None): a gap in the stack, never a zero."""
    main, n, bks = view.main, view.n, view.bks
    keep, rest = fold({p: sum(rows.values()) for p, rows in main[src].items()})
    known = main["gpu_rows"] if src == "gpu" else main["marked_rows"] if src == "markers" else [True] * n
    ss = []
    for p in keep:
        col = [main[src][p].get(row, 0.0) if known[row] else None for row in range(n)]
        mean, _, _ = reduce(col, bks)
        ss.append({"name": p, "color": phase_color(p), "y": rounded(mean)})
    if rest:
        col = [0.0 if k else None for k in known]
        for p in rest:
            for row, v in main[src][p].items():
                if known[row]:
                    col[row] += v
        mean, _, _ = reduce(col, bks)
        ss.append({"name": f"{OTHER} ({len(rest)} phases)", "color": OTHER_COLOR,
                   "y": rounded(mean)})
        view.notes.append(f"{title[:-10]}: {len(keep) + len(rest)} phases; the {TOP_N} with the most "
                          f"{ {'gpu': 'GPU busy', 'markers': 'marked GPU'}.get(src, 'host') } time over the run are drawn, the other "
                          f"{len(rest)} summed as one series '{OTHER}'.")
    return ss


def device_charts(view):
    """Utilization and hardware counters, memory, NCCL: the run's lowest rank."""
    main, series = view.main, view.series
    view.chart("utilization", "GPU utilization and hardware counters", "fraction",
               [series(main, "gpu_utilization", "GPU utilization (busy share)", PALETTE[0]),
                series(main, "sm_activity", "SM activity", PALETTE[1]),
                series(main, "tensor_core_or_pipe_utilization", "tensor pipe", PALETTE[2]),
                series(main, "memory_bandwidth_utilization", "DRAM bandwidth", PALETTE[3]),
                series(main, "markers_pending_share", "held by the program's stream (markers, lower bound)", PALETTE[7])],
               empty_field="gpu_utilization", ymax=1.0,
               note="GPU utilization is the share of the step with any kernel or copy running (what nvidia-smi "
                    "shows; traced lines); SM activity is how much of the SMs' time was busy. The gap between "
                    "them is the misleading-utilization gap. The markers' share, on every marked line, is the "
                    "part of the step the GPU was busy with (or held by) the program's stream: a lower bound.")
    gib = 1.0 / (1 << 30)
    view.chart("memory", "Memory", "GiB",
               [series(main, "device_used_peak_bytes", "device used (peak in step)", PALETTE[0], scale=gib),
                series(main, "allocated_bytes", "allocator: allocated", PALETTE[1], scale=gib),
                series(main, "reserved_bytes", "allocator: reserved", PALETTE[2], scale=gib)],
               empty_field="memory.device_used_peak_bytes")
    view.chart("nccl", "NCCL time and exposed communication", "ms",
               [series(main, "nccl_time_ms", "NCCL kernels", PALETTE[4]),
                series(main, "nccl_exposed_ms", "exposed (not overlapped)", PALETTE[3])],
               empty_field="nccl_time_ms")


def diagnosis_chart(view):
    """Diagnosis over time: the most frequent label of each bucket, lighter where it was carried from the
    last traced step, grey where nothing was known (basis none)."""
    main = view.main
    shown_labels = {lab for lab, _, _ in label_table(Counter(zip(main["labels"], main["bases"])))[:TOP_N]}
    strip_labels, strip_shades = strip([lab if lab in shown_labels else OTHER for lab in main["labels"]],
                                       main["bases"], view.bks)
    view.charts.append({"id": "diagnosis", "title": "Diagnosis over time (most frequent label per point)",
                        "kind": "strip", "x": view.x, "labels": strip_labels, "shades": strip_shades,
                        "colors": LABEL_COLORS, "carried_colors": CARRIED_COLORS, "none_color": NONE_COLOR})


def top_kernel_table(view, sources=None):
    """Top kernels per phase, over every line of every rank (each line lists its phase's top 5; `sources`:
    other {phase: {kernel: [ms, calls]}} to count instead): the TOP_N phases with the most kernel time,
    TOP_KERNELS kernels each; the other phases merged as one."""
    sources = [r["top"] for r in view.runs] if sources is None else sources
    totals = Counter()
    for src in sources:
        for phase, d in src.items():
            totals[phase] += sum(v[0] for v in d.values())
    keep, rest = fold(totals)
    other = f"{OTHER} ({len(rest)} phases)"
    into = {p: p for p in keep}
    top = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for src in sources:
        for phase, d in src.items():
            cells = top[into.get(phase, other)]
            for name, (ms, calls) in d.items():
                cell = cells[name]
                cell[0] += ms
                cell[1] += calls
    if rest:
        view.notes.append(f"Top kernels: {len(totals)} phases with kernels; the {TOP_N} with the most kernel time "
                          f"are listed, the other {len(rest)} merged as '{OTHER}'; {TOP_KERNELS} kernels each.")
    return {p: heapq.nsmallest(TOP_KERNELS, ([k, v[0], v[1]] for k, v in top[p].items()), key=lambda t: (-t[1], t[0]))
            for p in keep + ([other] if rest else [])}


def header_of(view, files, title, wanted):
    """The header's numbers, over every step of every rank of the run(s) shown."""
    runs, ids, all_runs = view.runs, view.shown_ids, view.all_runs
    all_time = [v for r in runs for v in r["cols"]["step_time_ms"] if v is not None]
    all_mfu = [v for r in runs for v in r["cols"]["estimated_mfu"] if v is not None]
    all_tps = [v for r in runs for v in r["cols"]["tokens_per_second"] if v is not None]
    label_bases = Counter(pair for r in runs for pair in zip(r["labels"], r["bases"]))
    devices = Counter()
    for r in runs:
        devices.update(r["devices"])
    return {
        "title": title,
        "run": (f"all {len(ids)}: " if view.every else "") + ", ".join(ids) +
               (f" (of {len(all_runs)} in these files)" if len(all_runs) > 1 and not view.every else ""),
        "run_count": len(all_runs),
        "shown": ids,
        "runs_text": runs_text(all_runs, ids, wanted),
        "gpus": [k for k, _ in devices.most_common(3) if k] or ["none (" + why_null(runs, "device") + ")"],
        "lines": sum(len(r["steps"]) for r in runs),
        "lines_all": sum(r["lines"] for r in all_runs),
        "steps": view.n,
        "first_step": view.axis[0], "last_step": view.axis[-1],
        "ranks": len(view.ranks),
        "step_time_median_ms": median(all_time),
        "step_time_p90_ms": p90(all_time),
        "tokens_per_second_median": median(all_tps),
        "mfu_median": median(all_mfu),
        "mfu_null": None if all_mfu else why_null(runs, "estimated_mfu"),
        **verdict(label_bases),
        "labels": fold_labels(label_table(label_bases)),
        "unparsable": sum(f["unparsable"] for f in files),
        "malformed": sum(view.malformed.values()),
    }


def mark_records(view, header):
    """Stall, resumed and end records: marks on every chart's step axis, and a summary in the header."""
    marks = sorted(({**m, "rank": r["rank"]} for r in view.runs for m in r["events"]),
                   key=lambda m: (m["step"], m["rank"], m["kind"]))
    left_out = sum(r["events_left_out"] for r in view.runs) + max(0, len(marks) - MAX_MARKS)
    marks = marks[:MAX_MARKS]  # the page's bound, whatever the ranks
    stalls = [m for m in marks if m["kind"] == "stall"]
    longest = max((m for m in marks if m["kind"] == "resumed"), default=None, key=lambda m: m["stalled_s"] or 0.0)
    header["stalls"] = (f"{len(stalls)} stall record(s) at step(s) " +
                        ", ".join(str(int(st)) for st in sorted({m['step'] for m in stalls})[:8]) +
                        (f"; longest {longest['text']}" if longest else "; not resumed") if stalls else "none")
    header["endings"] = ", ".join(sorted({m["text"][len("end: "):] for m in marks if m["kind"] == "end"})) or \
        "no end record (the run was still going, or was killed)"
    if left_out:
        view.notes.append(f"{left_out} stall/resumed/end record(s) are not marked (at most {MAX_EVENTS} per rank "
                          f"and {MAX_MARKS} per page; the earliest steps' are kept).")
    return [{"x": m["step"], "kind": m["kind"], "rank": m["rank"], "text": m["text"]} for m in marks]


def fold_labels(table):
    """The label table's TOP_N labels; the rest as one row `other`."""
    if len(table) <= TOP_N:
        return table
    by = Counter()
    for _, _, b in table[TOP_N:]:
        by.update(b)
    return table[:TOP_N] + [[f"{OTHER} ({len(table) - TOP_N} labels)", sum(by.values()), dict(by)]]


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
                    help="the HTML page to write (replaced whole, through a temporary beside it; only a regular file is "
                         "replaced). Default: %(default)s")
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
    try:
        replace_file(a.output, page)
    except FileRefused as e:
        print(f"steptrace-report: {e}", file=sys.stderr)
        return 2
    print(f"steptrace-report: {a.output} ({len(page) / 1e6:.2f} MB) from {data['header']['lines']} lines "
          f"of {data['header']['ranks']} rank(s) in {data['build_s']:.2f} s")
    if data["header"]["run_count"] > 1:
        print("steptrace-report: " + data["header"]["runs_text"])
    return 0

