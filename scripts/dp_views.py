#!/usr/bin/env python3
"""Rank 0's cross_rank views of a dp_validate.sh run, and the first that names the slow rank.

    scripts/dp_views.py OUT_DIR GPUS
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from steptrace.lines import step_lines  # noqa: E402  (the package's log reader, from the source tree)
out, gpus = sys.argv[1], int(sys.argv[2])
lines = step_lines(f"{out}/slow-0.jsonl")
slow = gpus - 1
print("rank 0's cross_rank views (the slow rank is", slow, "from step 10):")
first = None
for l in lines:
    v = l.get("cross_rank")
    if not v:
        continue
    print(f"  line {l['global_step']:3d}: view of step {v['step']:3d} reporting {v['reporting']}/{v['world_size']} "
          f"slowest_rank {v.get('slowest_rank')} culprit {v.get('culprit_phase')} gap {v.get('culprit_gap_ms', 0):.2f} ms "
          f"skew {v.get('skew', 0):.3f} scores {[(s['rank'], round(s['score'], 3)) for s in v.get('lowest_scores', [])]}")
    if first is None and v["step"] >= 10 and v.get("slowest_rank") == slow and v.get("culprit_phase") == "input":
        first = (l["global_step"], v["step"])
print("first line naming the slow rank and the input phase:", first)
for r in range(gpus):
    ls = step_lines(f"{out}/slow-{r}.jsonl")
    l = ls[len(ls) // 2]
    g = l.get("gpu") or {}
    print(f"rank {r} step {l['global_step']}: step_time_ms {l['step_time_ms']:.2f} input {l['dataloader_wait_ms']:.2f} "
          f"nccl phase {l['phases'].get('nccl', {}).get('host_ms', 0):.2f} ms | nccl_time_ms {l['nccl_time_ms']} "
          f"nccl_exposed_ms {g.get('nccl_exposed_ms')} nccl_overlap {g.get('nccl_overlap')} collectives {g.get('nccl_collectives')} "
          f"| rank {l['rank']} local_rank {l['local_rank']} world {l['world_size']} host {l['hostname']} device {(l.get('device') or {}).get('index')}")
