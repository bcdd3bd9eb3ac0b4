"""How steptrace's Python tools read the trace directory and write their outputs, by the runtime's rules.

Writing (`replace_file`): the output is replaced whole through a temporary created beside it with
O_EXCL (a name nobody can have planted a link at: mkstemp), and only a regular file is ever replaced:
`-o /dev/null`, a FIFO, a directory or a link is refused with a reason.

Reading (`read_json`): a file of the trace directory (anyone who can create files there can drop one)
is opened without waiting (O_NONBLOCK: a FIFO never blocks), read only if it is a regular file no larger
than the caller's bound (a link to /dev/zero, a 600 MB trace), parsed with non-finite numbers refused
(NaN, Infinity, and numbers too large for a double such as 1e999) and nesting bounded. `printable` makes a string safe to print on a terminal.
"""
import json
import os
import re
import stat
import tempfile

MAX_SMALL_FILE = 1 << 20   # presence, request and answer files: the runtime writes < 4 KiB
MAX_TRACE_FILE = 256 << 20  # a capture's trace file (the runtime bounds a capture's events; see docs/build.md)
MAX_RANKS = 1 << 24         # world_size above this is not a run steptrace wrote (the runtime's bound too)
MAX_DEPTH = 64              # JSON nesting: the runtime's files nest 5 deep at most
# A flight-recorder trace file's name (details/flight_recorder.hpp): run_id[0:8], rank, first captured step.
TRACE_NAME = re.compile(r"^trace-([0-9a-f]{1,8})-r(\d+)-s(\d+)\.json$")


class FileRefused(Exception):
    """A file the tools will not read or replace, with why."""


def _reject_constant(name):
    raise ValueError(f"non-finite number {name}")


def _finite_float(text):
    """A JSON number with a fraction or exponent; one beyond a double's range (1e999 reads as infinity) refused."""
    x = float(text)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"non-finite number {text[:32]}")
    return x


def _depth_ok(text, limit):
    """True when no array or object nests deeper than `limit` (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _unique_keys(pairs):
    """An object whose keys are each given once: readers differ on a repeated key (Python keeps the last,
    SQLite's JSON functions the first), so a line with one is not a line steptrace wrote."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {dup[:40]!r} given twice")
    return out


def loads(text, max_depth=MAX_DEPTH, unique_keys=False):
    """json.loads with NaN/Infinity and nesting deeper than max_depth refused (ValueError). The depth is
    scanned on small texts only; a large one (a trace) relies on the parser's recursion bound, caught.
    unique_keys: an object with a repeated key refused too (the lines' readers; slower)."""
    if len(text) <= MAX_SMALL_FILE and not _depth_ok(text, max_depth):
        raise ValueError(f"nested deeper than {max_depth}")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=_unique_keys if unique_keys else None)
    except RecursionError:
        raise ValueError("nested too deep") from None


def read_bytes(path, max_bytes):
    """The content of a regular file of at most max_bytes; FileRefused otherwise (never blocks)."""
    try:  # what it is, before opening (a device may act on open); fstat below checks what was opened
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise FileRefused("not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FileRefused(f"cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused("not a regular file")
        if st.st_size > max_bytes:
            raise FileRefused(f"{st.st_size} bytes (more than {max_bytes})")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileRefused(f"grew past {max_bytes} bytes while read")
        return data
    except OSError as e:
        raise FileRefused(f"cannot read: {e.strerror}") from None
    finally:
        os.close(fd)


def read_json(path, max_bytes=MAX_SMALL_FILE):
    """The parsed JSON document of `path`, or raises FileRefused with why."""
    data = read_bytes(path, max_bytes)
    try:
        return loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FileRefused(f"not JSON steptrace wrote ({e})") from None


def read_json_or_none(path, max_bytes=MAX_SMALL_FILE):
    try:
        return read_json(path, max_bytes)
    except FileRefused:
        return None


def replace_file(path, text):
    """Replaces `path` whole with `text` (UTF-8) through a temporary beside it; FileRefused when
    `path` exists and is not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise FileRefused(f"{path}: {e.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path} is not a regular file (a device, FIFO, directory or link): not replaced")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as e:
        raise FileRefused(f"cannot create a temporary in {directory}: {e.strerror}") from None
    try:
        # The replaced file's mode, or 0644 for a new one (mkstemp makes 0600); set on the descriptor.
        os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def printable(text, limit=200):
    """`text` with control characters (C0, DEL, C1) shown as escapes, cut to `limit` characters."""
    text = str(text)
    out = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text[:limit])
    return out + ("..." if len(text) > limit else "")
