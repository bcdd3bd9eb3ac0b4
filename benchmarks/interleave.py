"""The in-run comparison of gpt_compile.py, framework_budget.py and step_workloads (--interleave G): one process, steptrace
started once with a mode's settings, the warm-up steps all with steptrace's calls, then the timed steps in
groups of G that alternate with steptrace's calls ("on") and without them ("off": the same loop, no scope,
no callback; the session stays running, its background thread idle, CUPTI as the last on step left it).

Why: blocks of 200 steps in one process (the `block` lines) spread 0.3-0.4 points pair to pair on a
136 ms GPU-bound step (clocks and temperature drift over a block's 30 s), and framework trainings in
separate processes 10-20 %; groups of a few steps side by side see the same drift.

What it leaves out, said where it is printed: an off group runs with the session started (the idle
background thread: its 10-20 ms looks and memory samples), so a cost that a started session adds to every
step whatever the program calls is on both sides and cancels; the block pairs (off: never started)
bound that part. An off group next to a traced step may run with CUPTI attached (the detached mode
attaches at the end of the step before a traced one and detaches after it): such off groups are left
out of the comparison, the traced steps themselves are kept (their cost is the default's). Where the
traced step is the last on step of its group, CUPTI's records stay on through the whole off group after it
(only a step's begin switches them off, and an off step makes no call): those steps run as traced ones,
which no step of a run with steptrace on every step does (session 78: +7.8 and +12.9 ms over such an off
group on the torch.compile GPT-2, +0.8 ms a step on the C++ transformer) - the benchmark's own, not a
cost of steptrace's.

A pair (an on group against the off groups beside it) spreads with the program's own noise, steptrace or
not: the null pairs (each off group against the off groups two away, no steptrace on either side) say by
how much, and how many of them pass the bound one pair is held to (`null_over` beside `pairs_over`). The blocks
(consecutive groups, at least 200 kept timed steps a side, the last taking what is left) are what issue
#62's pairs were, 200 steps with steptrace against 200 without, side by side instead of one after the
other: each block's cost by its own means and medians, `blocks_over` those over the bound.

Each group of off steps runs inside the last on step before it, as steptrace sees the steps: where a step
has a scope (step_workloads' TRACE_STEP, gpt_compile.py by hand) its own time is what the budget's shares
are over (since session 76: before, the ledger took the time to the next step's begin, ~2x the step at
G steps on and G off, and paced the markers at about twice the budget's rate); where it has none
(`watch()`, the framework callbacks: a step runs to the next one's begin) the budget still sees a group's
steps inside one step, so by reasoning (not measured) it may spend up to (G on + G off) / G on times its
share on each on step, 2x at equal groups: there the in-run figure is an upper end for the same program
run with steptrace on every step.
"""
import json
import os
import statistics
import sys

__all__ = ["schedule", "traced_steps", "compare", "describe", "estimate_high"]


# The bound the default aims at for one pair of groups (on against the off groups beside it; docs/gpu.md,
# "What it costs"): pairs_over counts the pairs over it, null_over the null pairs (compare) over it.
PAIR_LIMIT = 0.003

# A block: the interleaved counterpart of one pair of the blocks (200 steps with steptrace, 200
# without, side by side): consecutive groups holding at least BLOCK_SIDE_STEPS kept timed steps a side, the
# last block taking what is left after it. Its cost is its on steps' mean over its kept off steps' mean (the
# traced steps in it included, the off groups beside a trace left out as in the whole run's comparison).
BLOCK_SIDE_STEPS = 200


