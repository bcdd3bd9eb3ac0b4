"""Unit tests of the report's functions (steptrace.report: guard, runs, diagnosis), on lines built here:
what each reads, refuses, splits and decides. Pure Python: no extension, no torch, no browser (the page
itself is checked in a real Chromium by tests/checks/report_check.py).

    PYTHONPATH=python python3 python/tests/test_report.py      (CTest report_unit)

With STEPTRACE_TOOLS_ONLY=1 (CTest sets it: the source tree has no built extension) it also checks that
the tools import without the extension and that the runtime then says what is missing."""
import json
import os
import shutil
import sqlite3
import sys
import tempfile
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import run_tests  # noqa: E402

import steptrace  # noqa: E402
from steptrace import schema  # noqa: E402
from steptrace.report import diagnosis, guard, runs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_dirs = []


def tmpdir():
    d = tempfile.mkdtemp(prefix="steptrace-report-unit-")
    _dirs.append(d)
    return d


def cleanup():
    while _dirs:
        shutil.rmtree(_dirs.pop(), ignore_errors=True)


def line(step, run_id="a" * 16, rank=0, ms=None, label="COMPUTE_BOUND", basis="traced", phases=None, **extra):
    out = {"schema": "steptrace.step/1", "global_step": step, "run_id": run_id, "rank": rank,
           "start_unix_ms": 1.7e12 + step * 100.0 if ms is None else ms, "step_time_ms": 100.0,
           "diagnosis": {"label": label, "basis": basis},
           "phases": phases if phases is not None else {"forward": {"host_ms": 40.0, "self_ms": 40.0, "count": 1}},
           "null_reasons": {}}
    out.update(extra)
    return out


