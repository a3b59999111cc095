"""Does the demo improve every domain on held-out tasks? Its domains and recipe, on CPU.

The demo's recipe (``controlplane/web/management/commands/demo_setup.py``: DEMO_CONFIG,
DEMO_DOMAINS, DEMO_STEPS) trains the tiny model from random init: the SFT stage, then GRPO. The
base (after SFT) and the final policy are evaluated on the demo's held-out suite (DEMO_SUITE: the
same tasks, samples and temperature as the compare page's evaluation of the demo's checkpoints).
Per domain it reports each one's mean reward with a 95% bootstrap interval over tasks, and the
paired difference (final - base, paired by task) with its interval; a domain improved when that
interval lies above 0, as the compare page flags it.

Last line: one JSON object with engine, steps, wall_s, all_improved and, per domain, base, final
and delta ({"mean", "lo", "hi"}), tasks and the curriculum level reached.

    python bench/learn_multi.py [--engine torch|vllm] [--steps 300] [--seed 0] [--set PATH=JSON] [--item D.F=JSON]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


def suite_specs(suite: dict):
    """The demo suite's items as the registry's evaluation worker builds them (workers/evaluate.py)."""
    from controlplane.registry.services import ITEM_DEFAULTS
    from trainer.evaluation import EvalSpec

    return [EvalSpec.from_item({**ITEM_DEFAULTS, **raw}) for raw in suite["items"]]


def scores(job, specs) -> dict[str, dict[str, float]]:
    """Per domain, each held-out task's mean reward under the job's current policy."""
    from controlplane.registry.stats import task_scores
    from trainer.evaluation import evaluate_job

    _, results = evaluate_job(job, specs)
    return {r.spec.domain: task_scores([t.as_dict() for t in r.tasks]) for r in results}


def interval(values) -> dict:
    from controlplane.registry.stats import bootstrap_ci

    lo, hi = bootstrap_ci(list(values))
    mean = sum(values) / len(values) if values else None
    return {"mean": None if mean is None else round(mean, 4), "lo": None if lo is None else round(lo, 4),
            "hi": None if hi is None else round(hi, 4)}


def parse_change(text: str) -> tuple[str, object]:
    """``a.b=JSON`` -> ("a.b", value); a value that is not JSON is taken as a string."""
    path, sep, raw = text.partition("=")
    if not sep or not path:
        raise SystemExit(f"{text!r}: expected PATH=VALUE")
    try:
        return path, json.loads(raw)
    except json.JSONDecodeError:
        return path, raw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="torch", choices=["torch", "vllm"])
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the demo's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--domain-balance", default=None, choices=["none", "equal"],
                        help="algorithm.domain_balance (default: the demo's)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=JSON",
                        help="change the recipe: a dotted config path and a JSON value, e.g. rollout.prompts_per_step=32 "
                             "or domains.builtin-reversal=2 (repeatable)")
    parser.add_argument("--item", action="append", default=[], metavar="DOMAIN.FIELD=JSON",
                        help="change a suite item, e.g. builtin-parity.level=1 (repeatable)")
    args = parser.parse_args()

    import django

    django.setup()
    import torch
    from tqdm import tqdm

    from controlplane.registry.stats import paired_delta
    from controlplane.web.management.commands.demo_setup import DEMO_CONFIG, DEMO_DOMAINS, DEMO_STEPS, DEMO_SUITE
    from trainer.config import put_path
    from trainer.run_fields import RUN_DEFAULTS
    from trainer.job import Job
    from trainer.models.tiny import build_tiny

    torch.set_num_threads(args.threads)
    steps = args.steps or DEMO_STEPS
    t0 = time.perf_counter()
    suite = copy.deepcopy(DEMO_SUITE)
    for change in args.item:
        target, value = parse_change(change)
        domain, _, field = target.rpartition(".")
        item = next((i for i in suite["items"] if i["domain"] == domain), None)
        if item is None:
            parser.error(f"--item {change}: the suite has no item for {domain!r}")
        item[field] = value
    specs = suite_specs(suite)
    with tempfile.TemporaryDirectory() as tmp:
        config = copy.deepcopy(DEMO_CONFIG)
        config.update({"model": {"path": str(build_tiny(os.path.join(tmp, "tiny"), seed=args.seed))},
                       "seed": args.seed, "domains": dict(DEMO_DOMAINS), "limits": {"max_steps": steps}})
        config["rollout"] = {**config["rollout"], "engine": args.engine}
        if args.domain_balance:
            config["algorithm"] = {**config.get("algorithm", {}), "domain_balance": args.domain_balance}
        config["sampler"] = {"holdout_fraction": RUN_DEFAULTS["sampler.holdout_fraction"], **config.get("sampler", {})}
        config.pop("checkpoint", None)
        for change in args.set:
            put_path(config, *parse_change(change))
        job = Job(config)
        bar = tqdm(total=config["sft"]["steps"], desc="sft", file=sys.stderr)
        job.sft(config["sft"]["steps"], callback=lambda s, loss: bar.update(1))
        bar.close()
        sft = {"steps": job.sft_steps_done, "left": dict(job.sft_stage.left)}
        print("sft:", sft, flush=True)
        base = scores(job, specs)
        print("base:", {d: round(sum(v.values()) / max(len(v), 1), 3) for d, v in base.items()}, flush=True)
        bar = tqdm(total=steps, desc="grpo", file=sys.stderr)
        for step in range(1, steps + 1):
            m = job.step()
            bar.update(1)
            if step % 25 == 0 or step == steps:
                bar.write(f"step {step:4d} " + " ".join(
                    f"{d.removeprefix('builtin-')} {m.get('reward/' + d, float('nan')):.3f}"
                    f"@L{int(m.get('sampler/level/' + d, 0))}" for d in DEMO_DOMAINS))
        bar.close()
        final = scores(job, specs)
        levels = dict(job.sampler.levels)
        job.close()
    domains = {}
    for d in DEMO_DOMAINS:
        delta = paired_delta(base[d], final[d])
        domains[d] = {"tasks": len(base[d]), "base": interval(base[d].values()), "final": interval(final[d].values()),
                      "delta": {k: None if delta[k] is None else round(delta[k], 4) for k in ("delta", "lo", "hi")},
                      "improved": delta["lo"] is not None and delta["lo"] > 0, "level": levels.get(d, 0)}
        print(f"{d:18s} base {domains[d]['base']['mean']:.3f} -> final {domains[d]['final']['mean']:.3f} "
              f"delta {delta['delta']:+.3f} [{delta['lo']:+.3f}, {delta['hi']:+.3f}] over {len(base[d])} tasks")
    print(json.dumps({"engine": args.engine, "steps": steps, "seed": args.seed, "changes": args.set + args.item,
                      "domain_balance": config.get("algorithm", {}).get("domain_balance", "none"),
                      "all_improved": all(v["improved"] for v in domains.values()), "sft": sft, "domains": domains,
                      "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
