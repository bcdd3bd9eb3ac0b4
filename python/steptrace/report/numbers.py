"""The report's shared small pieces: the series colours, rounding for the page, a median and the p90 of
what is there."""
import math
import statistics
import zlib

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]


def rounded(xs, digits=6):
    return [None if v is None or not math.isfinite(v) else float(f"{v:.{digits}g}") for v in xs]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def p90(xs):
    """The 90th percentile as stop()'s summary takes it (core/summary.hpp: the sorted value at index
    min(n - 1, n * 9 / 10)), so the report and the summary print the same number."""
    xs = sorted(x for x in xs if x is not None)
    return xs[min(len(xs) - 1, len(xs) * 9 // 10)] if xs else None


# A phase's colour is its own in every report: the built-in phases fixed (input and h2d as the labels
# INPUT-BOUND and H2D-BOUND, nccl as COMM-BOUND), any other name by a hash of it over the other colours.
BUILTIN_PHASE_COLORS = {"input": "#d62728", "h2d": "#ff7f0e", "forward": "#1f77b4", "backward": "#2ca02c",
                        "optimizer": "#8c564b", "nccl": "#9467bd"}
OTHER_COLOR = "#7f7f7f"  # the phases past the TOP_N drawn, summed
_FREE = [c for c in PALETTE if c not in BUILTIN_PHASE_COLORS.values()]


def phase_color(name):
    return BUILTIN_PHASE_COLORS.get(name) or _FREE[zlib.crc32(name.encode("utf-8", "replace")) % len(_FREE)]
