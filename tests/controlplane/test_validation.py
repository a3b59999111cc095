"""Every config is checked before anything is saved; errors name the field path and the reason."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from django.test import Client

import trainer.config as trainer_config_module

from controlplane.common.errors import InvalidInput
from controlplane.domains.schemas import domain_errors, verifier_errors
from controlplane.domains.models import Domain
from controlplane.runs.models import Run
from controlplane.runs.schemas import RUN_SCHEMA
from controlplane.runs.services import run_validate
from tests import factories
from trainer.config import ConfigError, RolloutConfig, _num, load_config, put_path
from trainer.run_fields import RUN_OWNED
from trainer.config_schema import config_setting, config_settings


def messages(errors):
    return [str(e) for e in errors]


def test_verifier_stage_timeout_path():
    spec = {"stages": [{"type": "exact", "timeout_s": 1}, {"type": "numeric", "timeout_s": 0}]}
    assert messages(verifier_errors(spec)) == ["verifier.stages[1].timeout_s: must be greater than 0"]


def test_verifier_unknown_stage_type_and_params():
    spec = {"stages": [{"type": "telepathy"}]}
    errors = messages(verifier_errors(spec))
    assert any(e.startswith("verifier.stages[0].type:") and "telepathy" in e for e in errors)


@pytest.mark.parametrize("spec,expected", [
    ({}, "verifier.stages: required"),
    ({"stages": []}, "verifier.stages: must not be empty"),
    ({"stages": [{"timeout_s": 1}]}, "verifier.stages[0].type: required"),
    ({"stages": [{"type": "exact", "retries": 2}]}, "verifier.stages[0].retries: unknown field"),
    ({"stages": "exact"}, "verifier.stages: must be a list"),
])
def test_verifier_shape_errors(spec, expected):
    assert expected in messages(verifier_errors(spec))


@pytest.mark.parametrize("data,expected", [
    ({"verifier": {"stages": [{"type": "code_tests", "params": {"limits": {"memory_mb": 1}}}]}},
     "verifier.stages[0].params.limits.memory_mb: must be at least 16"),
    ({"verifier": {"stages": [{"type": "code_tests", "params": {"limits": {"wall_s": -1}}}]}},
     "verifier.stages[0].params.limits.wall_s: must be greater than 0"),
    ({"verifier": {"stages": [{"type": "code_tests", "params": {"limits": {"gpus": 1}}}]}},
     "verifier.stages[0].params.limits.gpus: unknown parameter"),
    ({"sandbox": {"limits": {"memory_mb": 512}}}, "sandbox: unknown field"),
    ({"max_share": 0}, "max_share: must be greater than 0"),
    ({"max_share": 1.5}, "max_share: must be at most 1"),
    ({"priority": 100}, "priority: must be at most 99"),
    ({"max_concurrent_sandboxes": -2}, "max_concurrent_sandboxes: must be at least 0"),
    ({"task_timeout_s": "slow"}, "task_timeout_s: must be a number"),
    ({"kind": "poetry"}, "kind: must be one of: math, code, reasoning, document, tool_use, text, other"),
])
def test_domain_field_errors(data, expected):
    assert expected in messages(domain_errors(data, creating=False))


def test_domain_create_lists_every_missing_field():
    assert messages(domain_errors({}, creating=True)) == [
        "kind: required", "slug: required", "task_source: required", "title: required", "verifier: required",
    ]


@pytest.mark.parametrize("mutate,expected", [
    (lambda p: p.pop("name"), "name: required"),
    (lambda p: p.update(domains=[]), "domains: must not be empty"),
    (lambda p: p["domains"][0].update(weight=0), "domains[0].weight: must be greater than 0"),
    (lambda p: p["budget"].update(steps=0), "budget.steps: must be at least 1"),
    (lambda p: p.update(staleness=-1), "staleness: must be at least 0"),
    (lambda p: p.update(priority=0), "priority: must be at least 1"),
    (lambda p: p.update(config={"algorithm": {"clip_high": 0}}), "config.algorithm.clip_high: must be greater than 0"),
    (lambda p: p.update(config={"rollout": {"n": "eight"}}), "config.rollout.n: must be an integer"),
    (lambda p: p.update(config={"model": {"path": "/x"}}), "config.model.path: set it with the run's 'base_model' field instead"),
    (lambda p: p.update(config={"rollout": {"staleness": 2}}), "config.rollout.staleness: set it with the run's 'staleness' field instead"),
    (lambda p: p.update(config={"rollout": {"verify_budget_s": 5}}),
     "config.rollout.verify_budget_s: needs rollout.staleness of at least 1"),
    (lambda p: p.update(staleness=0, config={"rollout": {"verify_budget_s": 5}}),
     "config.rollout.verify_budget_s: needs rollout.staleness of at least 1"),
    (lambda p: p["domains"].append({"slug": "nope", "weight": 1}), "domains[1].slug: unknown domain 'nope'"),
    (lambda p: p["domains"].append({"slug": "addition", "weight": 1}), "domains[1].slug: 'addition' is listed twice"),
    (lambda p: p.update(base_model="/does/not/exist"), "base_model: model directory '/does/not/exist' not found under the allowed model directories"),
])
def test_run_errors_name_the_field(world, mutate, expected):
    payload = factories.run_payload(["addition"], team="acme")
    mutate(payload)
    with pytest.raises(InvalidInput) as err:
        run_validate(actor=factories.actor(world.users["member"]), data=payload)
    assert any(m.startswith(expected) for m in messages(err.value.errors)), messages(err.value.errors)


def test_every_error_of_a_run_body_comes_in_one_pass(world):
    """A bad weight and a bad budget do not hide the config's bad settings, nor one another; a run
    field with its own error is not lent to the config's cross-setting rules."""
    payload = factories.run_payload(["addition"], team="acme", staleness=-1,
                                    config={"algorithm": {"clip_low": 1.5}, "rollout": {"n": "x", "verify_budget_s": 5}})
    payload["domains"][0]["weight"] = 0
    payload["budget"]["steps"] = 0
    with pytest.raises(InvalidInput) as err:
        run_validate(actor=factories.actor(world.users["member"]), data=payload)
    paths = [e.path for e in err.value.errors]
    assert {"domains[0].weight", "budget.steps", "staleness", "config.algorithm.clip_low", "config.rollout.n"} <= set(paths), paths
    assert "config.rollout.staleness" not in paths  # staleness is reported once, at its own field