def schedule(n, group, on_first=True):
    """Step i of n is on (True) or off: groups of `group` alternating, the first on when on_first."""
    return [((i // group) % 2 == 0) == on_first for i in range(n)]


def traced_steps(lines, on):
    """The timed steps (indices into `on`) whose steptrace step was traced: the k-th step line is the k-th
    step run with steptrace's calls, warm-up included (`on` covers the timed steps only; the lines before
    them are the warm-up's). None when the counts do not match (a line lost or unwritten)."""
    n_on = sum(on)
    if lines is None or len(lines) < n_on:
        return None
    timed_lines = lines[len(lines) - n_on:]
    out, k = set(), 0
    for i, is_on in enumerate(on):
        if is_on:
            if timed_lines[k].get("traced"):
                out.add(i)
            k += 1
    return out


def _timed_lines(lines, on):
    """The timed on steps' lines (the last sum(on)), or None where there are fewer lines than on steps."""
    if lines is None or len(lines) < sum(on):
        return None
    return lines[len(lines) - sum(on):]


def estimate_mean(lines, on):
    """The lines' mean `overhead.estimated_fraction` over the timed on steps (the last sum(on) lines), or None."""
    tail = _timed_lines(lines, on)
    if tail is None:
        return None
    est = [(s.get("overhead") or {}).get("estimated_fraction") for s in tail]
    est = [e for e in est if e is not None]
    return statistics.fmean(est) if est else None


def estimate_high(lines, on):
    """The lines' `overhead.estimated_fraction_high` over the timed on steps: (its mean where a number, or
    None; how many lines with an estimate had none - the markers' cost not measured yet, a framework's
    steps; compact lines carry no high end and count in neither). (None, 0) when there are fewer lines
    than on steps."""
    tail = _timed_lines(lines, on)
    if tail is None:  # a line lost or unwritten: the lines are not the steps
        return None, 0
    high, unbounded = [], 0
    for s in tail:
        o = s.get("overhead") or {}
        if o.get("estimated_fraction") is None or "estimated_fraction_high" not in o:
            continue
        if o["estimated_fraction_high"] is None:
            unbounded += 1
        else:
            high.append(o["estimated_fraction_high"])
    return (statistics.fmean(high) if high else None), unbounded


def _groups(on, group):
    return [list(range(g, min(g + group, len(on)))) for g in range(0, len(on), group)]


def compare(times, on, group, skip=(), traced=()):
    """times[i]: timed step i's ms by the program's clock; on[i]: with steptrace's calls. skip: steps left
    out on both sides (the first after an evaluation, a group's switch). traced: on steps that were traced;
    the off groups next to one are left out. Returns a dict of the comparison."""
    skip, traced = set(skip), set(traced)
    groups = _groups(on, group)
    tainted = set()  # off groups beside a traced step
    for gi, g in enumerate(groups):
        if on[g[0]] and traced.intersection(g):
            for gj in (gi - 1, gi + 1):
                if 0 <= gj < len(groups) and not on[groups[gj][0]]:
                    tainted.add(gj)
    kept = [[times[i] for i in g if i not in skip] for g in groups]
    on_ms = [t for gi, g in enumerate(groups) if on[g[0]] for t in kept[gi]]
    off_ms = [t for gi, g in enumerate(groups) if not on[g[0]] and gi not in tainted for t in kept[gi]]
    # Each on group against the mean of the off groups beside it (both where both are kept: a drift
    # between them cancels), as a difference over the run's off mean (a mean of ratios would lean up).
    # An on group with no kept neighbour - a traced one: both its neighbours are left out - forms no pair,
    # so the pairs are the untraced steps' cost; the means above hold the traces too.
    off_mean = statistics.fmean(off_ms) if off_ms else None

    def against(gi, dist):
        """Group gi's mean less the mean of the kept off groups `dist` groups either side of it, over the
        off mean; None where neither is kept."""
        beside = [statistics.fmean(kept[gj]) for gj in (gi - dist, gi + dist)
                  if 0 <= gj < len(groups) and not on[groups[gj][0]] and gj not in tainted and kept[gj]]
        return (statistics.fmean(kept[gi]) - statistics.fmean(beside)) / off_mean if beside else None

    pairs, unpaired = [], 0
    for gi, g in enumerate(groups):
        if not on[g[0]] or not kept[gi] or not off_mean:
            continue
        pair = against(gi, 1)
        if pair is None:
            unpaired += 1
        else:
            pairs.append(pair)
    d = {"on_steps": len(on_ms), "off_steps": len(off_ms), "off_groups_left_out": len(tainted),
         "traced": len(traced), "pairs": len(pairs), "on_groups_unpaired": unpaired}
    if on_ms and off_ms:
        d["on_mean_ms"] = statistics.fmean(on_ms)
        d["off_mean_ms"] = statistics.fmean(off_ms)
        d["cost_by_means"] = d["on_mean_ms"] / d["off_mean_ms"] - 1
        d["cost_by_medians"] = statistics.median(on_ms) / statistics.median(off_ms) - 1
    if pairs:
        d["pair_mean"] = statistics.fmean(pairs)
        d["pair_median"] = statistics.median(pairs)
        d["pair_sd"] = statistics.stdev(pairs) if len(pairs) > 1 else 0.0
        # Neighbouring pairs share an off group: their correlation (lag 1) widens the mean's error,
        # var(mean) ~ sd^2 / n x (1 + 2 rho1).
        rho1 = 0.0
        if len(pairs) > 2 and d["pair_sd"] > 0:
            m = d["pair_mean"]
            rho1 = sum((a - m) * (b - m) for a, b in zip(pairs, pairs[1:])) / ((len(pairs) - 1) * d["pair_sd"] ** 2)
        d["pair_rho1"] = rho1
        d["pair_se"] = d["pair_sd"] / len(pairs) ** 0.5 * max(1.0, 1 + 2 * rho1) ** 0.5
        d["pair_max"] = max(pairs)
        d["pairs_over"] = sum(x > PAIR_LIMIT for x in pairs)
    # The same comparison with steptrace on neither side ("null pairs"): each kept off group against the
    # kept off groups two groups away (the on groups between them left out), over the same off mean: what
    # the program's own noise does to a pair of groups. An on/off pair over PAIR_LIMIT is read against
    # how many null pairs are (a 134 ms torch.compile step: 10 of 94 null pairs, 11 of 97 on/off pairs,
    # session 78). Two groups apart the drift between them is a little larger: an upper end for the noise.
    null = [x for x in (against(gi, 2) for gi, g in enumerate(groups)
                        if not on[g[0]] and gi not in tainted and kept[gi] and off_mean) if x is not None]
    d["null_pairs"] = len(null)
    if null:
        d["null_max"] = max(null)
        d["null_over"] = sum(x > PAIR_LIMIT for x in null)
    if len(null) > 1:
        d["null_sd"] = statistics.stdev(null)
    # The blocks (BLOCK_SIDE_STEPS): consecutive groups, a block closed once both its sides hold that many
    # kept steps; what is left after the last full block joins it (a side of the last block holds under
    # twice as many), and a run without a full block has none. Each block's cost by its own means and medians.
    sides, on_side, off_side = [], [], []
    for gi, g in enumerate(groups):
        if on[g[0]]:
            on_side += kept[gi]
        elif gi not in tainted:
            off_side += kept[gi]
        if len(on_side) >= BLOCK_SIDE_STEPS and len(off_side) >= BLOCK_SIDE_STEPS:
            sides.append((on_side, off_side))
            on_side, off_side = [], []
    if sides and (on_side or off_side):
        sides[-1] = (sides[-1][0] + on_side, sides[-1][1] + off_side)
    d["blocks"] = [statistics.fmean(a) / statistics.fmean(b) - 1 for a, b in sides]
    d["block_medians"] = [statistics.median(a) / statistics.median(b) - 1 for a, b in sides]
    d["block_sizes"] = [(len(a), len(b)) for a, b in sides]
    if sides:
        d["block_mean"] = statistics.fmean(d["blocks"])
        d["block_median"] = statistics.median(d["blocks"])
        d["block_max"] = max(d["blocks"])
        d["blocks_over"] = sum(x > PAIR_LIMIT for x in d["blocks"])
    return d


def describe(d):
    """One line's key=value fields (percentages with a sign)."""
    def pct(k):
        return f"{100 * d[k]:+.3f}%" if k in d else "-"
    out = [f"on_steps={d['on_steps']}", f"off_steps={d['off_steps']}", f"traced={d['traced']}",
           f"off_groups_left_out={d['off_groups_left_out']}", f"pairs={d['pairs']}",
           f"on_groups_unpaired={d['on_groups_unpaired']}"]
    if "on_mean_ms" in d:
        out += [f"on_mean_ms={d['on_mean_ms']:.4f}", f"off_mean_ms={d['off_mean_ms']:.4f}"]
    out += [f"cost_by_means={pct('cost_by_means')}", f"cost_by_medians={pct('cost_by_medians')}",

            f"pair_mean={pct('pair_mean')}", f"pair_median={pct('pair_median')}", f"pair_sd={pct('pair_sd')}",
            f"pair_se={pct('pair_se')}", f"pair_rho1={d.get('pair_rho1', 0):.2f}", f"pair_max={pct('pair_max')}",
            f"pairs_over={d.get('pairs_over', '-')}", f"null_pairs={d['null_pairs']}", f"null_sd={pct('null_sd')}",
            f"null_max={pct('null_max')}", f"null_over={d.get('null_over', '-')}",
            f"blocks={len(d.get('blocks', ()))}", f"block_mean={pct('block_mean')}",
            f"block_median={pct('block_median')}", f"block_max={pct('block_max')}",
            f"blocks_over={d.get('blocks_over', '-')}",
            "block_sizes=" + ",".join(f"{a}/{b}" for a, b in d.get("block_sizes", ())),
            "block_costs=" + ",".join(f"{100 * x:+.3f}%" for x in d.get("blocks", ())),
            "block_medians=" + ",".join(f"{100 * x:+.3f}%" for x in d.get("block_medians", ()))]
    return " ".join(out)


def main(argv):
    """python3 interleave.py PATH.times.json ... [--group G]: one block's comparison each, from the times
    file a block writes beside its lines ({"ms": [...], "on": [...], "group": G, "skip": [steps left out]}: gpt_compile.py's and
    step_workloads' --interleave; the lines beside it, PATH, place the traced steps, or where they were not
    kept their cut, PATH's .cut.gz: cut_lines.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from default_cost_summary import read_lines
    import cut_lines
    group = int(argv[argv.index("--group") + 1]) if "--group" in argv else None
    paths = [a for a in argv if a.endswith(".json")]
    if not paths:
        print(main.__doc__)
        return 2
    for path in paths:
        with open(path) as f:
            t = json.load(f)
        g = group or t.get("group")
        if not g or "on" not in t:
            print(f"{path}: no 'on' list or group (not an --interleave block): skipped")
            continue
        lines = path[:-len(".times.json")] if path.endswith(".times.json") else None
        steps = read_lines(lines)[0] if lines and os.path.exists(lines) else cut_lines.read(lines)
        traced = traced_steps(steps, t["on"])
        d = compare(t["ms"], t["on"], g, skip=t.get("skip", ()), traced=traced or ())
        est = estimate_mean(steps, t["on"])
        high, unbounded = estimate_high(steps, t["on"])
        if steps and all("estimated_fraction_high" not in (x.get("overhead") or {}) for x in steps):
            high, unbounded = None, "n/a"  # (a cut without the high end: not known, not "none")
        print(f"interleave times={path} group={g} {describe(d)} lines_matched={traced is not None} "
              f"estimate_mean={'-' if est is None else f'{100 * est:.4f}%'} "
              f"estimate_high_mean={'-' if high is None else f'{100 * high:.4f}%'} high_unbounded_lines={unbounded}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
