#!/usr/bin/env python3
"""benchmarks/interleave.py's arithmetic on step times made up to known answers: the on/off pairs, the
pairs over the bound, the null pairs (off groups against off groups two away) and the off groups beside
a traced step left out, and the blocks (200 steps a side, each a cost of its own).

    interleave_check.py
"""
import os
import statistics
import sys

from _paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import interleave  # noqa: E402

failures = []


def check(what, ok):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def near(a, b, tol=1e-9):
    return a is not None and abs(a - b) <= tol


G = 10
N = 200  # 20 groups: 10 on, 10 off
on = interleave.schedule(N, G)

# A quiet program: every off step 100 ms, every on step 100.2 ms: each pair +0.2 %, each null pair 0.
times = [100.2 if o else 100.0 for o in on]
d = interleave.compare(times, on, G)
check("pairs: every on group has an off neighbour", d["pairs"] == 10 and d["on_groups_unpaired"] == 0)
check("pair_mean +0.2 %", near(d["pair_mean"], 0.002))
check("cost_by_means +0.2 %", near(d["cost_by_means"], 0.002))
check("no pair over 0.3 %", d["pairs_over"] == 0)
# Off groups 1, 3, ..., 19: each has an off group two away but for none (group 1 has 3, group 19 has 17).
check("null pairs: every off group", d["null_pairs"] == 10)
check("null pairs of identical groups: sd 0, max 0, none over", near(d["null_sd"], 0) and near(d["null_max"], 0)
      and d["null_over"] == 0)

# One on group at +0.5 %: one pair over the bound; the null pairs do not see it.
times2 = list(times)
for i in range(40, 50):  # group 4, on
    times2[i] = 100.5
d2 = interleave.compare(times2, on, G)
check("one on group at +0.5 %: one pair over", d2["pairs_over"] == 1 and near(d2["pair_max"], 0.005))
check("the null pairs unchanged by an on group", d2["null_over"] == 0 and near(d2["null_max"], 0))

# One off group at +0.5 % (the program's own noise): its null pair is over the bound, measured against
# the off groups two away (groups 3 and 7 around group 5); the on groups beside it read low.
times3 = list(times)
for i in range(50, 60):  # group 5, off
    times3[i] = 100.5
d3 = interleave.compare(times3, on, G)
off_mean = (9 * 100.0 + 100.5) / 10
check("an off group at +0.5 %: one null pair over", d3["null_over"] == 1 and near(d3["null_max"], 0.5 / off_mean))
check("every off group still has its null pair", d3["null_pairs"] == 10)
check("no on/off pair over (it lowers its neighbours' pairs)", d3["pairs_over"] == 0)

# A traced on step in group 6: the off groups beside it (5 and 7) are left out of both comparisons.
d4 = interleave.compare(times3, on, G, traced={63})
check("off groups beside a traced step left out", d4["off_groups_left_out"] == 2)
check("the traced group pairs with nothing", d4["on_groups_unpaired"] == 1 and d4["pairs"] == 9)
check("null pairs without the left-out groups (the +0.5 % group 5 among them)",
      d4["null_pairs"] == 8 and d4["null_over"] == 0)
# A left-out off group slowed (CUPTI's records left on through it after a traced step that ended its on
# group: the benchmark's, not steptrace's): it moves neither the off mean, nor any pair, nor a null pair.
times5 = list(times3)
for i in range(70, 80):  # group 7, off, beside the traced group 6
    times5[i] = 101.0
d5 = interleave.compare(times5, on, G, traced={63})
check("a slow left-out group: no null pair sees it", d5["null_over"] == 0 and near(d5["null_max"], 0)
      and near(d5["null_sd"], 0))
check("a slow left-out group: the off mean without it", near(d5["off_mean_ms"], d4["off_mean_ms"]))
check("a slow left-out group: the pairs and the means unchanged", near(d5["pair_mean"], d4["pair_mean"])
      and near(d5["cost_by_means"], d4["cost_by_means"]))
line = interleave.describe(d4)
check("describe prints the counts", "pairs_over=0" in line and "null_pairs=8" in line and "null_over=0" in line)

# The null pairs are two groups apart, no further: one slow off group (group 5 at +0.5 ms) moves its own
# pair (+0.5 / m) and the two beside it (groups 3 and 7: -0.25 / m each), the other seven stay 0.
null_expected = [0.5 / off_mean, -0.25 / off_mean, -0.25 / off_mean] + [0.0] * 7
check("null pairs at +-2 groups only: their spread", near(d3["null_sd"], statistics.stdev(null_expected)))

# Rounds that start with an off group (on_first=False): the same answers, the sides swapped.
on_b = interleave.schedule(N, G, on_first=False)
times_b = [100.2 if o else 100.0 for o in on_b]
d6 = interleave.compare(times_b, on_b, G)
check("off first: every on group paired, +0.2 %", d6["pairs"] == 10 and near(d6["pair_mean"], 0.002))
check("off first: every off group has a null pair", d6["null_pairs"] == 10 and d6["null_over"] == 0)

# The bound is strict: a pair at exactly 0.3 % is not over it, one just above is (3 / 1000: the same
# double as the bound's 0.003).
times7 = [1003.0 if o else 1000.0 for o in on]
check("a pair at exactly the bound is not over", interleave.compare(times7, on, G)["pairs_over"] == 0)
times8 = [1003.1 if o else 1000.0 for o in on]
check("a pair just over the bound is", interleave.compare(times8, on, G)["pairs_over"] == 10)

