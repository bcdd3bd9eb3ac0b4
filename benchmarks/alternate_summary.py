#!/usr/bin/env python3
"""Tables for in-process alternation (step_workloads --alternate, python_gpt.py --mode alternate).

    alternate_summary.py BLOCKS.txt... [--lines-root DIR] [--stat mean|median]

Each input holds `block workload=W round=R mode=M ... mean_ms=X [median_ms=Y] ... lines=PATH|-` lines.
Within a round every mode's block is paired with that round's off block of the same workload (one
process: the pair shares placement, clocks and warm caches), so each round gives one ratio per mode of
the blocks' step times (--stat: their means, the default, or their medians); the table shows each
pair's cost, their mean and median, and the median by the other statistic. For steptrace blocks the estimate steptrace itself published is read
from the block's lines (the mean of overhead.estimated_fraction over its timed lines, and the last line's
with its 95 % range estimated_fraction_ci_low - _ci_high and _high where the line has them: full lines)
and set beside the measured cost, with the estimate's mean difference from it in points, with the interval and
CUPTI's mode at the end, and how many of the block's lines said UNKNOWN. Off blocks' spread across rounds
(max / min - 1) says how steady the process was.
"""
import json
import os
import statistics
import sys

from default_cost_summary import read_lines  # beside this file: one reader of steptrace's lines


def parse_blocks(paths):
    blocks = []
    for path in paths:
        with open(path) as f:
            for text in f:
                if not text.startswith("block "):
                    continue
                kv = dict(item.split("=", 1) for item in text.split()[1:] if "=" in item)
                try:
                    blocks.append({"workload": kv["workload"], "round": int(kv["round"]), "mode": kv["mode"],
                                   "mean_ms": float(kv["mean_ms"]),
                                   "median_ms": float(kv["median_ms"]) if "median_ms" in kv else None,
                                   "lines": kv.get("lines", "-"),
                                   "launches": kv.get("launches_per_step", "?"), "source": path})
                except (KeyError, ValueError):
                    continue
    return blocks


def last_estimate(path, root):
    """What the block's lines estimated: the last line's overhead (estimated_fraction, _ci_low, _ci_high,
    _high, trace_every, untraced_cupti), the mean of estimated_fraction over the block's timed lines (from
    the step its PATH.times.json names first, else all), the timed lines whose within_budget was false,
    and the lines labelled UNKNOWN and in all; {} without lines."""
    if path in ("-", ""):
        return {}
    full = path if os.path.isabs(path) or not root else os.path.join(root, path)
    steps, _ = read_lines(full)
    if not steps:
        return {}
    o = steps[-1].get("overhead") or {}
    out = {k: o.get(k) for k in ("estimated_fraction", "estimated_fraction_ci_low", "estimated_fraction_ci_high",
                                 "estimated_fraction_high", "trace_every", "untraced_cupti")}
    first = 0
    try:
        with open(full + ".times.json") as f:
            first = int(json.load(f).get("first_step", 0))
    except (OSError, ValueError, AttributeError):
        pass
    timed = [s for s in steps if isinstance(s.get("global_step"), int) and s["global_step"] >= first]
    est = [(s.get("overhead") or {}).get("estimated_fraction") for s in timed]
    est = [e for e in est if isinstance(e, (int, float))]
    out["estimate_mean"] = statistics.fmean(est) if est else None
    out["over_budget"] = sum(1 for s in timed if (s.get("overhead") or {}).get("within_budget") is False)
    out["timed"] = len(timed)
    out["traced"] = sum(1 for s in timed if s.get("traced") is True)
    out["unknown"] = sum(1 for s in steps if (s.get("diagnosis") or {}).get("label") == "UNKNOWN")
    out["lines"] = len(steps)
    return out


def pct(x):
    return "-" if x is None else f"{x * 100:+.2f}"