def write_log(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


# ---- guard: what a line must be ----

def test_parse_tells_fragments_from_lines_it_will_not_read():
    good, why = guard.parse(b'{"global_step": 3}')
    assert why is None and good == {"global_step": 3}
    assert guard.parse(b'{"global_step": 3, "step_ti')[1] == "unparsable"
    assert guard.parse(b'{"step_time_ms": NaN}')[1] == "NaN as a number"
    assert guard.parse(b'{"step_time_ms": -Infinity}')[1] == "-Infinity as a number"
    assert guard.parse(b"[1, 2]")[1] == "not a JSON object"
    deep = b"[" * 100000 + b"]" * 100000
    assert guard.parse(deep)[1] in ("nested too deeply", "not a JSON object"), guard.parse(deep)[1]


def test_check_line_names_the_field_of_the_wrong_type():
    guard.check_line(line(0), runs.SCALARS)  # a well-formed line passes
    cases = [
        (dict(line(0), global_step=-1), "global_step is not an integer"),
        (dict(line(0), global_step=True), "global_step is not an integer"),
        (dict(line(0), rank=True), "rank is not an integer"),
        (dict(line(0), run_id=7), "run_id is not a string"),
        (dict(line(0), run_id="x" * 129), "run_id longer than 128"),
        (dict(line(0), step_time_ms="12"), "step_time_ms is not a number"),
        (dict(line(0), memory={"allocator": 5}), "memory.allocator is not an object"),
        (line(0, phases={"fwd": {"host_ms": "1"}}), "a phase's host_ms is not a number"),
        (line(0, phases={"fwd": {"gpu": {"top_kernels": [{"name": 3}]}}}), "a kernel's name is not a string"),
        (dict(line(0), null_reasons={"x": 1}), "a null_reasons value is not a string"),
        (dict(line(0), trace={"file": "t.json", "reasons": [1]}), "a trace reason is not a string"),
    ]
    for bad, why in cases:
        try:
            guard.check_line(bad, runs.SCALARS)
        except guard.Malformed as e:
            assert str(e).startswith(why), (why, str(e))
        else:
            raise AssertionError(f"accepted a line with {why}")
    guard.check_line({"event": "end", "run_id": "a" * 16}, runs.SCALARS)  # an event record: its identity only


def test_fold_keeps_the_largest_and_breaks_ties_by_name():
    totals = {"b": 5.0, "a": 5.0, "c": 9.0, "d": 1.0}
    keep, rest = guard.fold(totals, n=3)
    assert keep == ["c", "a", "b"] and rest == ["d"], (keep, rest)
    assert guard.fold({}, n=3) == ([], [])


def test_cut_bounds_a_name():
    assert guard.cut("k" * guard.MAX_NAME) == "k" * guard.MAX_NAME
    long = guard.cut("k" * (guard.MAX_NAME + 50))
    assert len(long) == guard.MAX_NAME and long.endswith("…")


def test_skipped_note_counts_and_lists_the_commonest():
    note = guard.skipped_note(Counter({"rank is not an integer": 3, "unparsable": 1}))
    assert note.startswith("4 lines skipped: malformed (3 × rank is not an integer; 1 × unparsable)"), note
    many = guard.skipped_note(Counter({f"why {i}": 1 for i in range(6)}))
    assert "; …)" in many, many


# ---- runs: files, segments, the run to show ----

def test_a_log_two_runs_appended_to_is_two_segments_and_the_latest_is_shown():
    d = tmpdir()
    log = os.path.join(d, "steps-0.jsonl")
    old, new = "0" * 16, "f" * 16
    write_log(log, [line(s, run_id=old, ms=1.0e12 + s) for s in range(5)] +
              ['{"global_step": 9, "step_t'] +                              # a killed writer's fragment
              [dict(line(0, run_id=new), rank="zero")] +                    # malformed: counted, skipped
              [line(s, run_id=new, ms=2.0e12 + s) for s in range(3)] +
              [{"event": "end", "run_id": new, "rank": 0}])
    f = runs.load_file(log)
    assert f["unparsable"] == 1 and sum(f["malformed"].values()) == 1, (f["unparsable"], f["malformed"])
    segs = runs.segments([f])
    assert sorted((s["run_id"], s["steps"]) for s in segs) == [(old, [0, 1, 2, 3, 4]), (new, [0, 1, 2])]
    cat = runs.catalogue(segs)
    assert [r["id"] for r in cat] == [old, new] and [r["latest"] for r in cat] == [False, True]
    assert runs.choose(cat, None) == [new]
    assert runs.choose(cat, "all") == [old, new]
    assert runs.choose(cat, "000") == [old]  # a prefix naming one run
    try:
        runs.choose(cat, "zz")
    except runs.UnknownRun as e:
        assert old in str(e) and new in str(e) and "--run all" in str(e), str(e)
    else:
        raise AssertionError("an unknown run id was accepted")
    text = runs.runs_text(cat, [new], None)
    assert text.startswith("2 runs in these files") and "(latest)" in text, text
    new_seg = next(s for s in segs if s["run_id"] == new)
    assert len(new_seg["ends"]) == 1


def test_columns_phases_and_null_reasons_of_a_segment():
    d = tmpdir()
    log = os.path.join(d, "steps-0.jsonl")
    phases = {"forward": {"host_ms": 40.0, "self_ms": 30.0, "count": 1,
                          "gpu": {"busy_ms": 25.0, "top_kernels": [{"name": "gemm", "ms": 20.0, "calls": 4}]}},
              "attn": {"host_ms": 10.0, "self_ms": 10.0, "count": 2}}
    write_log(log, [line(0, phases=phases, tokens_per_second=5000.0, memory={"allocator": {"allocated_bytes": 64}},
                         null_reasons={"estimated_mfu": "flops per token unknown"}),
                    line(1, phases=phases, null_reasons={"estimated_mfu": "flops per token unknown"})])
    seg = runs.segments([runs.load_file(log)])[0]
    assert seg["cols"]["tokens_per_second"] == [5000.0, None]
    assert seg["cols"]["allocated_bytes"] == [64, None]
    assert seg["host"]["forward"] == {0: 30.0, 1: 30.0}  # self time: the stack adds up
    assert seg["gpu"]["forward"] == {0: 25.0, 1: 25.0}
    assert seg["top"]["forward"]["gemm"] == [40.0, 8]
    assert seg["nulls"]["estimated_mfu"] == Counter({"flops per token unknown": 2})


def test_the_report_opens_with_the_rank_the_others_wait_for():
    """Two ranks' logs made here: rank 1 slowed in its input, rank 0 waits for it in its collective. The
    report names rank 1 from rank 0's views (its share, its part, what the median rank waits), draws each
    rank's wait and own work, picks the slowest by own work (step times agree), and tables rank x phase."""
    from steptrace import report
    d = tmpdir()
    logs = []
    for rank in (0, 1):
        recs = []
        for st in range(40):
            extra = {}
            if st % 10 == 0:  # an exchange every 10 steps: this rank's own summary
                wait = 22.0 if rank == 0 else 1.0
                extra["rank_wait"] = {"step": st, "steps": 10, "step_time_ms": 100.0, "wait_ms": wait,
                                      "work_ms": 100.0 - wait, "wait_basis": "backward_end", "wait_steps": 10}
            if rank == 0 and st % 10 == 0:
                slow = 1 if st else 0  # the first view before the slowdown names rank 0
                extra["cross_rank"] = {
                    "step": st, "slowest_rank": slow, "gap_ms": 10.5, "wait_share": 0.21, "balanced": st == 0,
                    "culprit_phase": "input" if slow == 1 else "between_steps", "wait_basis": "backward_end",
                    "culprit": {"rank": slow, "wait_ms": 1.0}, "median_rank": {"rank": 1 - slow, "wait_ms": 22.0},
                    "culprit_gap_ms": 20.0}
            ph = {"input": {"host_ms": 21.0 if rank == 1 else 1.0, "self_ms": 21.0 if rank == 1 else 1.0, "count": 1},
                  "forward": {"host_ms": 40.0, "self_ms": 40.0, "count": 1}}
            recs.append(line(st, rank=rank, phases=ph, **extra))
        recs.append(dict(line(40, rank=rank), cross_rank={"slowest_rank": "one"}))  # malformed: skipped
        path = os.path.join(d, f"steps-{rank}.jsonl")
        write_log(path, recs)
        logs.append(path)
    data = report.build(logs, "t", 400, 1)
    hb = data["held_back"]
    assert hb["views"] == 4 and hb["judged"] == 4 and hb["balanced"] == 1, hb
    top = hb["culprits"][0]
    assert top["rank"] == 1 and top["views"] == 3 and abs(top["share"] - 0.75) < 1e-9, hb
    assert top["phase"] == "input" and top["phase_views"] == 3 and top["wait_gap_ms"] == 21.0, top
    assert hb["bases"] == {"backward_end": 4}, hb
    ids = [c["id"] for c in data["charts"]]
    assert "rank_wait" in ids and "rank_work" in ids, ids
    slow = next(c for c in data["charts"] if c["id"] == "slowest")
    assert "own work" in slow["title"], slow["title"]
    assert data["slowest_ranks"][0]["rank"] == 1, data["slowest_ranks"]  # by own work: step times are equal
    rp = data["rank_phases"]
    assert rp["phases"][:2] == ["forward", "input"], rp
    r0, r1 = rp["rows"]
    assert (r0["wait_ms"], r1["wait_ms"]) == (22.0, 1.0) and (r0["work_ms"], r1["work_ms"]) == (78.0, 99.0), rp
    assert r1["phases"][1] == 21.0, rp  # the mean over the rank's lines read (the malformed one is not)


def test_rank_numbers_near_the_float_limit_build_a_page():
    """Each value finite, their median or difference not (two 1.7e308 average to infinity): the held-back
    summary and the rank x phase table say null there, and the page builds (its data is JSON)."""
    from steptrace import report
    d = tmpdir()
    big = 1.7e308
    logs = []
    for rank in (0, 1):
        recs = []
        for st in range(4):
            extra = {"rank_wait": {"step": st, "wait_ms": big, "work_ms": big}}
            if rank == 0:
                extra["cross_rank"] = {"step": st, "slowest_rank": 1, "gap_ms": big, "wait_share": big,
                                       "culprit": {"wait_ms": -big}, "median_rank": {"wait_ms": big}}
            ph = {"forward": {"host_ms": big, "self_ms": big, "count": 1}}
            recs.append(line(st, rank=rank, phases=ph, **extra))
        path = os.path.join(d, f"big-{rank}.jsonl")
        write_log(path, recs)
        logs.append(path)
    data = report.build(logs, "t", 400, 1)
    top = data["held_back"]["culprits"][0]
    assert top["rank"] == 1 and top["gap_ms"] is None and top["wait_gap_ms"] is None, top
    assert data["rank_phases"]["rows"][0]["phases"] == [None], data["rank_phases"]
    out = os.path.join(d, "page.html")
    report.main([*logs, "-o", out])
    assert os.path.getsize(out) > 10000


def test_a_file_read_in_parts_is_the_file_read_whole():
    d = tmpdir()
    log = os.path.join(d, "big.jsonl")
    pad = "x" * 4000  # lines of ~4 KB: a file past 64 MiB, so that split_points makes several parts
    n = 0
    with open(log, "w") as f:
        while f.tell() < (66 << 20):
            f.write(json.dumps(line(n, hostname=pad)) + "\n")
            n += 1
    parts = runs.split_points(log, 4)
    assert len(parts) == 2, parts  # one part per 32 MiB at most
    assert parts[0][1] == 0 and parts[-1][2] == os.path.getsize(log)
    assert all(parts[i][2] == parts[i + 1][1] for i in range(len(parts) - 1))
    with open(log, "rb") as f:
        for _, start, _ in parts[1:]:
            f.seek(start - 1)
            assert f.read(1) == b"\n"  # every part begins at a line's start
    whole = runs.segments([runs.load_file(log)])
    joined = runs.segments([runs.merge([runs.load_range(p) for p in parts], log)])
    assert whole[0]["steps"] == joined[0]["steps"] == list(range(n))
    assert whole[0]["host"] == joined[0]["host"]



def test_a_line_longer_than_any_steptrace_writes_is_skipped_unread():
    """The report reads a log a line at a time (memory: one line, not the file): a valid JSON line of 3 MB
    (a forged hostname) is counted as malformed and skipped, the lines around it read, whole or in parts."""
    from steptrace.lines import MAX_LINE_BYTES
    d = tmpdir()
    log = os.path.join(d, "long.jsonl")
    write_log(log, [line(0), line(1, hostname="h" * (3 * MAX_LINE_BYTES)), line(2), line(3)])
    f = runs.load_file(log)
    assert f["malformed"] == {f"a line longer than {MAX_LINE_BYTES} bytes": 1}, f["malformed"]
    assert f["unparsable"] == 0
    assert runs.segments([f])[0]["steps"] == [0, 2, 3]
    size = os.path.getsize(log)
    with open(log, "rb") as fh:
        first = len(fh.readline())
    parts = [runs.load_file(log, 0, first), runs.load_file(log, first, size)]
    assert runs.segments([runs.merge(parts, log)])[0]["steps"] == [0, 2, 3]

# ---- compact logs (schema steptrace.step/2) ----

def compact_log(d):
    """A compact log as line_detail=compact writes one: a run record, lines with reason codes (the
    sentence on the first line that uses a code), the run record again when the device changed."""
    rid = "c" * 16
    run = {"event": "run", "schema": "steptrace.run/2", "run_id": rid, "rank": 0, "hostname": "node7",
           "timestamp": "2026-11-27T10:00:00.000Z",
           "device": {"name": "GPU A"}, "job_id": None, "null_reasons": {"job_id": "no job id"},
           "settings": {"line_detail": "compact"}, "from_step": 0}
    lines = []
    for s in range(4):
        l = {"schema": "steptrace.step/2", "global_step": s, "run_id": rid, "rank": 0, "start_unix_ms": 1.7e12 + s,
             "step_time_ms": 10.0 + s, "sm_activity": None, "diagnosis": {"label": "COMPUTE-BOUND", "basis": "carried"},
             "phases": {"forward": {"host_ms": 4.0, "self_ms": 4.0, "count": 1}},
             "null_reasons": {"sm_activity": "9f8335c3"}}
        if s == 0:
            l["reason_text"] = {"9f8335c3": "counters paused between traced steps"}
        lines.append(l)
    later = dict(run, device={"name": "GPU B"}, from_step=2)
    path = os.path.join(d, "compact.jsonl")
    write_log(path, [run, lines[0], lines[1], later, lines[2], lines[3], {"event": "end", "run_id": rid, "rank": 0}])
    return path


def test_expand_gives_a_compact_line_its_run_record_and_sentences():
    from steptrace import lines as reader
    path = compact_log(tmpdir())
    steps = reader.step_lines(path)
    assert [l["global_step"] for l in steps] == [0, 1, 2, 3]
    for l in steps:
        assert l["hostname"] == "node7" and "settings" not in l and "reason_text" not in l, l
        assert l["null_reasons"]["sm_activity"] == "counters paused between traced steps", l["null_reasons"]
        assert l["null_reasons"]["job_id"] == "no job id"
        assert "timestamp" not in l and "from_step" not in l, l  # the record's own, not the line's
    assert [l["device"]["name"] for l in steps] == ["GPU A", "GPU A", "GPU B", "GPU B"]
    # A code whose sentence no earlier line carried (a log read from its middle) says so.
    rec = reader.read_records(path)
    tail = [r for r in rec if r.get("global_step") in (2, 3)]
    assert next(reader.expand(tail))["null_reasons"]["sm_activity"] == "reason code 9f8335c3"
    # A compact UNKNOWN line's diagnosis.reason is a code: given its sentence back.
    unknown = [dict(rec[1], diagnosis={"label": "UNKNOWN", "basis": "none", "reason": "0badc0de"},
                    reason_text={"0badc0de": "no GPU evidence and no host-side wait past its threshold"})]
    assert next(reader.expand(unknown))["diagnosis"]["reason"] == "no GPU evidence and no host-side wait past its threshold"
    # Full lines pass as they are.
    full = line(0)
    assert list(reader.expand([full])) == [full]


def test_the_report_reads_a_compact_log():
    path = compact_log(tmpdir())
    f = runs.load_file(path)
    assert f["unparsable"] == 0 and not f["malformed"], f["malformed"]
    seg = runs.segments([f])[0]
    assert seg["steps"] == [0, 1, 2, 3] and seg["cols"]["step_time_ms"] == [10.0, 11.0, 12.0, 13.0]
    assert seg["devices"] == Counter({"GPU A": 1, "GPU B": 1})
    assert seg["reasons"] == {"9f8335c3": "counters paused between traced steps"}
    assert seg["nulls"]["sm_activity"] == Counter({"9f8335c3": 4})
    assert seg["nulls"]["job_id"] == Counter({"no job id": 2})  # the run records' reasons
    import steptrace.report as report
    assert report.why_null([seg], "sm_activity") == "counters paused between traced steps"
    bad = dict(line(0, run_id="c" * 16), reason_text={"x": 5})
    try:
        guard.check_line(bad, runs.SCALARS)
    except guard.Malformed as e:
        assert str(e).startswith("a reason_text value is not a string"), str(e)
    else:
        raise AssertionError("a reason_text of the wrong type was accepted")



def test_a_compact_logs_traces_are_found_by_their_names():
    """A compact log's lines name no trace file: the report finds the run's files by the recorder's names,
    beside the log and in the run record's trace_dir, and links them; another run's or rank's are not taken."""
    from steptrace import report
    d = tmpdir()
    path = compact_log(d)  # run cccccccc..., rank 0
    elsewhere = os.path.join(d, "traces")
    os.makedirs(elsewhere)
    for where, name in ((d, "trace-cccccccc-r0-s2.json"), (elsewhere, "trace-cccccccc-r0-s3.json"),
                        (d, "trace-cccccccc-r1-s2.json"), (d, "trace-dddddddd-r0-s2.json"), (d, "not-a-trace.json")):
        with open(os.path.join(where, name), "w") as f:
            f.write("{}")
    recs = [json.loads(l) for l in open(path)]
    recs[0]["settings"]["trace_dir"] = "trac{rank}"  # relative: beside the log; {rank} the recorder's to fill
    os.rename(elsewhere, os.path.join(d, "trac0"))
    write_log(path, recs)
    data = report.build([path], "t", 400, 1)
    found = sorted((t["step"], os.path.basename(t["file"])) for t in data["traces"])
    assert found == [(2, "trace-cccccccc-r0-s2.json"), (3, "trace-cccccccc-r0-s3.json")], found
    out = os.path.join(d, "r.html")
    report.main([path, "-o", out])
    page = open(out).read()
    assert "trace-cccccccc-r0-s3.json" in page and "trace-dddddddd" not in page


def test_a_compact_logs_top_kernels_come_from_its_traces():
    """Compact lines carry no kernel names: the kernel table is made from the kernel events of the run's
    trace files, their captured steps only (a neighbour step's kernels and other events left out)."""
    from steptrace import report
    d = tmpdir()
    path = compact_log(d)  # run cccccccc..., rank 0
    def kernel(step, phase, name, dur_us):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 2, "tid": 7, "ts": 10.0, "dur": dur_us,
                "args": {"global_step": step, "phase": phase, "correlation": 1, "stream": 7}}
    trace = {"traceEvents": [kernel(2, "forward", "gemm_a", 1500.0), kernel(2, "forward", "gemm_a", 500.0),
                             kernel(2, "backward", "gemm_b", 3000.0), kernel(1, "forward", "neighbour", 9000.0),
                             {"ph": "X", "cat": "phase", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 5000,
                              "args": {"global_step": 2}}],
             "otherData": {"schema": "steptrace.trace/1", "run_id": "c" * 16, "rank": 0, "captured": [2]}}
    with open(os.path.join(d, "trace-cccccccc-r0-s2.json"), "w") as f:
        json.dump(trace, f)
    with open(os.path.join(d, "trace-cccccccc-r0-s3.json"), "w") as f:
        f.write("{not json")  # a file being written: skipped
    data = report.build([path], "t", 400, 1)
    assert data["top_kernels"] == {"backward": [["gemm_b", 3.0, 1]], "forward": [["gemm_a", 2.0, 2]]}, data["top_kernels"]
    assert any("1 captured steps in 1 trace files" in n for n in data["notes"]), data["notes"]

