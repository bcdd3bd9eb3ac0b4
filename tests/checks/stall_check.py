#!/usr/bin/env python3
"""The stall watchdog on a GPU, with examples/dp_train (issue #17).

    tests/checks/stall_check.py DP_TRAIN OUT_DIR gpu|two_ranks

gpu:       one rank; at step 20 a kernel runs 5 s in `forward` while the step thread waits in `nccl`.
           The stall records must name step 20, the step thread in `nccl`, the `forward` launch
           outstanding on the GPU; a resumed record follows; every step has its line.
two_ranks: two GPUs; at step 20 rank 1 sits 5 s in `input` and stops entering the all-reduce. Rank 1's
           records must name `input`, rank 0's `nccl` with the collective outstanding; both ranks share
           rank 0's run_id. Exit 77 (skipped) with fewer than two GPUs.
"""
import json
import os
import subprocess
import sys

from dp_skew_check import gpu_count  # the same directory
import _paths  # noqa: F401  (python/ on sys.path)
from steptrace import schema
from steptrace.lines import read_records, split_records

HANG_STEP, HANG_S, STALL_AFTER_S, STEPS = 20, 5.0, 1.5, 40


failures = []


def check(cond, what):
    print(("  ok    " if cond else "  FAIL  ") + what)
    if not cond:
        failures.append(what)


def read(path):
    return split_records(read_records(path))  # every line whole


def step_thread_phases(stall):
    threads = [t for t in stall["threads"] if t["step_thread"]]
    return [p["phase"] for p in threads[0]["open_phases"]] if threads else None


def run(binary, out, gpus, where):
    log = os.path.join(out, f"stall-{where}-{{rank}}.jsonl")
    for r in range(gpus):
        path = log.replace("{rank}", str(r))
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ, STEPTRACE_SUMMARY="0", NCCL_NVLS_ENABLE="0", STEPTRACE_TRACE_EVERY="1",
               STEPTRACE_STALL_AFTER_S=str(STALL_AFTER_S))
    cmd = [binary, "--gpus", str(gpus), "--steps", str(STEPS), "--log", log, "--hang-rank", str(gpus - 1),
           "--hang-step", str(HANG_STEP), "--hang-s", str(HANG_S), "--hang-where", where]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True, timeout=300)
    return [read(log.replace("{rank}", str(r))) for r in range(gpus)]


def common(rank, steps, events):
    stalls = [e for e in events if e["event"] == "stall"]
    resumed = [e for e in events if e["event"] == "resumed"]
    print(f"rank {rank}: {len(steps)} step lines, {len(stalls)} stall records, {len(resumed)} resumed")
    for s in stalls:
        print("  stall:", json.dumps({k: s[k] for k in ("open_step", "stalled_s", "threshold_s", "report", "threads", "gpu")}))
    check(len(steps) == STEPS, f"rank {rank}: every step has its line ({len(steps)})")
    wrong = [f"{e['event']}: {p}" for e in stalls + resumed for p in schema.problems(e["event"], e)]
    check(not wrong, f"rank {rank}: the stall and resumed records as their rows declare them (schema.json) {wrong[:4]}")
    check(len(stalls) >= 2, f"rank {rank}: stall records at 1x and 2x the threshold ({len(stalls)})")
    check(all(s["open_step"] == HANG_STEP for s in stalls), f"rank {rank}: the stall records name step {HANG_STEP}")
    check(all(s["threshold_s"] >= STALL_AFTER_S for s in stalls), f"rank {rank}: threshold >= stall_after_s")
    check(len(resumed) == 1 and resumed[0]["stalled_step"] == HANG_STEP and resumed[0]["stalled_s"] >= HANG_S * 0.9,
          f"rank {rank}: one resumed record for step {HANG_STEP} after >= {HANG_S * 0.9} s")
    ids = {r["run_id"] for r in steps + events}
    check(len(ids) == 1, f"rank {rank}: one run_id on every line and record ({ids})")
    return stalls, ids


def main():
    binary, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    n = gpu_count()
    if mode == "gpu":
        if n < 1:
            print("skipped: no GPU")
            return 77
        [(steps, events)] = run(binary, out, 1, "gpu")
        stalls, _ = common(0, steps, events)
        for s in stalls:
            check(step_thread_phases(s) == ["nccl"], f"report {s['report']}: the step thread waits in nccl")
            g = s["gpu"]
            check((g["outstanding_by_phase"].get("forward") or 0) >= 1,
                  f"report {s['report']}: the forward launch is outstanding ({g['outstanding_by_phase']})")
            check(g["open_step_outstanding"] is not None and g["open_step_outstanding"] <= g["open_step_launches"],
                  f"report {s['report']}: outstanding {g['open_step_outstanding']} of {g['open_step_launches']} launches")
            # CUPTI hands over a record buffer only when every record in it is complete: while the kernel
            # runs, the records sharing its buffer (earlier steps' too) stay held back, so the last
            # activity may be unknown; then the record must say why.
            check(g["last_activity_s"] is not None or bool(s["null_reasons"].get("gpu.last_activity_s")),
                  f"report {s['report']}: last GPU activity {g['last_activity_s']} s ago, or why not")
            # The kernel runs on one SM: PM sampling sees the GPU busy, on a small share of its SMs.
            check(g["sm_active_recent"] is not None and 0 < g["sm_active_recent"] < 0.05,
                  f"report {s['report']}: one SM busy: sm_active_recent {g['sm_active_recent']}")
    elif mode == "two_ranks":
        if n < 2:
            print(f"skipped: {n} GPU(s), two needed")
            return 77
        ranks = run(binary, out, 2, "input")
        ids = set()
        for rank, (steps, events) in enumerate(ranks):
            stalls, rank_ids = common(rank, steps, events)
            ids |= rank_ids
            want = "input" if rank == 1 else "nccl"
            for s in stalls:
                check(step_thread_phases(s) == [want], f"rank {rank} report {s['report']}: the step thread is in {want}")
                print(f"  rank {rank} report {s['report']}: sm_active_recent {s['gpu']['sm_active_recent']}")
                if rank == 0:
                    check((s["gpu"]["outstanding_by_phase"].get("nccl") or 0) >= 1,
                          f"rank 0 report {s['report']}: the all-reduce is outstanding ({s['gpu']['outstanding_by_phase']})")
        check(len(ids) == 1, f"both ranks share rank 0's run_id ({ids})")
    else:
        print("mode: gpu or two_ranks")
        return 2
    print("stall_check:", "FAILED: " + "; ".join(failures) if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