def main(argv):
    root = None
    stat = "mean_ms"
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--lines-root":
            root = next(it, None)
        elif a == "--stat":
            stat = {"mean": "mean_ms", "median": "median_ms"}.get(next(it, ""), "")
            if not stat:
                print("alternate_summary: --stat mean|median", file=sys.stderr)
                return 2
        else:
            paths.append(a)
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    blocks = [b for b in parse_blocks(paths) if b[stat] is not None]
    if not blocks:
        print("alternate_summary: no block lines in the inputs", file=sys.stderr)
        return 1
    out = []
    for workload in sorted({b["workload"] for b in blocks}):
        mine = [b for b in blocks if b["workload"] == workload]
        # A block pairs with the off block of its own round in its own file (one process): two files'
        # rounds 0 are two processes' (gpt_compile.py's profiler runs in a process of its own).
        off = {}
        for b in mine:
            if b["mode"] == "off":
                if (b["source"], b["round"]) in off:
                    print(f"alternate_summary: two off blocks of round {b['round']} in {b['source']}", file=sys.stderr)
                    return 1
                off[(b["source"], b["round"])] = b
        offs = [b[stat] for b in off.values()]
        out.append(f"### {workload}\n")
        if offs:
            out.append(f"off blocks: {len(offs)}, step {stat[:-3]} {statistics.median(offs):.3f} ms (median of blocks), "
                       f"{min(offs):.3f} - {max(offs):.3f} ms: spread {100 * (max(offs) / min(offs) - 1):.2f} % "
                       f"across rounds.\n")
        other = "median_ms" if stat == "mean_ms" else "mean_ms"
        out.append(f"| mode | pairs | step ms ({stat[:-3]} of a block), median of blocks | cost % by the {stat[:-3]}: each pair "
                   f"(paired with its round's off block) | mean of pairs | median of pairs | by the {other[:-3]}: median of "
                   "pairs | line's estimate %: mean over the timed lines, mean of blocks | estimate - cost, points (mean of pairs) "
                   "| last line's estimate [95 % range] (high) | trace_every, CUPTI at the end | timed lines traced, over "
                   "budget | lines UNKNOWN |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        modes = ["off", "default", "full", "full_nocounters"]
        modes += sorted({b["mode"] for b in mine} - set(modes))
        for mode in modes:
            bs = sorted((b for b in mine if b["mode"] == mode), key=lambda b: b["round"])
            if not bs:
                continue
            key = lambda b: (b["source"], b["round"])  # noqa: E731
            paired = [b for b in bs if key(b) in off]
            ratios = [b[stat] / off[key(b)][stat] - 1 for b in paired]
            others = [b[other] / off[key(b)][other] - 1 for b in paired
                      if b.get(other) is not None and off[key(b)].get(other) is not None]
            got = [last_estimate(b["lines"], root) for b in bs]
            def med(key):
                v = [g[key] for g in got if g.get(key) is not None]
                return statistics.median(v) if v else None
            est = med("estimated_fraction")
            each = ", ".join(pct(r) for r in ratios) if ratios else "-"
            mean_cost = pct(statistics.fmean(ratios)) if ratios else "-"
            median_cost = pct(statistics.median(ratios)) if ratios else "-"
            other_cost = pct(statistics.median(others)) if others else "-"
            means = [g["estimate_mean"] for g in got if g.get("estimate_mean") is not None]
            est_mean = pct(statistics.fmean(means)) if means else "-"
            gaps = [g["estimate_mean"] - r for b, g, r in zip(paired, [last_estimate(b["lines"], root) for b in paired], ratios)
                    if g.get("estimate_mean") is not None]
            gap = f"{statistics.fmean(gaps) * 100:+.3f}" if gaps else "-"
            estimate = "-"
            if est is not None:
                lo, hi = med("estimated_fraction_ci_low"), med("estimated_fraction_ci_high")
                estimate = pct(est) + (f" [{pct(lo)}, {pct(hi)}]" if lo is not None and hi is not None else "")
                if med("estimated_fraction_high") is not None:
                    estimate += f" ({pct(med('estimated_fraction_high'))})"
            every = sorted({(g.get("trace_every"), g.get("untraced_cupti")) for g in got if g.get("trace_every") is not None},
                           key=lambda x: (x[0], x[1] or ""))
            every_text = ", ".join(f"{t} {c or ''}".strip() for t, c in every) if every else "-"
            unknown = sum(g.get("unknown", 0) for g in got)
            total = sum(g.get("lines", 0) for g in got)
            timed = sum(g.get("timed", 0) for g in got)
            budget_text = f"{sum(g.get('traced', 0) for g in got)}, {sum(g.get('over_budget', 0) for g in got)} of {timed}" if timed else "-"
            out.append(f"| {mode} | {len(ratios)} | {statistics.median(b[stat] for b in bs):.3f} | {each} | {mean_cost} | "
                       f"{median_cost} | {other_cost} | {est_mean} | {gap} | {estimate} | {every_text} | {budget_text} | "
                       f"{f'{unknown} / {total}' if total else '-'} |")
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
