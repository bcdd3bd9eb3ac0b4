"""The line's declaration as data: python/steptrace/schema.json, written from the C++ rows
(include/steptrace/core/schema_data.hpp; tests/test_schema_doc.cpp holds the file to them).

    from steptrace import schema
    schema.field("step", ("gpu", "nccl_exposed_ms"))   # the row: {"path", "type", "tiers", "digits", "unit", "nullable"}
    schema.is_number(schema.field("step", ("phases", "forward", "host_ms")))

Each record ("step": the step line, full or compact; "end": the end record; "stall" and "resumed": the stall
watchdog's records) is a list of rows, each with a
JSON pointer whose segment "*" stands for any name of a `names` object or any element of an array. What a
field means and when it is null: docs/schema.md. Pure Python: no extension module needed."""
import functools
import json
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")
NUMBER_TYPES = ("number", "integer")


@functools.lru_cache(maxsize=1)
def load():
    """The whole document ({"format", "records": {"step": {"schemas", "fields"}, "end": {...}, "stall": {...},
    "resumed": {...}}})."""
    with open(_PATH, encoding="utf-8") as f:
        return json.load(f)


def _segments(pointer):
    return tuple(s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:])


@functools.lru_cache(maxsize=4)
def _rows(record):
    try:
        fields = load()["records"][record]["fields"]
    except KeyError:
        raise ValueError(f"steptrace.schema: no record {record!r} (step, end, stall, resumed)") from None
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


def _fits(row, value):
    """Whether a value read from JSON is of its row's type (null where the row allows it)."""
    if value is None:
        return row["nullable"]
    t = row["type"]
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t in ("object", "names"):
        return isinstance(value, dict)
    return t == "array" and isinstance(value, list)


def problems(record, obj):
    """What a parsed record says against its rows: each value no row declares, or not of its row's type,
    as "/path: why" (empty: none). Containers are checked with their members."""
    out = []

    def walk(value, path):
        if path:
            row = field(record, path)
            pointer = "/" + "/".join(str(p) for p in path)
            if row is None:
                out.append(f"{pointer}: no row declares it")
                return
            if not _fits(row, value):
                out.append(f"{pointer}: {value!r:.40}, declared {row['type']}"
                           + ("" if row["nullable"] else ", never null"))
                return
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))

    walk(obj, ())
    return out
