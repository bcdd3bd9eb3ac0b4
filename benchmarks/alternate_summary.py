#!/usr/bin/env python3
"""Tables for in-process alternation (step_workloads --alternate, python_gpt.py --mode alternate).

    alternate_summary.py BLOCKS.txt... [--lines-root DIR]

Each input holds `block workload=W round=R mode=M ... mean_ms=X ... lines=PATH|-` lines. Within a round
every mode's block is paired with that round's off block of the same workload (one process: the pair
shares placement, clocks and warm caches), so each round gives one ratio per mode; the table shows the
median ratio over rounds and its range. For default blocks the estimate steptrace itself published is
read from the block's last step line (overhead.estimated_fraction and _high) and set beside the
measured cost. Off blocks' spread across rounds (max / min - 1) says how steady the process was.
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
                                   "mean_ms": float(kv["mean_ms"]), "lines": kv.get("lines", "-"),
                                   "launches": kv.get("launches_per_step", "?"), "source": path})
                except (KeyError, ValueError):
                    continue
    return blocks


def last_estimate(path, root):
    """(estimated_fraction, estimated_fraction_high, trace_every) of the last step line, or Nones."""
    if path in ("-", ""):
        return None, None, None
    full = path if os.path.isabs(path) or not root else os.path.join(root, path)
    steps, _ = read_lines(full)
    if not steps:
        return None, None, None
    o = steps[-1].get("overhead") or {}
    return o.get("estimated_fraction"), o.get("estimated_fraction_high"), o.get("trace_every")


def pct(x):
    return "-" if x is None else f"{x * 100:+.2f}"


def main(argv):
    root = None
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--lines-root":
            root = next(it, None)
        else:
            paths.append(a)
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    blocks = parse_blocks(paths)
    if not blocks:
        print("alternate_summary: no block lines in the inputs", file=sys.stderr)
        return 1
    out = []
    for workload in sorted({b["workload"] for b in blocks}):
        mine = [b for b in blocks if b["workload"] == workload]
        off = {b["round"]: b for b in mine if b["mode"] == "off"}
        offs = [b["mean_ms"] for b in off.values()]
        out.append(f"### {workload}\n")
        if offs:
            out.append(f"off blocks: {len(offs)}, step mean {statistics.median(offs):.3f} ms (median of blocks), "
                       f"{min(offs):.3f} - {max(offs):.3f} ms: spread {100 * (max(offs) / min(offs) - 1):.2f} % "
                       f"across rounds.\n")
        out.append("| mode | rounds | step ms, median of blocks | cost % (paired with its round's off block), median | min - max | "
                   "line's estimate %, median (high) | trace_every at the end |")
        out.append("|---|---|---|---|---|---|---|")
        for mode in ("off", "default", "full", "full_nocounters"):
            bs = [b for b in mine if b["mode"] == mode]
            if not bs:
                continue
            ratios = [b["mean_ms"] / off[b["round"]]["mean_ms"] - 1 for b in bs if b["round"] in off]
            est, high, every = [], [], []
            for b in bs:
                e, h, t = last_estimate(b["lines"], root)
                if e is not None:
                    est.append(e)
                if h is not None:
                    high.append(h)
                if t is not None:
                    every.append(t)
            cost = pct(statistics.median(ratios)) if ratios else "-"
            span = f"{pct(min(ratios))} - {pct(max(ratios))}" if ratios else "-"
            estimate = f"{pct(statistics.median(est))} ({pct(statistics.median(high)) if high else '-'})" if est else "-"
            every_text = ", ".join(str(t) for t in sorted(set(every))) if every else "-"
            out.append(f"| {mode} | {len(bs)} | {statistics.median(b['mean_ms'] for b in bs):.3f} | {cost} | {span} | "
                       f"{estimate} | {every_text} |")
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