# ---- diagnosis: bases, the verdict, the strip ----

def test_the_lines_reader_on_a_file_someone_else_wrote():
    """steptrace.lines on hostile bytes (issue #58): non-UTF-8, nesting 100 000 deep, a repeated key, a
    bare value, an over-long line: strict raises ValueError (never UnicodeDecodeError or RecursionError),
    strict=False skips them; iter_step_lines streams (a generator, one line at a time)."""
    from steptrace import lines as reader
    path = os.path.join(tmpdir(), "hostile.jsonl")
    bad = [b'\xff\xfe{"global_step": 9}', b"[" * 100000 + b"]" * 100000, b'{"run_id": "a", "run_id": "b", "global_step": 9}',
           b"5", b'{"global_step": 9, "x": "' + b"a" * (reader.MAX_LINE_BYTES + 10) + b'"}', b'{"global_step": 1e999}']
    with open(path, "wb") as f:
        f.write(b'{"global_step": 0}\n')
        for b in bad:
            f.write(b + b"\n")
        f.write(b'{"global_step": 1}\n')
    assert [l["global_step"] for l in reader.step_lines(path, strict=False)] == [0, 1]
    stream = reader.iter_step_lines(path, strict=False)
    assert not isinstance(stream, list) and next(stream)["global_step"] == 0
    for b in bad:
        one = os.path.join(tmpdir(), "one.jsonl")
        with open(one, "wb") as f:
            f.write(b + b"\n")
        try:
            reader.step_lines(one)
        except ValueError:
            pass
        else:
            raise AssertionError(f"strict reading accepted {b[:40]!r}")


