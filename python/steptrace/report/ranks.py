"""The report's view across ranks (one run, several ranks): who held the step back (rank 0's cross-rank
views), each rank's step time, collective wait and own work over the steps, the slowest rank per window,
and the rank x phase table."""
import math
import statistics
from collections import Counter, defaultdict

from .numbers import PALETTE, median, rounded

MAX_RANK_LINES = 8
MAX_HEAT_ROWS = 64    # ranks in the per-rank heat map at most: the slowest (the median is over every rank)


def _finite(v):
    """v where it is a finite number, else None: the page's data is JSON without Infinity (each value read
    is finite, but a median of two near the float limit, or a difference, need not be)."""
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def _median(xs):
    return _finite(median([x for x in xs if _finite(x) is not None]))


def held_back(view):
    """Who held the step back (rank 0's cross-rank views of the run shown): per culprit rank, the share of
    views naming it, what the median rank waited for it (gap_ms, per step), its most named part; how many
    views read balanced. None without views."""
    if view.every or 0 not in view.by_rank:
        return None
    views = view.by_rank[0]["views"]
    if not views:
        return None
    by_rank = defaultdict(list)
    for v in views:
        if isinstance(v.get("slowest_rank"), int):
            by_rank[v["slowest_rank"]].append(v)
    culprits = []
    for rk, vs in sorted(by_rank.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:8]:
        phases = Counter(v["phase"] for v in vs if v.get("phase"))
        gaps = [v["gap_ms"] for v in vs if v.get("gap_ms") is not None]
        waits = [v["median_wait_ms"] - v["culprit_wait_ms"] for v in vs
                 if v.get("median_wait_ms") is not None and v.get("culprit_wait_ms") is not None]
        phase, k = phases.most_common(1)[0] if phases else (None, 0)
        culprits.append({"rank": rk, "views": len(vs), "share": len(vs) / len(views),
                         "gap_ms": _median(gaps), "wait_gap_ms": _median(waits), "phase": phase, "phase_views": k,
                         "phases": dict(phases.most_common(4))})
    judged = [v["balanced"] for v in views if v.get("balanced") is not None]
    shares = [v["wait_share"] for v in views if v.get("wait_share") is not None]
    return {"views": len(views), "first_step": views[0]["step"], "last_step": views[-1]["step"],
            "balanced": sum(judged), "judged": len(judged), "wait_share_median": _median(shares),
            "bases": dict(Counter(v["basis"] or "none" for v in views).most_common(3)), "culprits": culprits}


def rank_phase_table(view):
    """Rank x phase: each rank's mean host time per phase (self time), its collective wait and own work
    (rank_wait), over its lines; the MAX_HEAT_ROWS ranks with the most own work when there are more."""
    if view.every or len(view.ranks) < 2:
        return None
    totals = Counter()
    for rk in view.ranks:
        for name, rows in view.by_rank[rk]["host"].items():
            totals[name] += sum(rows.values())
    phases = [p for p, _ in totals.most_common(8)]
    rows = []
    for rk in view.ranks:
        seg = view.by_rank[rk]
        n = max(1, len(seg["steps"]))
        mean_of = lambda key: _median(seg["cols"][key])
        rows.append({"rank": rk, "phases": [_finite(round(sum(seg["host"].get(p, {}).values()) / n, 4)) for p in phases],
                     "step_ms": mean_of("step_time_ms"), "wait_ms": mean_of("rank_wait_ms"),
                     "work_ms": mean_of("rank_work_ms")})
    if len(rows) > MAX_HEAT_ROWS:
        rows = sorted(rows, key=lambda r: -(r["work_ms"] or 0))[:MAX_HEAT_ROWS]
    return {"phases": phases, "rows": rows}


def rank_charts(view):
    """Step time per rank, and the slowest rank per window (one run, several ranks). The slowest ranks' table."""
    if len(view.ranks) > 1 and not view.every:
        per_rank, by_bucket = rank_means(view)
        rank_chart(view, per_rank, by_bucket)
        # Each rank's collective wait and own work (rank_wait, one every cross_rank_every steps): who waits.
        # Under synchronous data parallelism step times agree; the slowest is then the one with the most own work.
        work_buckets = None
        for key, cid, title in (("rank_wait_ms", "rank_wait", "Collective wait per rank (ms per step)"),
                                ("rank_work_ms", "rank_work", "Own work per rank: iteration less collective wait (ms per step)")):
            if all(any(v is not None for v in view.by_rank[rk]["cols"][key]) for rk in view.ranks):
                pr, bb = rank_means(view, key)
                rank_chart(view, pr, bb, cid, title)
                if key == "rank_work_ms":
                    work_buckets = bb
        if work_buckets is not None:
            return slowest_chart(view, work_buckets, "own work")
        return slowest_chart(view, by_bucket)
    if len(view.ranks) == 1:
        view.notes.append("One rank in these files: per-rank step time and the slowest rank need every rank's file.")
    return []


