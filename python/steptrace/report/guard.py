"""The hostile-input side of steptrace-report (issue #33): what a line must be to be read, the bounds on
what the page holds, the trace links it may make, and the data embedded in the page. Used by
the report's main module and its reading side (runs).

- A line is read only when every field the report uses has its schema's type (docs/schema.md): ints for
  `global_step` (0..2^53) and `rank` (0..2^31), finite numbers or null for times and fractions, objects,
  lists and strings where the schema has them. Any other line (and one nested too deeply to decode, or
  with NaN/Infinity) is skipped and counted: the page says "N lines skipped: malformed" and why.
- Bounds: per-phase charts draw the TOP_N phases with the most time over the run (host time for the host
  chart, GPU busy time for the GPU chart) and sum the rest as one series `other`; the kernel table lists
  the TOP_N phases with the most kernel time (the rest merged into one `other` entry), TOP_KERNELS kernels
  each; the label table TOP_N labels; names are cut at MAX_NAME characters; at most MAX_TRACES trace files
  are listed, MAX_STEPS_LISTED steps each. The page then grows with the steps drawn (at most --max-points)
  and not with the names in the lines.
- A trace file is linked only when its path resolves (symlinks followed) to a regular `.json` file inside
  the directory of the log file its line came from (where the flight recorder writes it unless
  `trace_dir` says otherwise); the link is relative, percent-encoded and starts with ./ or ../ (never a
  scheme such as javascript:). Otherwise its name is shown as text, with why it is not linked.
- The data goes into the page as JSON with <, > and & written as \\u003c, \\u003e, \\u0026: no string
  can close the script or open an HTML comment in it; the page's code puts every text into the DOM
  escaped (or as textContent).
"""
import heapq
import json
import math
import os
from urllib.parse import quote

TOP_N = 12            # phases drawn per per-phase chart and listed in the kernel table; labels listed
TOP_KERNELS = 8       # kernels listed per phase
MAX_NAME = 200        # characters kept of a phase, kernel, label, device name or reason (steptrace cuts kernels at 200)
MAX_TRACES = 100      # trace files listed
MAX_STEPS_LISTED = 20  # steps listed per trace file
MAX_RUN_ID = 128      # characters of a run_id (steptrace writes 16)
OTHER = "other"


class Malformed(Exception):
    """A line the report cannot read as the schema says (the message: which field)."""


def _constant(name):
    raise Malformed(f"{name} as a number")


# The keys a line is grouped and ordered by: given twice, readers differ (Python keeps the last, SQLite's
# JSON functions the first) and a forged line could pass for another run's. Only a line where one of them
# appears twice in its text is parsed with the (slower) check of every object's keys.
_IDENTITY = (b'"run_id"', b'"rank"', b'"global_step"', b'"event"', b'"schema"', b'"start_unix_ms"')