def test_a_forged_time_is_no_line_time():
    """A line's start_unix_ms of 1e308 (or a timestamp in 1970, or far in the future) made its run the
    newest, the one the report shows by default (issue #58): such a time is no line's."""
    import time as _time
    now = _time.time() * 1000.0
    assert runs.line_ms({"start_unix_ms": now}) == now
    for forged in (1e308, 1.0, 5e12):  # 5e12: the year 2128
        assert runs.line_ms({"start_unix_ms": forged}) is None, forged
    assert runs.line_ms({"timestamp": "1970-01-01T00:00:01Z"}) is None
    assert runs.line_ms({"timestamp": "9999-12-31T23:59:59Z"}) is None
    assert runs.line_ms({"start_unix_ms": 10 ** 400}) is None  # too large for a double: no OverflowError
    assert not guard.is_num(10 ** 400)


def test_a_line_with_an_identity_key_twice_is_not_read():
    """A forged line repeating run_id (issue #58: SQLite reads the first, Python the last value)."""
    line, why = guard.parse(b'{"run_id": "aaaaaaaaaaaaaaaa", "run_id": "bbbbbbbbbbbbbbbb", "global_step": 1}')
    assert line is None and why == "a key given twice", (line, why)
    line, why = guard.parse(b'{"run_id": "aaaaaaaaaaaaaaaa", "global_step": 1, "x": {"y": 1}}')
    assert why is None and line["run_id"] == "aaaaaaaaaaaaaaaa"


