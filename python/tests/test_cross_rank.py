"""The cross-rank view of a torch.distributed job, on the CPU: two processes joined by a gloo process
group, each running a loop instrumented by steptrace.watch (which sets the view up). A rank made slow in
its input phase must be named by rank 0's lines, with that phase; a balanced run must name no culprit
past the balance threshold; both ranks' lines share rank 0's run_id. Run directly
(`python tests/test_cross_rank.py`); without torch.distributed it says "skipped" and exits 0."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 40
EVERY = 5


def worker(rank, world, port, log, slow_rank):
    import torch
    import torch.distributed as dist
    import steptrace
    # As torchrun sets them (steptrace reads the rank from them, as from Slurm's or MPI's).
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    assert steptrace.start(log_path=log, summary=False, gpu="off", cross_rank_every=EVERY)
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches():
        for _ in range(STEPS):
            if rank == slow_rank:
                time.sleep(0.015)  # the planted slow input
            yield torch.randn(4, 8)

    for x in steptrace.watch(model, opt, batches()):
        out = model(x)
        time.sleep(0.02)  # the same work on every rank
        out.sum().backward()
        opt.step()
        opt.zero_grad()
    steptrace.stop()
    steptrace.unwatch()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(slow_rank):
    d = tempfile.mkdtemp(prefix="steptrace-ranks-")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(r), "2", str(port), os.path.join(d, f"r{r}.jsonl"),
                               str(slow_rank)]) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=180) == 0, "a rank failed"
    lines = {}
    for r in range(2):
        lines[r] = [j for j in map(json.loads, open(os.path.join(d, f"r{r}.jsonl"))) if "global_step" in j]
    return lines


def views(lines):
    return [l["cross_rank"] for l in lines[0] if isinstance(l.get("cross_rank"), dict)]


def test_the_slow_rank_and_its_phase():
    lines = run(slow_rank=1)
    v = views(lines)
    assert len(v) >= STEPS // EVERY - 3, f"{len(v)} views"
    named = [x for x in v if x["slowest_rank"] == 1 and x["culprit_phase"] == "input"]
    assert len(named) >= len(v) - 1, v
    assert all(x["balanced"] is False for x in named), named
    assert all(l.get("cross_rank") is None for l in lines[1]), "rank 1's lines carry a view"  # rank 0 only
    # One run_id for both ranks (lines written after the exchange was set up).
    ids = [{l["run_id"] for l in lines[r][2:]} for r in range(2)]
    assert ids[0] == ids[1] and len(ids[0]) == 1, ids
    assert {l["rank"] for l in lines[1]} == {1}


def test_a_balanced_run_names_no_culprit():
    v = views(run(slow_rank=-1))
    assert len(v) >= STEPS // EVERY - 3, f"{len(v)} views"
    balanced = [x for x in v if x["balanced"] is True]
    assert len(balanced) >= len(v) - 1, v


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
        return 0
    try:
        import torch.distributed as dist
        if not dist.is_available():
            raise ImportError("torch.distributed is not available")
    except ImportError as e:
        print(f"test_cross_rank: skipped: {e}")
        return 0
    failed = 0
    for name, fn in sorted((n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)):
        try:
            fn()
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"test_cross_rank: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
