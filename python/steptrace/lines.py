"""Reading a steptrace JSONL log: one JSON record per line; step lines are the records without an
"event" key (run, stall, resumed and end records have one: docs/schema.md).

A compact log (`line_detail=compact`, schema steptrace.step/2) keeps the run's constant facts in its run
records (`{"event": "run"}`) and a reason's sentence on the first line that uses its code: `expand`
gives each compact line those back, so that a reader finds the fields and sentences a full line
(steptrace.step/1) has under the same names. `step_lines` expands.

The report (steptrace.report) has its own reader: it validates every field it uses and skips what it
cannot read (steptrace.report.guard). These helpers are for checks on logs steptrace wrote itself,
where a line that does not parse is a finding, unless the check reads a killed run's log (strict=False).
A line that is not UTF-8, nests deeper than steptrace writes (files.MAX_DEPTH) or is longer than
MAX_LINE_BYTES does not parse. `iter_records` and `iter_step_lines` stream (memory bounded by one line and
the run records); `read_records` and `step_lines` return lists of all of them.
"""
from .files import loads

MAX_LINE_BYTES = 1 << 20  # steptrace's lines are < 16 KB (core/line_tiers.hpp); a longer one is not its

COMPACT_SCHEMA = "steptrace.step/2"
# A run record's keys not copied to a line: its own (what it is, when it was written, the settings).
_RUN_ONLY = ("event", "schema", "settings", "null_reasons", "from_step", "timestamp")


def raw_lines(path, start=0, end=None):
    """(offset, bytes without the newline) of each line of bytes start..end of `path` (a range that
    begins at a line's start), read one at a time: memory one line. (offset, None) for a line longer
    than MAX_LINE_BYTES, whose bytes are skipped unread."""
    with open(path, "rb") as f:
        f.seek(start)
        pos = start
        while end is None or pos < end:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            here, pos = pos, pos + len(raw)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # the rest of the over-long line
                    raw = f.readline(MAX_LINE_BYTES + 1)
                    pos += len(raw)
                yield here, None
                continue
            yield here, raw.rstrip(b"\n")


def iter_records(path, strict=True):
    """Every record of the log, in order, one at a time. strict: a line that does not parse (not JSON,
    not UTF-8, too deep, too long) raises ValueError; otherwise it is skipped (the fragment a killed run
    can leave). Blank lines are skipped."""
    for _, raw in raw_lines(path):
        if raw is None:
            if strict:
                raise ValueError(f"a line longer than {MAX_LINE_BYTES} bytes")
            continue
        if not raw.strip():
            continue
        try:
            record = loads(raw.decode("utf-8"), unique_keys=True)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            if strict:
                raise ValueError(f"not a line steptrace wrote: {e}") from None
            continue
        yield record


def read_records(path, strict=True):
    """iter_records as a list."""
    return list(iter_records(path, strict))


def split_records(records):
    """(step lines, event records), each in log order."""
    steps, events = [], []
    for r in records:
        (events if "event" in r else steps).append(r)
    return steps, events


def expand(records):
    """The records in order, each compact line (schema steptrace.step/2) given its run record's fields
    (those it lacks) and its null_reasons (and an UNKNOWN line's diagnosis.reason) as sentences: the run
    record's for its fields, the run's `reason_text` for the codes (a code whose sentence no earlier line
    of the run carried reads "reason code C"; a sentence's numbers are those of the first line that
    carried it: the full line has each line's own). Full lines and event records pass as they are."""
    runs, texts = {}, {}
    for r in records:
        key = (r.get("run_id"), r.get("rank", 0))
        if r.get("event") == "run":
            runs[key] = r
            yield r
            continue
        if "event" in r or r.get("schema") != COMPACT_SCHEMA:
            yield r
            continue
        book = texts.setdefault(key, {})
        book.update(r.get("reason_text") or {})
        out = dict(r)
        out.pop("reason_text", None)
        reasons = {k: book.get(code, f"reason code {code}") for k, code in (r.get("null_reasons") or {}).items()}
        diag = r.get("diagnosis")
        if isinstance(diag, dict) and isinstance(diag.get("reason"), str):  # an UNKNOWN line's reason, as a code
            out["diagnosis"] = dict(diag, reason=book.get(diag["reason"], f"reason code {diag['reason']}"))
        run = runs.get(key)
        if run is not None:
            for k, v in run.items():
                if k not in _RUN_ONLY and k not in out:
                    out[k] = v
            for k, why in (run.get("null_reasons") or {}).items():
                reasons.setdefault(k, why)
        out["null_reasons"] = reasons
        yield out


def iter_step_lines(path, strict=True):
    """The step lines of the log, in order (compact lines expanded), one at a time."""
    return (r for r in expand(iter_records(path, strict)) if isinstance(r, dict) and "event" not in r)


def step_lines(path, strict=True):
    """iter_step_lines as a list."""
    return list(iter_step_lines(path, strict))
