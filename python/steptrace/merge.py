"""One timeline from every rank's captures of the same steps (steptrace-ctl merge).

Reads the flight recorder's trace files (schema steptrace.trace/1) of one run, keeps the asked steps,
and writes one Trace Event file (chrome://tracing, Perfetto) with a process per rank:

- alignment "step_start" (the default): each step begins at the same instant on every rank (each rank's
  events of step S move by that rank's offset at S). Host clocks are never compared: the exchange does
  not measure their offsets, so the view shows what each rank did within the step, not when in wall time.
  "wall": the wall clock each rank wrote (origin_unix_ns), unmoved: right on one host, as good as NTP
  across hosts.
- the slowest rank (largest work: step time less its `nccl` phase, mean over the steps) and its
  culprit phase (the non-communication phase whose time exceeds the median of the other ranks by the
  most: the rule of steptrace's cross_rank view) are marked.
- bounded: at most K ranks in full (the slowest, the fastest, the median, then the next slowest); the
  others as one counter track per phase (min, median and max over them at each step) and a table.
"""
import json
import os
import statistics
import sys

from .files import MAX_TRACE_FILE, TRACE_NAME, FileRefused, printable, read_json, replace_file

MAX_MISSING_LISTED = 64  # ranks_missing lists this many; ranks_missing_count counts them all
# Trace text parsed by one merge, all files together: Python holds a parsed trace at ~27x its size, so
# this bounds the merge's memory (~3.5 GB at most); past it, files are skipped and named (--max-trace-mb).
MAX_MERGE_BYTES = 128 << 20
MAX_TS_US = 1e15  # an event's ts (us from its file's origin): ~31 years; past it, not an event steptrace wrote
MAX_DUR_US = 1e12  # an event's dur: ~11.6 days
MAX_SKIPPED_LISTED = 64

COMM_PHASE = "nccl"
DEFAULT_FULL_RANKS = 3
PID_BASE = 1000


class MergeError(Exception):
    pass


def find_traces(directory, run_ids, first, last, max_bytes=None, skipped=None):
    """(rank, path, document) of each trace file of these runs that captured a step in first..last.
    `max_bytes`: the text parsed, all files together (MAX_MERGE_BYTES by default); `skipped` (a list) gets
    (file name, why) of each trace file of these runs that was not read."""
    budget = MAX_MERGE_BYTES if max_bytes is None else max_bytes
    prefixes = {r[:8] for r in run_ids}
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise MergeError(f"cannot list {directory}: {e.strerror}")
    for name in names:
        m = TRACE_NAME.match(name)
        if not m or m.group(1) not in prefixes:
            continue
        path = os.path.join(directory, name)
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        if size > budget:
            if skipped is not None:
                skipped.append((name, f"{size} bytes: past what is left of the merge's bound ({budget} bytes; --max-trace-mb)"))
            continue
        try:
            doc = read_json(path, min(MAX_TRACE_FILE, budget))
        except FileRefused as e:
            if skipped is not None:
                skipped.append((name, str(e)))
            continue  # being written, cut short, too large, not a regular file: not a capture to merge
        except MemoryError:
            if skipped is not None:
                skipped.append((name, "not enough memory to parse it"))
            continue
        budget -= size
        other = doc.get("otherData") if isinstance(doc, dict) else None
        if (not isinstance(other, dict) or other.get("schema") != "steptrace.trace/1" or other.get("run_id") not in run_ids
                or not isinstance(other.get("captured"), list) or not isinstance(doc.get("traceEvents"), list)
                or not isinstance(other.get("origin_unix_ns", 0), int)):
            continue  # not a trace of these runs, or not in the shape steptrace writes
        rank = other.get("rank")
        if not isinstance(rank, int) or rank < 0:
            continue
        if any(isinstance(s, int) and first <= s <= last for s in other["captured"]):
            out.append((rank, path, doc))
    return out


