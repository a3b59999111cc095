"""How well does a forecast made early say where a real run ends? ScaleRL's curve on the tiny model.

The demo's recipe (bench/learn_tiny.py: a weak base from the SFT stage, then GRPO on single-digit
addition, on CPU) runs ``--steps`` steps; every ``--eval-every`` steps the held-out result is the
sampled reward on the whole addition table (``--eval-n`` samples a task), set against the
generated tokens spent so far. The forecast (trainer/forecast.py, as the run page draws it) is
fitted on the results of the first ``--fraction`` of the steps and on all of them; the early
fit's prediction at the run's final compute (with its bootstrap band) is compared with the final
held-out result (the mean of the last three evaluations).

Prints the results and, as its last line, one JSON object: the early forecast's asymptote and
band, the full forecast's, the final held-out result, the early prediction of it with its band,
whether the band holds it, the error, and wall seconds.

    python bench/forecast.py [--steps 150] [--eval-every 5] [--fraction 0.3] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.learn_tiny import add_recipe_options, rl_config, sft_to_base  # noqa: E402


def held_out_curve(job, tasks, steps: int, every: int, n: int) -> list[tuple[int, float, float]]:
    """``(step, generated tokens so far, held-out sampled reward)`` every ``every`` steps."""
    spent, out = 0, []
    for step in range(1, steps + 1):
        job.step()
        spent += sum(sum(t.loss_mask) for t in job.last_generated)
        if step % every == 0:
            reward = job.evaluate(tasks, greedy=False, n=n)["reward"]
            out.append((step, float(spent), reward))
            print(f"step {step:4d} tokens {spent:8d} held-out reward {reward:.3f}", flush=True)
    return out


def summary(fit) -> dict:
    if fit.curve is None:
        return {"asymptote": None, "band": None, "note": fit.note}
    return {"asymptote": round(fit.curve.a, 4), "band": [round(v, 4) for v in fit.asymptote_band],
            "r0": round(fit.curve.r0, 4), "b": round(fit.curve.b, 3), "c_mid": round(fit.curve.c_mid, 1), "results": fit.used}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_options(parser, steps=150)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--eval-n", type=int, default=4, help="samples a held-out task")
    parser.add_argument("--fraction", type=float, default=0.3, help="share of the steps the early forecast sees")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trainer.catalogue.builtin import ADDITION
    from trainer.forecast import forecast
    from trainer.job import Job
    from trainer.models.tiny import build_tiny

    t0 = time.perf_counter()
    tasks = ADDITION.all_tasks()
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(rl_config(str(build_tiny(os.path.join(tmp, "tiny"), seed=args.seed)), "torch", args))
        sft_to_base(job, tasks, args.base_greedy)
        curve = held_out_curve(job, tasks, args.steps, args.eval_every, args.eval_n)
        job.close()
    early = [p for p in curve if p[0] <= args.fraction * args.steps]
    fit_early = forecast([c for _, c, _ in early], [r for _, _, r in early], at=curve[-1][1])
    fit_all = forecast([c for _, c, _ in curve], [r for _, _, r in curve])
    final = sum(r for _, _, r in curve[-3:]) / len(curve[-3:])
    early_s, all_s = summary(fit_early), summary(fit_all)
    predicted = None if fit_early.predicted is None else round(fit_early.predicted, 4)
    band = None if fit_early.predicted_band is None else [round(v, 4) for v in fit_early.predicted_band]
    holds = band is not None and band[0] <= final <= band[1]
    print(f"early ({len(early)} results, first {args.fraction:.0%} of the steps): {early_s}")
    print(f"all ({len(curve)} results): {all_s}")
    print(f"final held-out reward (mean of the last 3): {final:.4f}; the early fit predicted {predicted} there "
          f"(band {band})")
    print(json.dumps({"steps": args.steps, "fraction": args.fraction, "early": early_s, "all": all_s,
                      "final_held_out": round(final, 4), "early_predicted_final": predicted, "early_predicted_band": band,
                      "early_band_holds_final": holds, "early_error": None if predicted is None else round(predicted - final, 4),
                      "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