def test_a_reason_code_without_its_sentence_says_so():
    """A compact line's code whose sentence is on no line read (issue #58: shown bare)."""
    from steptrace import report
    seg = {"nulls": {"sm_activity": Counter({"9f8335c3": 3})}, "reasons": {}}
    why = report.why_null([seg], "sm_activity")
    assert "9f8335c3" in why and "sentence" in why, why
    seg["reasons"]["9f8335c3"] = "counters paused"
    assert report.why_null([seg], "sm_activity") == "counters paused"


def test_line_basis_of_old_lines():
    assert diagnosis.line_basis({}, {"basis": "markers"}) == "markers"
    assert diagnosis.line_basis({"gpu": {}}, {"label": "COMPUTE_BOUND"}) == "traced"
    assert diagnosis.line_basis({"gpu": None}, {"label": "COMPUTE_BOUND"}) == "host_only"
    assert diagnosis.line_basis({}, {}) == "none"


def test_verdict_is_the_label_of_most_lines():
    unknown = diagnosis.verdict(Counter({("UNKNOWN", "none"): 10}))
    assert unknown["dominant"] == "UNKNOWN" and unknown["dominant_share"] == 1.0
    v = diagnosis.verdict(Counter({("COMPUTE_BOUND", "traced"): 2, ("COMPUTE_BOUND", "carried"): 5,
                                   ("INPUT_BOUND", "host_only"): 3, ("UNKNOWN", "none"): 6}))
    assert v["dominant"] == "COMPUTE_BOUND" and abs(v["dominant_share"] - 7 / 16) < 1e-12, v
    assert v["basis_text"] == "43.8 % of the lines: 12.5 % traced, 31.2 % carried", v["basis_text"]
    # One INPUT-BOUND line (the step that found the loader empty) among 200 UNKNOWN: the headline is
    # UNKNOWN, with the rare label named as what it is.
    rare = diagnosis.verdict(Counter({("INPUT-BOUND", "host_only"): 1, ("UNKNOWN", "none"): 200}))
    assert rare["dominant"] == "UNKNOWN" and abs(rare["dominant_share"] - 200 / 201) < 1e-12, rare
    assert rare["basis_text"] == ("99.5 % of the lines: nothing measured to name a bottleneck from; the most "
                                  "frequent label of the others: INPUT-BOUND on 0.5 %"), rare["basis_text"]
    tie = diagnosis.verdict(Counter({("HOST/LAUNCH-BOUND", "markers"): 5, ("UNKNOWN", "none"): 5}))
    assert tie["dominant"] == "HOST/LAUNCH-BOUND", tie
    # UNKNOWN the most frequent label, under half the lines: still UNKNOWN (stop()'s summary's rule), its
    # advice not "no line had" anything, the most frequent other label (ties by name) beside it.
    split = diagnosis.verdict(Counter({("COMPUTE-BOUND", "traced"): 30, ("COMM-BOUND", "carried"): 30,
                                       ("UNKNOWN", "none"): 40}))
    assert split["dominant"] == "UNKNOWN" and split["dominant_share"] == 0.4, split
    assert split["advice"] == diagnosis.ADVICE_MOSTLY_UNKNOWN and "COMM-BOUND on 30.0 %" in split["basis_text"], split
    # UNKNOWN lines whose basis is not none are still UNKNOWN, never "the other label".
    odd = diagnosis.verdict(Counter({("UNKNOWN", "markers"): 4, ("UNKNOWN", "none"): 4, ("INPUT-BOUND", "host_only"): 2}))
    assert odd["dominant"] == "UNKNOWN" and "INPUT-BOUND on 20.0 %" in odd["basis_text"], odd
    assert odd["advice"] == diagnosis.ADVICE_MOSTLY_UNKNOWN
    table = diagnosis.label_table(Counter({("A", "traced"): 1, ("B", "none"): 4, ("B", "carried"): 1}))
    assert table == [["B", 5, {"none": 4, "carried": 1}], ["A", 1, {"traced": 1}]], table


