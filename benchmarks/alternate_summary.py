#!/usr/bin/env python3
"""Tables for in-process alternation (step_workloads --alternate, python_gpt.py --mode alternate).

    alternate_summary.py BLOCKS.txt... [--lines-root DIR] [--stat mean|median]

Each input holds `block workload=W round=R mode=M ... mean_ms=X [median_ms=Y] ... lines=PATH|-` lines.
Within a round every mode's block is paired with that round's off block of the same workload (one
process: the pair shares placement, clocks and warm caches), so each round gives one ratio per mode of
the blocks' step times (--stat: their means, the default, or their medians); the table shows the median
ratio over rounds and its range. For steptrace blocks the estimate steptrace itself published is read
from the block's last step line (overhead.estimated_fraction, its 95 % range estimated_fraction_ci_low -
_ci_high where the line has it, and _high) and set beside the measured cost, with the interval and
CUPTI's mode at the end, and how many of the block's lines said UNKNOWN. Off blocks' spread across rounds
(max / min - 1) says how steady the process was.
"""
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
    """What the block's last step line estimated (overhead's estimated_fraction, _ci_low, _ci_high, _high,
    trace_every, untraced_cupti) and the block's lines labelled UNKNOWN and in all; {} without lines."""
    if path in ("-", ""):
        return {}
    full = path if os.path.isabs(path) or not root else os.path.join(root, path)
    steps, _ = read_lines(full)
    if not steps:
        return {}
    o = steps[-1].get("overhead") or {}
    out = {k: o.get(k) for k in ("estimated_fraction", "estimated_fraction_ci_low", "estimated_fraction_ci_high",
                                 "estimated_fraction_high", "trace_every", "untraced_cupti")}
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
        off = {b["round"]: b for b in mine if b["mode"] == "off"}
        offs = [b[stat] for b in off.values()]
        out.append(f"### {workload}\n")
        if offs:
            out.append(f"off blocks: {len(offs)}, step {stat[:-3]} {statistics.median(offs):.3f} ms (median of blocks), "
                       f"{min(offs):.3f} - {max(offs):.3f} ms: spread {100 * (max(offs) / min(offs) - 1):.2f} % "
                       f"across rounds.\n")
        out.append(f"| mode | rounds | step ms ({stat[:-3]} of a block), median of blocks | cost % (paired with its round's "
                   "off block), median | min - max | line's estimate %, median [its 95 % range] (high) | trace_every, "
                   "CUPTI at the end | lines UNKNOWN |")
        out.append("|---|---|---|---|---|---|---|---|")
        modes = ["off", "default", "full", "full_nocounters"]
        modes += sorted({b["mode"] for b in mine} - set(modes))
        for mode in modes:
            bs = [b for b in mine if b["mode"] == mode]
            if not bs:
                continue
            ratios = [b[stat] / off[b["round"]][stat] - 1 for b in bs if b["round"] in off]
            got = [last_estimate(b["lines"], root) for b in bs]
            def med(key):
                v = [g[key] for g in got if g.get(key) is not None]
                return statistics.median(v) if v else None
            est = med("estimated_fraction")
            cost = pct(statistics.median(ratios)) if ratios else "-"
            span = f"{pct(min(ratios))} - {pct(max(ratios))}" if ratios else "-"
            estimate = "-"
            if est is not None:
                lo, hi = med("estimated_fraction_ci_low"), med("estimated_fraction_ci_high")
                estimate = pct(est) + (f" [{pct(lo)}, {pct(hi)}]" if lo is not None and hi is not None else "")
                estimate += f" ({pct(med('estimated_fraction_high'))})"
            every = sorted({(g.get("trace_every"), g.get("untraced_cupti")) for g in got if g.get("trace_every") is not None},
                           key=lambda x: (x[0], x[1] or ""))
            every_text = ", ".join(f"{t} {c or ''}".strip() for t, c in every) if every else "-"
            unknown = sum(g.get("unknown", 0) for g in got)
            total = sum(g.get("lines", 0) for g in got)
            out.append(f"| {mode} | {len(bs)} | {statistics.median(b[stat] for b in bs):.3f} | {cost} | {span} | "
                       f"{estimate} | {every_text} | {f'{unknown} / {total}' if total else '-'} |")
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
