#!/usr/bin/env python3
"""One line per gpt_train variant: its dominant diagnosis and the numbers behind it.

    scripts/torch_variant_summary.py LOG.jsonl NAME
"""
import sys, collections

import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from steptrace.lines import step_lines  # noqa: E402  (the package's log reader, from the source tree)
lines = step_lines(sys.argv[1])[5:]  # skip warm-up steps
labels = collections.Counter(l["diagnosis"]["label"] for l in lines)
ev = lambda k: sum((l["diagnosis"]["evidence"][k] or 0) for l in lines) / len(lines)
att = [l["phases"].get("attention", {}).get("gpu", {}) for l in lines]
att_eff = [a["sm_efficiency"] for a in att if a.get("sm_efficiency") is not None]
top = att[-1].get("top_kernels", [{}])[0].get("name", "")[:60] if att else ""
print(f"{sys.argv[2]:10s} {labels.most_common(1)[0][0]:18s} steps={len(lines)} step_ms={sum(l['step_time_ms'] for l in lines)/len(lines):8.2f} "
      f"mfu={sum((l['estimated_mfu'] or 0) for l in lines)/len(lines):.3f} input={ev('input_share'):.2f} h2d={ev('h2d_share'):.2f} "
      f"gpu_util={ev('gpu_utilization'):.2f} sm_eff={ev('sm_efficiency'):.2f} attn_sm_eff={(sum(att_eff)/len(att_eff) if att_eff else float('nan')):.3f} attn_top={top}")
