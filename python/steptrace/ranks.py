"""steptrace.cross_rank(): the cross-rank view of a torch.distributed job (DDP, FSDP, any process group).

    steptrace.cross_rank()      # after init_process_group() and steptrace.start(), on every rank

Every ``cross_rank_every`` steps each rank's step time and built-in phase times (a few floats) are
gathered from all ranks, asynchronously, on a gloo group of steptrace's own made over the same ranks
(CPU tensors: nothing is queued on the program's GPU streams or its NCCL communicator, and no rank ever
waits for another in a step). Rank 0's lines then carry ``cross_rank`` (the slowest rank, the phase that
makes it slow, the skew), every rank takes rank 0's ``run_id`` (one broadcast, waited for at most 60 s),
and ``steptrace-ctl`` captures line up across ranks, as for C++ jobs (docs/schema.md, ``cross_rank``).
It is a collective: the program calls it on every rank (``steptrace.watch()`` never does; the framework
callbacks do, at the start of training, on every rank)."""
import collections
import datetime

from . import _steptrace

_RUN_ID_TIMEOUT_S = 60


class _Gather:
    """The posted gathers not yet handed back, oldest first (they complete in order on one group)."""

    def __init__(self, dist, torch, group, world):
        self.dist, self.torch, self.group, self.world = dist, torch, group, world
        self.pending = collections.deque()
        self.failed = None  # why a gather failed: the exchange stops (the runtime says so in the lines)
        self.free = []  # (buffer, its per-rank views): made once, reused once handed back

    def post(self, summary):
        if self.failed:
            raise RuntimeError(self.failed)  # the runtime switches the exchange off, with this reason
        self.pump()
        t = self.torch.tensor(summary, dtype=self.torch.float32)
        if self.free and self.free[-1][0].shape[1] == t.numel():
            buf, outs = self.free.pop()
        else:  # one buffer of world x floats, one view per rank (allocating them per gather costs ~1 ms at 1 024 ranks)
            buf = self.torch.empty(self.world, t.numel(), dtype=self.torch.float32)
            outs = list(buf.unbind(0))
        work = self.dist.all_gather(outs, t, group=self.group, async_op=True)
        self.pending.append((work, buf, outs))

    def pump(self):
        """Training thread, at step boundaries: hands each completed gather back, in order."""
        while self.pending and self.pending[0][0].is_completed():
            work, buf, outs = self.pending.popleft()
            work.wait()  # completed: returns at once (and raises what the gather failed with)
            if not _steptrace.cross_rank_deliver(buf.flatten().tolist()):
                # 64 gathers the background thread has not read: one lost would pair every later view
                # with the wrong step, so the exchange stops here (the next post says why).
                self.failed = "64 gathered views were not read by steptrace's background thread"
                self.pending.clear()
                return
            self.free.append((buf, outs))

    def agree(self, mine):
        box = [mine]
        self.dist.broadcast_object_list(box, src=_global_rank(self.dist, self.group, 0), group=self.group)
        return str(box[0])


def _global_rank(dist, group, rank):
    """A group's rank as a global rank (torch >= 2.0 names it get_global_rank; 1.13 keeps it private)."""
    if group is None:
        return rank
    fn = getattr(dist, "get_global_rank", None) or getattr(dist.distributed_c10d, "_get_global_rank")
    return fn(group, rank)


_gather = None


def _pump():
    """Called at each step's end (steptrace.step, loader, watch): cheap when nothing is pending."""
    g = _gather
    if g is not None and g.pending:
        try:
            g.pump()
        except Exception as e:  # noqa: BLE001 - a failed gather switches the view off, never the training
            g.failed = f"a gather failed: {e}"
            g.pending.clear()


def cross_rank(group=None, every=0):
    """Sets up the cross-rank view over torch.distributed (docs above). `group`: the ranks to compare
    (default: all); `every`: steps between gathers (default: the cross_rank_every setting). A collective:
    every rank of the group calls it, in the same order as its other collectives. Returns False (with one
    warning) when steptrace is not running, torch.distributed is not initialised, or the group has one rank."""
    global _gather
    import torch
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        _steptrace.warn_once("cross_rank.dist", "steptrace.cross_rank(): torch.distributed is not initialised "
                                                "(init_process_group first); the cross-rank view stays off")
        return False
    if not _steptrace.is_running():
        _steptrace.warn_once("cross_rank.running", "steptrace.cross_rank() before steptrace.start(): ignored")
        return False
    world = dist.get_world_size(group)
    if world < 2:
        return False
    ranks = None if group is None else [_global_rank(dist, group, r) for r in range(world)]
    # steptrace's own group, over the same ranks: its gathers never share the program's communicator
    # or its streams. new_group is itself a collective of every process of the default group.
    side = dist.new_group(ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=_RUN_ID_TIMEOUT_S))
    gather = _Gather(dist, torch, side, world)
    _gather = gather
    return bool(_steptrace.use_cross_rank(dist.get_rank(side), world, gather.post, gather.agree, int(every)))
