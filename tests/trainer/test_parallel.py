"""Data-parallel updates are the single-process update: two gloo ranks and one process, on the
same batches from the same seed, end with equal parameters and equal metrics (trainer/parallel.py)."""
from __future__ import annotations

import json
import multiprocessing as mp
import socket

import pytest

from trainer.outcomes import Verification

STEPS = 3


def alternate(items):
    return [Verification.passed() if i % 2 else Verification.failed() for i, _ in enumerate(items)]


def train(config: dict, out: str, rank: int = 0, world: int = 1, port: int = 0) -> None:
    """One process of the comparison: ``STEPS`` steps, then its parameters and metrics to ``out``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the same reduction order in every process
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from trainer.job import Job

    job = Job(config, verify_batch=alternate)
    try:
        metrics = [job.step() for _ in range(STEPS)]
        torch.save({n: p.detach().clone() for n, p in job.model.named_parameters()}, out + ".pt")
        with open(out + ".json", "w") as f:
            json.dump(metrics, f)
    finally:
        job.close()
        if world > 1:
            dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(target, world: int, *, timeout: float = 600, per_rank=lambda rank: {}, **kwargs) -> None:
    """``world`` spawned processes, each ``target(**kwargs, **per_rank(rank), rank=, world=, port=)``
    (``port``: one free port for their process group); every one must exit with 0 within ``timeout`` s."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=target, kwargs={**kwargs, **per_rank(rank), "rank": rank, "world": world, "port": port})
             for rank in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    assert [p.exitcode for p in procs] == [0] * world


def run_processes(config: dict, outs: list[str]) -> None:
    spawn_ranks(train, len(outs), config=config, per_rank=lambda rank: {"out": outs[rank]})


@pytest.mark.slow
def test_two_gloo_ranks_update_exactly_as_one_process(base_config, tmp_path):
    import torch

    base_config["optimizer"]["micro_batch_size"] = 3  # micro-batches that split unevenly over the ranks
    base_config["limits"]["max_steps"] = STEPS
    one, two = str(tmp_path / "one"), [str(tmp_path / f"rank{r}") for r in range(2)]
    run_processes(base_config, [one])
    run_processes(base_config, two)

    single = torch.load(one + ".pt")
    ranks = [torch.load(o + ".pt") for o in two]
    assert single.keys() == ranks[0].keys() == ranks[1].keys()
    for name, p in single.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), name  # the ranks never drift apart
    # ... and are the one-process weights, but for the order in which the micro-batches' gradients
    # are summed (six micro-batches of 3, 3, 3, 3, 3 and 1 sequences: three on each rank).
    worst = max((ranks[0][n] - p).abs().max().item() for n, p in single.items())
    assert worst < 1e-5, worst
    print(f"largest weight difference, 2 ranks vs 1 process, after {STEPS} steps: {worst:.2e}")

    m_one = json.load(open(one + ".json"))
    m_ranks = [json.load(open(o + ".json")) for o in two]
    for step in range(STEPS):
        for key in ("loss/policy", "policy/entropy", "policy/grad_norm", "policy/clip_frac", "mismatch/logprob_abs",
                    "reward/mean", "perf/train_tokens"):
            assert m_ranks[0][step][key] == pytest.approx(m_one[step][key], rel=1e-4, abs=1e-6), (step, key)
            assert m_ranks[1][step][key] == m_ranks[0][step][key], (step, key)
    assert m_one[-1]["policy/grad_norm"] > 0  # the updates did something


def test_a_rank_without_micro_batches_still_joins_the_reduction(tmp_path):
    """Three ranks, one parameter used by two of them and another by none: the sums are the
    single-process sums, and the unused parameter keeps no gradient."""
    spawn_ranks(_reduce_case, 3, timeout=120, per_rank=lambda rank: {"out": str(tmp_path / f"r{rank}.json")})
    results = [json.load(open(tmp_path / f"r{rank}.json")) for rank in range(3)]
    assert all(r == {"used": [3.0, 3.0], "unused": None, "sums": {"loss": 3.0, "tokens": 6.0}} for r in results), results


def _reduce_case(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from trainer.parallel import all_reduce_grads, all_reduce_sums

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    used, unused = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    totals = {}
    if rank < 2:  # rank 2 had no micro-batch: no gradient, no sums
        used.grad = torch.full((2,), 1.0 + rank)
        totals = {"loss": 1.0 + rank, "tokens": 3.0}
    all_reduce_grads([used, unused])
    sums = all_reduce_sums(totals, ("loss", "tokens"))
    with open(out, "w") as f:
        json.dump({"used": used.grad.tolist(), "unused": None if unused.grad is None else unused.grad.tolist(),
                   "sums": sums}, f)
    dist.destroy_process_group()


def train_resume(config: dict, out: str, rank: int, world: int, port: int, save: str = "", resume: str = "") -> None:
    """Train 2 steps and checkpoint to ``save``, or resume from ``resume``; then one more step;
    the parameters to ``out``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from trainer.job import Job

    job = Job.resume(resume, verify_batch=alternate) if resume else Job(config, verify_batch=alternate)
    try:
        if not resume:
            job.step()
            job.step()
            job.save_checkpoint(save)
        job.step()
        if rank == 0:
            torch.save({n: p.detach().clone() for n, p in job.model.named_parameters()}, out)
    finally:
        job.close()
        if world > 1:
            dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("saved_on, resumed_on", [(2, 1), (1, 2)])
def test_a_checkpoint_resumes_on_another_number_of_ranks(base_config, tmp_path, saved_on, resumed_on):
    """Rank 0 writes the whole state (every rank holds it); a checkpoint taken on 2 ranks goes on
    on 1 process, and one taken on 1 process on 2 ranks, as if nothing had changed."""
    import torch

    base_config["optimizer"]["micro_batch_size"] = 3
    base_config["limits"]["max_steps"] = 3
    ckpt = str(tmp_path / "ckpt")
    spawn_ranks(train_resume, saved_on, config=base_config, out=str(tmp_path / "straight.pt"), save=ckpt)
    spawn_ranks(train_resume, resumed_on, config=base_config, out=str(tmp_path / "resumed.pt"), resume=ckpt)
    straight, resumed = torch.load(tmp_path / "straight.pt"), torch.load(tmp_path / "resumed.pt")
    worst = max((straight[n] - p).abs().max().item() for n, p in resumed.items())
    assert worst < 1e-5, worst
    assert not (tmp_path / "ckpt.tmp").exists()
