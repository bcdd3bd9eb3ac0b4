#!/usr/bin/env python3
"""What a flood at the scrape endpoint costs the log: examples/mlp_train --cpu with the endpoint on, run
side by side under three loads, interleaved, each repeated:

- none: no client;
- scrapes: 3 clients that GET /metrics back to back as fast as the endpoint answers;
- huge: 3 clients that send requests of 64 KiB of headers (past the endpoint's 8 KiB bound) back to back.

Per run: steps, lines written, lines unwritten and dropped (the end record's `dropped`), connections made, and
the program's median step time from its lines.

    benchmarks/scrape_flood.py MLP_TRAIN [--steps N] [--repeats R] [--out DIR]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from steptrace.lines import iter_records  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


lock = threading.Lock()


def client(port, kind, stop, sent):
    huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * (64 << 10) + b"\r\n\r\n"
    plain = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            time.sleep(0.001)  # not listening yet
            continue
        with lock:
            sent[0] += 1
        try:
            with c:
                c.sendall(huge if kind == "huge" else plain)
                while c.recv(65536):
                    pass
        except OSError:
            pass  # the endpoint closes a request past its bound


def run(binary, kind, steps, out, i):
    port = free_port()
    log = os.path.join(out, f"{kind}-{i}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    env = {k: v for k, v in os.environ.items() if k != "STEPTRACE_LOG"}  # it would win over --log
    env.update(STEPTRACE_PROMETHEUS_LISTEN=f"127.0.0.1:{port}", STEPTRACE_SUMMARY="0")
    stop, sent, threads = threading.Event(), [0], []
    if kind != "none":
        for _ in range(3):
            t = threading.Thread(target=client, args=(port, kind, stop, sent), daemon=True)
            t.start()
            threads.append(t)
    subprocess.run([binary, "--cpu", "--steps", str(steps), "--log", log], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop.set()
    for t in threads:
        t.join()
    lines, end = [], None
    for r in iter_records(log, strict=False):
        if not isinstance(r, dict):
            continue
        if r.get("event") == "end":
            end = r
        elif "event" not in r and "global_step" in r:
            lines.append(r)
    dropped = (end or {}).get("dropped") or {}
    return {"kind": kind, "repeat": i, "steps": steps, "lines": len(lines),
            "lines_unwritten_total": dropped.get("lines_unwritten_total"),
            "dropped": {k: v for k, v in dropped.items() if v}, "requests": sent[0],
            "median_step_ms": statistics.median(l["step_time_ms"] for l in lines) if lines else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="/tmp/scrape_flood")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for i in range(a.repeats):
        for kind in ("none", "scrapes", "huge"):
            rows.append(run(a.binary, kind, a.steps, a.out, i))
            print(json.dumps(rows[-1]), flush=True)
    for kind in ("none", "scrapes", "huge"):
        rs = [r for r in rows if r["kind"] == kind]
        print(f"{kind:8s} lines {[r['lines'] for r in rs]} of {a.steps}; unwritten {[r['lines_unwritten_total'] for r in rs]}; "
              f"requests {[r['requests'] for r in rs]}; median step ms {[round(r['median_step_ms'] or 0, 3) for r in rs]}")


if __name__ == "__main__":
    main()
