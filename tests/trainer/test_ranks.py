"""A job led by rank 0 on several gloo ranks (trainer/ranks.py): the followers build the job the
leader announces, generate their share of each step's groups, take part in every update and take
the leader's weights after its SFT stage; only the leader verifies; the ranks' weights stay equal
and the checkpoint resumes in one process."""
from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from tests.trainer.test_parallel import alternate, free_port

STEPS = 3
SFT_STEPS = 2


def led(config: dict, out: str, rank: int, world: int, port: int, ckpt: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from trainer import ranks
    from trainer.follower import follow
    from trainer.job import Job

    ranks.setup()

    def save(job) -> None:
        torch.save({n: p.detach().clone() for n, p in job.model.named_parameters()}, out + ".pt")

    try:
        if rank == 0:
            verified: list[int] = []

            def verify(items):
                verified.append(len(items))
                return alternate(items)

            job = Job(config, verify_batch=verify)
            job.sft(SFT_STEPS)
            metrics = [job.step() for _ in range(STEPS)]
            job.save_checkpoint(ckpt)
            result = {"metrics": metrics, "spread": job.last_weight_spread, "verified": verified}
            save(job)
            job.close()
        else:
            result = follow(on_stop=save)
        with open(out + ".json", "w") as f:
            json.dump(result, f)
    finally:
        ranks.teardown()
        dist.destroy_process_group()


def launch_led(config: dict, tmp_path, world: int) -> tuple[list[str], str]:
    """``world`` ranks running :func:`led`; each rank's output prefix, and the checkpoint."""
    ctx = mp.get_context("spawn")
    port, ckpt = free_port(), str(tmp_path / "ckpt")
    outs = [str(tmp_path / f"rank{r}") for r in range(world)]
    procs = [ctx.Process(target=led, args=(config, outs[r], r, world, port, ckpt)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    assert [p.exitcode for p in procs] == [0] * world
    return outs, ckpt


@pytest.mark.slow
def test_a_led_job_splits_the_rollout_and_keeps_the_ranks_equal(base_config, tmp_path):
    import torch

    from trainer.job import Job

    world = 3
    base_config["rollout"]["prompts_per_step"] = 6
    base_config["sft"] = {"steps": 0, "batch_size": 8}
    outs, ckpt = launch_led(base_config, tmp_path, world)

    leader = json.load(open(outs[0] + ".json"))
    followers = [json.load(open(o + ".json")) for o in outs[1:]]
    # Each follower generated its third of every step's six groups and took part in every update.
    assert followers == [{"updates": STEPS, "generated_groups": 2 * STEPS}] * (world - 1)
    # The leader verified every completion, its own and the followers' (6 groups x 4 each step).
    assert leader["verified"] == [6 * 4] * STEPS
    assert all(m["batch/groups_generated"] == 6 for m in leader["metrics"])
    assert leader["metrics"][-1]["policy/grad_norm"] > 0
    # After SFT (the leader's alone, then copied) and every update, the ranks hold equal weights.
    assert leader["spread"] == 0.0
    weights = [torch.load(o + ".pt") for o in outs]
    for name, p in weights[0].items():
        for other in weights[1:]:
            assert torch.equal(other[name], p), name
    # The checkpoint the leader wrote resumes in one process.
    job = Job.resume(ckpt, verify_batch=alternate)
    try:
        assert job.step_count == STEPS
        job.step()
        assert job.step_count == STEPS + 1
    finally:
        job.close()


@pytest.mark.slow
def test_an_overlapped_led_job_generates_each_share_with_the_leaders_policy_version(base_config, tmp_path):
    """Staleness 1 on 2 led ranks: the leader's rollout thread asks for each batch on the
    generation channel while its main thread sends updates; the follower generates its share of
    every batch with exactly the policy version the leader's batch records (its generating thread
    loads the weights its own update kept), after SFT too, and the ranks' weights stay equal."""
    import torch

    world = 2
    base_config["rollout"].update(prompts_per_step=4, staleness=1)
    base_config["sft"] = {"steps": 0, "batch_size": 8}
    outs, ckpt = launch_led(base_config, tmp_path, world)

    leader = json.load(open(outs[0] + ".json"))
    follower = json.load(open(outs[1] + ".json"))
    lags = [m["batch/policy_lag"] for m in leader["metrics"]]
    assert lags == [0.0] + [1.0] * (STEPS - 1)  # generation ran one update ahead
    # Batches generated: STEPS consumed, one more queued ahead when the checkpoint came, each split.
    assert follower["updates"] == STEPS and follower["generated_groups"] == 2 * (STEPS + 1)
    versions = [m["batch/policy_version"] for m in leader["metrics"]]
    assert follower["versions"][:STEPS] == versions == [0.0, 0.0, 1.0]
    assert follower["versions"][STEPS] == STEPS - 1  # the batch ahead, for the checkpoint
    assert leader["spread"] == 0.0
    weights = [torch.load(o + ".pt") for o in outs]
    for name, p in weights[0].items():
        assert torch.equal(weights[1][name], p), name