def test_a_section_that_is_not_a_mapping_is_an_error_not_a_crash(world):
    payload = factories.run_payload(["addition"], team="acme", staleness=1, config={"rollout": 5})
    with pytest.raises(InvalidInput) as err:
        run_validate(actor=factories.actor(world.users["member"]), data=payload)
    assert ("config.rollout", "must be a mapping") in [(e.path, e.message) for e in err.value.errors]


def test_bad_run_is_refused_before_anything_is_saved(world):
    client = Client()
    client.force_login(world.users["member"])
    payload = factories.run_payload(["addition"], team="acme", config={"algorithm": {"clip_high": 0}})
    r = client.post("/api/runs", json.dumps(payload), content_type="application/json")
    assert r.status_code == 422
    assert {"path": "config.algorithm.clip_high", "message": "must be greater than 0"} in r.json()["errors"]
    assert Run.objects.count() == 0


def test_bad_domain_edit_is_refused_and_keeps_the_version(world):
    client = Client()
    client.force_login(world.staff)
    r = client.patch("/api/domains/addition", json.dumps({"verifier": {"stages": [{"type": "exact", "timeout_s": 0}]}}),
                     content_type="application/json")
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "verifier.stages[0].timeout_s", "message": "must be greater than 0"}]
    d = Domain.objects.get(slug="addition")
    assert d.version == 1 and d.versions.count() == 1


