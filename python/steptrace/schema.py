"""The line's declaration as data: python/steptrace/schema.json, written from the C++ rows
(include/steptrace/core/schema_data.hpp; tests/test_schema_doc.cpp holds the file to them).

    from steptrace import schema
    schema.field("step", ("gpu", "nccl_exposed_ms"))   # the row: {"path", "type", "tiers", "digits", "unit", "nullable"}
    schema.is_number(schema.field("step", ("phases", "forward", "host_ms")))

Each record ("step": the step line, full or compact; "end": the end record) is a list of rows, each with a
JSON pointer whose segment "*" stands for any name of a `names` object or any element of an array. What a
field means and when it is null: docs/schema.md. Pure Python: no extension module needed."""
import functools
import json
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")
NUMBER_TYPES = ("number", "integer")


@functools.lru_cache(maxsize=1)
def load():
    """The whole document ({"format", "records": {"step": {"schemas", "fields"}, "end": {...}}})."""
    with open(_PATH, encoding="utf-8") as f:
        return json.load(f)


def _segments(pointer):
    return tuple(s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:])


@functools.lru_cache(maxsize=2)
def _rows(record):
    try:
        fields = load()["records"][record]["fields"]
    except KeyError:
        raise ValueError(f"steptrace.schema: no record {record!r} (step, end)") from None
    return tuple((_segments(r["path"]), r) for r in fields)


def fields(record="step"):
    """Every row of a record, in docs/schema.md's order."""
    return [r for _, r in _rows(record)]


def field(record, path):
    """The row declaring the field at `path` (a tuple of keys; an array element's key is its index), or None."""
    path = tuple(str(p) for p in path)
    for segs, row in _rows(record):
        if len(segs) == len(path) and all(s == "*" or s == p for s, p in zip(segs, path)):
            return row
    return None


def is_number(row):
    """Whether a row's field is a JSON number (a time, a share, a count)."""
    return row is not None and row["type"] in NUMBER_TYPES
