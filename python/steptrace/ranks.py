"""steptrace.cross_rank(): the cross-rank view of a torch.distributed job (DDP, FSDP, any process group).

    steptrace.cross_rank()      # after init_process_group() and steptrace.start(), on every rank

Every ``cross_rank_every`` steps each rank's step time and built-in phase times (a few floats) are
gathered from all ranks, asynchronously, on a gloo group of steptrace's own made over the same ranks
(CPU tensors: nothing is queued on the program's GPU streams or its NCCL communicator, and no rank ever
waits for another in a step). Rank 0's lines then carry ``cross_rank`` (the slowest rank, the phase that
makes it slow, the skew), every rank takes rank 0's ``run_id`` (one broadcast), and ``steptrace-ctl``
captures line up across ranks, as for C++ jobs (docs/schema.md, ``cross_rank``).
It is a collective: the program calls it on every rank (``steptrace.watch()`` never does; the framework
callbacks do, at the start of training, on every rank).

It never raises into training (a KeyboardInterrupt or SystemExit excepted): ranks that reach it apart
(one still loading a checkpoint) wait for each other as long as torch.distributed's own default timeout
(30 min, what the program's first collective would wait), and a rank that never comes, or a failure of
the group's setup, costs one warning and ``False``. A peer that dies or hangs later leaves gathers
unanswered: after ``_MAX_PENDING`` of them the view stops (the lines say why), and ``stop()`` never
waits for them (the group is kept, not torn down, so no destructor waits on a gather that cannot end)."""
import collections
import datetime

from . import _steptrace


def _default_timeout_s():
    """torch.distributed's default process-group timeout (torch.distributed.constants.default_pg_timeout,
    30 min): how long ranks that reach the setup apart wait for each other."""
    try:
        from torch.distributed.constants import default_pg_timeout
        return max(60.0, default_pg_timeout.total_seconds())
    except Exception:  # noqa: BLE001 - an older or stripped torch: its documented value
        return 1800.0


_SETUP_TIMEOUT_S = None  # None: _default_timeout_s(); tests set a short one
_MAX_PENDING = 16  # gathers posted and not completed: past this, a peer is taken as dead or hung
_kept = []  # groups and gathers a dead peer left pending: never destroyed (their destructors would wait)


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
        if len(self.pending) >= _MAX_PENDING:
            self.failed = (f"{len(self.pending)} gathers were not completed by every rank (a rank dead, hung or "
                           "no longer stepping); the cross-rank view stops")
            self.abandon()
            raise RuntimeError(self.failed)
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

    def abandon(self):
        """Keeps the group and its unfinished gathers for the life of the process: a gloo group's
        destructor waits for its pending work, which a dead peer never completes."""
        if self.pending:
            kept = (self.group, list(self.pending))
            _kept.append(kept)
            try:  # one reference more than anyone drops: not freed when the interpreter clears modules at exit
                import ctypes
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
            except Exception:  # noqa: BLE001 - without ctypes, _kept holds them until the interpreter ends
                pass
            self.pending.clear()

    def agree(self, mine):
        box = [mine]
        self.dist.broadcast_object_list(box, src=_global_rank(self.dist, self.group, 0), group=self.group)
        return str(box[0])


def framework_rank():
    """(rank, world_size) from torch.distributed when the program initialised it, else None. torch is not
    imported here: a program that has not imported it has no process group."""
    import sys
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-torn-down group: no answer
        return None
    return None


def rank_settings(settings, known):
    """`settings` (start()'s keyword arguments) with rank and world_size from `known` ((rank, world) from
    the framework or torch.distributed) where neither the program nor STEPTRACE_RANK gave them."""
    import os
    if known is None:
        return settings
    out = dict(settings)
    if "rank" not in settings and not os.environ.get("STEPTRACE_RANK"):
        out["rank"] = known[0]
    if "world_size" not in settings and not os.environ.get("STEPTRACE_WORLD_SIZE"):
        out["world_size"] = known[1]
    return out


