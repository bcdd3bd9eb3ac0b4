"""The reading side of steptrace-report: the lines of each file, split by run and rank, and the choice of
the run to show.

A log that several runs appended to (same path, a new `run_id` at every `start()`, each counting its
`global_step` from 0 again) holds several series: drawn as one, the steps would go back and forth. So
every file is read as segments, one per (`run_id`, `rank`); lines without `run_id` (old logs) are the run
"?". Lines whose fields have the wrong type are skipped and counted (guard). The
report shows one run, by default the latest (its last line has the newest time; the file's
order breaks ties), `--run ID` another, `--run all` every run, one series each.
"""
import math
import os
from collections import Counter, defaultdict
from datetime import datetime

from ..lines import MAX_LINE_BYTES, raw_lines
from .diagnosis import line_basis
from .guard import MAX_NAME, Malformed, check_line, cut, parse

NO_ID = "?"  # the run of lines without run_id
SHOWN_IN_HEADER = 10  # runs listed in the header at most (the error for an unknown id lists every one)

# Per-step scalar fields: (key in the page's data, path in the line).
SCALARS = [
    ("step_time_ms", ("step_time_ms",)),
    ("tokens_per_second", ("tokens_per_second",)),
    ("estimated_mfu", ("estimated_mfu",)),
    ("gpu_utilization", ("gpu_utilization",)),
    ("sm_activity", ("sm_activity",)),
    ("tensor_core_or_pipe_utilization", ("tensor_core_or_pipe_utilization",)),
    ("memory_bandwidth_utilization", ("memory_bandwidth_utilization",)),
    ("nccl_time_ms", ("nccl_time_ms",)),
    ("nccl_exposed_ms", ("gpu", "nccl_exposed_ms")),
    ("device_used_peak_bytes", ("memory", "device_used_peak_bytes")),
    ("allocated_bytes", ("memory", "allocator", "allocated_bytes")),
    ("reserved_bytes", ("memory", "allocator", "reserved_bytes")),
    ("dataloader_wait_ms", ("dataloader_wait_ms",)),
    # The stream markers' view of every marked line (traced or not): the share of the step the GPU was
    # held by the program's stream (a lower bound of its busy share), and the step's GPU span.
    ("markers_pending_share", ("gpu_markers", "pending_share")),
    ("markers_span_ms", ("gpu_markers", "span_ms")),
    # Every rank's own summary as exchanged (rank_wait): its collective wait and own work per step.
    ("rank_wait_ms", ("rank_wait", "wait_ms")),
    ("rank_work_ms", ("rank_wait", "work_ms")),
]
# Rank 0's cross-rank view (cross_rank), kept per view: numbers checked as SCALARS are.
VIEW_NUMBERS = [
    ("slowest_rank", ("cross_rank", "slowest_rank")),
    ("gap_ms", ("cross_rank", "gap_ms")),
    ("wait_share", ("cross_rank", "wait_share")),
    ("culprit_wait_ms", ("cross_rank", "culprit", "wait_ms")),
    ("median_wait_ms", ("cross_rank", "median_rank", "wait_ms")),
    ("culprit_gap_ms", ("cross_rank", "culprit_gap_ms")),
]


class UnknownRun(Exception):
    """--run named no run of these files; the message lists those there are."""


def dig(obj, path):
    """The number at path (check_line made sure it is one, or null, or absent)."""
    for k in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def line_key(line):
    """(run_id, rank) of a line (checked: a string or none, an int or none): the segment it belongs to."""
    return line.get("run_id") or NO_ID, line.get("rank", 0)


EARLIEST_MS = 946684800000.0  # 2000-01-01: no steptrace line is older
LATEST_MS = 4102444800000.0    # 2100-01-01: a host's clock may be wrong, not by a century


def _plausible_ms(ms):
    """ms if it can be a line's wall time (2000 to 2100), else None: a forged 1e308 would otherwise make
    its run the newest, the one the report shows by default."""
    return ms if ms is not None and EARLIEST_MS <= ms <= LATEST_MS else None


