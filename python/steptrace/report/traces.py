"""The trace files of a run that its lines do not name: a compact log's lines carry no `trace`, so the
report finds the flight recorder's files by their names (details/flight_recorder.hpp)."""
import os
import re

from .runs import NO_ID

TRACE_FILE = re.compile(r"^trace-([0-9a-f]{1,8})-r(\d+)-s(\d+)\.json$")  # details/flight_recorder.hpp's names
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
                            if TRACE_FILE.match(e.name):
                                names.append(e.name)
                except OSError:
                    pass
                listed[d] = sorted(names)
            for name in listed[d]:
                m = TRACE_FILE.match(name)
                if m.group(1) != seg["run_id"][:8] or not isinstance(seg["rank"], int) or int(m.group(2)) != seg["rank"]:
                    continue
                found.append({"step": int(m.group(3)), "rank": seg["rank"], "file": os.path.join(d, name),
                              "log": seg["path"], "reasons": ["found by its name (the lines do not name it)"]})
                if len(found) >= limit:
                    return found
    return found