def check_rank(known, who):
    """Says once, by name, when the running session's rank is not the one `who` knows (steptrace started
    before the process group, with a launcher's environment that names no rank)."""
    mine = _steptrace.run_rank() if known is not None else None
    if mine is not None and tuple(mine) != tuple(known):
        _steptrace.warn_once("rank.mismatch", f"steptrace's lines say rank {mine[0]} of {mine[1]} but {who} says rank "
                                              f"{known[0]} of {known[1]}: steptrace was started before the ranks were "
                                              "known (start it after init_process_group, let the framework's callback "
                                              "start it, or pass rank=/world_size=); this process's lines keep rank "
                                              f"{mine[0]}")
        return False
    return True


def _claims(dist, side, world, rank, running):
    """Every process's (lines' rank, pid, host, running) over steptrace's group; says once, by name, where
    two processes claim one rank (their logs would both say it). Returns the group ranks that do not run
    steptrace."""
    import os
    import socket
    mine = _steptrace.run_rank() if running else None
    claim = (mine[0] if mine else -1, os.getpid(), socket.gethostname(), bool(running))
    claims = [None] * world
    dist.all_gather_object(claims, claim, group=side)
    idle = [i for i, c in enumerate(claims) if not (isinstance(c, (tuple, list)) and len(c) == 4 and c[3])]
    if not running:
        return idle
    same = [c for i, c in enumerate(claims) if i != rank and isinstance(c, (tuple, list)) and len(c) == 4 and c[3]
            and c[0] == claim[0]]
    if same:
        others = ", ".join(f"pid {c[1]} on {c[2]}" for c in same[:4])
        _steptrace.warn_once("rank.claimed", f"rank {claim[0]} is claimed by this process (pid {claim[1]} on {claim[2]}) "
                                             f"and by {others}: their lines say the same rank (pass rank= to "
                                             "steptrace.start(), or start it after init_process_group)")
    return idle


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
            g.abandon()


def _end():
    """At stop(): the exchange ends with the run; what a peer never answered is kept, not waited for."""
    global _gather
    from . import _waits
    _waits.stop()
    g, _gather = _gather, None
    if g is not None:
        try:
            g.pump()
        except Exception:  # noqa: BLE001 - the run is over: nothing left to hand back
            pass
        g.abandon()


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
    world = dist.get_world_size(group)
    if world < 2:
        return False
    # A rank that does not run steptrace still joins the setup (a collective): the others would wait for
    # it. Every rank then learns which ranks run it, and the view is on only where all do.
    timeout = _SETUP_TIMEOUT_S if _SETUP_TIMEOUT_S is not None else _default_timeout_s()
    try:
        ranks = None if group is None else [_global_rank(dist, group, r) for r in range(world)]
        # steptrace's own group, over the same ranks: its gathers never share the program's communicator
        # or its streams. new_group is itself a collective of every process of the default group.
        side = dist.new_group(ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=timeout))
        rank = dist.get_rank(side)
        running = _steptrace.is_running()
        if running:
            check_rank((dist.get_rank(), dist.get_world_size()), "torch.distributed")
        idle = _claims(dist, side, world, rank, running)
    except Exception as e:  # noqa: BLE001 - a late, dead or missing peer: the view stays off, training goes on
        _steptrace.warn_once("cross_rank.setup", f"steptrace.cross_rank(): the ranks' group could not be set up "
                                                 f"within {timeout:.0f} s ({type(e).__name__}: {e}); the cross-rank "
                                                 "view stays off (training is not affected)")
        return False
    if not running:
        _steptrace.warn_once("cross_rank.running", "steptrace.cross_rank() before steptrace.start(): ignored")
        return False
    if idle:
        _steptrace.warn_once("cross_rank.idle", f"steptrace.cross_rank(): rank(s) {', '.join(map(str, idle[:8]))} of "
                                                "the group do not run steptrace: the cross-rank view stays off")
        return False
    gather = _Gather(dist, torch, side, world)
    _gather = gather
    taken = bool(_steptrace.use_cross_rank(rank, world, gather.post, gather.agree, int(every)))
    if taken:
        from . import _waits
        _waits.install(torch)  # the backward_end wait, where CUDA runs the backward
    return taken
