"""A job on N ranks with one leader: rank 0 runs the job as one process would (it samples tasks,
verifies, records, decides when to checkpoint and stop); ranks 1..N-1 follow its commands.

Launched by ``torchrun`` (``workers/launch.py`` does it for a run), every rank calls
:func:`setup` right after ``init_process_group``; it makes a gloo group for the commands, so they
travel the same way beside NCCL on GPUs. Then rank 0 builds its :class:`~trainer.job.Job` and
the others call :func:`trainer.follower.follow`. The leader's job announces what the followers must do, as it does
it, with one broadcast each (:func:`command`):

- ``init`` / ``resume``: build the same job (the same config and weights, or the same checkpoint);
- ``generate``: the rollout is split across ranks: each rank generates every ``world``-th of the
  step's requests (whole groups) with its own engine, and the leader gathers them, so the batch
  is the one process's batch, made N times faster where generation is the bottleneck;
- ``update``: the verified batch and its advantages; every rank runs the data-parallel update of
  :mod:`trainer.parallel` on it (the gradients are summed over the ranks) and syncs its engine;
- ``params``: the leader's weights after a stage only it ran (SFT), copied to every rank;
- ``checkpoint``: every rank reaches the checkpoint's barrier (rank 0 writes it alone); then the
  ranks compare their weights and a divergence is an error, not a silent drift;
- ``stop``.

Only rank 0 verifies (its ``verify_batch`` sends the work to the verify queues) and only it
talks to the run driver; a follower's job never verifies. With overlap (``rollout.staleness`` >
0) the leader's rollout thread sends ``generate`` on a channel of its own, naming the policy
version to generate with, while its main thread sends ``update``: each follower serves them on
two threads, its generating thread loading the weights of that version (kept by its main thread
after each update) into its engine first (:func:`trainer.follower.follow`).
"""
from __future__ import annotations

import os
import signal
import socket
import threading
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from trainer.config import ParallelConfig
from trainer.parallel import rank_and_world
from trainer.watchdog import Heartbeat, Lost, Watchdog, interval_for

_CONTROL = None
"""The commands' process group (gloo), made by :func:`setup`; None: no leader (every rank runs
the whole job itself, as ``tests/trainer/test_parallel.py`` does)."""

_GENERATE = None
"""The generation commands' process group (gloo): with overlap (``rollout.staleness`` > 0) the
leader's rollout thread sends ``generate`` here while its main thread sends ``update`` on
:data:`_CONTROL`, and each follower serves the two on two threads."""

WAIT = timedelta(days=7)
"""How long a follower waits for the leader's next command (the leader may verify, evaluate or
sit paused between two). A leader that dies closes its connections, which ends the wait at once.
The default group's collectives (the update's reductions) time out after the run's
``parallel.collective_timeout_s`` instead, and the leader's watchdog names a rank that falls
silent within that time (:mod:`trainer.watchdog`)."""

DIVERGENCE_TOL = 1e-4
"""Largest relative difference of the ranks' weight sums a checkpoint accepts."""


COLLECTIVE_TIMEOUT_S = ParallelConfig().collective_timeout_s
"""``parallel.collective_timeout_s``'s default: how long a collective, or a silent rank, may take."""

_BEAT: Heartbeat | None = None
_WATCHDOG: Watchdog | None = None


def setup(timeout_s: float | None = None) -> None:
    """Make the command group and start this rank's heartbeat (and, on rank 0, the watchdog over
    the others, :mod:`trainer.watchdog`); every rank calls it once, after ``init_process_group``."""
    global _CONTROL, _GENERATE, _BEAT, _WATCHDOG
    _CONTROL = dist.new_group(backend="gloo", timeout=WAIT)
    _GENERATE = dist.new_group(backend="gloo", timeout=WAIT)
    timeout = timeout_s or COLLECTIVE_TIMEOUT_S
    rank, world = rank_and_world()
    if world > 1:
        store = dist.PrefixStore("temper", dist.distributed_c10d._get_default_store())
        if rank == 0:
            _WATCHDOG = Watchdog(store, world, timeout)
        else:
            _BEAT = Heartbeat(store, rank, interval_for(timeout))
    dist.barrier(group=_CONTROL)  # every beat is in the store before the watchdog reads it


def teardown() -> None:
    global _CONTROL, _GENERATE, _BEAT, _WATCHDOG
    for part in (_BEAT, _WATCHDOG):
        if part is not None:
            part.stop()
    _CONTROL, _GENERATE, _BEAT, _WATCHDOG = None, None, None, None


def on_rank_lost(callback: Callable[[Lost], None] | None) -> None:
    """The leader's ``callback(lost)`` when a rank falls silent for the collective timeout (called
    once, on the watchdog's thread, while the leader may be stuck in a collective with it)."""
    if _WATCHDOG is not None:
        _WATCHDOG.on_lost = callback


def end_local_ranks() -> None:
    """SIGKILL every other rank of this job on this host (the leader giving up on a lost rank: a
    stopped process would otherwise hold its devices until someone continues it). Ranks on other
    hosts end when their next collective finds the leader gone."""
    if _WATCHDOG is None:
        return
    here = socket.gethostname()
    for _, _, beat in list(_WATCHDOG.seen.values()):
        if beat["host"] == here and beat["pid"] != os.getpid():
            try:
                os.kill(beat["pid"], signal.SIGKILL)
            except OSError:
                pass  # gone already


