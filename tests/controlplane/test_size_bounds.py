"""Through the API, every size a worker would allocate is refused above its bound with a 422
naming the field, and nothing is saved: the issue's 10^9 prompts_per_step, n and max_new_tokens
(a trainer on that config died of MemoryError after 85 s), every other numeric setting, the run's
own budget fields, and the sizes of a domain's verifier cascade."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.domains.models import Domain
from controlplane.domains.schemas import MAX_ENV_STEPS, MAX_STAGE_TESTS, MAX_STAGES, verifier_errors
from controlplane.runs.models import Run
from controlplane.runs.schemas import MAX_BUDGET_TOKENS
from tests import factories
from trainer.ceilings import numeric_settings
from trainer.config import put_path
from trainer.run_fields import RUN_OWNED

OWNED = {o.path for o in RUN_OWNED}


def _post(client, path, payload):
    return client.post(path, json.dumps(payload), content_type="application/json")


def _member(world) -> Client:
    client = Client()
    client.force_login(world.users["member"])
    return client


def test_the_issues_three_billions_are_refused_and_nothing_is_saved(world):
    client = _member(world)
    config = {"rollout": {"prompts_per_step": 10**9, "n": 10**9, "max_new_tokens": 10**9}}
    payload = factories.run_payload(["addition"], team="acme", config=config)
    for endpoint in ("/api/runs/validate", "/api/runs"):
        r = _post(client, endpoint, payload)
        assert r.status_code == 422, r.content
        assert r.json()["errors"] == [
            {"path": "config.rollout.prompts_per_step", "message": "must be at most 4096"},
            {"path": "config.rollout.n", "message": "must be at most 1024"},
            {"path": "config.rollout.max_new_tokens", "message": "must be at most 65536"},
        ]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("path", sorted(set(numeric_settings()) - OWNED))
def test_a_billion_in_any_numeric_setting_is_refused_through_the_api(world, path):
    bounds = numeric_settings()[path]
    config: dict = {}
    put_path(config, path, 10**9 if bounds.get("le", bounds.get("lt")) < 10**9 else 10**12)
    r = _post(_member(world), "/api/runs", factories.run_payload(["addition"], team="acme", config=config))
    assert r.status_code == 422, r.content
    assert f"config.{path}" in [e["path"] for e in r.json()["errors"]]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("field,value,expected", [
    ("budget", {"steps": 10**9}, ("budget.steps", "must be at most 10000000")),
    ("budget", {"steps": 10, "wall_s": 1e12}, ("budget.wall_s", "must be at most 31622400")),
    ("budget", {"steps": 10, "tokens": 10**30}, ("budget.tokens", f"must be at most {MAX_BUDGET_TOKENS}")),
    ("staleness", 10**9, ("staleness", "must be at most 16")),
])
def test_the_runs_own_size_fields_are_bounded(world, field, value, expected):
    """``budget.tokens`` of 10^30 used to reach the bigint column (a 500)."""
    r = _post(_member(world), "/api/runs", factories.run_payload(["addition"], team="acme", **{field: value}))
    assert r.status_code == 422, r.content
    assert [(e["path"], e["message"]) for e in r.json()["errors"]] == [expected]
    assert Run.objects.count() == 0


def test_a_product_of_settings_is_refused_at_the_setting_it_names(world):
    config = {"rollout": {"prompts_per_step": 4096, "n": 1024}}
    r = _post(_member(world), "/api/runs/validate", factories.run_payload(["addition"], team="acme", config=config))
    assert r.status_code == 422
    assert {"path": "config.rollout.prompts_per_step",
            "message": "times rollout.n is 4194304 sequences per step; at most 65536 are allowed"} in r.json()["errors"]


def test_at_the_bounds_a_run_is_accepted(world):
    """n at its bound, and the sequences (64 x 1024) and tokens (65536 x (512 + 512)) of a step
    exactly at theirs."""
    config = {"rollout": {"prompts_per_step": 64, "n": 1024, "max_new_tokens": 512, "batch_size": 128},
              "optimizer": {"micro_batch_size": 128}}
    r = _post(_member(world), "/api/runs", factories.run_payload(["addition"], team="acme", config=config))
    assert r.status_code == 201, r.content
    assert Run.objects.get().config == config


@pytest.mark.parametrize("spec,expected", [
    ({"stages": [{"type": "exact"}] * (MAX_STAGES + 1)}, ("verifier.stages", f"must have at most {MAX_STAGES} items")),
    ({"stages": [{"type": "code_tests", "params": {"tests": ["assert True"] * (MAX_STAGE_TESTS + 1)}}]},
     ("verifier.stages[0].params.tests", f"lists {MAX_STAGE_TESTS + 1} tests; at most {MAX_STAGE_TESTS} are allowed")),
    ({"stages": [{"type": "environment", "params": {"max_steps": 10**9}}]},
     ("verifier.stages[0].params.max_steps", f"must be at most {MAX_ENV_STEPS}")),
    ({"stages": [{"type": "code_tests", "params": {"limits": {"memory_mb": 10**9}}}]},
     ("verifier.stages[0].params.limits.memory_mb", "must be at most 65536")),
    ({"stages": [{"type": "code_tests", "timeout_s": 10**9}]}, ("verifier.stages[0].timeout_s", "must be at most 3600")),
])
def test_a_verifier_cascades_sizes_are_bounded(world, spec, expected):
    assert [(e.path, e.message) for e in verifier_errors(spec)] == [expected]
    client = Client()
    client.force_login(world.staff)
    r = client.patch("/api/domains/addition", json.dumps({"verifier": spec}), content_type="application/json")
    assert r.status_code == 422 and expected in [(e["path"], e["message"]) for e in r.json()["errors"]]
    assert Domain.objects.get(slug="addition").version == 1


def test_a_cascade_at_its_sizes_is_accepted():
    spec = {"stages": [{"type": "code_tests", "params": {"tests": ["assert True"] * MAX_STAGE_TESTS}}]
            + [{"type": "exact"}] * (MAX_STAGES - 1)}
    assert verifier_errors(spec) == []


def test_an_evaluation_over_the_runs_domains_is_bounded(world):
    """``eval.tasks_per_domain`` times the run's domains: the domains come from the run's own field."""
    slugs = [factories.domain(f"many-{i}").slug for i in range(11)]
    config = {"eval": {"every_steps": 5, "tasks_per_domain": 10_000}}
    r = _post(_member(world), "/api/runs/validate", factories.run_payload(slugs[:10], team="acme", config=config))
    assert r.status_code == 200, r.content
    r = _post(_member(world), "/api/runs", factories.run_payload(slugs, team="acme", config=config))
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "config.eval.tasks_per_domain",
                                   "message": "times 11 domains is 110000 eval tasks; at most 100000 are allowed"}]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("weight", [float("inf"), float("nan"), 1e7, -1e-9, -1])
def test_a_running_runs_domain_weights_are_finite_and_bounded(world, weight):
    """The API's body reader refuses NaN and Infinity; the CLI's values (YAML: .inf) reach the
    service directly, which refuses them too."""
    from controlplane.common.errors import InvalidInput
    from controlplane.runs.services import run_set_weights

    run = factories.run(world.team, domains=[world.domain])
    actor = factories.actor(world.users["member"])
    with pytest.raises(InvalidInput) as err:
        run_set_weights(actor=actor, run=run, weights={"addition": weight})
    assert [(e.path, e.message) for e in err.value.errors] == [
        ("weights.addition", "must be a finite number from 0 (pauses the domain) to 1e+06")]
    assert run_set_weights(actor=actor, run=run, weights={"addition": 1e6}).run_domains.get().weight == 1e6


def test_a_weight_of_0_pauses_a_domain_but_a_run_keeps_one_domain_sampled(world):
    from controlplane.common.errors import InvalidInput
    from controlplane.runs.services import run_set_weights

    run = factories.run(world.team, domains=[world.domain])
    with pytest.raises(InvalidInput) as err:
        run_set_weights(actor=factories.actor(world.users["member"]), run=run, weights={"addition": 0})
    assert [(e.path, e.message) for e in err.value.errors] == [
        ("weights", "at least one domain must keep a weight above 0 (a weight of 0 pauses a domain)")]
    assert run.run_domains.get().weight == 1.0
    two = factories.run(world.team, domains=[world.domain, world.domain2])
    client = _member(world)
    r = _post(client, f"/api/runs/{two.id}/weights", {"weights": {"parity": 0}})
    assert r.status_code == 200, r.content
    assert dict(two.run_domains.values_list("domain__slug", "weight")) == {"addition": 1.0, "parity": 0.0}
    r = _post(client, f"/api/runs/{two.id}/weights", {"weights": {"addition": 0}})
    assert r.status_code == 422 and [e["path"] for e in r.json()["errors"]] == ["weights"]
    r = _post(client, f"/api/runs/{two.id}/weights", {"weights": {"parity": 2}})  # resumed
    assert r.status_code == 200 and two.run_domains.get(domain__slug="parity").weight == 2.0


@pytest.mark.parametrize("body,path", [
    ({"name": "   "}, "name"),
    ({"config": {"tokenizer": {"path": "\t"}}}, "config.tokenizer.path"),
    ({"config": {"model": {"reference_path": " "}}}, "config.model.reference_path"),
    ({"clone_from": 2**63 - 1}, "clone_from"),
])
def test_validate_refuses_what_create_refuses(world, body, path):
    """A blank run name or model reference reached the trainer as it was; /api/runs/validate said
    valid: true for a clone_from that /api/runs refused."""
    for endpoint in ("/api/runs/validate", "/api/runs"):
        r = _post(_member(world), endpoint, factories.run_payload(["addition"], team="acme", **body))
        assert r.status_code == 422, (endpoint, r.content)
        assert [e["path"] for e in r.json()["errors"]] == [path]
    assert Run.objects.count() == 0


def test_a_clone_from_another_teams_run_is_refused_by_validate_too(world):
    theirs = Run.objects.create(team=world.other, name="theirs", base_model="tiny-llama", budget_steps=1)
    r = _post(_member(world), "/api/runs/validate", factories.run_payload(["addition"], team="acme", clone_from=theirs.pk))
    assert r.status_code == 422 and r.json()["errors"] == [{"path": "clone_from", "message": f"no run {theirs.pk} in your teams"}]


@pytest.mark.parametrize("path,body", [
    ("priority", {"priority": 5, "x": 1}),
    ("weights", {"weights": {"addition": 1}, "x": 1}),
])
def test_a_run_controls_documented_body_is_the_accepted_one(world, path, body):
    created = _post(_member(world), "/api/runs", factories.run_payload(["addition"], team="acme"))
    run_id = created.json()["id"]
    r = _post(_member(world), f"/api/runs/{run_id}/{path}", body)
    assert r.status_code == 422 and r.json()["errors"] == [{"path": "x", "message": "unknown field"}]