def rank_means(view, key="step_time_ms"):
    """Each rank's mean step time per bucket of the lowest rank's steps, from the rank's own lines only (time
    and memory grow with the lines, not with ranks x steps): rank -> {bucket: ms}, and bucket -> {rank: ms}."""
    rows_of, bucket = defaultdict(list), [0] * view.n
    for row, st in enumerate(view.main["steps"]):
        rows_of[st].append(row)
    for j, (a, b) in enumerate(view.bks):
        bucket[a:b] = [j] * (b - a)
    per_rank, by_bucket = {}, defaultdict(dict)
    for rk in view.ranks:
        acc = defaultdict(lambda: [0.0, 0])
        for st, v in dict(zip(view.by_rank[rk]["steps"], view.by_rank[rk]["cols"][key])).items():
            if v is None:
                continue
            for row in rows_of.get(st, ()):
                acc[bucket[row]][0] += v
                acc[bucket[row]][1] += 1
        per_rank[rk] = {j: t / k for j, (t, k) in acc.items()}
        for j, v in per_rank[rk].items():
            by_bucket[j][rk] = v
    return per_rank, by_bucket


def rank_chart(view, per_rank, by_bucket, cid="ranks", title="Step time per rank"):
    """A line per rank (MAX_RANK_LINES ranks at most), else a heat map against the ranks' median."""
    ranks, points = view.ranks, range(len(view.bks))
    dense = lambda rk: [per_rank[rk].get(j) for j in points]
    if len(ranks) <= MAX_RANK_LINES:
        ss = [{"name": f"rank {rk}", "color": PALETTE[i % len(PALETTE)], "y": rounded(dense(rk))}
              for i, rk in enumerate(ranks)]
        view.chart(cid, title, "ms", ss)
        return
    med = [statistics.median(by_bucket[j].values()) if by_bucket.get(j) else None for j in points]
    rows = ranks
    if len(ranks) > MAX_HEAT_ROWS:  # the highest ranks: mean value over the median, over their points
        score = {rk: statistics.fmean(v / med[j] for j, v in per_rank[rk].items() if med[j]) if
                 any(med[j] for j in per_rank[rk]) else 0.0 for rk in ranks}
        rows = sorted(sorted(ranks, key=lambda rk: -score[rk])[:MAX_HEAT_ROWS])
        view.notes.append(f"{title}: {len(ranks)} ranks; the {MAX_HEAT_ROWS} highest (over the ranks' median, on "
                          "average) are drawn, coloured against the median of every rank.")
    view.charts.append({"id": cid, "title": f"{title} ({len(ranks)} ranks" +
                        (f", the {len(rows)} highest" if len(rows) < len(ranks) else "") +
                        "), relative to the ranks' median", "kind": "heat", "x": view.x,
                        "rows": [f"rank {rk}" for rk in rows], "z": [rounded(dense(rk), 4) for rk in rows],
                        "med": rounded(med, 4)})


def slowest_chart(view, by_bucket, what="step time"):
    """The slowest rank per window and its `what` (step time, or own work when every rank has it) above the
    ranks' median; the ranks most often slowest."""
    slowest, excess = [], []
    for j in range(len(view.bks)):
        vals = by_bucket.get(j, {})
        if len(vals) < 2:
            slowest.append(None)
            excess.append(None)
            continue
        rk = max(vals, key=vals.get)
        med = statistics.median(vals.values())
        slowest.append(rk)
        excess.append(vals[rk] - med)
    view.chart("slowest", f"Slowest rank per window: its {what} above the ranks' median" +
               (" (the rank the others wait for)" if what == "own work" else ""), "ms",
               [{"name": "slowest rank's excess over the median", "color": PALETTE[3], "y": rounded(excess),
                 "tags": slowest}])
    counts = Counter(s for s in slowest if s is not None)
    return [{"rank": rk, "windows": c, "share": c / max(1, sum(counts.values()))} for rk, c in counts.most_common(8)]
