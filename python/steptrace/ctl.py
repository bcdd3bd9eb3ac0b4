"""steptrace-ctl: ask a running job for captures of its next steps, and merge them into one timeline.

    steptrace-ctl list    [--dir DIR]
    steptrace-ctl capture --steps N [--dir DIR] [--run RUN_ID] [--wait SECONDS] [-o MERGED.json]
    steptrace-ctl merge   [--dir DIR] --request ID | --run RUN_ID --steps A-B   [-o MERGED.json]
                          [--full-ranks K] [--align step_start|wall]

DIR is the job's trace directory (STEPTRACE_TRACE_DIR, else the log file's directory; default: the
environment's STEPTRACE_TRACE_DIR, else the current directory), a path every rank sees. Each running
process of steptrace keeps `steptrace-live-<run_id>-r<rank>.json` there. `capture` writes one request
file, `steptrace-request-<id>.json`, for the run found there; every rank of that run reads it within a
second, answers in `steptrace-answer-<id[:6]>-r<rank>.json` and writes the steps as traces. With the
cross-rank exchange on, the ranks agree on the same steps through it; without, each rank captures its
own next N steps (its answer says so). No daemon, no network listener.

Who can ask: whoever can create files in DIR (the job's own users, as its directory's permissions say).
A request can make steptrace trace and write traces of at most 64 steps, within trace_max_files, at
most 32 times a run; each rank answers it in a file of its own.

Exit status of capture: 0 when every rank asked answered with planned steps and wrote them (and the
merge, with -o, succeeded); 1 otherwise (what is missing is printed).
"""
import argparse
import json
import os
import secrets
import socket
import sys
import time

from . import merge as steptrace_merge
from .files import MAX_RANKS, FileRefused, printable, read_json_or_none

MAX_STEPS = 64  # core/capture_request.hpp: kMaxRequestSteps
MAX_RUN_IDS = 4096  # core/capture_request.hpp: kMaxRequestRunIds
PRESENCE_STALE_S = 120  # a presence file is rewritten every 30 s while its process runs
HEX = set("0123456789abcdef")


def is_hex16(text):
    return isinstance(text, str) and len(text) == 16 and set(text) <= HEX


def default_dir():
    return os.environ.get("STEPTRACE_TRACE_DIR") or "."


def read_json(path):
    """A small file of the trace directory, read by the runtime's rules (steptrace.files); None if refused."""
    return read_json_or_none(path)


def alive(entry):
    """True / False: running or gone (its pid checked on this host; elsewhere, by the heartbeat of its file)."""
    written = entry.get("written_unix_s")
    if not isinstance(written, (int, float)) or time.time() - written > PRESENCE_STALE_S:
        return False  # not rewritten for two minutes: its process is gone (killed before stop())
    if entry.get("host") != socket.gethostname():
        return True
    try:
        os.kill(entry["pid"], 0)
        return True
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True


