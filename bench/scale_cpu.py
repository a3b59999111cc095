"""Data-parallel updates on CPU: one process against two gloo ranks (one core each) training the
same tiny model on the same batches from the same seed (trainer/parallel.py).

    .venv/bin/python bench/scale_cpu.py     # last line: {"update_tokens_per_s_1", "..._2", "max_param_diff", ...}

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--updates", type=int, default=4, help="optimizer updates per batch (algorithm.updates_per_batch)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=16)
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
    print(json.dumps({
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
