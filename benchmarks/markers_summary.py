#!/usr/bin/env python3
"""What the stream markers gave each run's lines (docs/gpu.md, "Stream markers").

    markers_summary.py LINES.jsonl ...

Per file: lines, lines with `gpu_markers`, `diagnosis.basis` and labels, the untraced lines'
`pending_share` (median, min), traced lines whose markers agreed with their records, and per phase the
median of `gpu_markers.phases.<name>.span_ms` over the records' `phases.<name>.gpu.busy_ms` on traced
lines (a span holds the phase's idle gaps: >= 1), and the last line's `overhead.parts.host_api`."""
import collections
import json
import statistics
import sys


def step_lines(path):
    with open(path) as f:
        return [j for j in map(json.loads, f) if "global_step" in j]


def summarize(path):
    lines = step_lines(path)
    marked = [l for l in lines if isinstance(l.get("gpu_markers"), dict)]
    pending = [l["gpu_markers"]["pending_share"] for l in marked
               if not l["traced"] and l["gpu_markers"]["pending_share"] is not None]
    ratios = collections.defaultdict(list)
    for l in marked:
        if not l["traced"]:
            continue
        for phase, m in (l["gpu_markers"].get("phases") or {}).items():
            gpu = (l.get("phases") or {}).get(phase, {}).get("gpu") or {}
            if gpu.get("busy_ms"):
                ratios[phase].append(m["span_ms"] / gpu["busy_ms"])
    parts = (lines[-1].get("overhead") or {}).get("parts") or {} if lines else {}
    host_api = (parts.get("host_api") or {}).get("fraction")
    return {
        "lines": len(lines),
        "with_markers": len(marked),
        "basis": dict(collections.Counter(l["diagnosis"]["basis"] for l in lines)),
        "labels": dict(collections.Counter(l["diagnosis"]["label"] for l in lines)),
        "pending_share_untraced": {"median": round(statistics.median(pending), 3), "min": round(min(pending), 3)} if pending else None,
        # agrees_with_records is a full line's (line_detail=full): compact lines say nothing of it (None).
        "traced_agreeing": (f"{sum(1 for l in marked if l['traced'] and l['gpu_markers'].get('agrees_with_records') is True)}"
                            f" / {sum(1 for l in marked if l['traced'])}")
                           if any("agrees_with_records" in l["gpu_markers"] for l in marked) else None,
        "span_over_busy": {k: round(statistics.median(v), 3) for k, v in sorted(ratios.items())},
        "host_api_pct": None if host_api is None else round(host_api * 100, 3),
        "no_markers_why": dict(collections.Counter((l.get("null_reasons") or {}).get("gpu_markers", "")[:90]
                                                   for l in lines if l not in marked)),
    }


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for path in argv:
        print(path.rsplit("/", 1)[-1], json.dumps(summarize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