def _usable(x, bound):
    """A number steptrace could have written: finite, not a bool, at most `bound` in size (hostile files
    hold 1e305 or integers of hundreds of digits)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and -bound <= x <= bound


def step_of(event, step_by_correlation):
    args = event.get("args") or {}
    step = args.get("global_step")
    if isinstance(step, int):
        return step
    corr = args.get("correlation")
    if corr is not None:
        return step_by_correlation.get(corr)
    return None


class RankView:
    """One rank's events of the asked steps, and what they say about its time."""

    def __init__(self, rank, docs, first, last):
        self.rank = rank
        self.first = first
        self.events = []        # (step, wall ns, event) of the asked steps
        self.meta = []          # ph M events
        self.step_start_ns = {}  # step -> wall ns of its begin
        self.step_ms = {}
        self.phase_ms = {}      # step -> {phase: ms}: the outermost scopes on the step thread
        self.host_pid = None
        self.gpu = {}           # step -> ([NCCL kernel intervals], [other GPU work intervals]), wall ns
        seen = set()
        on_step_thread = []     # (step, depth, name, ms) of phase scopes on a step thread
        for doc in docs:
            other = doc["otherData"]
            origin = other.get("origin_unix_ns", 0)
            captured = {c for c in other["captured"] if isinstance(c, int) and first <= c <= last}
            events = [e for e in doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("args", {}), dict)]
            step_by_corr = {}
            for e in events:
                args = e.get("args") or {}
                if "correlation" in args and isinstance(args.get("global_step"), int):
                    step_by_corr[args["correlation"]] = args["global_step"]
            step_threads = set()
            for e in events:
                if e.get("ph") != "M":
                    continue
                name = str((e.get("args") or {}).get("name", ""))
                if e.get("name") == "process_name" and self.host_pid is None and " host" in name:
                    self.host_pid = e.get("pid")
                if e.get("name") == "thread_name" and "step thread" in name:
                    step_threads.add(e.get("tid"))
                key = (e.get("name"), e.get("pid"), e.get("tid"))
                if key not in seen:
                    seen.add(key)
                    self.meta.append(e)
            for e in events:
                if e.get("ph") == "M":
                    continue
                step = step_of(e, step_by_corr)
                ts, dur = e.get("ts"), e.get("dur", 0)
                if step not in captured or not _usable(ts, MAX_TS_US) or not _usable(dur, MAX_DUR_US) or dur < 0:
                    continue  # the neighbours a trace holds beside the asked steps, or not an event we read
                ts_ns = origin + int(round(ts * 1000))
                key = (e.get("ph"), e.get("cat"), e.get("name"), e.get("pid"), e.get("tid"), ts_ns, e.get("id"))
                if key in seen:
                    continue  # the same event in two overlapping files: once
                seen.add(key)
                if e.get("cat") == "step" and e.get("ph") == "X":
                    self.step_start_ns[step] = ts_ns
                    own = (e.get("args") or {}).get("step_time_ms")  # the step's own time (the event runs to the next start)
                    usable = _usable(own, MAX_DUR_US / 1000) and own >= 0
                    self.step_ms[step] = own if usable else dur / 1000  # traces before the arg: to the next start
                depth = (e.get("args") or {}).get("depth")
                if e.get("ph") == "X" and e.get("cat") in ("kernel", "memcpy", "memset"):
                    nccl = e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")
                    self.gpu.setdefault(step, ([], []))[0 if nccl else 1].append((ts_ns, ts_ns + int(round(dur * 1000))))
                if e.get("cat") == "phase" and e.get("ph") == "X" and e.get("tid") in step_threads and isinstance(depth, int):
                    on_step_thread.append((step, depth, str(e.get("name")), dur / 1000))
                self.events.append((step, ts_ns, e))
        # Per step, the outermost scopes on the step thread (the cross-rank view's rule; a loop wrapped
        # in an outer scope has its phases one level down).
        top = {}
        for step, depth, _, _ in on_step_thread:
            top[step] = min(depth, top.get(step, depth))
        for step, depth, name, ms in on_step_thread:
            if depth == top[step]:
                phases = self.phase_ms.setdefault(step, {})
                phases[name] = phases.get(name, 0.0) + ms

    def steps(self):
        return sorted(self.step_start_ns)

    def ordinal(self, step):
        """The step's place in this rank's capture: 0 for its first asked step."""
        return step - self.first

    def measured(self):
        """Whether the captured steps carry GPU records (the collective wait is then measured)."""
        return any(s in self.gpu for s in self.step_ms)

    def wait_ms(self, step):
        """The step's collective wait: NCCL kernel time not overlapped by its other GPU work (the cross-rank
        view's `trace` basis, core/cross_rank.hpp); the fast ranks' NCCL kernels run on while they wait."""
        nccl, other = self.gpu.get(step, ([], []))
        return (_union(nccl) - _overlap(nccl, other)) / 1e6

    def work_ms(self, step, measured=False):
        if measured:
            return max(0.0, self.step_ms.get(step, 0.0) - self.wait_ms(step))
        return max(0.0, self.step_ms.get(step, 0.0) - self.phase_ms.get(step, {}).get(COMM_PHASE, 0.0))

    def mean_work_ms(self, steps, measured=False):
        """Over the steps (with measured waits: the steps whose GPU records the capture holds; a step without
        them would read no wait, and its whole time as work)."""
        vals = [self.work_ms(s, measured) for s in steps if s in self.step_ms and (not measured or s in self.gpu)]
        return sum(vals) / len(vals) if vals else 0.0

    def mean_wait_ms(self, steps):
        vals = [self.wait_ms(s) for s in steps if s in self.step_ms and s in self.gpu]
        return sum(vals) / len(vals) if vals else 0.0

    def mean_phase_ms(self, steps, phase):
        vals = [self.phase_ms.get(s, {}).get(phase, 0.0) for s in steps if s in self.step_ms]
        return sum(vals) / len(vals) if vals else 0.0


