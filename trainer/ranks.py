"""A job on N ranks with one leader: rank 0 runs the job as one process would (it samples tasks,
verifies, records, decides when to checkpoint and stop); ranks 1..N-1 follow its commands.

Launched by ``torchrun`` (``workers/launch.py`` does it for a run), every rank calls
:func:`setup` right after ``init_process_group``; it makes a gloo group for the commands, so they
travel the same way beside NCCL on GPUs. Then rank 0 builds its :class:`~trainer.job.Job` and
the others call :func:`trainer.job.follow`. The leader's job announces what the followers must do, as it does
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
talks to the run driver; a follower's job never verifies. Overlap (``rollout.staleness`` > 0)
is single-process: the config refuses it with more than one rank.
"""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer.parallel import rank_and_world

_CONTROL = None
"""The commands' process group (gloo), made by :func:`setup`; None: no leader (every rank runs
the whole job itself, as ``tests/trainer/test_parallel.py`` does)."""

WAIT = timedelta(days=7)
"""How long a follower waits for the leader's next command (the leader may verify, evaluate or
sit paused between two). A leader that dies closes its connections, which ends the wait at once."""

DIVERGENCE_TOL = 1e-4
"""Largest relative difference of the ranks' weight sums a checkpoint accepts."""


def setup() -> None:
    """Make the command group; every rank calls it once, after ``init_process_group``."""
    global _CONTROL
    _CONTROL = dist.new_group(backend="gloo", timeout=WAIT)


def teardown() -> None:
    global _CONTROL
    _CONTROL = None


def leading() -> bool:
    """Whether this process is rank 0 of a led job of more than one rank."""
    rank, world = rank_and_world()
    return _CONTROL is not None and world > 1 and rank == 0


def led() -> bool:
    """Whether this process is any rank of a led job of more than one rank."""
    return _CONTROL is not None and rank_and_world()[1] > 1


def command(name: str, *args: Any) -> None:
    """The leader announces ``name(*args)`` to every follower."""
    dist.broadcast_object_list([(name, args)], src=0, group=_CONTROL)


def receive() -> tuple[str, tuple]:
    """A follower waits for the leader's next command: ``(name, args)``."""
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, group=_CONTROL)
    return box[0]


def gather_generated(mine: list) -> list | None:
    """Every rank's share of a generate command, on the leader (``None`` elsewhere), in rank order."""
    rank, world = rank_and_world()
    out: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, out, dst=0, group=_CONTROL)
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


def init_from_env() -> tuple[int, int]:
    """``init_process_group`` from torchrun's environment (NCCL when this rank has a GPU, else
    gloo), the GPU of this rank's LOCAL_RANK made current, and :func:`setup`. Returns
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
    dist.init_process_group("nccl" if cuda else "gloo", timeout=WAIT)
    setup()
    return rank_and_world()
