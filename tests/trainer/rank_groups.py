"""Groups of gloo ranks that run a job's cases in turn, started once per group (DeepSpeed's import and
engine builds are the slow part): shared by tests/trainer/test_deepspeed.py and bench/scale_cpu.py.
Parameters are read from the checkpoints' Hugging Face exports, so ZeRO-3's gathering for the
export is part of what is compared."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import time


def alternate(items):
    """A verifier for rank tests: every other completion passes."""
    from trainer.outcomes import Verification

    return [Verification.passed() if i % 2 else Verification.failed() for i, _ in enumerate(items)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STEPS = 4
"""Steps of every case."""
STAGES = (0, 2, 3)


def config_for(base: dict, stage: int | None, ckpt_dir: str = "") -> dict:
    """The comparison's config: DeepSpeed at ``stage`` (None: the plain torch backend)."""
    cfg = json.loads(json.dumps(base))
    cfg["optimizer"].update({"micro_batch_size": 6, "warmup_steps": 2, "lr_schedule": "linear",
                             "backend": "torch" if stage is None else "deepspeed", "zero_stage": stage or 0})
    cfg["limits"]["max_steps"] = STEPS
    cfg["checkpoint"] = {"dir": ckpt_dir, "keep_last": 10}
    return cfg


def rank_main(cases: list[dict], rank: int, world: int, port: int, out: str, led: bool) -> None:
    """Run ``cases`` in turn on this rank. A case: ``config``, ``final`` (checkpoint written after
    the last step), ``resume`` (a checkpoint to continue), ``every`` (checkpoint after every step),
    ``die_after`` (the leader SIGKILLs itself after that step, before its checkpoint),
    ``mark`` (a file the leader writes after ``mark_after`` steps), ``lost`` (a file the leader's
    watchdog writes when a rank is lost: the time and the rank, host and stage; then it ends),
    ``steps`` (instead of ``STEPS``), ``verify_s`` (seconds each verification call takes),
    ``verify`` ``"domain"`` (the domains' own verifiers instead of :func:`alternate`),
    ``reward_key`` (a metric recorded at every step, e.g. ``reward/builtin-addition``).

    ``led``: rank 0 leads and the others follow (trainer/ranks.py: the rollout is split over the
    ranks, each sampling its share); else every rank runs the whole job on the same samples, so
    the update is all that differs from one process (the same global batch)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from trainer import ranks
    from trainer.follower import follow
    from trainer.job import Job

    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        if led:
            ranks.setup(cases[0].get("timeout"))
    results = []
    for case in cases:
        if led and rank > 0:
            follow()
            continue
        verify = alternate
        if case.get("verify") == "domain":
            from trainer import catalogue
            from trainer.job import verify_inline

            verify = verify_inline({slug: catalogue.get(slug) for slug in case["config"]["domains"]})
        if case.get("verify_s"):  # verification that takes a while (remote workers, sandboxes)
            def verify(items, wait=case["verify_s"], inner=verify):
                time.sleep(wait)
                return inner(items)
        job = Job.resume(case["resume"], verify_batch=verify) if case.get("resume") else \
            Job(case["config"], verify_batch=verify)
        if case.get("lost"):
            ranks.on_rank_lost(lambda lost, path=case["lost"]: _report_lost(path, lost))
        lrs, losses, step_s, rewards = [], [], [], []
        try:
            while job.step_count < case.get("steps", STEPS):
                metrics = job.step()
                lrs.append(metrics.get("optim/lr"))
                losses.append(metrics.get("loss/policy"))
                step_s.append(metrics.get("stage/step_s"))
                if case.get("reward_key"):
                    rewards.append(metrics.get(case["reward_key"]))
                if case.get("mark") and job.step_count == case["mark_after"]:
                    with open(case["mark"], "w") as f:
                        json.dump({"pids": ranks_pids()}, f)
                if job.step_count == case.get("die_after"):
                    os.kill(os.getpid(), signal.SIGKILL)
                if case.get("every"):
                    job.save_checkpoint(os.path.join(case["every"], f"step-{job.step_count}"))
            if case.get("final"):
                job.save_checkpoint(case["final"])
        finally:
            job.close()
        results.append({"lrs": lrs, "losses": losses, "step_s": step_s, "rewards": rewards})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    if world > 1:
        ranks.teardown()
        dist.destroy_process_group()


def ranks_pids() -> dict:
    """On the leader: every follower's pid, as its heartbeat says."""
    from trainer import ranks

    if ranks._WATCHDOG is None:
        return {}
    ranks._WATCHDOG.read()
    return {rank: beat["pid"] for rank, (_, _, beat) in ranks._WATCHDOG.seen.items()}


def _report_lost(path: str, lost) -> None:
    """The leader's watchdog found ``lost``: write when and what, end the ranks here, end."""
    from trainer import ranks

    with open(path, "w") as f:
        json.dump({"t": time.time(), "rank": lost.rank, "host": lost.host, "stage": lost.stage,
                   "silent_s": lost.silent_s}, f)
    ranks.end_local_ranks()
    os._exit(1)


def launch(cases: list[dict], world: int, out: str, led: bool = False, on_start=None) -> list[int]:
    """Start ``world`` ranks on ``cases``; their exit codes (``on_start()`` runs once they started)."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(cases, rank, world, port, out, led)) for rank in range(world)]
    for p in procs:
        p.start()
    if on_start is not None:
        on_start()
    for p in procs:
        p.join(timeout=900)
    for p in procs:
        if p.exitcode is None:
            p.kill()
    return [p.exitcode for p in procs]


def params_of(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(checkpoint, "model", "model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


