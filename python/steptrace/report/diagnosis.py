"""The diagnosis side of steptrace-report: each line's basis, the header's verdict, the diagnosis strip
and the label table.

A line's `diagnosis.basis` (docs/schema.md, issue #31) says what its label was decided from: `traced`
(this step's GPU attribution), `carried` (an untraced step given the last traced step's GPU view),
`host_only` (host-visible waits alone), `none` (nothing: label UNKNOWN). The headline is the label of
the most lines, UNKNOWN counted, as stop()'s summary takes it: an untraced line carried from a traced step
has its label, so a run traced one step in N is not called UNKNOWN, and a label on a few lines is never
shown over the many that measured nothing.
"""
from collections import Counter

BASES = ("traced", "markers", "carried", "carried_scaled", "host_only", "none")

# What a label asks of the person reading it (our advice; the labels are the line's diagnosis.label).
ADVICE = {
    "INPUT-BOUND": "The step waits for data. More DataLoader workers, pinned memory, prefetching, or moving "
                   "decoding and augmentation off the training process.",
    "H2D-BOUND": "Host-to-device copies take a large share of the step. Pinned memory with non_blocking copies on "
                 "a side stream, fewer and larger transfers, or keeping data on the GPU.",
    "COMM-BOUND": "Communication is not hidden behind computation. Overlap it (bucketing, gradient accumulation), "
                  "compress, or check the interconnect and the slowest rank.",
    "HOST/LAUNCH-BOUND": "The GPU waits for the host: kernels are launched too slowly. CUDA Graphs, fusing small "
                         "kernels (torch.compile), larger batches, and less Python work per step.",
    "LOW-SM-EFFICIENCY": "Kernels keep the GPU busy but fill few SMs. Larger batches or tiles, fused kernels, and "
                         "shapes that give every SM work.",
    "COMPUTE-BOUND": "The GPU is busy with well-filled kernels. Gains now come from the math itself: lower "
                     "precision, better kernels (FlashAttention, fused optimizers), or less work per token.",
    "UNKNOWN": "Not enough was measured to name a bottleneck: no line had GPU attribution, a GPU view carried "
               "from a traced step, or a host-side wait past its threshold.",
}
ADVICE_MOSTLY_UNKNOWN = ("More lines had neither GPU evidence (a trace, stream markers, a carried view) nor a "
                         "host-side wait past its threshold than had any one label; the label table below gives "
                         "what the other lines say.")
NONE_COLOR = "#b4b4b4"  # basis none (label UNKNOWN): neutral grey, nothing known
LABEL_COLORS = {
    "INPUT-BOUND": "#d62728", "H2D-BOUND": "#ff7f0e", "COMM-BOUND": "#9467bd", "HOST/LAUNCH-BOUND": "#e377c2",
    "LOW-SM-EFFICIENCY": "#bcbd22", "COMPUTE-BOUND": "#2ca02c", "UNKNOWN": NONE_COLOR,
}


def lighter(color, amount=0.45):
    """`color` (#rrggbb) mixed with white. 0.45 keeps every label's carried shade saturated enough
    (max - min channel > 40) for the page's and report_check's data-pixel counts."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


CARRIED_COLORS = {label: lighter(c) for label, c in LABEL_COLORS.items() if label != "UNKNOWN"}


def line_basis(line, diag):
    """The line's diagnosis.basis; a line written before the field existed: `traced` when its `gpu`
    object is non-null, else `none` for UNKNOWN, else `host_only` (issue #31's rule for old lines)."""
    basis = diag.get("basis")
    if basis in BASES:
        return basis
    if isinstance(line.get("gpu"), dict):
        return "traced"
    return "none" if diag.get("label", "UNKNOWN") == "UNKNOWN" else "host_only"


def pct(share):
    return f"{share * 100:.1f} %"


def verdict(pairs):
    """The header's label from a Counter of (label, basis) over every line: the label of the most lines,
    UNKNOWN counted (as stop()'s summary takes it, core/diagnosis.hpp dominant_label: a label on a few
    lines is never shown over the many that measured nothing), ties to a named label, by name. When
    UNKNOWN leads, the text names the most frequent other label. Its share is of all lines, by basis."""
    total = max(1, sum(pairs.values()))
    unknown, known = 0, Counter()
    for (label, basis), k in pairs.items():
        if label == "UNKNOWN":
            unknown += k
        else:
            known[label] += k
    best = min(known.items(), key=lambda kv: (-kv[1], kv[0])) if known else None
    if best is None or unknown > best[1]:
        text = (f"{pct(unknown / total)} of the lines: nothing measured to name a bottleneck from" if pairs
                else "no lines")
        if best:
            text += f"; the most frequent label of the others: {best[0]} on {pct(best[1] / total)}"
        return {"dominant": "UNKNOWN", "dominant_share": unknown / total, "advice": ADVICE["UNKNOWN"]
                if not known else ADVICE_MOSTLY_UNKNOWN, "basis_text": text}
    dominant, n = best
    parts = [f"{pct(pairs[(dominant, b)] / total)} {b.replace('_', '-')}" for b in BASES
             if b != "none" and pairs[(dominant, b)]]
    return {"dominant": dominant, "dominant_share": n / total, "advice": ADVICE.get(dominant, ""),
            "basis_text": f"{pct(n / total)} of the lines: " + ", ".join(parts)}


def label_table(pairs):
    """[label, lines, {basis: lines}] by lines, most first."""
    by_label = {}
    for (label, basis), k in pairs.items():
        by_label.setdefault(label, Counter())[basis] += k
    return [[label, sum(c.values()), dict(c)] for label, c in
            sorted(by_label.items(), key=lambda kv: -sum(kv[1].values()))]


def shade(basis):
    """How the strip colours a basis: the label's colour, its lighter shade, or grey."""
    return "none" if basis == "none" else "carried" if basis in ("carried", "carried_scaled") else "own"


def strip(labels, bases, buckets):
    """Per point: the most frequent (label, shade) of its bucket's lines, as two lists."""
    out_labels, out_shades = [], []
    for a, b in buckets:
        if b <= a:
            out_labels.append(None)
            out_shades.append(None)
            continue
        (label, sh), _ = Counter(zip(labels[a:b], map(shade, bases[a:b]))).most_common(1)[0]
        out_labels.append(label)
        out_shades.append(sh)
    return out_labels, out_shades
