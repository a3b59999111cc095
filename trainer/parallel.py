"""Data parallelism for the policy update with ``torch.distributed`` (gloo on CPU, NCCL on GPUs).

When the job runs in a process group of N ranks (started by ``torchrun``, or by a test with
``init_process_group``), every rank holds the same batch and the same weights; each computes the
loss of its share of the micro-batches (whole micro-batches, formed as one process forms them, so
each one's forward is the same computation), divided by the normaliser of the whole mini-batch, so
the sum of the ranks' gradients is the single-process gradient but for the order of one sum. :func:`all_reduce_grads` sums them
before the optimizer step, which then runs identically on every rank: the weights stay equal
across ranks and equal to those of one process on the same batch (``tests/trainer/test_parallel.py``).
DeepSpeed's engine reduces its own gradients, inside every backward under ZeRO-2/3, so there every
rank runs the same number of backwards (:func:`equal_shares` pads a rank short of micro-batches).
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait for every rank (a no-op outside a process group)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def my_share(items: list, rank: int, world: int) -> list:
    """The items (micro-batches) rank ``rank`` of ``world`` works on: every ``world``-th, from ``rank``.

    >>> my_share([0, 1, 2, 3, 4], 1, 2), my_share([0, 1, 2, 3, 4], 0, 1)
    ([1, 3], [0, 1, 2, 3, 4])
    """
    return items[rank::world]


def equal_shares(micros: list, rank: int, world: int, *, pad: bool) -> list[tuple[list, bool]]:
    """Rank ``rank``'s micro-batches as ``(micro_batch, counts)`` pairs. With ``pad`` (a backend
    whose every backward is a collective: DeepSpeed ZeRO-2/3), every rank gets the same number of
    them, however the micro-batches divide: a rank short of real ones runs zero-weight copies of
    the first (``counts`` False), whose backward adds nothing but keeps the ranks in step.

    >>> equal_shares([[0], [1], [2]], 1, 2, pad=True)
    [([1], True), ([0], False)]
    >>> equal_shares([[0], [1], [2]], 1, 2, pad=False), equal_shares([[0]], 2, 3, pad=True)
    ([([1], True)], [([0], False)])
    """
    mine = [(m, True) for m in my_share(micros, rank, world)]
    if pad and world > 1 and micros:
        rounds = -(-len(micros) // world)
        mine += [(micros[0], False)] * (rounds - len(mine))
    return mine


def gather_to_leader(obj) -> list | None:
    """Every rank's ``obj`` on rank 0, in rank order (``None`` elsewhere); ``[obj]`` outside a
    process group."""
    rank, world = rank_and_world()
    if world == 1:
        return [obj]
    out: list | None = [None] * world if rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the ranks, in one flat buffer. A parameter without a
    gradient on some ranks (a rank with no micro-batch has none at all) counts as zero there; one
    without a gradient on every rank keeps none, as it would in one process (AdamW skips it)."""
    has = torch.tensor([float(p.grad is not None) for p in params])
    dist.all_reduce(has)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p, seen in zip(params, has.tolist()):
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone() if seen else None
        offset += n


def all_reduce_sums(totals: dict[str, float], keys: tuple[str, ...]) -> dict[str, float]:
    """The per-rank sums of ``keys`` (tokens, loss, entropy...) summed over the ranks; a key a
    rank never added counts as 0 there."""
    values = torch.tensor([float(totals.get(k, 0.0)) for k in keys], dtype=torch.float64)
    dist.all_reduce(values)
    return dict(zip(keys, values.tolist()))
