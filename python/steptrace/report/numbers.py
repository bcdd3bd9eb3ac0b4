"""The report's shared small pieces: the series colours, rounding for the page, a median of what is there."""
import math
import statistics

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]


def rounded(xs, digits=6):
    return [None if v is None or not math.isfinite(v) else float(f"{v:.{digits}g}") for v in xs]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
