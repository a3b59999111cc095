"""One evaluation truth: a run's held-out curve is the registry's stored evaluations of its
checkpoints (and its base model) on the suite that evaluates it; the run page names that source;
the comparison's baseline is chosen, never the order versions were ticked in."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from controlplane.registry import selectors, services
from controlplane.registry.models import EvalRun, ModelVersion
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.controlplane.test_registry_gate import N

pytestmark = pytest.mark.django_db


def record(version, sv, scores: dict[str, list[float]]) -> EvalRun:
    """An evaluation of ``version`` completed the way the eval worker completes one."""
    ev = EvalRun.objects.create(version=version, suite_version=sv, state="running")
    results = []
    for domain, rewards in scores.items():
        per_task = [{"task_id": f"t{i}", "rewards": [r], "outcomes": ["pass" if r == 1 else "fail"], "tokens": 3,
                     "seconds": 0.01, "completion": ""} for i, r in enumerate(rewards)]
        results.append({"domain": domain, "domain_version": 1, "layer": "capability", "tasks": len(rewards),
                        "samples": 1, "pass_at": {"1": sum(rewards) / len(rewards)},
                        "mean_reward": sum(rewards) / len(rewards), "outcomes": {}, "tokens_per_task": 3.0,
                        "seconds_per_task": 0.01, "per_task": per_task})
    return services.eval_record(eval_run=ev, results=results)


def checkpoint_version(run, step: int) -> ModelVersion:
    return ModelVersion.objects.create(team=run.team, name=f"tiny@{run.id}/{step}", base="tiny", base_model=run.base_model,
                                       run=run, step=step, path="/nowhere")


@pytest.fixture
def truth(world):
    admin = factories.actor(world.users["admin"])
    suite = services.suite_save(actor=admin, data={"slug": "heldout", "team": "acme", "auto_evaluate": True, "items": [
        {"domain": "addition", "tasks": N, "samples": 4, "temperature": 1.0}, {"domain": "parity", "tasks": N, "level": 4}]})
    other = services.suite_save(actor=admin, data={"slug": "other", "team": "acme", "items": [{"domain": "addition", "tasks": N}]})
    run = factories.run(world.team, domains=[world.domain, world.domain2], base_model="/models/tiny", state="running")
    base = ModelVersion.objects.create(team=world.team, kind="base", name="tiny", base="tiny", base_model="/models/tiny",
                                       path="/models/tiny")
    return type("Truth", (), {"admin": admin, "suite": suite, "other": other, "run": run, "base": base, "world": world})


def points(run, key: str) -> dict[int, float]:
    return dict(MetricPoint.objects.filter(run=run, key=key).values_list("step", "value"))


def test_the_runs_held_out_points_are_the_stored_evaluations_of_its_versions(truth):
    run = truth.run
    assert selectors.run_eval_suite(run) == truth.suite
    record(truth.base, truth.suite, {"addition": [0.0] * N, "parity": [1.0, 0.0] * (N // 2)})
    v5, v10 = checkpoint_version(run, 5), checkpoint_version(run, 10)
    record(v10, truth.suite, {"addition": [1.0] * N, "parity": [1.0] * N})  # out of step order
    record(v5, truth.suite, {"addition": [1.0, 0.0, 0.0, 0.0] * (N // 4), "parity": [1.0, 0.0] * (N // 2)})
    record(v5, truth.other, {"addition": [1.0] * N})  # another suite never writes the curve

    assert points(run, "eval/reward/addition") == {0: 0.0, 5: 0.25, 10: 1.0}
    assert points(run, "eval/reward/parity") == {0: 0.5, 5: 0.5, 10: 1.0}  # every domain of the suite
    assert points(run, "eval/pass@1/addition") == {0: 0.0, 5: 0.25, 10: 1.0}
    assert points(run, "eval/reward/mean")[5] == pytest.approx(0.375)
    # ... the numbers the comparison shows for the same versions.
    result = selectors.compare_versions(actor=truth.admin, refs=[str(truth.base.pk), str(v5.pk), str(v10.pk)],
                                        suite="heldout")
    for row in result["rows"]:
        for cell, step in zip(row["cells"], (0, 5, 10)):
            assert cell["mean"] == pytest.approx(points(run, f"eval/reward/{row['domain']}")[step])


def test_a_run_that_starts_from_a_base_evaluated_earlier_gets_its_step_0_at_its_first_checkpoint(truth):
    from controlplane.runs.models import Checkpoint

    record(truth.base, truth.suite, {"addition": [0.0, 1.0] * (N // 2), "parity": [0.0] * N})
    later = factories.run(truth.world.team, domains=[truth.world.domain], base_model="/models/tiny", state="running")
    assert points(later, "eval/reward/addition") == {}
    checkpoint = Checkpoint.objects.create(run=later, step=20, path="/nowhere/ckpt")
    services.version_register_checkpoint(checkpoint=checkpoint)
    assert points(later, "eval/reward/addition") == {0: 0.5}


def test_no_suite_no_curve_from_the_registry(truth, world):
    lone = factories.run(world.team, domains=[world.team_domain], base_model="/models/tiny")
    assert selectors.run_eval_suite(lone) is None
    record(checkpoint_version(lone, 5), truth.suite, {"addition": [1.0] * N})
    assert points(lone, "eval/reward/addition") == {}
    # Another team's auto-evaluating suite is never the source of this team's run.
    services.suite_save(actor=factories.actor(world.other_users["admin"]), data={
        "slug": "theirs", "team": "globex", "auto_evaluate": True, "items": [{"domain": "globex-private", "tasks": 4}]})
    assert selectors.run_eval_suite(lone) is None


def test_the_run_page_names_the_source_of_its_held_out_chart(truth, world):
    client = Client()
    client.force_login(world.users["viewer"])
    html = client.get(f"/runs/{truth.run.id}/").content.decode()
    source = re.search(r'data-testid="eval-source" data-kind="(\w+)">(.*?)</p>', html, re.S)
    assert source.group(1) == "suite"
    text = " ".join(source.group(2).split())
    assert "heldout</a> v1" in text and f"addition {N} tasks &times; 4 at temperature 1.0" in text and "level 4" in text
    in_training = factories.run(world.team, domains=[world.team_domain], config={"eval": {"every_steps": 10}})
    html = client.get(f"/runs/{in_training.id}/").content.decode()
    assert 'data-kind="in_training"' in html and "In-training evaluation every 10 steps" in html
    html = client.get(f"/runs/{factories.run(world.team, domains=[world.team_domain]).id}/").content.decode()
    assert 'data-kind="none"' in html


def test_the_comparisons_baseline_is_the_base_model_unless_another_is_picked(truth, world):
    run = truth.run
    record(truth.base, truth.suite, {"addition": [0.0] * N, "parity": [0.0] * N})
    v5, v10 = checkpoint_version(run, 5), checkpoint_version(run, 10)
    record(v5, truth.suite, {"addition": [1.0] * N, "parity": [1.0] * N})
    record(v10, truth.suite, {"addition": [1.0] * N, "parity": [1.0] * N})
    client = Client()
    client.force_login(world.users["viewer"])

    def columns(url):
        html = client.get(url).content.decode()
        return [int(x) for x in re.findall(r'data-testid="compare-version" data-version-id="(\d+)"', html)], html

    # Ticked newest first (the versions table's order): the base model is still the baseline.
    order, html = columns(f"/registry/compare/?v={v10.pk}&v={v5.pk}&v={truth.base.pk}")
    assert order == [truth.base.pk, v10.pk, v5.pk]
    assert html.count('data-testid="improvement"') == 4 and 'data-testid="regression"' not in html
    # Without a base model among them, the earliest checkpoint.
    assert columns(f"/registry/compare/?v={v10.pk}&v={v5.pk}")[0] == [v5.pk, v10.pk]
    # Picked explicitly; the picker shows it selected.
    order, html = columns(f"/registry/compare/?v={v5.pk}&v={truth.base.pk}&v={v10.pk}&baseline={v10.pk}")
    assert order[0] == v10.pk
    assert re.search(rf'<option value="{v10.pk}" selected>', html)
    # A baseline that is not compared is an error that says so.
    html = columns(f"/registry/compare/?v={v5.pk}&v={v10.pk}&baseline={truth.base.pk}")[1]
    assert "is not one of the compared versions" in html
    # ?run= compares the run's base model with its last checkpoint; from=first, its first checkpoint.
    assert columns(f"/registry/compare/?run={run.id}")[0] == [truth.base.pk, v10.pk]
    assert columns(f"/registry/compare/?run={run.id}&from=first")[0] == [v5.pk, v10.pk]
