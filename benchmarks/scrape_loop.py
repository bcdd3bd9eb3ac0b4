#!/usr/bin/env python3
"""Scrapes a steptrace endpoint as Prometheus would, until terminated (benchmarks/run_all.sh, budget_prom).

    scrape_loop.py HOST:PORT INTERVAL_S OUT_FILE
appends "scrapes=N failed=M" to OUT_FILE when it ends (SIGTERM)."""
import signal
import sys
import time
import urllib.request

address, interval, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ok = failed = 0


def done(*_):
    with open(out, "a") as f:
        f.write(f"scrapes={ok} failed={failed}\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, done)
while True:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as r:
            ok += b"steptrace_up" in r.read()
    except OSError:
        failed += 1
    time.sleep(interval)