def line_ms(line):
    """The line's wall time in ms since the epoch (start_unix_ms, else timestamp), or None (also for a
    time no line can have)."""
    v = line.get("start_unix_ms")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return _plausible_ms(float(v)) if math.isfinite(v) else None
        except OverflowError:  # an integer too large for a double
            return None
    ts = line.get("timestamp")
    if isinstance(ts, str):
        try:
            return _plausible_ms(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000.0)
        except (ValueError, OverflowError):
            return None
    return None


MAX_EVENTS = 200  # stall, resumed and end marks kept per (run, rank); the rest are counted


def _number(v, limit=1e15):
    """v if it is a finite number within ±limit (JSON allows integers of any size), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(f) and abs(f) <= limit else None


def _list(v):
    return v if isinstance(v, list) else []


def event_mark(line):
    """A stall, resumed or end record as a mark on the step axis (docs/schema.md), or None: kind, step,
    and a short text of what it says. Values of the wrong type are left out, never trusted."""
    kind = line.get("event")
    if kind == "stall":
        step = _number(line.get("open_step"))
        where = []
        for t in _list(line.get("threads")):
            if not isinstance(t, dict) or t.get("step_thread") is not True:
                continue
            for ph in _list(t.get("open_phases")):
                if isinstance(ph, dict) and isinstance(ph.get("phase"), str):
                    where.append(cut(ph["phase"]))
        stalled = _number(line.get("stalled_s"), 1e9)
        text = "stalled " + (f"{stalled:.1f} s" if stalled is not None else "?") + \
            (" in " + " > ".join(where[:4]) if where else "") + \
            (" (between steps)" if line.get("step_scope_open") is False else "")
    elif kind == "resumed":
        step = _number(line.get("open_step"))
        stalled = _number(line.get("stalled_s"), 1e9)
        text = "resumed after " + (f"{stalled:.1f} s" if stalled is not None else "?") + \
            (f" (step {int(line['stalled_step'])} stalled)" if _number(line.get("stalled_step")) is not None else "")
    elif kind == "end":
        step = _number(line.get("last_global_step"))
        reason = line.get("reason")
        text = "end: " + (cut(reason) if isinstance(reason, str) else "?")
    else:
        return None
    if step is None:
        return None
    return {"kind": kind, "step": step, "text": text,
            "stalled_s": _number(line.get("stalled_s"), 1e9) if kind != "end" else None}


def new_segment(path, key):
    return {"path": path, "run_id": key[0], "rank": key[1], "steps": [], "cols": {k: [] for k, _ in SCALARS},
            "labels": [], "bases": [], "gpu_rows": [],   # gpu_rows: row -> the line has GPU attribution
            "host": defaultdict(dict), "gpu": defaultdict(dict),   # phase -> {row: ms}; host: self time
            "markers": defaultdict(dict),   # phase -> {row: its GPU span from the stream markers}
            "marked_rows": [],   # row -> the line has its phases' markers
            "inclusive_rows": 0,   # lines written before phases had self_ms: their host rows are inclusive
            "top": {}, "nulls": defaultdict(Counter),   # top: phase -> {kernel: [ms, calls]}
            "traces": [], "ends": [], "events": [], "events_left_out": 0, "devices": Counter(),
            "views": [],   # rank 0's cross-rank views: {step, slowest_rank, gap_ms, ..., phase, balanced, basis}
            "reasons": {},   # reason code -> sentence (compact lines, schema steptrace.step/2)
            "trace_dirs": [],   # the run record's trace_dir setting (a compact log's lines name no trace)
            "first_ms": None, "last_ms": None, "first_pos": None, "last_pos": None}


def add_line(seg, line, pos):
    row = len(seg["steps"])
    seg["steps"].append(line["global_step"])
    ms = line_ms(line)
    if ms is not None:
        seg["first_ms"] = ms if seg["first_ms"] is None else min(seg["first_ms"], ms)
        seg["last_ms"] = ms if seg["last_ms"] is None else max(seg["last_ms"], ms)
    if seg["first_pos"] is None:
        seg["first_pos"] = pos
    seg["last_pos"] = pos
    dev = line.get("device")
    if dev:
        seg["devices"][cut(dev.get("name") or "")] += 1
    for key, p in SCALARS:
        seg["cols"][key].append(dig(line, p))
    diag = line.get("diagnosis") or {}
    seg["labels"].append(cut(diag.get("label") or "UNKNOWN"))
    seg["bases"].append(line_basis(line, diag))
    seg["gpu_rows"].append(isinstance(line.get("gpu"), dict))
    gm = line.get("gpu_markers")
    seg["marked_rows"].append(isinstance(gm, dict) and bool(gm.get("phases")))  # phases marked: spans known
    for name, ph in ((gm.get("phases") or {}).items() if isinstance(gm, dict) else ()):  # types checked
        if ph.get("span_ms") is not None:
            seg["markers"][cut(name) if len(name) > MAX_NAME else name][row] = ph["span_ms"]
    inclusive = False
    for name, ph in (line.get("phases") or {}).items():  # types checked (check_line); names cut
        if len(name) > MAX_NAME:
            name = cut(name)
        # The host stack is of self time (a phase nested in another is not in its parent's): the step
        # thread's phases add up to its phase-covered time; other threads' stack on top.
        # A line written before self_ms has inclusive times only, drawn as they are and counted.
        host = ph.get("self_ms") if "self_ms" in ph else ph.get("host_ms")
        inclusive = inclusive or ("self_ms" not in ph and host is not None)
        if host is not None:
            rows = seg["host"][name]
            rows[row] = rows.get(row, 0.0) + host
        g = ph.get("gpu")
        if g:
            if g.get("busy_ms") is not None:
                rows = seg["gpu"][name]
                rows[row] = rows.get(row, 0.0) + g["busy_ms"]
            for t in g.get("top_kernels") or ():
                kernel = t.get("name") or "?"
                kernels = seg["top"].get(name)
                if kernels is None:
                    kernels = seg["top"][name] = {}
                cell = kernels.setdefault(kernel if len(kernel) <= MAX_NAME else cut(kernel), [0.0, 0])
                cell[0] += t.get("ms") or 0.0
                cell[1] += t.get("calls") or 0
    seg["inclusive_rows"] += inclusive
    for field, why in (line.get("null_reasons") or {}).items():
        seg["nulls"][field][cut(why)] += 1  # a compact line's: a code, its sentence in seg["reasons"]
    for code, sentence in (line.get("reason_text") or {}).items():  # types checked (check_line)
        seg["reasons"].setdefault(code, cut(sentence))
    xr = line.get("cross_rank")
    if isinstance(xr, dict):
        v = {k: dig(line, path) for k, path in VIEW_NUMBERS}
        v["step"] = xr.get("step") if isinstance(xr.get("step"), int) else line["global_step"]
        v["phase"] = cut(xr["culprit_phase"]) if isinstance(xr.get("culprit_phase"), str) else None
        v["balanced"] = xr.get("balanced") if isinstance(xr.get("balanced"), bool) else None
        v["basis"] = cut(xr["wait_basis"]) if isinstance(xr.get("wait_basis"), str) else None
        seg["views"].append(v)
    t = line.get("trace")
    if t and t.get("file"):
        seg["traces"].append({"step": line["global_step"], "rank": line.get("rank", 0), "file": t["file"],
                              "log": seg["path"], "reasons": [cut(r) for r in t.get("reasons") or []]})


def load_file(path, start=0, end=None):
    """One file's steps (or those of bytes start..end of it), as columns, one segment per (run_id, rank).
    Lines that do not parse (a killed writer's fragment) are counted, and so are lines the report will
    not read (malformed: why -> lines)."""
    segs = {}
    unparsable = 0
    malformed = Counter()
    for here, raw in raw_lines(path, start, end):
        if raw is None:  # longer than any line steptrace writes: skipped unread
            malformed[f"a line longer than {MAX_LINE_BYTES} bytes"] += 1
            continue
        if not raw.strip():
            continue
        line, why = parse(raw)
        if why == "unparsable":
            unparsable += 1
            continue
        if why is None and "event" not in line and "global_step" not in line:
            continue
        if why is None:
            try:
                check_line(line, SCALARS)
            except Malformed as e:
                why = str(e)
        if why is not None:
            malformed[why] += 1
            continue
        key = line_key(line)
        seg = segs.get(key)
        if seg is None:
            seg = segs[key] = new_segment(path, key)
        if "event" in line:
            if line.get("event") == "run":  # a compact log's run record: the device, its fields' reasons
                dev = line.get("device")
                if isinstance(dev, dict) and isinstance(dev.get("name"), str):
                    seg["devices"][cut(dev["name"])] += 1
                settings = line.get("settings")
                where = settings.get("trace_dir") if isinstance(settings, dict) else None
                if isinstance(where, str) and where and where not in seg["trace_dirs"] and len(seg["trace_dirs"]) < 4:
                    seg["trace_dirs"].append(where)
                reasons = line.get("null_reasons")
                for field, why in (reasons.items() if isinstance(reasons, dict) else ()):
                    if isinstance(field, str) and isinstance(why, str):
                        seg["nulls"][cut(field)][cut(why)] += 1
                continue
            if line.get("event") == "end":
                seg["ends"].append(line)
            mark = event_mark(line)
            if mark is not None:
                if len(seg["events"]) < MAX_EVENTS:
                    seg["events"].append(mark)
                else:
                    seg["events_left_out"] += 1
            continue
        add_line(seg, line, here)
    for seg in segs.values():
        seg["host"], seg["gpu"], seg["markers"] = dict(seg["host"]), dict(seg["gpu"]), dict(seg["markers"])
        seg["nulls"] = dict(seg["nulls"])
    return {"path": path, "segments": segs, "unparsable": unparsable, "malformed": malformed}


def split_points(path, parts):
    """Byte ranges of `path` cut at line ends, `parts` of them (fewer for small files)."""
    size = os.path.getsize(path)
    parts = max(1, min(parts, size // (32 << 20)))
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(size * i // parts)
            f.readline()
            cuts.append(max(cuts[-1], f.tell()))
    cuts.append(size)
    return [(path, cuts[i], cuts[i + 1]) for i in range(parts) if cuts[i + 1] > cuts[i]]


def load_range(task):
    return load_file(*task)


def append(out, p):
    """Segment p (the same run and rank, later in the file or in a later file) after segment out."""
    offset = len(out["steps"])
    out["steps"] += p["steps"]
    for k in out["cols"]:
        out["cols"][k] += p["cols"][k]
    for key in ("labels", "bases", "gpu_rows", "marked_rows", "traces", "ends", "views"):
        out[key] += p[key]
    out["trace_dirs"] += [d for d in p["trace_dirs"] if d not in out["trace_dirs"]][:max(0, 4 - len(out["trace_dirs"]))]
    out["inclusive_rows"] += p["inclusive_rows"]
    room = max(0, MAX_EVENTS - len(out["events"]))
    out["events"] += p["events"][:room]
    out["events_left_out"] += p["events_left_out"] + max(0, len(p["events"]) - room)
    for key in ("host", "gpu", "markers"):
        for phase, rows in p[key].items():
            dst = out[key].setdefault(phase, {})
            for row, v in rows.items():
                dst[row + offset] = v
    for phase, d in p["top"].items():
        dst = out["top"].setdefault(phase, {})
        for name, (ms, calls) in d.items():
            cell = dst.setdefault(name, [0.0, 0])
            cell[0] += ms
            cell[1] += calls
    for field, c in p["nulls"].items():
        out["nulls"].setdefault(field, Counter()).update(c)
    out["devices"].update(p["devices"])
    for code, sentence in p["reasons"].items():
        out["reasons"].setdefault(code, sentence)
    for k, pick in (("first_ms", min), ("last_ms", max), ("first_pos", min), ("last_pos", max),
                    ("first_at", min), ("last_at", max)):
        vals = [v for v in (out.get(k), p.get(k)) if v is not None]
        out[k] = pick(vals) if vals else None
    return out


def merge(parts, path):
    """One file's parts (in order) as one: its segments, each whole."""
    out = {"path": path, "segments": {}, "unparsable": 0, "malformed": Counter()}
    for p in parts:
        out["unparsable"] += p["unparsable"]
        out["malformed"].update(p["malformed"])
        for key, seg in p["segments"].items():
            if key in out["segments"]:
                append(out["segments"][key], seg)
            else:
                out["segments"][key] = seg
    return out


def segments(files):
    """Every file's segments with step lines, one per (run_id, rank): a run and rank in several files is
    one segment (in the files' order). first_at/last_at: (file index, byte) of its first/last line."""
    out = {}
    for i, f in enumerate(files):
        for key, seg in f["segments"].items():
            if not seg["steps"]:
                continue
            seg["first_at"], seg["last_at"] = (i, seg["first_pos"]), (i, seg["last_pos"])
            if key in out:
                append(out[key], seg)
            else:
                out[key] = seg
    return list(out.values())


def catalogue(segs):
    """The runs of these segments, oldest first: id, step range, lines, ranks; the latest is marked."""
    runs = {}
    for s in segs:
        r = runs.setdefault(s["run_id"], {"id": s["run_id"], "lines": 0, "ranks": [], "segs": []})
        r["lines"] += len(s["steps"])
        r["ranks"].append(s["rank"])
        r["segs"].append(s)
    for r in runs.values():
        segs_ = r.pop("segs")
        r["ranks"].sort()
        r["first_step"] = min(min(s["steps"]) for s in segs_)
        r["last_step"] = max(max(s["steps"]) for s in segs_)
        firsts = [s["first_ms"] for s in segs_ if s["first_ms"] is not None]
        lasts = [s["last_ms"] for s in segs_ if s["last_ms"] is not None]
        r["first_ms"], r["last_ms"] = (min(firsts) if firsts else None), (max(lasts) if lasts else None)
        r["first_at"], r["last_at"] = min(s["first_at"] for s in segs_), max(s["last_at"] for s in segs_)
    out = sorted(runs.values(), key=lambda r: (r["first_ms"] is not None, r["first_ms"] or 0.0, r["first_at"]))
    latest = max(out, key=lambda r: (r["last_ms"] is not None, r["last_ms"] or 0.0, r["last_at"]))
    for r in out:
        r["latest"] = r is latest
    return out


def describe(r):
    ranks = r["ranks"]
    who = f", ranks {ranks[0]}–{ranks[-1]}" if len(ranks) > 1 else ""
    return (f"{r['id']}{' (lines without run_id)' if r['id'] == NO_ID else ''}: global_step "
            f"{r['first_step']}–{r['last_step']}, {r['lines']} line{'s' if r['lines'] != 1 else ''}{who}")


def choose(runs, wanted):
    """The ids of the runs to show: the latest (wanted None), every one ("all"), or the one named (its
    id, or a prefix of it that names no other). UnknownRun when none fits."""
    if wanted is None:
        return [r["id"] for r in runs if r["latest"]]
    if wanted == "all":
        return [r["id"] for r in runs]
    ids = [r["id"] for r in runs]
    if wanted in ids:
        return [wanted]
    starts = [i for i in ids if wanted and i.startswith(wanted)]
    if len(starts) == 1:
        return starts
    raise UnknownRun(f"no run {wanted!r} in these files" + (" (it starts several run ids)" if starts else "") +
                     f"; they hold {len(runs)} run{'s' if len(runs) != 1 else ''}: " +
                     "; ".join(describe(r) for r in runs) +
                     ". Pick one with --run ID (or a prefix that names one run), or --run all for every run.")


def runs_text(runs, shown, wanted):
    """The header's sentence on runs: how many, which (ids, step ranges, lines), which is shown, how to
    pick another."""
    if len(runs) == 1:
        return f"1 run in these files: {describe(runs[0])}."
    listed = runs if len(runs) <= SHOWN_IN_HEADER else \
        [r for i, r in enumerate(runs) if i >= len(runs) - SHOWN_IN_HEADER + 1 or r["id"] in shown][-SHOWN_IN_HEADER:]
    more = len(runs) - len(listed)
    text = (f"{len(runs)} runs in these files (each with its own run_id and its own global_step count), "
            f"oldest first: " + "; ".join(describe(r) + (" (latest)" if r["latest"] else "") for r in listed) +
            (f"; and {more} more (every id: --run with an unknown id lists them)" if more else "") + ". ")
    if len(shown) > 1:
        return text + (f"Shown: all {len(shown)} runs, one series per run (--run all); per-phase time, the "
                       "diagnosis over time and the per-rank views need one run: --run ID.")
    why = "the latest run (its last line is the newest)" if wanted is None else f"chosen with --run {wanted}"
    return text + (f"Shown: {shown[0]}, {why}. Another: --run ID (a unique prefix will do); "
                   "every run, one series each: --run all.")
