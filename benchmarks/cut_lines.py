#!/usr/bin/env python3
"""A run's step lines cut to what the results keep of them: one JSON object a step line, gzip it beside the
times file (`PATH.cut.gz` for `PATH.jsonl`), which `interleave.py` then reads for the traced steps and the
estimate where the lines themselves were not kept (`read`).

    python3 cut_lines.py LINES.jsonl > LINES.cut && gzip LINES.cut

Keys: s (global_step), tr (traced), ms (step_time_ms), every (markers_every), te (trace_every), est
(overhead.estimated_fraction), m (its method), wb (within_budget), hi (estimated_fraction_high, full lines
only: compact ones carry none), marked (the line has gpu_markers), why
(null_reasons.gpu_markers, the compact line's code read back to its sentence, 160 characters at most).
"""
import json
import sys


def cut(lines):
    sentences = {}  # a compact log brings a code's sentence once, in `reason_text`
    for raw in lines:
        line = json.loads(raw)
        sentences.update(line.get("reason_text") or {})
        if "global_step" not in line:
            continue
        o = line.get("overhead") or {}
        why = (line.get("null_reasons") or {}).get("gpu_markers")
        if isinstance(why, str):
            why = sentences.get(why, why)
        row = {"s": line["global_step"], "tr": line.get("traced"), "ms": line.get("step_time_ms"),
               "every": o.get("markers_every"), "te": o.get("trace_every"), "est": o.get("estimated_fraction"),
               "m": o.get("method"), "wb": o.get("within_budget"),
               "marked": isinstance(line.get("gpu_markers"), dict), "why": (why or "")[:160]}
        if "estimated_fraction_high" in o:  # full lines (null: no high end claimed); compact ones carry none
            row["hi"] = o["estimated_fraction_high"]
        yield row


def read(lines_path):
    """The cut beside the lines `X.jsonl` (`X.cut.gz`) read back as step lines with the keys the in-run
    comparison reads (traced, overhead.estimated_fraction, and its high end where the cut kept one); None
    where there is no cut."""
    import gzip
    import os
    if not lines_path or not lines_path.endswith(".jsonl"):
        return None
    path = lines_path[:-len(".jsonl")] + ".cut.gz"
    if not os.path.exists(path):
        return None
    out = []
    with gzip.open(path, "rt") as f:
        for r in (json.loads(x) for x in f if x.strip()):
            o = {"estimated_fraction": r.get("est")}
            if "hi" in r:  # (cuts made before it was kept have none)
                o["estimated_fraction_high"] = r["hi"]
            out.append({"traced": r.get("tr"), "overhead": o})
    return out


def main(argv):
    if len(argv) != 1:
        print(__doc__)
        return 2
    with open(argv[0]) as f:
        for row in cut(f):
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