def live_processes(directory):
    """The presence files of DIR in the shape steptrace writes (others are skipped, with a note)."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise SystemExit(f"steptrace-ctl: cannot list {directory}: {e.strerror}")
    for name in names:
        if not (name.startswith("steptrace-live-") and name.endswith(".json")):
            continue
        entry = read_json(os.path.join(directory, name))
        if (not isinstance(entry, dict) or entry.get("schema") != "steptrace.live/1" or not is_hex16(entry.get("run_id"))
                or not all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                           for k in ("rank", "world_size", "pid"))
                or not 0 <= entry["rank"] < entry["world_size"] <= MAX_RANKS):
            print(f"steptrace-ctl: {printable(name)}: not a presence file steptrace wrote; skipped", file=sys.stderr)
            continue
        entry["alive"] = alive(entry)
        out.append(entry)
    return out


def runs_of(processes):
    runs = {}
    for p in processes:
        if p["alive"] is False:
            continue  # its process is gone (a run killed before stop()): not asked
        runs.setdefault(p.get("run_id"), []).append(p)
    return runs


def cmd_list(args):
    processes = live_processes(args.dir)
    if not processes:
        print(f"no steptrace process has a presence file in {args.dir}")
        return 1
    print(f"{'run_id':16}  {'rank':>4}/{'world':<5}  {'host':20}  {'pid':>8}  {'exchange':8}  state")
    for p in sorted(processes, key=lambda p: (p["run_id"], p["rank"])):
        state = ("running" if p["host"] == socket.gethostname() else "running (another host: by its heartbeat)") \
            if p["alive"] else "gone (stale presence file)"
        print(f"{p.get('run_id', '?'):16}  {p.get('rank', '?'):>4}/{p.get('world_size', '?'):<5}  "
              f"{printable(p.get('host', '?'), 20):20}  {p.get('pid', '?'):>8}  {printable(p.get('exchange', '?'), 8):8}  {state}")
    return 0


def choose_run(args, processes):
    """The run ids a request is for, and the ranks expected to answer."""
    runs = runs_of(processes)
    if args.run:
        chosen = {r: ps for r, ps in runs.items() if r == args.run}
        if not chosen:
            raise SystemExit(f"steptrace-ctl: no running process of run {args.run} in {args.dir} (steptrace-ctl list)")
    elif len(runs) == 1:
        chosen = runs
    else:
        # The ranks of one job without the exchange each have a run_id of their own: one job id joins them.
        jobs = {str(p.get("job_id") or "") for ps in runs.values() for p in ps}
        if len(jobs) == 1 and next(iter(jobs)):
            chosen = runs
        elif not runs:
            raise SystemExit(f"steptrace-ctl: no running steptrace process in {args.dir}")
        else:
            raise SystemExit("steptrace-ctl: several runs in " + args.dir + ": " + ", ".join(sorted(runs)) +
                             "; name one with --run")
    if len(chosen) > MAX_RUN_IDS:
        raise SystemExit(f"steptrace-ctl: {len(chosen)} runs in one job (ranks without the exchange), more than the "
                         f"{MAX_RUN_IDS} a request may name; ask them with --run, or hand steptrace the communicator")
    ranks = sorted({p["rank"] for ps in chosen.values() for p in ps})
    world = max(p["world_size"] for ps in chosen.values() for p in ps)
    return sorted(chosen), ranks, world


def write_request(directory, run_ids, steps):
    rid = secrets.token_hex(8)
    while rid.startswith("000000"):  # its tag (the first 6 hex digits) must not be 0
        rid = secrets.token_hex(8)
    doc = {"schema": "steptrace.request/1", "id": rid, "run_ids": run_ids, "steps": steps,
           "created_unix_s": time.time(), "by": f"{os.environ.get('USER', '?')}@{socket.gethostname()}"}
    path = os.path.join(directory, f"steptrace-request-{rid}.json")
    tmp = os.path.join(directory, f".steptrace-request-{rid}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
        f.write("\n")
    os.rename(tmp, path)  # whole or not at all: the ranks never read half a request
    return rid, path


def read_answers(directory, rid):
    """{rank: answer}: named by the id, or by its tag while a rank knew the plan only from the exchange."""
    out = {}
    for prefix in (f"steptrace-answer-{rid[:6]}-r", f"steptrace-answer-{rid}-r"):  # the id's answer wins
        for name in os.listdir(directory):
            if not (name.startswith(prefix) and name.endswith(".json")):
                continue
            a = read_json(os.path.join(directory, name))
            if not (isinstance(a, dict) and a.get("schema") == "steptrace.answer/1" and a.get("id") in (rid, None)
                    and isinstance(a.get("rank"), int) and a.get("status") in ("waiting", "planned", "refused")):
                continue
            if a["status"] == "planned" and not (isinstance(a.get("first_step"), int) and isinstance(a.get("last_step"), int)):
                continue
            out[a["rank"]] = a
    return out


def captured_ranks(directory, run_ids, planned):
    """The ranks whose traces hold their last planned step, captured (one listing of the directory)."""
    lo = min(a["last_step"] for a in planned.values())
    hi = max(a["last_step"] for a in planned.values())
    done = set()
    for rank, _, doc in steptrace_merge.find_traces(directory, set(run_ids), lo, hi):
        if rank in planned and planned[rank]["last_step"] in doc["otherData"]["captured"]:
            done.add(rank)
    return done


def cmd_capture(args):
    if not 1 <= args.steps <= MAX_STEPS:
        raise SystemExit(f"steptrace-ctl: --steps must be in 1..{MAX_STEPS}")
    processes = live_processes(args.dir)
    run_ids, ranks, world = choose_run(args, processes)
    rid, path = write_request(args.dir, run_ids, args.steps)
    print(f"request {rid}: {args.steps} steps of run {', '.join(run_ids)} ({len(ranks)} of {world} ranks have a "
          f"presence file here); wrote {path}")
    if args.wait <= 0:
        return 0
    deadline = time.time() + args.wait
    answers = {}
    while time.time() < deadline:
        answers = read_answers(args.dir, rid)
        settled = [r for r in ranks if answers.get(r, {}).get("status") in ("planned", "refused")]
        if len(settled) == len(ranks):
            break
        time.sleep(0.2)
    for r in ranks:
        a = answers.get(r)
        if not a:
            print(f"  rank {r}: no answer within {args.wait:g} s")
        elif a.get("status") == "planned":
            print(f"  rank {r}: steps {a['first_step']}-{a['last_step']} "
                  f"({'aligned' if a.get('aligned') else 'not aligned'}; {printable(a.get('how', ''))})")
        else:  # an answer file's words are anyone's who can write the directory: no terminal escapes
            print(f"  rank {r}: {a.get('status')}: {printable(a.get('reason') or a.get('how', ''))}")
    planned = {r: a for r, a in answers.items() if a.get("status") == "planned"}
    if not planned:
        return 1
    # Then the traces: each rank writes its capture once the last asked step's line is out.
    pending = set(planned)
    while pending and time.time() < deadline:
        pending -= captured_ranks(args.dir, run_ids, planned)
        if pending:
            time.sleep(0.5)
    if pending:
        print(f"  no trace yet from rank(s) {', '.join(map(str, sorted(pending)))} within {args.wait:g} s")
    rc = 0 if not pending and len(planned) == len(ranks) else 1  # every rank asked captured its steps
    if args.output:
        first = min(a["first_step"] for a in planned.values())
        last = max(a["last_step"] for a in planned.values())
        ranges = {r: (a["first_step"], a["last_step"]) for r, a in planned.items()}
        rc = max(rc, write_merge(args, run_ids, first, last, expected=range(world), ranges=ranges))
    return rc


def write_merge(args, run_ids, first, last, expected, ranges=None):
    try:
        doc = steptrace_merge.merge(args.dir, run_ids, first, last, full_ranks=args.full_ranks, align=args.align,
                                    expected_ranks=expected, ranges=ranges,
                                    max_bytes=int(args.max_trace_mb * (1 << 20)))
    except steptrace_merge.MergeError as e:
        print(f"steptrace-ctl: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"steptrace-ctl: not enough memory to merge these traces (lower --max-trace-mb, now {args.max_trace_mb:g})",
              file=sys.stderr)
        return 1
    try:
        steptrace_merge.write_merged(doc, args.output)
    except (FileRefused, ValueError) as e:
        print(f"steptrace-ctl: {e}", file=sys.stderr)
        return 1
    o = doc["otherData"]
    which = (f"steps {o['steps'][0]}-{o['steps'][-1]}" if o["same_steps"] else
             "each rank's own steps, laid side by side in order")
    waits = {r["rank"]: r.get("wait_ms") for r in o["per_rank"]}
    held = (f", the rank the others wait for: it waits {waits[o['slowest_rank']]:.3g} ms a step, the most any rank "
            f"waits {max(w for w in waits.values() if w is not None):.3g} ms" if o.get("waits_measured") else
            " (host phases only: the traces hold no GPU records, so the rank that waits may be named)")
    print(f"merged {o['ranks']} ranks, {which} into {args.output}: slowest rank "
          f"{o['slowest_rank']}{held}" + (f" (culprit phase {o['culprit_phase']}, +{o['culprit_gap_ms']:.3g} ms over the "
                                    f"others' median)" if o["culprit_phase"] else "") +
          (f"; no trace from {o['ranks_missing_count']} rank(s): {o['ranks_missing']}"
           + (" ..." if o["ranks_missing_count"] > len(o["ranks_missing"]) else "") if o["ranks_missing"] else ""))
    for s in o["traces_skipped"]:
        print(f"  skipped {printable(s['file'])}: {printable(s['why'])}")
    return 0


def cmd_merge(args):
    if args.request:
        answers = read_answers(args.dir, args.request)
        planned = [a for a in answers.values() if a.get("status") == "planned"]
        if not planned:
            raise SystemExit(f"steptrace-ctl: no rank answered request {args.request} with planned steps in {args.dir}")
        run_ids = sorted({a["run_id"] for a in planned if is_hex16(a.get("run_id"))})
        first = min(a["first_step"] for a in planned)
        last = max(a["last_step"] for a in planned)
        world = max(a["world_size"] if isinstance(a.get("world_size"), int) and 0 < a["world_size"] <= MAX_RANKS else 1
                    for a in planned)
        ranges = {a["rank"]: (a["first_step"], a["last_step"]) for a in planned}
    else:
        if not args.run or not args.steps:
            raise SystemExit("steptrace-ctl merge: give --request ID, or --run RUN_ID and --steps A-B")
        run_ids = [args.run]
        a, _, b = args.steps.partition("-")
        try:
            first, last = int(a), int(b or a)
        except ValueError:
            raise SystemExit(f"steptrace-ctl merge: --steps {args.steps!r} is not A-B")
        world = 0
        ranges = None
    args.output = args.output or "merged-trace.json"
    return write_merge(args, run_ids, first, last, expected=range(world), ranges=ranges)


class _ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in --help, where it has one."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="steptrace-ctl", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    defaults = {"formatter_class": _ShowDefaults}  # --help shows each default
    p_list = sub.add_parser("list", help="the steptrace processes with a presence file in DIR", **defaults)
    p_cap = sub.add_parser("capture", help="ask a running job for its next N steps as traces", **defaults)
    p_cap.add_argument("--steps", type=int, required=True, help=f"how many steps (1..{MAX_STEPS})")
    p_cap.add_argument("--run", help="the run_id (steptrace-ctl list), when DIR holds several runs")
    p_cap.add_argument("--wait", type=float, default=60, help="seconds to wait for answers and traces (0: do not wait)")
    p_merge = sub.add_parser("merge", help="one timeline from every rank's traces of the same steps", **defaults)
    p_merge.add_argument("--request", help="the request's id (its answers name the run and steps)")
    p_merge.add_argument("--run", help="the run_id, with --steps")
    p_merge.add_argument("--steps", help="A-B: the steps, with --run")
    for p in (p_list, p_cap, p_merge):
        p.add_argument("--dir", default=default_dir(), help="the trace directory ($STEPTRACE_TRACE_DIR, else the working directory)")
    for p in (p_cap, p_merge):
        p.add_argument("-o", "--output", help="the merged Trace Event file to write (capture: once the traces are in)")
        p.add_argument("--full-ranks", type=int, default=steptrace_merge.DEFAULT_FULL_RANKS,
                       help="ranks shown in full (the slowest, the fastest, the median, ...); the rest as per-phase tracks")
        p.add_argument("--max-trace-mb", type=float, default=steptrace_merge.MAX_MERGE_BYTES / (1 << 20),
                       help="trace text read by one merge, all files together (bounds its memory, ~27x this)")
        p.add_argument("--align", choices=("step_start", "wall"), default="step_start",
                       help="step_start: every rank's step begins together; wall: each rank's own clock")
    args = parser.parse_args(argv)
    return {"list": cmd_list, "capture": cmd_capture, "merge": cmd_merge}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
