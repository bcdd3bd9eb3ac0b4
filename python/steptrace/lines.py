"""Reading a steptrace JSONL log in the checking scripts: one JSON record per line; step lines are the
records without an "event" key (stall, resumed and end records have one: docs/schema.md).

The report (steptrace.report) has its own reader: it validates every field it uses and skips what it
cannot read (steptrace.report.guard). These helpers are for checks on logs steptrace wrote itself,
where a line that does not parse is a finding, unless the check reads a killed run's log (strict=False).
"""
import json


def read_records(path, strict=True):
    """Every record of the log, in order. strict: a line that is not JSON raises ValueError; otherwise it
    is skipped (the fragment a killed run can leave). Blank lines are skipped."""
    records = []
    with open(path) as f:
        for text in f:
            if not text.strip():
                continue
            try:
                records.append(json.loads(text))
            except ValueError:
                if strict:
                    raise
    return records


def split_records(records):
    """(step lines, event records), each in log order."""
    steps, events = [], []
    for r in records:
        (events if "event" in r else steps).append(r)
    return steps, events


def step_lines(path, strict=True):
    """The step lines of the log, in order."""
    return split_records(read_records(path, strict))[0]
