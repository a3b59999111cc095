"""Data-parallel updates on CPU: one process against two gloo ranks (one core each) training the
same tiny model on the same batches from the same seed (trainer/parallel.py); then the scale paths
of #47 on their CPU twins.

    .venv/bin/python bench/scale_cpu.py     # last line: {"update_tokens_per_s_1", "..._2", "max_param_diff",
                                            #   "zero_max_param_diff", "resume_max_param_diff", "hang_detected_s", ...}

The #47 figures (tests/trainer/rank_groups.py runs the rank groups, as tests/trainer/test_deepspeed.py does):

- ``zero_max_param_diff``: per ZeRO stage ("0", "2", "3"), the largest weight difference between
  DeepSpeed on 1 rank and on 2 gloo ranks (``DS_ACCELERATOR=cpu``) after 4 steps on the same global
  batch, micro-batches of 6, 6 and 4 sequences (the short rank pads); goal below 1e-5.
- ``resume_max_param_diff``: two led ranks at ZeRO-3, the leader SIGKILLed after step 3 of 4 and the
  run resumed from its step-2 checkpoint, against two ranks never stopped; goal 0, or below 1e-6.
- ``hang_detected_s``: two led ranks with ``parallel.collective_timeout_s`` 20, rank 1 SIGSTOPped
  after step 2: seconds until the leader's watchdog names it (rank, host, stage); goal within the
  timeout (the watchdog looks every tenth of it).
- ``tp2_mismatch_kl``: the largest ``mismatch/kl`` of a 4-step run whose vLLM engine is tensor
  parallel over 2 CPU workers, each step generated after a weight sync; goal below 1e-3.
- ``ranks2_speedup_staleness1_vs_0``: two led ranks (plain backend), 12 steps whose verification
  takes 0.5 s a batch (as remote verify workers do), steps per second after the first two at
  staleness 1 over staleness 0, side by side.

Each rank generates the whole batch (generation is not split across ranks yet) and updates on its
share of it; the update's throughput is the trained tokens over the seconds the update took.
``max_param_diff`` is the largest difference of any weight between rank 0 and the one process
after the first step (``--updates`` optimizer updates on the same batch; float summation order
only: the ranks hold equal weights). Later steps sample new batches with weights that differ in
the last bits, so a sampled token can differ there: those steps measure throughput only.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def verify(items):
    from trainer.outcomes import Verification

    return [Verification.passed() if i % 2 else Verification.failed() for i, _ in enumerate(items)]


def train(config: dict, steps: int, out: str, rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from trainer.job import Job

    job = Job(config, verify_batch=verify)
    metrics = [job.step()]  # one batch, ``algorithm.updates_per_batch`` updates on it
    torch.save({n: p.detach().clone() for n, p in job.model.named_parameters()}, out + ".pt")
    metrics += [job.step() for _ in range(steps - 1)]
    Path(out + ".json").write_text(json.dumps(metrics))
    job.close()
    if world > 1:
        dist.destroy_process_group()


def launch(config: dict, steps: int, outs: list[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=train, args=(config, steps, out, rank, len(outs), port)) for rank, out in enumerate(outs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")


def scale_paths() -> dict:
    """The #47 figures on CPU twins (DeepSpeed ZeRO on gloo ranks, a killed run resumed, a stopped rank)."""
    import os
    import signal
    import threading
    import time

    from tests.trainer.rank_groups import STAGES, config_for, launch as launch_group, max_diff, params_of
    from trainer.models.tiny import build_tiny

    with tempfile.TemporaryDirectory(prefix="temper-scale47-") as tmp:
        root = Path(tmp)
        model = str(build_tiny(root / "model", layers=2))
        base = {"model": {"path": model}, "seed": 0, "rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 3},
                "optimizer": {"lr": 1e-3}, "limits": {}}
        t0 = time.perf_counter()
        launch_group([{"config": config_for(base, s), "final": str(root / f"one-z{s}")} for s in STAGES], 1, str(root / "one.json"))
        launch_group([{"config": config_for(base, s), "final": str(root / f"two-z{s}")} for s in STAGES], 2, str(root / "two.json"))
        zero = {str(s): max_diff(params_of(str(root / f"one-z{s}")), params_of(str(root / f"two-z{s}"))) for s in STAGES}
        print(f"ZeRO 1 vs 2 ranks: {zero} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

        z3 = config_for(base, 3, str(root / "killed"))
        launch_group([{"config": config_for(base, 3), "final": str(root / "straight")}], 2, str(root / "s.json"), led=True)
        codes = launch_group([{"config": z3, "every": str(root / "killed"), "die_after": 3, "final": str(root / "never")}],
                             2, str(root / "k.json"), led=True)
        launch_group([{"resume": str(root / "killed" / "step-2"), "final": str(root / "resumed")}], 2, str(root / "r.json"), led=True)
        resume = max_diff(params_of(str(root / "straight")), params_of(str(root / "resumed")))
        print(f"killed ({codes}) and resumed vs never stopped, ZeRO-3 on 2 ranks: {resume:.3g}", file=sys.stderr)

        timeout = 20.0
        mark, lost = root / "mark.json", root / "lost.json"
        stopped = {}

        def stop_rank_1() -> None:
            """Once the leader has done step 2: SIGSTOP rank 1, and when."""
            while not mark.exists():
                time.sleep(0.05)
            pid = int(json.loads(mark.read_text())["pids"]["1"])
            stopped["t"] = time.time()
            os.kill(pid, signal.SIGSTOP)

        hang_cfg = config_for(base, None)  # the leader goes on into step 3 and waits there for rank 1
        watcher = threading.Thread(target=stop_rank_1, daemon=True)
        launch_group([{"config": hang_cfg, "final": str(root / "hang"), "timeout": timeout, "mark": str(mark),
                       "mark_after": 2, "lost": str(lost)}], 2, str(root / "h.json"), led=True, on_start=watcher.start)
        found = json.loads(lost.read_text())
        hang_s = found["t"] - stopped["t"]
        print(f"rank {found['rank']} on {found['host']} stopped during {found['stage']}: named after {hang_s:.1f} s "
              f"(timeout {timeout:g} s)", file=sys.stderr)
        speed = {}
        for staleness in (0, 1):
            cfg = config_for(base, None)
            cfg["rollout"]["staleness"] = staleness
            launch_group([{"config": cfg, "final": str(root / f"async{staleness}"), "steps": 12, "verify_s": 0.5}],
                         2, str(root / f"async{staleness}.json"), led=True)
            step_s = json.loads((root / f"async{staleness}.json").read_text())[0]["step_s"][2:]  # after the start
            speed[staleness] = len(step_s) / sum(step_s)
        print(f"2 ranks, verification 0.5 s a batch: {speed[0]:.3f} steps/s at staleness 0, {speed[1]:.3f} at 1",
              file=sys.stderr)
        tp2 = tp2_mismatch(model, root / "tp2")
        print(f"vLLM tensor parallel 2 on CPU: mismatch/kl after each sync {tp2}", file=sys.stderr)
    return {"zero_max_param_diff": zero, "resume_max_param_diff": resume, "hang_detected_s": round(hang_s, 2),
            "hang_timeout_s": timeout, "hang_named": {k: found[k] for k in ("rank", "host", "stage")},
            "tp2_mismatch_kl": max(tp2), "tp2_mismatch_kl_by_step": tp2,
            "ranks2_speedup_staleness1_vs_0": round(speed[1] / speed[0], 3),
            "ranks2_steps_per_s": {"staleness0": round(speed[0], 3), "staleness1": round(speed[1], 3)}}


def tp2_mismatch(model: str, ckpt: Path) -> list[float]:
    """``mismatch/kl`` of each step of a 4-step run whose vLLM engine is tensor parallel over 2
    CPU workers (Temper binds their threads): every step after the first is generated by the
    engine after a weight sync, so a sync that missed a worker would show here."""
    from trainer.job import Job

    config = {"model": {"path": model}, "seed": 0,
              "rollout": {"engine": "vllm", "tensor_parallel_size": 2, "prompts_per_step": 4, "n": 4, "max_new_tokens": 4},
              "optimizer": {"lr": 1e-2, "micro_batch_size": 8}, "limits": {"max_steps": 4}, "checkpoint": {"dir": str(ckpt)}}
    seen: list[float] = []
    Job(config, verify_batch=verify, callbacks=[lambda step, m, samples: seen.append(m["mismatch/kl"])]).run(progress=False)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--updates", type=int, default=4, help="optimizer updates per batch (algorithm.updates_per_batch)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--skip-scale", action="store_true", help="only the plain data-parallel figures")
    args = parser.parse_args()
    import torch

    from trainer.models.tiny import build_tiny

    with tempfile.TemporaryDirectory(prefix="temper-scale-") as tmp:
        model = build_tiny(Path(tmp) / "model", hidden=args.hidden, layers=4, heads=args.hidden // 64,
                           intermediate=4 * args.hidden)
        config = {"model": {"path": str(model)}, "seed": 0,
                  "rollout": {"prompts_per_step": args.prompts, "n": args.n, "max_new_tokens": args.new_tokens},
                  "algorithm": {"updates_per_batch": args.updates},
                  "optimizer": {"lr": 1e-3, "micro_batch_size": args.micro_batch}, "limits": {"max_steps": args.steps}}
        one, two = str(Path(tmp) / "one"), [str(Path(tmp) / f"rank{r}") for r in range(2)]
        figures = {}
        for label, outs in (("1", [one]), ("2", two)):
            launch(config, args.steps, outs)
            metrics = json.loads(Path(outs[0] + ".json").read_text())[1:]  # the first step warms up (and is compared)
            tokens = sum(m["perf/train_tokens"] for m in metrics)
            update_s = sum(m["stage/update_s"] for m in metrics)
            figures[label] = {"update_tokens_per_s": tokens / update_s, "step_s": sum(m["stage/step_s"] for m in metrics) / len(metrics)}
            print(f"{label} rank(s): update {figures[label]['update_tokens_per_s']:.0f} tokens/s, "
                  f"step {figures[label]['step_s']:.2f} s", file=sys.stderr)
        single, rank0 = torch.load(one + ".pt"), torch.load(two[0] + ".pt")
        rank1 = torch.load(two[1] + ".pt")
        diff = max((rank0[k] - single[k]).abs().max().item() for k in single)
        ranks_equal = all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    scale = {} if args.skip_scale else scale_paths()
    print(json.dumps({
        **scale,
        "steps": args.steps, "sequences_per_step": args.prompts * args.n, "hidden": args.hidden,
        "update_tokens_per_s_1": round(figures["1"]["update_tokens_per_s"], 1),
        "update_tokens_per_s_2": round(figures["2"]["update_tokens_per_s"], 1),
        "update_speedup": round(figures["2"]["update_tokens_per_s"] / figures["1"]["update_tokens_per_s"], 2),
        "step_s_1": round(figures["1"]["step_s"], 3), "step_s_2": round(figures["2"]["step_s"], 3),
        "max_param_diff": diff, "ranks_equal": ranks_equal, "goal_max_param_diff": 1e-5,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
