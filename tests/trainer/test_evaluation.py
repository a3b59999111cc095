"""Evaluation with the trainer's engines: pass@k and costs; greedy is reproducible; evaluating a
job between steps leaves its training exactly as it would have been."""
from __future__ import annotations

import pytest

from trainer.evaluation import EvalSpec, evaluate, evaluate_job, load_for_eval


def test_greedy_evaluation_is_identical_and_sampled_is_seeded(tiny_path):
    engine, tokenizer = load_for_eval(tiny_path)
    specs = [EvalSpec("builtin-reversal", tasks=10, max_new_tokens=5),
             EvalSpec("builtin-addition", tasks=6, samples=4, temperature=1.0, k=(1, 2, 4), max_new_tokens=3)]
    first, second = evaluate(engine, tokenizer, specs), evaluate(engine, tokenizer, specs)
    for a, b in zip(first, second):
        assert [t.as_dict() | {"seconds": 0} for t in a.tasks] == [t.as_dict() | {"seconds": 0} for t in b.tasks]
    rev, add = (r.summary() for r in first)
    assert rev["tasks"] == 10 and rev["samples"] == 10 and rev["tokens_per_task"] > 0 and rev["seconds_per_task"] > 0
    assert set(add["pass_at"]) == {"1", "2", "4"} and add["samples"] == 4 * add["tasks"]
    assert add["pass_at"]["1"] <= add["pass_at"]["2"] <= add["pass_at"]["4"]
    assert sum(rev["outcomes"].values()) == rev["samples"]


@pytest.mark.parametrize("staleness", [0, 1])
def test_evaluating_between_steps_does_not_change_training(base_config, staleness):
    from trainer.job import Job

    base_config["rollout"]["staleness"] = staleness
    base_config["domains"] = {"builtin-addition": 1.0, "builtin-reversal": 1.0}
    base_config["sampler"] = {"holdout_fraction": 0.1}

    def train(with_eval: bool):
        samples = []
        job = Job(base_config, callbacks=[lambda step, m, s: samples.append([(x["task_id"], x["completion"]) for x in s])])
        try:
            evals = []
            for _ in range(3):
                job.step()
                if with_eval:
                    metrics, _ = evaluate_job(job)
                    evals.append(metrics)
            weights = [p.detach().clone() for p in job.model.parameters()]
        finally:
            job.close()
        return samples, weights, evals

    plain, w_plain, _ = train(False)
    evaluated, w_eval, evals = train(True)
    assert evaluated == plain
    assert all((a == b).all() for a, b in zip(w_plain, w_eval))
    assert {"eval/reward/builtin-reversal", "eval/pass@1/builtin-reversal", "eval/reward/mean"} <= set(evals[-1])
