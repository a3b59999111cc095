"""A plan before a run: the estimate of a run body from its domains' run history (the team's
earlier runs of the same base model), else their latest evaluation, else an assumption, each
figure with its source; the arithmetic is the one controlplane/runs/estimate.py documents, and a
bad body is refused as POST /api/runs refuses it, naming the field."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.registry.models import EvalResult, EvalRun, ModelVersion
from controlplane.registry import selectors as registry_selectors
from controlplane.registry import services as registry_services
from controlplane.runs.estimate import CPU_PER_WALL, HISTORY_RUNS, estimate, history, run_estimate
from controlplane.runs.models import Run, UsageRecord
from controlplane.runs.spec import RunSpec
from tests import factories

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("money_context")]

BASE = "tiny-llama"


def used(run, step: int, domain: str, **figures) -> None:
    UsageRecord.objects.create(run=run, team_id=run.team_id, step=step, domain=domain, driver="w1", at=timezone.now(), **figures)


def history_run(team, *, base_model: str = BASE, wall: float = 10.0, generated: int = 400, domains=None) -> Run:
    """Two steps on ``addition``: per step ``wall`` s of wall, 1.5x that of CPU, and 8 completions
    of ``generated`` tokens (300/400 of them trained), 2 sandbox s and 80 judge tokens."""
    run = factories.run(team, base_model=base_model, state="completed", domains=domains)
    for step in (1, 2):
        used(run, step, "", wall_s=wall, cpu_s=1.5 * wall)
        used(run, step, "addition", generated_tokens=generated, trained_tokens=generated * 3 // 4, completions=8,
             sandbox_s=2.0, judge_tokens=80)
    return run


def evaluation(team, *, base_model: str, tasks: int, samples: int, tokens_per_task: float, seconds_per_task: float,
               finished_ago: timedelta, domain: str = "parity") -> EvalRun:
    admin = factories.actor(factories.member(team, "admin"))
    slug = f"suite-{EvalRun.objects.count()}"
    sv = registry_services.suite_save(actor=admin, data={"slug": slug, "team": team.slug, "items": [{"domain": domain, "tasks": tasks}]})
    version = ModelVersion.objects.create(team=team, kind="base", name=f"m{EvalRun.objects.count()}", base="m",
                                          base_model=base_model, path="/nowhere")
    ev = EvalRun.objects.create(version=version, suite_version=sv, state="completed", finished_at=timezone.now() - finished_ago)
    EvalResult.objects.create(eval_run=ev, domain=domain, domain_version=1, layer="capability", tasks=tasks, samples=samples,
                              tokens_per_task=tokens_per_task, seconds_per_task=seconds_per_task)
    return ev


def body(**overrides) -> dict:
    data = factories.run_payload([], base_model=BASE, budget={"steps": 10},
                                 config={"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 64}})
    data["domains"] = [{"slug": "addition", "weight": 2}, {"slug": "parity", "weight": 1}, {"slug": "acme-private", "weight": 1}]
    data.update(overrides)
    return data


@pytest.fixture
def measured(world):
    """``addition`` has run history, ``parity`` evaluations only, ``acme-private`` nothing; beside
    them, evidence the estimate must not read (another base model's run, another team's run, an
    older evaluation, a newer one of another base model)."""
    ours = history_run(world.team)
    history_run(world.team, base_model="other-model", wall=1000.0, generated=4000)
    history_run(world.other, wall=500.0)
    evaluation(world.team, base_model=BASE, tasks=10, samples=40, tokens_per_task=120.0, seconds_per_task=2.0,
               finished_ago=timedelta(days=1))
    evaluation(world.team, base_model=BASE, tasks=10, samples=10, tokens_per_task=999.0, seconds_per_task=99.0,
               finished_ago=timedelta(days=5))
    evaluation(world.team, base_model="other-model", tasks=10, samples=10, tokens_per_task=7.0, seconds_per_task=7.0,
               finished_ago=timedelta(hours=1))
    return ours


def test_the_estimate_is_the_documented_arithmetic_on_history_evaluations_and_assumptions(world, measured):
    member = factories.actor(world.users["member"])
    out = run_estimate(actor=member, data=body(), evaluations=registry_selectors.eval_task_costs)

    # Per completion: addition from its run history (2 steps x 8 completions: 800 tokens, 600
    # trained, 20 s wall, 30 s CPU, 4 sandbox s, 160 judge tokens over 16 completions); parity
    # from the newest evaluation of the same base model (120 tokens and 2 s a task of 4 samples);
    # acme-private assumed: 64 tokens (the run's max_new_tokens) at the mean seconds per token of the two.
    add = dict(tokens=50.0, seconds=1.25, cpu=1.875, trained=0.75, sandbox=0.25, judge=10.0)
    par = dict(tokens=30.0, seconds=0.5, cpu=0.5 * CPU_PER_WALL, trained=1.0)
    rate = (1.25 / 50 + 0.5 / 30) / 2
    pri = dict(tokens=64.0, seconds=64 * rate, cpu=64 * rate * CPU_PER_WALL, trained=1.0)
    domains = {d["slug"]: d for d in out["domains"]}
    assert [domains[s]["source"] for s in ("addition", "parity", "acme-private")] == ["history", "evaluation", "assumed"]
    assert domains["addition"]["detail"].startswith(f"1 earlier run(s) of {BASE} (#{measured.id}), 2 steps")
    assert "120" not in domains["parity"]["detail"] and "10 tasks x 4 samples" in domains["parity"]["detail"]
    assert domains["acme-private"]["tokens_per_completion"] == 64.0
    assert domains["addition"]["seconds_per_completion"] == 1.25 and domains["parity"]["seconds_per_completion"] == 0.5

    # A step: 4 prompts x 2 completions = 8, split 2:1:1 -> 4, 2, 2.
    c = {"add": 4, "par": 2, "pri": 2}
    per_step = {
        "completions": 8,
        "generated_tokens": 4 * add["tokens"] + 2 * par["tokens"] + 2 * pri["tokens"],
        "trained_tokens": 4 * add["tokens"] * add["trained"] + 2 * par["tokens"] + 2 * pri["tokens"],
        "wall_s": 4 * add["seconds"] + 2 * par["seconds"] + 2 * pri["seconds"],
        "cpu_s": 4 * add["cpu"] + 2 * par["cpu"] + 2 * pri["cpu"],
        "sandbox_s": c["add"] * add["sandbox"],
        "judge_tokens": c["add"] * add["judge"],
        "gpu_s": 0.0,
    }
    assert out["steps"] == {"value": 10, "source": "budget.steps"}
    for key, value in per_step.items():
        assert out["figures"][key]["per_step"] == pytest.approx(value, abs=1e-3), key
        assert out["usage"][key] == pytest.approx(10 * value, abs=1e-2 if key.endswith("_s") else 0.51), key
    assert out["usage"]["generated_tokens"] == 3880 and out["usage"]["trained_tokens"] == 3380
    assert out["figures"]["sandbox_s"]["unmeasured"] == ["acme-private", "parity"]
    assert out["figures"]["wall_s"]["unmeasured"] == []
    assert "history: addition" in out["figures"]["wall_s"]["source"] and "evaluation: parity" in out["figures"]["wall_s"]["source"]
    assert any("base model" in a for a in out["assumptions"])


def test_a_wall_limit_ends_the_run_first_and_gpus_multiply_the_wall(world, measured):
    member = factories.actor(world.users["member"])
    per_step_wall = run_estimate(actor=member, data=body(), evaluations=registry_selectors.eval_task_costs)["figures"]["wall_s"]["per_step"]
    limited = run_estimate(actor=member, data=body(budget={"steps": 10, "wall_s": 2.5 * per_step_wall}),
                           evaluations=registry_selectors.eval_task_costs)
    assert limited["steps"]["value"] == 3  # the driver stops after the step that passes the limit
    assert limited["steps"]["source"].startswith("budget.wall_s")

    spec = RunSpec.from_body({**body(gpus=2), "budget": {"steps": 10}})  # the arithmetic alone: no GPU pool needed
    out = estimate(spec, histories={}, evaluations=registry_selectors.eval_task_costs(team_id=world.team.id, slugs=["parity"], base_model=BASE))
    assert out["usage"]["gpu_s"] == pytest.approx(2 * out["usage"]["wall_s"], abs=1e-2)
    assert "2 GPU(s)" in out["figures"]["gpu_s"]["source"]


def test_history_reads_the_latest_runs_of_a_domain(world):
    oldest = history_run(world.team, wall=1000.0, generated=4000)  # other hardware, long ago
    latest = [history_run(world.team) for _ in range(HISTORY_RUNS)]
    add = history(team_id=world.team.id, slugs=["addition", "parity"], base_model=BASE)
    assert set(add) == {"addition"}  # parity: no run worked on it
    m = add["addition"]
    assert (m.tokens, m.seconds, m.cpu_s) == (50.0, 1.25, 1.875)
    assert f"#{oldest.id}" not in m.detail and all(f"#{r.id}" in m.detail for r in latest)


def test_with_nothing_measured_time_is_unknown_and_tokens_are_the_allowance(world):
    out = run_estimate(actor=factories.actor(world.users["member"]), data=body(), evaluations=registry_selectors.eval_task_costs)
    assert {d["source"] for d in out["domains"]} == {"assumed"}
    assert out["usage"]["wall_s"] is None and out["usage"]["gpu_s"] is None and out["usage"]["cpu_s"] is None
    assert out["usage"]["generated_tokens"] == 10 * 8 * 64
    assert out["figures"]["wall_s"]["unmeasured"] == ["acme-private", "addition", "parity"]  # slug order, as the spec keeps them


def test_an_evaluation_longer_than_the_runs_allowance_is_capped(world):
    evaluation(world.team, base_model=BASE, tasks=2, samples=2, tokens_per_task=640.0, seconds_per_task=4.0,
               finished_ago=timedelta(hours=1))
    out = run_estimate(actor=factories.actor(world.users["member"]), data=body(), evaluations=registry_selectors.eval_task_costs)
    parity = next(d for d in out["domains"] if d["slug"] == "parity")
    assert parity["tokens_per_completion"] == 64.0 and parity["seconds_per_completion"] == pytest.approx(0.4)
    assert "capped at the run's 64 tokens" in parity["detail"]


def post(user, data) -> tuple[int, dict]:
    client = Client()
    client.force_login(user)
    r = client.post("/api/runs/estimate", json.dumps(data) if not isinstance(data, str) else data, content_type="application/json")
    return r.status_code, r.json()


def test_the_api_answers_the_estimate_and_refuses_a_bad_body_naming_the_field(world, measured):
    status, out = post(world.users["member"], body())
    assert status == 200, out
    assert out["usage"]["generated_tokens"] == 3880 and out["steps"]["value"] == 10
    assert isinstance(out["usage"]["completions"], int) and set(out["usage"]) == set(out["figures"])

    bad = [
        (body(domains=[{"slug": "nope", "weight": 1}]), "domains[0].slug"),
        (body(budget={"steps": 0}), "budget.steps"),
        (body(config={"rollout": {"n": 0}}), "config.rollout.n"),
        (body(config={"limits": {"max_steps": 5}}), "config.limits.max_steps"),
        (body(name=" "), "name"),
    ]
    for data, field in bad:
        status, out = post(world.users["member"], data)
        assert status == 422, (field, out)
        assert field in [e["path"] for e in out["errors"]], (field, out)
    status, out = post(world.users["member"], "[1, 2]")
    assert status == 422, out
    status, out = post(world.users["viewer"], body())
    assert status == 403, out
    assert Run.objects.filter(name="my run").count() == 0


def test_the_estimate_is_priced_at_the_admins_prices_and_checked_against_a_money_budget(world, measured):
    """The estimate's cost is its figures times the pools' prices (per hour of GPU, CPU and
    sandbox, per million judge tokens); a part with usage and no price is unknown, and so is the
    total; a money budget below the cost is reported as over it."""
    from decimal import Decimal

    from controlplane.scheduling.models import ResourcePool

    ResourcePool.objects.all().delete()
    prices = {"cpu": Decimal("0.36"), "sandbox": Decimal("1.8"), "judge": Decimal("4")}
    for kind, price in prices.items():
        ResourcePool.objects.create(name=f"p-{kind}", kind=kind, capacity=4, price=price)
    status, out = post(world.users["member"], body())
    assert status == 200, out
    usage = out["usage"]
    assert usage["cpu_s"] and usage["sandbox_s"] and usage["judge_tokens"] and not usage["gpu_s"]
    expected = (Decimal(repr(usage["cpu_s"])) * prices["cpu"] / 3600 + Decimal(repr(usage["sandbox_s"])) * prices["sandbox"] / 3600
                + Decimal(repr(usage["judge_tokens"])) * prices["judge"] / 1_000_000)
    assert Decimal(out["cost"]["total"]) == expected.quantize(Decimal("0.000001"))
    assert out["cost"]["gpu"] == "0.000000" and out["cost"]["currency"] == "USD" and out["cost"]["budget"] is None

    under = (expected / 2).quantize(Decimal("0.01"))
    status, out = post(world.users["member"], body(budget={"steps": 10, "cost": str(under)}))
    assert status == 200 and out["cost"]["budget"] == f"{under.normalize():f}" and out["cost"]["within_budget"] is False
    status, out = post(world.users["member"], body(budget={"steps": 10, "cost": str(expected * 2)}))
    assert out["cost"]["within_budget"] is True

    ResourcePool.objects.filter(kind="sandbox").update(price=None)
    status, out = post(world.users["member"], body(budget={"steps": 10, "cost": "5"}))
    assert out["cost"]["sandbox"] is None and out["cost"]["total"] is None and out["cost"]["within_budget"] is None