def heartbeat_interval() -> float:
    """Seconds between two heartbeats of this job's ranks."""
    return _WATCHDOG.interval if _WATCHDOG is not None else interval_for(COLLECTIVE_TIMEOUT_S)


def pause_on_terminate() -> None:
    """On the leader under torchrun: when one rank dies, torchrun's agent sends SIGTERM to every
    other rank, the leader included, which would then die before it could say why. Here SIGTERM
    wakes a thread (the main one may be stuck in a collective, where Python's handlers cannot run)
    that asks the watchdog for a silent rank: found, its ``on_lost`` pauses the run and ends this
    process; none, the process ends as SIGTERM would have ended it. Called from the main thread."""
    if _WATCHDOG is None:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)  # the C-level handler writes the signal's number here at once
    signal.signal(signal.SIGTERM, lambda signum, frame: None)

    def watch() -> None:
        while True:
            if signal.SIGTERM in os.read(read, 64):
                _WATCHDOG.suspect(4 * _WATCHDOG.interval)
                os._exit(128 + signal.SIGTERM)
    threading.Thread(target=watch, name="leader-sigterm", daemon=True).start()


def is_collective_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective that failed (a peer's connection closed, a timeout), as
    gloo and NCCL report it, rather than an error of the job itself."""
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(mark in text for mark in ("gloo", "NCCL", "Connection closed by peer",
                                                                            "Connection reset by peer", "Timed out"))


def lost_rank(wait_s: float | None = None) -> Lost | None:
    """On the leader, after a collective failed: the rank that went silent (waiting up to ``wait_s``
    for its silence to show), or None (not led, or every rank still beats)."""
    return _WATCHDOG.suspect(wait_s) if _WATCHDOG is not None else None


def leading() -> bool:
    """Whether this process is rank 0 of a led job of more than one rank."""
    rank, world = rank_and_world()
    return _CONTROL is not None and world > 1 and rank == 0


def led() -> bool:
    """Whether this process is any rank of a led job of more than one rank."""
    return _CONTROL is not None and rank_and_world()[1] > 1


def command(name: str, *args: Any, generation: bool = False) -> None:
    """The leader announces ``name(*args)`` to every follower (``generation``: on the channel of
    generation, which an overlapped job's rollout thread uses beside the main thread's)."""
    dist.broadcast_object_list([(name, args)], src=0, group=_GENERATE if generation else _CONTROL)


def receive(generation: bool = False) -> tuple[str, tuple]:
    """A follower waits for the leader's next command: ``(name, args)``."""
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, group=_GENERATE if generation else _CONTROL)
    return box[0]


def gather_generated(mine: list, generation: bool = False) -> list | None:
    """Every rank's share of a generate command, on the leader (``None`` elsewhere), in rank order."""
    rank, world = rank_and_world()
    out: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, out, dst=0, group=_GENERATE if generation else _CONTROL)
    return out


def broadcast_params(model: torch.nn.Module) -> None:
    """Rank 0's parameters to every rank (over the default group: NCCL for CUDA tensors)."""
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p.data, src=0)


def weight_spread(model: torch.nn.Module) -> float:
    """The largest relative difference between the ranks' sums of their weights (0: equal)."""
    total = torch.tensor([sum(float(p.detach().double().sum()) for p in model.parameters())], dtype=torch.float64)
    _, world = rank_and_world()
    sums = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(sums, total, group=_CONTROL)
    values = [float(s) for s in sums]
    scale = max(max(abs(v) for v in values), 1e-12)
    return (max(values) - min(values)) / scale


def rank_devices(visible: str, local_rank: int, per_rank: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` of local rank ``local_rank`` when each rank takes ``per_rank``
    consecutive devices of ``visible`` (its vLLM engine spans them; it trains on the first).

    >>> rank_devices("4,5,6,7", 1, 2), rank_devices("4,5,6,7", 3, 1)
    ('6,7', '7')
    """
    devices = [d for d in visible.split(",") if d.strip()]
    mine = devices[local_rank * per_rank:(local_rank + 1) * per_rank]
    if len(mine) != per_rank:
        raise RuntimeError(f"rank {local_rank} needs {per_rank} of CUDA_VISIBLE_DEVICES={visible!r}; there are too few")
    return ",".join(mine)


def init_from_env(timeout_s: float = COLLECTIVE_TIMEOUT_S) -> tuple[int, int]:
    """``init_process_group`` from torchrun's environment (NCCL when this rank has a GPU, else
    gloo; collectives time out after ``timeout_s``), the GPU of this rank's LOCAL_RANK made
    current, and :func:`setup` (heartbeats, the leader's watchdog). Returns
    ``(rank, world)``. With ``TEMPER_DEVICES_PER_RANK`` above 1 each rank first narrows
    ``CUDA_VISIBLE_DEVICES`` to its own group of devices (before CUDA starts), so its engine's
    tensor-parallel workers see exactly those."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    per_rank = int(os.environ.get("TEMPER_DEVICES_PER_RANK", "1") or 1)
    if per_rank > 1 and os.environ.get("CUDA_VISIBLE_DEVICES"):
        os.environ["CUDA_VISIBLE_DEVICES"] = rank_devices(os.environ["CUDA_VISIBLE_DEVICES"], local, per_rank)
        local = 0  # the first of this rank's own devices
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > local
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    setup(timeout_s)
    return rank_and_world()