# Steps left out on both sides (a group's switch): an on step of 200 ms among them changes nothing.
times9 = list(times)
times9[40] = 200.0
d9 = interleave.compare(times9, on, G, skip={40})
check("skipped steps count on neither side", d9["on_steps"] == 99 and near(d9["pair_mean"], 0.002))

# The blocks: 200 timed steps a side in groups of 10 are 40 groups; a run of 1 000 steps (100 groups) is
# two blocks, the second holding the 20 groups left over (60 in all). Block 0's on steps at +0.5 %,
# block 1's at +0.2 %: one block over the bound, each block's cost by its own means.
N10 = 1000
on10 = interleave.schedule(N10, G)
times10 = [(100.5 if i < 400 else 100.2) if o else 100.0 for i, o in enumerate(on10)]
d10 = interleave.compare(times10, on10, G)
check("blocks: 1 000 steps in groups of 10 are two blocks", len(d10["blocks"]) == 2)
check("blocks: each by its own means", near(d10["blocks"][0], 0.005) and near(d10["blocks"][1], 0.002))
check("blocks: the one over the bound counted, the max and the mean",
      d10["blocks_over"] == 1 and near(d10["block_max"], 0.005) and near(d10["block_mean"], 0.0035))
# A traced on step in block 1 (group 44): the off groups beside it (43, 45) are out of its block too; one
# of them slowed changes no block.
times11 = list(times10)
for i in range(430, 440):  # group 43, off
    times11[i] = 103.0
d11 = interleave.compare(times11, on10, G, traced={445})
check("blocks: an off group beside a trace is out of its block", near(d11["blocks"][1], 0.002)
      and near(d11["blocks"][0], 0.005))
# Without the trace the slowed group is the program's: block 1 reads lower.
d12 = interleave.compare(times11, on10, G)
check("blocks: a slow off group kept lowers its block", d12["blocks"][1] < 0.002 and near(d12["blocks"][0], 0.005))
# Fewer steps than a block: none, and describe says so.
check("blocks: fewer than 400 steps make none", d["blocks"] == [] and "blocks=0" in interleave.describe(d))
check("describe prints the blocks", "blocks_over=1" in interleave.describe(d10)
      and "block_costs=+0.500%,+0.200%" in interleave.describe(d10) and "block_sizes=200/200,300/300" in interleave.describe(d10))
# A block closes on kept steps, both sides: a trace in block 0 (group 4) leaves its off neighbours 3 and 5
# out, and the block takes two more groups to hold 200 off steps (on 220); steps left out on both sides
# (every group's first) make each group 9 steps, a block 23 groups a side.
d15 = interleave.compare(times10, on10, G, traced={45})
check("blocks: a side short of left-out steps takes the next groups'", d15["block_sizes"] == [(220, 200), (280, 280)])
d16 = interleave.compare(times10, on10, G, skip=set(range(0, N10, 10)))
check("blocks: skipped steps do not count toward a side", d16["block_sizes"] == [(207, 207), (243, 243)])
# Groups that do not divide 200 (30 steps): a block closes at 210 a side (7 groups each); 1 200 steps are
# two full blocks and 180 a side left over, which joins the second.
on13 = interleave.schedule(1200, 30)
d13 = interleave.compare([100.2 if o else 100.0 for o in on13], on13, 30)
check("blocks: groups of 30", d13["block_sizes"] == [(210, 210), (390, 390)] and near(d13["block_max"], 0.002))
# Under 200 a side (395 steps, the last group of 5: 200 on, 195 off): no block.
on14 = interleave.schedule(395, G)
d14 = interleave.compare([100.2 if o else 100.0 for o in on14], on14, G)
check("blocks: 200 on and 195 off make none", d14["blocks"] == [] and "blocks_over" not in d14)

# Run as a program on a times file whose lines were not kept, only their cut (cut_lines.py's .cut.gz):
# the traced steps and the estimate come from the cut. 20 warm-up lines, then 200 timed steps: one
# traced in group 6 (steps 60-69, on), so off groups 5 and 7 are left out.
import contextlib  # noqa: E402
import gzip  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402

import cut_lines  # noqa: E402  (benchmarks/, on the path above)

with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, "run.jsonl")
    with open(base + ".times.json", "w") as f:
        json.dump({"ms": times, "on": on, "group": G, "skip": []}, f)
    on_steps = [i for i, o in enumerate(on) if o]
    raw = [json.dumps({"global_step": k, "traced": k == 20 + on_steps.index(63), "step_time_ms": 100.0,
                       "overhead": {"estimated_fraction": 0.0008}}) for k in range(20 + len(on_steps))]
    with gzip.open(os.path.join(tmp, "run.cut.gz"), "wt") as f:
        for row in cut_lines.cut(raw):
            f.write(json.dumps(row) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        interleave.main([base + ".times.json"])
    printed = out.getvalue()
check("a cut beside the times file: the lines matched, the trace placed, the estimate read",
      "lines_matched=True" in printed and "off_groups_left_out=2" in printed and "estimate_mean=0.0800%" in printed)

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
print("all passed")