def _merged(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _union(intervals):
    return sum(b - a for a, b in _merged(intervals))


def _overlap(xs, ys):
    """Length of union(xs) ∩ union(ys)."""
    a, b = _merged(xs), _merged(ys)
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def culprit(views, slowest):
    """The non-communication phase where the slowest rank exceeds the others' median by the most (each
    rank's mean over its own captured steps)."""
    phases = sorted({p for v in views for s in v.steps() for p in v.phase_ms.get(s, {}) if p != COMM_PHASE})
    best, gap = None, 0.0
    others = [v for v in views if v is not slowest]
    if not others:
        return None, 0.0
    for p in phases:
        g = slowest.mean_phase_ms(slowest.steps(), p) - statistics.median(v.mean_phase_ms(v.steps(), p) for v in others)
        if g > gap:
            best, gap = p, g
    return best, gap


def choose_full(views, k, measured=False):
    """The ranks shown in full: the slowest, the fastest, the median, then the next slowest."""
    by_work = sorted(views, key=lambda v: (v.mean_work_ms(v.steps(), measured), v.rank))
    order = [by_work[-1], by_work[0], by_work[len(by_work) // 2]] + list(reversed(by_work[:-1]))
    chosen = []
    for v in order:
        if len(chosen) >= k:
            break
        if v not in chosen:
            chosen.append(v)
    return chosen


def merge(directory, run_ids, first, last, full_ranks=DEFAULT_FULL_RANKS, align="step_start", expected_ranks=None,
          ranges=None, max_bytes=None):
    """`ranges`: {rank: (first, last)} where ranks captured different steps (no exchange: each its own
    next N); the i-th step of each rank's capture is then laid beside the others' i-th."""
    ranges = ranges or {}
    if align not in ("step_start", "wall"):
        raise MergeError(f"align must be step_start or wall, not {align!r}")
    if full_ranks < 1:
        raise MergeError("full ranks must be at least 1")
    skipped = []
    found = find_traces(directory, set(run_ids), first, last, max_bytes=max_bytes, skipped=skipped)
    if not found:
        why = "".join(f"; {printable(n)} skipped: {printable(r)}" for n, r in skipped[:3])
        raise MergeError(f"no trace of run {', '.join(sorted(run_ids))} captured steps {first}-{last} in {directory}{why}")
    by_rank = {}
    for rank, _, doc in found:
        by_rank.setdefault(rank, []).append(doc)
    views = [RankView(rank, docs, *ranges.get(rank, (first, last))) for rank, docs in sorted(by_rank.items())]
    views = [v for v in views if v.step_start_ns]
    if not views:
        raise MergeError(f"the traces found hold none of steps {first}-{last}")
    steps = sorted({s for v in views for s in v.steps()})
    same_steps = len({tuple(v.steps()) for v in views}) == 1
    # Alignment: the i-th asked step starts on every rank when the lowest rank that has it started it.
    reference = {}
    for v in views:
        for s in v.steps():
            reference.setdefault(v.ordinal(s), v.step_start_ns[s])
    ordinals = sorted(reference)
    def shift(view, step):
        if align == "wall" or step not in view.step_start_ns:
            return 0
        return reference[view.ordinal(step)] - view.step_start_ns[step]
    origin = min(ts + shift(v, s) for v in views for s, ts, _ in v.events)

    # The rank the others wait for: with GPU records on every rank, the most own work = step time less the
    # collective wait (exposed NCCL time); without, the host rule (step time less the nccl phase).
    measured = all(v.measured() for v in views)
    by_work = sorted(views, key=lambda v: (v.mean_work_ms(v.steps(), measured), v.rank))
    slowest, fastest = by_work[-1], by_work[0]
    culprit_phase, culprit_gap = culprit(views, slowest)
    full = choose_full(views, full_ranks, measured)
    full_set = {v.rank for v in full}
    out = []
    for v in full:
        role = []
        if v is slowest:
            role.append("slowest")
        if v is fastest and len(views) > 1:
            role.append("fastest")
        if v is by_work[len(by_work) // 2] and len(views) > 2:
            role.append("median")
        # A rank's processes (its host, then each GPU) as pids of their own: base + rank x 8 + n.
        pid_map = {v.host_pid: PID_BASE + 8 * v.rank}
        def new_pid(pid, pid_map=pid_map, rank=v.rank):
            if pid not in pid_map:
                pid_map[pid] = PID_BASE + 8 * rank + min(len(pid_map), 7)
            return pid_map[pid]
        for e in v.meta:
            e = dict(e)
            e["pid"] = new_pid(e.get("pid"))
            if e.get("name") == "process_name" and role and e["pid"] == pid_map.get(v.host_pid):
                e["args"] = dict(e.get("args") or {}, name=f"{(e.get('args') or {}).get('name', '')} [{', '.join(role)}]")
            out.append(e)
        for step, ts_ns, e in v.events:
            e = dict(e)
            e["pid"] = new_pid(e.get("pid"))
            e["ts"] = round((ts_ns + shift(v, step) - origin) / 1000, 3)
            out.append(e)
        if v is slowest and culprit_phase and len(views) > 1:
            host = pid_map[v.host_pid]
            for s in v.steps():
                if s in v.step_start_ns:
                    out.append({"ph": "i", "s": "p", "name": f"slowest rank {v.rank}: {culprit_phase} +{culprit_gap:.3g} ms",
                                "pid": host, "tid": 0, "ts": round((v.step_start_ns[s] + shift(v, s) - origin) / 1000, 3),
                                "args": {"culprit_phase": culprit_phase, "culprit_gap_ms": culprit_gap, "global_step": s}})
    rest = [v for v in views if v.rank not in full_set]
    if rest:
        summary_pid = PID_BASE + 8 * (max(v.rank for v in views) + 1)
        out.append({"ph": "M", "name": "process_name", "pid": summary_pid,
                    "args": {"name": f"{len(rest)} other ranks (per phase: min / median / max ms)"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": summary_pid, "args": {"sort_index": 1 << 30}})
        phases = sorted({p for v in rest for s in v.steps() for p in v.phase_ms.get(s, {})})
        for i in ordinals:
            at_step = [(v, v.first + i) for v in rest if v.first + i in v.step_ms]
            if not at_step:
                continue
            if align == "step_start":
                ts = round((reference[i] - origin) / 1000, 3)
            else:
                ts = round((min(v.step_start_ns[s] for v, s in at_step) - origin) / 1000, 3)
            for p in ["step"] + phases:
                vals = [v.step_ms[s] if p == "step" else v.phase_ms.get(s, {}).get(p, 0.0) for v, s in at_step]
                out.append({"ph": "C", "name": f"{p} ms", "pid": summary_pid, "ts": ts,
                            "args": {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}})
    present = {v.rank for v in views}
    missing, missing_count = [], 0
    for r in expected_ranks or []:  # a range of up to MAX_RANKS: counted, the first MAX_MISSING_LISTED listed
        if r not in present:
            missing_count += 1
            if len(missing) < MAX_MISSING_LISTED:
                missing.append(r)
    other = {
        "schema": "steptrace.merged/1",
        "ranks_missing_count": missing_count,
        "run_ids": sorted(run_ids),
        "steps": steps,
        "alignment": align,
        "same_steps": same_steps,
        "alignment_note": (("each asked step begins at the same instant on every rank (the lowest rank's start); host "
                            "clocks are not compared" if align == "step_start" else
                            "each rank's own wall clock (origin_unix_ns), not corrected for offsets between hosts") +
                           ("" if same_steps else "; the ranks captured different steps (no exchange): the i-th "
                            "step of each rank's capture is laid beside the others' i-th")),
        "ranks": len(views),
        "ranks_missing": missing,
        "full_ranks": [v.rank for v in full],
        "slowest_rank": slowest.rank,
        "fastest_rank": fastest.rank,
        "culprit_phase": culprit_phase,
        "culprit_gap_ms": culprit_gap,
        "basis": ("the captured steps' GPU records: own work = step time less the collective wait (NCCL kernel time "
                  "not overlapped by the rank's other GPU work), mean over the steps; the culprit phase from the host "
                  "phases" if measured else
                  "the captured steps' host phases (work = step time less the nccl phase, mean over the steps): "
                  "a rank's traces hold no GPU records"),
        "waits_measured": measured,
        "traces_skipped_count": len(skipped),
        "traces_skipped": [{"file": n, "why": r} for n, r in skipped[:MAX_SKIPPED_LISTED]],
        "per_rank": [{"rank": v.rank, "work_ms": round(v.mean_work_ms(steps, measured), 4),
                      "wait_ms": round(v.mean_wait_ms(steps), 4) if measured else None,
                      "step_ms": round(sum(v.step_ms.values()) / len(v.step_ms), 4),
                      "steps": v.steps()} for v in views],
    }
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": other}


def write_merged(doc, path):
    """Replaces `path` whole (files.replace_file: regular files only, an O_EXCL temporary)."""
    replace_file(path, json.dumps(doc, separators=(",", ":"), allow_nan=False))  # never Infinity or NaN