def _unique_keys(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Malformed("a key given twice")
    return out


def parse(raw):
    """(line, None) for a JSON object; (None, "unparsable") for a fragment that is no JSON; (None, why)
    for JSON the report will not read (not an object, NaN/Infinity, nested too deeply, an identity key
    given twice)."""
    strict = any(raw.count(k) > 1 for k in _IDENTITY)
    try:
        line = json.loads(raw.decode("utf-8", errors="replace"), parse_constant=_constant,
                          object_pairs_hook=_unique_keys if strict else None)
    except Malformed as e:
        return None, str(e)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError:
        return None, "unparsable"
    if not isinstance(line, dict):
        return None, "not a JSON object"
    return line, None


NUMBER = (int, float)  # type(True) is bool: not in it


def _finite(v):
    """math.isfinite, False for an integer too large for a double (a forged 400-digit number)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def is_num(v):
    return type(v) in NUMBER and _finite(v)


def _num_or_none(v):
    return v is None or type(v) in NUMBER and _finite(v)


def is_index(v, limit):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= limit


def cut(s):
    return s if len(s) <= MAX_NAME else s[:MAX_NAME - 1] + "…"


def _need(ok, why):
    if not ok:
        raise Malformed(why)


def _opt(line, key, kind, why):
    v = line.get(key)
    _need(v is None or isinstance(v, kind) and not isinstance(v, bool), f"{why} (a {type(v).__name__})")
    return v


def _ident(line):
    rid = _opt(line, "run_id", str, "run_id is not a string")
    _need(rid is None or len(rid) <= MAX_RUN_ID, f"run_id longer than {MAX_RUN_ID} characters")
    _need("rank" not in line or is_index(line["rank"], 2 ** 31 - 1), "rank is not an integer 0..2^31")


def check_line(line, scalars):
    """Raise Malformed (the field) unless every field the report reads has its type. scalars: the
    paths of the per-step numbers (runs.SCALARS)."""
    if "event" in line:
        _opt(line, "event", str, "event is not a string")
        _ident(line)
        return
    _need(is_index(line.get("global_step"), 2 ** 53), "global_step is not an integer 0..2^53")
    _ident(line)
    for key in ("hostname", "job_id", "timestamp"):
        _opt(line, key, str, f"{key} is not a string")
    ms = line.get("start_unix_ms")
    _need(ms is None or is_num(ms), "start_unix_ms is not a number")
    for _, path in scalars:
        obj = line
        for i, k in enumerate(path):
            obj = obj.get(k)
            if obj is None:
                break
            last = i == len(path) - 1
            _need(is_num(obj) if last else isinstance(obj, dict),
                  ".".join(path[:i + 1]) + (" is not a number" if last else " is not an object"))
    xr = _opt(line, "cross_rank", dict, "cross_rank is not an object")
    if xr:
        for key in ("slowest_rank", "gap_ms", "wait_share", "culprit_gap_ms"):
            _need(_num_or_none(xr.get(key)), f"cross_rank.{key} is not a number")
        for key in ("culprit", "median_rank"):
            _need(xr.get(key) is None or type(xr.get(key)) is dict, f"cross_rank.{key} is not an object")
            _need(_num_or_none((xr.get(key) or {}).get("wait_ms")), f"cross_rank.{key}.wait_ms is not a number")
        _opt(xr, "culprit_phase", str, "cross_rank.culprit_phase is not a string")
        _opt(xr, "wait_basis", str, "cross_rank.wait_basis is not a string")
        _need(xr.get("balanced") is None or isinstance(xr.get("balanced"), bool), "cross_rank.balanced is not a boolean")
    _opt(line, "rank_wait", dict, "rank_wait is not an object")
    dev = _opt(line, "device", dict, "device is not an object")
    if dev:
        _opt(dev, "name", str, "device.name is not a string")
    _opt(line, "gpu", dict, "gpu is not an object")
    diag = _opt(line, "diagnosis", dict, "diagnosis is not an object")
    if diag:
        _opt(diag, "label", str, "diagnosis.label is not a string")
        _opt(diag, "basis", str, "diagnosis.basis is not a string")
    reasons = _opt(line, "null_reasons", dict, "null_reasons is not an object")
    for v in (reasons or {}).values():
        _need(isinstance(v, str), "a null_reasons value is not a string")
    for v in (_opt(line, "reason_text", dict, "reason_text is not an object") or {}).values():
        _need(isinstance(v, str), "a reason_text value is not a string")
    for ph in (_opt(line, "phases", dict, "phases is not an object") or {}).values():  # the most of a line: fast
        _need(type(ph) is dict, "a phase is not an object")
        _need(_num_or_none(ph.get("host_ms")), "a phase's host_ms is not a number")
        _need(_num_or_none(ph.get("self_ms")), "a phase's self_ms is not a number")
        g = ph.get("gpu")
        if g is None:
            continue
        _need(type(g) is dict, "a phase's gpu is not an object")
        _need(_num_or_none(g.get("busy_ms")), "a phase's gpu.busy_ms is not a number")
        tops = g.get("top_kernels")
        _need(tops is None or type(tops) is list, "top_kernels is not a list")
        for t in tops or ():
            _need(type(t) is dict, "a top kernel is not an object")
            name = t.get("name")
            _need(name is None or type(name) is str, "a kernel's name is not a string")
            _need(_num_or_none(t.get("ms")) and _num_or_none(t.get("calls")), "a kernel's ms or calls is not a number")
    gm = _opt(line, "gpu_markers", dict, "gpu_markers is not an object")
    for ph in (_opt(gm, "phases", dict, "gpu_markers.phases is not an object") or {}).values() if gm else ():
        _need(type(ph) is dict, "a gpu_markers phase is not an object")
        _need(_num_or_none(ph.get("span_ms")), "a gpu_markers phase's span_ms is not a number")
    tr = _opt(line, "trace", dict, "trace is not an object")
    if tr:
        _opt(tr, "file", str, "trace.file is not a string")
        for r in _opt(tr, "reasons", list, "trace.reasons is not a list") or []:
            _need(isinstance(r, str), "a trace reason is not a string")


def skipped_note(counts):
    """The page's sentence on skipped lines: counts is a Counter of why."""
    n = sum(counts.values())
    return f"{n} line{'s' if n != 1 else ''} skipped: malformed (" + \
        "; ".join(f"{k} × {why}" for why, k in counts.most_common(4)) + \
        ("; …" if len(counts) > 4 else "") + "). The report reads a line only when every field it uses has the " \
        "schema's type (docs/schema.md)."


def fold(totals, n=TOP_N):
    """Names by total (most first; ties by name): the n kept, and the rest."""
    keep = heapq.nsmallest(n, totals, key=lambda p: (-totals[p], p))
    kept = set(keep)
    return keep, [p for p in totals if p not in kept]


def trace_link(file, log_path, out_dir):
    """(href, None) when the trace file may be linked from the page at out_dir, else (None, why)."""
    log_dir = os.path.realpath(os.path.dirname(os.path.abspath(log_path)))
    name = os.path.basename(file)
    why = "not found beside the lines"
    # As written (absolute, or relative to here, as the writer's working directory may be), then beside the log.
    for cand in (file, os.path.join(log_dir, name)):
        try:
            real = os.path.realpath(cand)
            if not os.path.isfile(real):
                continue
            if os.path.commonpath([real, log_dir]) != log_dir:
                why = "not linked: outside the log's directory"
                continue
        except (OSError, ValueError):
            continue
        if not (name.endswith(".json") and real.endswith(".json")):
            why = "not linked: not a .json file"
            continue
        rel = quote(os.path.relpath(real, out_dir))
        return (rel if rel.startswith("../") else "./" + rel), None
    return None, why


def resolve_traces(data, out_path):
    """The page's trace table: one entry per (file, rank), its steps, and its link (trace_link) or why
    it has none; at most MAX_TRACES files, MAX_STEPS_LISTED steps each."""
    out_dir = os.path.realpath(os.path.dirname(os.path.abspath(out_path)))
    by_file, more = {}, 0
    for t in data["traces"]:
        key = (t["file"], t["rank"])
        e = by_file.get(key)
        if e is not None:
            if len(e["steps"]) < MAX_STEPS_LISTED:
                e["steps"].append(t["step"])
            else:
                e["more_steps"] += 1
            continue
        if len(by_file) >= MAX_TRACES:
            more += 1
            continue
        href, why = trace_link(t["file"], t["log"], out_dir)
        by_file[key] = {"rank": t["rank"], "steps": [t["step"]], "more_steps": 0, "reasons": t["reasons"][:8],
                        "name": cut(os.path.basename(t["file"]) or t["file"]), "href": href, "why": why}
    data["traces"] = list(by_file.values())
    if more:
        data["notes"].append(f"{len(by_file)} trace files listed; {more} more lines name other trace files "
                             "(not listed).")


def embed(data):
    """The page's data as JSON that cannot end its <script> element or open a comment in it."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False) \
        .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