def test_malformed_json_and_wrong_types_are_clear(world):
    client = Client()
    client.force_login(world.users["member"])
    r = client.post("/api/runs", "{not json", content_type="application/json")
    assert r.status_code == 422 and "not valid JSON" in r.json()["errors"][0]["message"]
    r = client.post("/api/runs", "[1, 2]", content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"][0]["message"] == "must be an object"
    r = client.get("/api/runs/1/metrics?after=abc")
    assert r.status_code == 422 and r.json()["errors"][0] == {"path": "after", "message": "must be an integer"}


def test_quota_errors(world):
    client = Client()
    client.force_login(world.staff)
    r = client.put("/api/teams/acme/quota", json.dumps({"max_gpus": -1}), content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"] == [{"path": "quota.max_gpus", "message": "must be at least 0"}]


# ----------------------------------------------------------------------------- one source per setting
# The trainer's dataclasses (trainer/config.py) give every run setting its type, default, bounds and
# help; the run form, the API and the Run model derive from them, and the settings a run owns are
# listed once (RUN_OWNED). These tests hold every setting to that, so a new one is covered unasked.

def _violations(setting):
    """``(bad value, trainer bound operator)`` for each bound of a setting."""
    out = []
    for op, bound in setting.bounds.items():
        bad = {"ge": bound - 1, "gt": bound, "le": bound + 1, "lt": bound}[op]
        out.append((int(bad) if setting.type is int else float(bad), op))
    return out


def _config_at(path, value):
    config = {}
    put_path(config, path, value)
    return config


def test_every_bound_of_every_setting_is_the_apis(world):
    """A value beyond any bound of any trainer setting is refused at ``config.<path>`` with the
    trainer's own message; settings the run owns are refused whatever their value."""
    actor = factories.actor(world.users["member"])
    owned = {o.path for o in RUN_OWNED}
    checked, wrong = set(), []
    for path, setting in config_settings().items():
        if path in owned:
            continue
        for bad, op in _violations(setting):
            with pytest.raises(ConfigError) as trainer:
                load_config(_config_at(path, bad))
            expected = [(f"config.{p}", m) for p, m in trainer.value.errors]
            with pytest.raises(InvalidInput) as api:
                run_validate(actor=actor, data=factories.run_payload(["addition"], team="acme", config=_config_at(path, bad)))
            got = [(e.path, e.message) for e in api.value.errors]
            checked.add((path, op))
            if got != expected or expected[0][0] != f"config.{path}":
                wrong.append((path, op, bad, got, expected))
    assert not wrong
    assert {("rollout.n", "le"), ("rollout.prompts_per_step", "le"), ("algorithm.clip_high", "gt")} <= checked


@pytest.mark.parametrize("owned", RUN_OWNED, ids=lambda o: o.path)
def test_a_setting_the_run_owns_is_refused_in_config_naming_the_run_field(world, owned):
    client = Client()
    client.force_login(world.users["member"])
    config = _config_at(owned.path, config_setting(owned.path).default)  # a valid value, still refused
    payload = factories.run_payload(["addition"], team="acme", config=config)
    for url in ("/api/runs/validate", "/api/runs"):
        r = client.post(url, json.dumps(payload), content_type="application/json")
        assert r.status_code == 422
        assert r.json()["errors"] == [{"path": f"config.{owned.path}", "message": owned.refusal()}]
    assert Run.objects.count() == 0
    if not owned.assigned:  # the message names a field of the run body that sets it
        node = RUN_SCHEMA
        for part in owned.source.split("."):
            node = node["properties"][part]
        assert f"'{owned.source}'" in owned.refusal()


def test_settings_beside_run_owned_ones_are_accepted(world):
    config = {"model": {"dtype": "bfloat16"}, "checkpoint": {"every_steps": 3}, "rollout": {"n": 4}, "seed": 7}
    plan = run_validate(actor=factories.actor(world.users["member"]),
                        data=factories.run_payload(["addition"], team="acme", config=config))
    assert plan.fields["config"] == config


def test_a_rule_across_config_and_run_fields_sees_the_run_fields(world):
    """A verification budget needs staleness, which the run's own field sets: with it, accepted."""
    plan = run_validate(actor=factories.actor(world.users["member"]),
                        data=factories.run_payload(["addition"], team="acme", staleness=1,
                                                   config={"rollout": {"verify_budget_s": 5}}))
    assert plan.fields["config"] == {"rollout": {"verify_budget_s": 5}}


def test_run_fields_take_the_trainer_settings_bounds_and_default(world):
    actor = factories.actor(world.users["member"])
    staleness = config_setting("rollout.staleness")
    max_steps = config_setting("limits.max_steps")

    def errors(**overrides):
        with pytest.raises(InvalidInput) as err:
            run_validate(actor=actor, data=factories.run_payload(["addition"], team="acme", **overrides))
        return [(e.path, e.message) for e in err.value.errors]

    assert errors(staleness=staleness.bounds["le"] + 1) == [("staleness", f"must be at most {staleness.bounds['le']}")]
    assert errors(budget={"steps": max_steps.bounds["le"] + 1}) == [("budget.steps", f"must be at most {max_steps.bounds['le']}")]
    plan = run_validate(actor=actor, data=factories.run_payload(["addition"], team="acme", staleness=staleness.bounds["le"]))
    assert plan.fields["staleness"] == staleness.bounds["le"]
    plan = run_validate(actor=actor, data=factories.run_payload(["addition"], team="acme"))
    assert plan.fields["staleness"] == staleness.default
    assert Run._meta.get_field("staleness").default == staleness.default
    assert Run._meta.get_field("staleness").help_text == staleness.help


def test_the_database_holds_the_staleness_bounds(world):
    from django.db import IntegrityError, transaction

    bounds = config_setting("rollout.staleness").bounds
    factories.run(world.team, staleness=bounds["le"])
    for bad in (bounds["ge"] - 1, bounds["le"] + 1):
        with pytest.raises(IntegrityError), transaction.atomic():
            factories.run(world.team, staleness=bad)


def test_the_run_models_migrations_follow_the_trainer_settings(db):
    """A bound changed in trainer/config.py that the Run model holds needs its migration."""
    from django.core.management import call_command

    call_command("makemigrations", "runs", "--check", "--dry-run", verbosity=0)


@dataclass
class RolloutWithTopK(RolloutConfig):
    top_k: int = _num(0, ge=0, le=1000)
    """Sample only from the k most likely tokens; 0 samples from all of them."""


def test_a_setting_added_to_the_trainer_reaches_the_form_the_api_and_the_trainer(world, monkeypatch):
    """The one edit of docs/controlplane.md ("Adding a run setting"), made here: a field with its
    bounds and docstring in a trainer dataclass, and nothing else."""
    from controlplane.runs.preflight import trainer_config

    monkeypatch.setattr(trainer_config_module, "RolloutConfig", RolloutWithTopK)
    client = Client()
    client.force_login(world.users["member"])

    page = client.get("/runs/new/").content.decode()
    form = json.loads(re.search(r'<script id="form-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    top_k = form["config_schema"]["properties"]["rollout"]["properties"]["top_k"]
    assert top_k == {"type": "integer", "default": 0, "minimum": 0, "maximum": 1000,
                     "description": "Sample only from the k most likely tokens; 0 samples from all of them."}

    payload = factories.run_payload(["addition"], team="acme", config={"rollout": {"top_k": 1001}})
    r = client.post("/api/runs/validate", json.dumps(payload), content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"] == [{"path": "config.rollout.top_k", "message": "must be at most 1000"}]

    payload["config"]["rollout"]["top_k"] = 40
    r = client.post("/api/runs", json.dumps(payload), content_type="application/json")
    assert r.status_code == 201, r.json()
    run = Run.objects.get(pk=r.json()["id"])
    cfg = load_config(trainer_config(run, list(run.run_domains.select_related("domain", "domain_version"))))
    assert cfg.rollout.top_k == 40
