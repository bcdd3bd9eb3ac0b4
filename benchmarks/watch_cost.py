#!/usr/bin/env python3
"""What steptrace.watch's hooks add to a step, against the same step instrumented by hand and bare.

    PYTHONPATH=... python3 benchmarks/watch_cost.py [--calls 2000] [--repeats 5]

One tiny step on the CPU (a 4x4 Linear: forward, backward, SGD step, zero_grad), steptrace running with
gpu=off and no log: timed bare, by hand (steptrace.step and three phases) and under watch(), each the best
of --repeats runs of --calls steps. Prints the added time per step of each; host-only, so what it shows
is the hooks' and scopes' own cost (docs/python.md, "What it costs")."""
import argparse
import sys
import time


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    import torch
    import steptrace
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(2, 4)
    if not steptrace.start(log_path="", summary=False, gpu="off"):
        print("watch_cost: steptrace.start() returned False", file=sys.stderr)
        return 1

    def per_call(fn):
        best = float("inf")
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            for _ in range(a.calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / a.calls)
        return best

    def train_step():
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()

    ph = {name: steptrace.phase(name) for name in ("forward", "backward", "optimizer")}

    def by_hand():
        with steptrace.step():
            with ph["forward"]:
                loss = model(x).sum()
            with ph["backward"]:
                loss.backward()
            with ph["optimizer"]:
                opt.step()
            opt.zero_grad()
    bare = per_call(train_step)
    manual = per_call(by_hand)
    steptrace.watch(model, opt)
    watched = per_call(train_step)
    steptrace.unwatch()
    steptrace.stop()
    print(f"watch: {(watched - bare) * 1e6:.1f} us added per step of one forward, backward, optimizer step and "
          f"zero_grad; by hand {(manual - bare) * 1e6:.1f} us (bare {bare * 1e6:.1f} us; best of "
          f"{a.repeats} x {a.calls})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
