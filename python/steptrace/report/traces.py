"""The trace files of a run that its lines do not name: a compact log's lines carry no `trace`, so the
report finds the flight recorder's files by their names (details/flight_recorder.hpp)."""
import os

from ..files import TRACE_NAME, FileRefused, read_json
from .guard import cut, is_num
from .runs import NO_ID

MAX_LISTED_ENTRIES = 100_000  # a directory's entries looked at, at most


def traces_beside(segs, limit):
    """The trace files of these segments' runs that their lines do not name (a compact log's lines carry no
    `trace`): in the run record's `trace_dir` ({rank} filled in; a relative one as given, from here, and
    from the log's directory: the program's working directory is not in the log) and the log's directory
    (the default), by the recorder's file name trace-<run_id[0:8]>-r<rank>-s<first step>.json."""
    found, listed = [], {}
    for seg in segs:
        if seg["traces"] or seg["run_id"] == NO_ID:
            continue
        base = os.path.dirname(os.path.abspath(seg["path"]))
        dirs = []
        for d in seg["trace_dirs"]:  # the setting as the program gave it: {rank} is the recorder's to fill
            d = d.replace("{rank}", str(seg["rank"]))
            dirs += [d] if os.path.isabs(d) else [os.path.abspath(d), os.path.join(base, d)]
        dirs.append(base)
        for d in dict.fromkeys(os.path.realpath(x) for x in dirs):
            if d not in listed:
                names = []
                try:
                    with os.scandir(d) as it:
                        for i, e in enumerate(it):
                            if i >= MAX_LISTED_ENTRIES:
                                break
                            if TRACE_NAME.match(e.name):
                                names.append(e.name)
                except OSError:
                    pass
                listed[d] = sorted(names)
            for name in listed[d]:
                m = TRACE_NAME.match(name)
                if m.group(1) != seg["run_id"][:8] or not isinstance(seg["rank"], int) or int(m.group(2)) != seg["rank"]:
                    continue
                found.append({"step": int(m.group(3)), "rank": seg["rank"], "file": os.path.join(d, name),
                              "log": seg["path"], "reasons": ["found by its name (the lines do not name it)"]})
                if len(found) >= limit:
                    return found
    return found


MAX_KERNEL_TRACE_BYTES = 16 << 20  # trace text read for the kernel table, all files together (~27x in memory)


def kernels_from_traces(traces, budget=MAX_KERNEL_TRACE_BYTES):
    """Top kernels per phase from the trace files' kernel events of their captured steps, for lines that
    carry none (a compact log's): ({phase: {kernel: [ms, launches]}}, files read, captured steps). Only
    files named as the recorder names them; each read as the tools read a file someone else wrote
    (files.read_json: a regular file, bounded, non-finite numbers refused), `budget` bytes in all."""
    top, files, steps = {}, 0, set()
    seen = set()
    for t in traces:
        f = t.get("file")
        if not isinstance(f, str) or not TRACE_NAME.match(os.path.basename(f)):
            continue
        here = [f] if os.path.isabs(f) else [os.path.join(os.path.dirname(os.path.abspath(t["log"])), f), f]
        path = next((p for p in here if os.path.isfile(p)), None)
        if path is None or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        try:
            size = os.stat(path).st_size
            if size > budget:
                continue
            doc = read_json(path, budget)
        except (OSError, FileRefused, MemoryError):
            continue
        budget -= size
        other = doc.get("otherData") if isinstance(doc, dict) else None
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(other, dict) or not isinstance(other.get("captured"), list) or not isinstance(events, list):
            continue
        captured = {c for c in other["captured"] if isinstance(c, int) and not isinstance(c, bool)}
        files += 1
        for e in events:
            if not isinstance(e, dict) or e.get("cat") != "kernel" or e.get("ph") != "X":
                continue
            a = e.get("args")
            step = a.get("global_step") if isinstance(a, dict) else None
            dur = e.get("dur")
            if step not in captured or not is_num(dur) or dur < 0:
                continue
            steps.add((path, step))
            phase = cut(str(a.get("phase") or "?"))
            cell = top.setdefault(phase, {}).setdefault(cut(str(e.get("name") or "kernel")), [0.0, 0])
            cell[0] += dur / 1000.0
            cell[1] += 1
    return top, files, len(steps)
