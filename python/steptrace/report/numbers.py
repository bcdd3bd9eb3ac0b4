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
# INPUT-BOUND and H2D-BOUND, nccl as COMM-BOUND), any other name a hue of its own from a hash of the name
# (360 hues, kept 30 degrees clear of the built-ins' and the other series' reds, so two names rarely meet).
BUILTIN_PHASE_COLORS = {"input": "#d62728", "h2d": "#ff7f0e", "forward": "#1f77b4", "backward": "#2ca02c",
                        "optimizer": "#8c564b", "nccl": "#9467bd"}
OTHER_COLOR = "#17becf"  # the phases past the TOP_N drawn, summed (a colour the screenshot check counts)


def _hsl(h, s, l):
    """#rrggbb of hue h (degrees), saturation s and lightness l (0-1)."""
    c = (1 - abs(2 * l - 1)) * s
    x = c * (1 - abs((h / 60) % 2 - 1))
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(h // 60) % 6]
    m = l - c / 2
    return "#" + "".join(f"{round((v + m) * 255):02x}" for v in (r, g, b))


def phase_color(name):
    if name in BUILTIN_PHASE_COLORS:
        return BUILTIN_PHASE_COLORS[name]
    h = zlib.crc32(name.encode("utf-8", "replace"))
    hue = 30 + (h % 300)  # 30..329: not the reds of input and the labels
    light = 0.38 + ((h >> 9) % 3) * 0.1  # three lightnesses: names of near hues still apart
    return _hsl(hue, 0.6, light)
