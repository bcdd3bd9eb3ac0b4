"""The cross-rank view of a torch.distributed job, on the CPU, in two parts:
- two processes joined by a gloo process group, each running a loop instrumented by steptrace.watch with
  an all_reduce per step (as DDP's), the view set up by steptrace.cross_rank(): the plumbing (rank 0's
  lines carry views of both ranks, rank 1's none, one run_id);
- 1 024 ranks simulated in one process, every other rank's summary rank 0's own, one of them made slow:
  the verdicts (the slow rank and its phase; a balanced run), on summaries whose differences are known.
Run directly (`python tests/test_cross_rank.py`); without torch.distributed it says "skipped", exits 0."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 30
EVERY = 5


def worker(rank, world, port, log, mode="normal"):
    """mode normal: both ranks set the view up and all-reduce each step (as DDP). The others have no
    all-reduce of the program's (a peer may be gone): late: rank 1 reaches cross_rank() 2 s after rank 0
    (setup timeout 20 s); never: rank 1 never calls it (rank 0's setup times out after 3 s); hang: rank 1
    stops stepping after 10 steps and blocks for good while rank 0 trains on and ends."""
    import torch
    import torch.distributed as dist
    import steptrace
    if mode in ("spawn", "same_rank"):
        # As torch.multiprocessing.spawn: no launcher variable at all; init_process_group is told the rank.
        # same_rank: both processes are also told STEPTRACE_RANK=0 (a copied setting).
        for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"):
            os.environ.pop(v, None)
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        if mode == "same_rank":
            os.environ["STEPTRACE_RANK"] = "0"
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    else:
        # As torchrun sets them (steptrace reads the rank from them, as from Slurm's or MPI's).
        # gloo on the loopback device: a container's host name need not resolve to a reachable address.
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    if mode != "idle" or rank == 0:  # idle: rank 1 does not run steptrace, and calls cross_rank() all the same
        assert steptrace.start(log_path=log, summary=False, gpu="off", cross_rank_every=EVERY)
    steptrace._ranks._SETUP_TIMEOUT_S = {"late": 20, "never": 3, "hang": 60}.get(mode)
    if mode == "hang":  # a hung peer taken as such after 2 unanswered gathers (30 steps, one gather in 5)
        steptrace._ranks._MAX_PENDING = 2
    if mode == "late" and rank == 1:
        time.sleep(2)
    if mode != "never" or rank == 0:
        ok = steptrace.cross_rank()  # every rank, after both are initialised and started
        print(f"rank {rank}: cross_rank() -> {ok}", flush=True)
        if mode not in ("never", "idle"):
            assert ok
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    batches = [torch.randn(4, 8) for _ in range(STEPS)]
    for i, x in enumerate(steptrace.watch(model, opt, batches)):
        if mode == "hang" and rank == 1 and i == 10:
            time.sleep(3600)  # hung (the test kills it once rank 0 has ended)
        out = model(x)
        out.sum().backward()
        if mode == "normal":
            for p in model.parameters():  # the ranks keep in step, as DDP's all-reduce makes them
                dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    t0 = time.monotonic()
    steptrace.stop()
    steptrace.unwatch()
    stopped = time.monotonic() - t0
    if mode in ("normal", "hang"):  # as a program ends: hang: rank 0 beside a hung peer, steptrace's gathers pending
        dist.destroy_process_group()
    print(f"rank {rank}: stop() took {stopped:.3f} s, destroy_process_group() {time.monotonic() - t0 - stopped:.3f} s",
          flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode="normal", outputs=None):
    """Two worker processes; returns each rank's step lines. `outputs` (a dict) gets each rank's stdout."""
    d = tempfile.mkdtemp(prefix="steptrace-ranks-")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(r), "2", str(port), os.path.join(d, f"r{r}.jsonl"),
                               mode], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.STDOUT if mode in ("hang", "same_rank") else None) for r in range(2)]
    try:
        if mode == "hang":  # rank 0 ends on its own, promptly, while rank 1 is hung; then rank 1 is killed
            t0 = time.monotonic()
            out, _ = procs[0].communicate(timeout=45)
            took = time.monotonic() - t0
            assert procs[0].returncode == 0, "rank 0 failed"
            procs[1].kill()
            outputs[0], outputs[1] = out, procs[1].communicate()[0]
            outputs["rank0_s"] = took
        else:
            for r, p in enumerate(procs):
                out, _ = p.communicate(timeout=180)
                if outputs is not None:
                    outputs[r] = out
                assert p.returncode == 0, f"rank {r} failed: {out}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lines = {}
    for r in range(2):
        path = os.path.join(d, f"r{r}.jsonl")
        lines[r] = [j for j in map(json.loads, open(path)) if "global_step" in j] if os.path.exists(path) else []
    return lines


def views(lines):
    return [l["cross_rank"] for l in lines[0] if isinstance(l.get("cross_rank"), dict)]


def test_two_gloo_processes_share_the_view_and_the_run_id():
    lines = run()
    v = views(lines)
    # A gather completes when both ranks posted it; the last ones may still be on their way at stop().
    assert v, "no view on rank 0's lines"
    for x in v:
        assert x["world_size"] == 2 and x["reporting"] == 2 and x["missing_count"] == 0, x
        assert x["step"] % EVERY == 0 and x["slowest_rank"] in (0, 1), x
    assert all(l.get("cross_rank") is None for l in lines[1]), "rank 1's lines carry a view"  # rank 0 only
    # One run_id for both ranks (lines written after the exchange was set up).
    ids = [{l["run_id"] for l in lines[r][2:]} for r in range(2)]
    assert ids[0] == ids[1] and len(ids[0]) == 1, ids
    assert {l["rank"] for l in lines[1]} == {1}


def test_a_rank_that_comes_late_or_never_does_not_stop_training():
    """Issue #58: cross_rank() raised a gloo timeout into training when ranks reached it apart."""
    out = {}
    lines = run("late", out)  # 2 s apart: both set up (the wait is the program's own first collective's)
    assert "cross_rank() -> True" in out[0] and "cross_rank() -> True" in out[1], out
    # Each rank's steps, and the wait that found the loader exhausted (one more line).
    assert len(lines[0]) == STEPS + 1 and len(lines[1]) == STEPS + 1, (len(lines[0]), len(lines[1]))
    out = {}
    lines = run("never", out)  # rank 1 never comes: rank 0 is told False, trains on, ends with rc 0
    assert "rank 0: cross_rank() -> False" in out[0], out
    assert len(lines[0]) == STEPS + 1 and len(lines[1]) == STEPS + 1, (len(lines[0]), len(lines[1]))
    assert all(l.get("cross_rank") is None for l in lines[0])


def test_ranks_from_torch_distributed_without_launcher_variables():
    """torch.multiprocessing.spawn's shape: no RANK, LOCAL_RANK or WORLD_SIZE; init_process_group(rank=r)
    before start(): the lines say ranks 0 and 1 of 2 (issue #59: both said rank 0)."""
    lines = run("spawn")
    for r in range(2):
        assert {l["rank"] for l in lines[r]} == {r}, (r, lines[r][0]["rank"])


def test_two_processes_claiming_one_rank_are_told_so_by_name():
    """Both processes given STEPTRACE_RANK=0: each one's log says, once, that another process (by pid)
    claims its rank, and that torch.distributed says otherwise for the one that is rank 1."""
    out = {}
    run("same_rank", out)
    for r in range(2):
        assert out[r].count("rank 0 is claimed by this process") == 1, out[r][-1500:]
    assert "steptrace's lines say rank 0 of 2 but torch.distributed says rank 1 of 2" in out[1], out[1][-1500:]


def test_a_rank_without_steptrace_joins_the_setup_and_no_rank_waits():
    """Rank 1 does not run steptrace (disabled there) but its callbacks call cross_rank() on every rank: it
    joins the group's setup, so rank 0 does not wait for it; both are told False."""
    out = {}
    lines = run("idle", out)
    assert "rank 0: cross_rank() -> False" in out[0] and "rank 1: cross_rank() -> False" in out[1], out
    assert len(lines[0]) == STEPS + 1 and not lines[1]


def test_a_hung_peer_stops_the_view_and_never_holds_the_exit():
    """Rank 1 hangs after 10 steps: rank 0's gathers stay pending; after _MAX_PENDING (2 here) the view
    stops with its reason, and rank 0's stop() and exit never wait for them (the group's timeout is 60 s)."""
    out = {}
    lines = run("hang", out)
    assert len(lines[0]) == STEPS + 1, len(lines[0])
    # The view stopped, and a warning said why (rank 0's output, its stderr included).
    assert "gathers were not completed by every rank" in out[0], out[0][-2000:]
    assert out["rank0_s"] < 30, out  # the process's whole run, destroy_process_group() included; a wait on the gathers would be >= 60 s
    stop_s = float(out[0].split("stop() took ")[1].split(" s")[0])
    assert stop_s < 5, out
    print(f"hung peer: rank 0 ran and ended in {out['rank0_s']:.1f} s, stop() {stop_s:.3f} s")


class _SimulatedRanks:
    """torch.distributed as seen by rank 0 of `world` simulated ranks, in this process: every other rank's
    summary is rank 0's own with its rank set, rank `slow` (if any) 15 ms slower in its input phase (the wire
    layout of core/cross_rank.hpp: valid, rank, step, step_ms, then the built-in phases from input)."""

    class _Work:
        def is_completed(self):
            return True

        def wait(self):
            return True

    def __init__(self, world, slow=None):
        self.world, self.slow = world, slow
        self.simulated_s = 0.0  # time spent simulating the other ranks (not the exchange's cost)

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_world_size(self, group=None):
        return self.world

    def get_rank(self, group=None):
        return 0

    def new_group(self, **kwargs):
        return "side"

    def get_global_rank(self, group, rank):
        return rank

    def broadcast_object_list(self, box, src=0, group=None):
        pass  # rank 0 keeps its own

    def all_gather_object(self, out, obj, group=None):
        for k in range(len(out)):  # each simulated rank claims its own rank
            out[k] = (k,) + tuple(obj[1:])

    # Where a summary's backward_end wait and its steps sit (core/cross_rank.hpp, summary_wait_index).
    WAIT, WAIT_STEPS = 21, 22

    def all_gather(self, outs, t, group=None, async_op=False):
        """Every simulated rank's summary is rank 0's, as a synchronous data-parallel job makes them: each
        step holds a 0.5 ms wait at the end of backward (1 ms more of step time); with a slow rank, that one
        spends 15 ms more in its input and the others wait those 15 ms inside their step."""
        t0 = time.perf_counter()
        for k, out in enumerate(outs):
            out.copy_(t)
            out[1] = float(k)
            out[self.WAIT], out[self.WAIT_STEPS] = 0.5, 2.0
            out[3] += 1.0  # step_ms: the wait is within the step
            if self.slow is not None:
                out[3] += 15.0  # every rank's step is as long as the slow one's
                if k == self.slow:
                    out[4] += 15.0  # input
                else:
                    out[self.WAIT] += 15.0
        self.simulated_s += time.perf_counter() - t0
        return self._Work()


def simulate(world, slow):
    """Rank 0 of `world` simulated ranks runs 20 steps, one gather every 2; returns rank 0's views and what
    one exchange cost the training thread (post + hand-back, the simulated ranks' own time left out)."""
    import torch
    import steptrace
    real = torch.distributed
    log = os.path.join(tempfile.mkdtemp(prefix="steptrace-ranks-"), "r0.jsonl")
    sim = _SimulatedRanks(world, slow=slow)
    torch.distributed = sim
    try:
        assert steptrace.start(log_path=log, summary=False, gpu="off", cross_rank_every=2)
        assert steptrace.cross_rank()
        inp, fwd = steptrace.phase("input"), steptrace.phase("forward")
        for _ in range(20):
            with steptrace.step():
                with inp:
                    pass
                with fwd:
                    pass
        gather = steptrace._ranks._gather
        steptrace.stop()
        costs = []
        for _ in range(20):
            simulated = sim.simulated_s
            t0 = time.perf_counter()
            gather.post([1.0] * 25)
            gather.pump()
            costs.append(time.perf_counter() - t0 - (sim.simulated_s - simulated))
    finally:
        torch.distributed = real
    views = [l["cross_rank"] for l in (j for j in map(json.loads, open(log)) if "global_step" in j)
             if isinstance(l.get("cross_rank"), dict)]
    return views, sorted(costs)[len(costs) // 2]


def test_1024_ranks_simulated_one_slow_in_input():
    views, cost = simulate(1024, slow=777)
    assert len(views) >= 5, views  # a gather every 2 of 20 steps, each handed back at the next step's end
    for v in views:
        assert v["world_size"] == 1024 and v["reporting"] == 1024, v
        assert v["slowest_rank"] == 777 and v["culprit_phase"] == "input", v
        assert v["balanced"] is False and v["wait_basis"] == "backward_end", v
        assert v["culprit"]["wait_ms"] == 0.5 and v["median_rank"]["wait_ms"] == 15.5, v
    # Printed, not asserted: a shared machine's timing.
    print(f"1024 simulated ranks: {len(views)} views, all name rank 777 in input; post + hand-back "
          f"{cost * 1e6:.0f} us per exchange on the training thread (median of 20)")


def test_1024_ranks_simulated_balanced():
    views, _ = simulate(1024, slow=None)
    assert len(views) >= 5, views
    for v in views:  # every rank's summary the same: no gap, no culprit
        assert v["balanced"] is True and v["step_skew"] == 0 and v["gap_ms"] == 0, v
        assert v["culprit_phase"] is None, v


def test_an_interrupt_during_the_run_id_broadcast_reaches_the_program():
    """Ctrl-C while steptrace.cross_rank() waits for rank 0's run_id: KeyboardInterrupt
    reaches the program, as it would from the broadcast itself; training is not left waiting."""
    import torch
    import steptrace
    real = torch.distributed

    class Interrupted(_SimulatedRanks):
        def broadcast_object_list(self, box, src=0, group=None):
            raise KeyboardInterrupt

    torch.distributed = Interrupted(2)
    log = os.path.join(tempfile.mkdtemp(prefix="steptrace-ranks-"), "r0.jsonl")
    try:
        assert steptrace.start(log_path=log, summary=False, gpu="off")
        try:
            steptrace.cross_rank()
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the KeyboardInterrupt raised in the broadcast was swallowed")
        steptrace.stop()
    finally:
        torch.distributed = real
        if steptrace.is_running():
            steptrace.stop()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
        return 0
    try:
        import torch.distributed as dist
        if not dist.is_available():
            raise ImportError("torch.distributed is not available")
    except ImportError as e:
        print(f"test_cross_rank: skipped: {e}")
        return 0
    from runner import run_tests
    return run_tests(globals(), "test_cross_rank")


if __name__ == "__main__":
    sys.exit(main())