def test_a_phase_keeps_its_colour_and_the_header_reads_as_the_summary():
    """Two runs whose phases rank differently by time draw each phase in the same colour; the header's
    p90 is the one stop()'s summary prints (core/summary.hpp's index); tokens/s unset is n/a, not 0."""
    from steptrace import report
    d = tmpdir()
    colours = []
    for name, sizes in (("a", (40.0, 10.0, 5.0)), ("b", (5.0, 10.0, 40.0))):
        log = os.path.join(d, f"{name}.jsonl")
        phases = {p: {"host_ms": ms, "self_ms": ms, "count": 1} for p, ms in zip(("forward", "backward", "my_loss"), sizes)}
        write_log(log, [line(s, phases=phases, step_time_ms=float(s + 1)) for s in range(10)])
        data = report.build([log], "t", 400, 1)
        stack = next(c for c in data["charts"] if c["id"] == "phases_host")
        colours.append({x["name"]: x["color"] for x in stack["series"]})
        times = sorted(float(s + 1) for s in range(10))
        assert data["header"]["step_time_p90_ms"] == times[min(9, 10 * 9 // 10)] == 10.0, data["header"]
        assert data["header"]["tokens_per_second_median"] is None
    assert colours[0] == colours[1], colours
    assert colours[0]["forward"] == "#1f77b4" and len(set(colours[0].values())) == 3, colours
    from steptrace.report.numbers import BUILTIN_PHASE_COLORS, phase_color
    custom = ["loss", "all_reduce", "backward_comm", "lr_sched", "prefetch", "attention", "mlp", "embedding",
              "checkpoint", "eval", "zero_grad", "clip_grad"]
    assert len({phase_color(n) for n in custom} | set(BUILTIN_PHASE_COLORS.values())) == len(custom) + 6
    page = open(os.path.join(os.path.dirname(report.__file__), "page.py")).read()
    assert "n/a (no line had tokens set)" in page and "ms p90" in page


def test_every_marked_line_has_its_gpu_view():
    """A DDP run's real lines (2 H200s, tests/data; 8 of 25 traced, 17 with stream markers): the markers'
    per-phase GPU span and the busy share's lower bound are drawn on the marked lines, the traced busy time
    on the traced ones, told apart by chart and series."""
    from steptrace import report
    log = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                       "h200x2_ddp_rank1_slowed-0.jsonl")
    lines = [json.loads(l) for l in open(log) if l.strip()]
    marked = [l for l in lines if isinstance(l.get("gpu_markers"), dict) and (l["gpu_markers"].get("phases") or {})]
    data = report.build([log], "t", 400, 1)
    charts = {c["id"]: c for c in data["charts"]}
    stack = charts["phases_markers"]
    assert "empty" not in stack, stack.get("empty")
    names = {x["name"] for x in stack["series"]}
    assert {"input", "forward", "backward", "optimizer"} <= names, names
    drawn = sum(1 for i in range(len(stack["x"])) if any(x["y"][i] is not None for x in stack["series"]))
    assert drawn == len(marked), (drawn, len(marked))
    fwd = next(x for x in stack["series"] if x["name"] == "forward")
    first = next(i for i, l in enumerate(lines) if l in marked)
    assert abs(fwd["y"][first] - marked[0]["gpu_markers"]["phases"]["forward"]["span_ms"]) < 1e-3
    share = next(x for x in charts["utilization"]["series"] if "markers" in x["name"])
    assert sum(v is not None for v in share["y"]) >= len(marked)


def test_strip_takes_each_buckets_commonest_label_and_shade():
    labels = ["A", "A", "B", "B", "B", "A"]
    bases = ["traced", "traced", "carried", "carried", "none", "markers"]
    out = diagnosis.strip(labels, bases, [(0, 2), (2, 5), (5, 6), (6, 6)])
    assert out == (["A", "B", "A", None], ["own", "carried", "own", None]), out


# ---- the declaration as data (steptrace/schema.json, from the C++ rows) ----

def test_the_report_reads_declared_numbers():
    for key, path in runs.SCALARS + runs.VIEW_NUMBERS:
        row = schema.field("step", path)
        assert schema.is_number(row), f"the report's {key} reads {'.'.join(path)}: declared {row}"
    assert len(runs.SCALARS) >= 10
    assert schema.field("step", ("gpu", "no_such_field")) is None  # the rule can fail
    assert not schema.is_number(schema.field("step", ("gpu",)))     # an object is no number
    assert schema.field("step", ("phases", "forward", "host_ms"))["path"] == "/phases/*/host_ms"
    assert schema.field("end", ("last_global_step",))["type"] == "integer"
    assert schema.field("end", ("step_time_ms",)) is None           # the step line's, not the end record's


def test_a_stall_record_is_checked_against_its_rows():
    stall = {"event": "stall", "schema": "steptrace.stall/1", "timestamp": "t", "rank": 0, "job_id": None,
             "open_step": 20, "stalled_s": 61.5, "median_step_ms": None, "step_scope_open": True,
             "threads": [{"tid": 7, "name": "train", "step_thread": True,
                          "open_phases": [{"phase": "nccl", "open_s": 3.5}, {"phase": "x", "open_s": None}]}],
             "gpu": {"outstanding_by_phase": {"forward": 2}, "sm_active_recent": None}, "null_reasons": {}}
    assert schema.problems("stall", stall) == []
    # The rule can fail: a field of another record, a wrong type, a null where never null, an element's.
    stall.update(lines_written=3, open_step=1.5, report=None)
    stall["threads"][0]["open_phases"][0]["open_s"] = "3.5"
    got = schema.problems("stall", stall)
    assert got == ["/open_step: 1.5, declared integer, never null", "/threads/0/open_phases/0/open_s: '3.5', declared number",
                   "/lines_written: no row declares it", "/report: None, declared integer, never null"], got
    assert schema.problems("resumed", {"event": "resumed", "stalled_step": 3, "reports": 1, "open_step": 4}) == []
    assert schema.problems("resumed", {"threads": []}) == ["/threads: no row declares it"]


def synthetic(record, tier="full"):
    """A record holding every field its rows declare for `tier` (full: all; compact, run: the rows that
    tier carries), of the declared type: a name of a `names` object is "input" (a phase the views name),
    an array has one element."""
    rows = schema.fields(record)
    kinds = {r["path"]: r["type"] for r in rows}
    leaf = {"string": "x", "number": 1.5, "integer": 1, "boolean": True}
    doc = {}
    for r in rows:
        if tier not in r["tiers"]:
            continue
        segs = r["path"].split("/")[1:]
        node, prefix = doc, ""
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            kind = kinds.get(prefix + "/" + seg, "object")
            value = leaf[kind] if last and kind in leaf else ([] if kind == "array" else {})
            if isinstance(node, list):
                if not node:
                    node.append(value)
                node = node[0]
            else:
                key = "input" if seg == "*" else seg
                node = node.setdefault(key, value)
            prefix += "/" + seg
    return doc


def views_missing(sql, tier="full"):
    """The columns of examples/logs/schema.sql's views that read nothing from lines holding every
    declared field ([view.column, ...]): a path no row declares reads NULL. tier "compact": the step line
    is a compact one (the default log), beside its run record."""
    db = sqlite3.connect(":memory:")
    db.executescript(sql)
    step, end = synthetic("step", tier), synthetic("end")
    records = [("s", None, step), ("e", "end", end)]
    if tier == "compact":
        records.append(("r", "run", dict(synthetic("step", "run"), event="run")))
    for key, event, line_ in records:
        db.execute("INSERT INTO lines(line_key, run_id, rank, global_step, event, file, line) VALUES (?, ?, 0, 0, ?, 'f', ?)",
                   (key, "r" * 16, event, json.dumps(line_)))
    missing = []
    for view in ("steps", "ends", "phases", "runs"):
        cur = db.execute(f"SELECT * FROM {view}")
        got = cur.fetchall()
        names = [d[0] for d in cur.description]
        assert len(got) == 1, (view, got)
        missing += [f"{view}.{n}" for n, v in zip(names, got[0]) if v is None]
    db.close()
    return missing


def test_the_sqlite_views_read_declared_fields():
    with open(os.path.join(ROOT, "examples", "logs", "schema.sql"), encoding="utf-8") as f:
        sql = f.read()
    assert views_missing(sql) == []
    # The check can fail: a path no row declares reads NULL.
    assert views_missing(sql.replace("'$.step_time_ms'", "'$.step_time_msec'")) == ["steps.step_time_ms"]
    assert views_missing(sql.replace("'$.last_global_step'", "'$.last_step'")) == ["ends.last_step"]
    # The default log's compact lines: what the views fall back on for them (the run record's hostname, the
    # start time, the input phase) is declared too; only the full line's own fields read nothing.
    full_only = ["steps.peak_memory_bytes", "phases.gpu_kernel_ms"]
    assert sorted(views_missing(sql, "compact")) == sorted(full_only), views_missing(sql, "compact")
    assert "steps.timestamp" in views_missing(sql.replace("'$.start_unix_ms'", "'$.start_ms'"), "compact")
    assert "steps.dataloader_wait_ms" in views_missing(sql.replace("'$.phases.input.host_ms'", "'$.phases.input.ms'"), "compact")
    assert "steps.hostname" in views_missing(sql.replace("json_extract(r.line, '$.hostname')", "json_extract(r.line, '$.host')"), "compact")


# ---- the package: the tools without the extension ----

def test_the_tools_are_in_the_package():
    for mod in ("steptrace.report", "steptrace.ctl", "steptrace.merge", "steptrace.files", "steptrace.lines"):
        m = __import__(mod, fromlist=["_"])
        assert os.path.dirname(os.path.abspath(m.__file__)).startswith(os.path.dirname(os.path.abspath(steptrace.__file__))), m.__file__
    import importlib.util
    for old in ("steptrace_report", "steptrace_ctl", "steptrace_merge", "steptrace_files", "steptrace_lines"):
        assert importlib.util.find_spec(old) is None, f"a top-level module {old} is importable"
    if os.environ.get("STEPTRACE_TOOLS_ONLY") == "1":
        try:
            steptrace.start()
        except ImportError as e:
            assert "pip install ./python" in str(e) and "steptrace.report" in str(e), str(e)
        else:
            raise AssertionError("start() without the extension did not say it is missing")


if __name__ == "__main__":
    sys.exit(run_tests(dict(globals()), "test_report", after_each=cleanup))
