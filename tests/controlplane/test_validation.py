"""Every config is checked before anything is saved; errors name the field path and the reason."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.common.errors import InvalidInput
from controlplane.domains.schemas import domain_errors, verifier_errors
from controlplane.domains.models import Domain
from controlplane.runs.models import Run
from controlplane.runs.services import run_validate
from tests import factories


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
    ({"sandbox": {"limits": {"memory_mb": 1}}}, "sandbox.limits.memory_mb: must be at least 16"),
    ({"sandbox": {"backend": "vm"}}, "sandbox.backend: must be one of: default, bwrap, docker"),
    ({"sandbox": {"limits": {"wall_s": -1}}}, "sandbox.limits.wall_s: must be greater than 0"),
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
    (lambda p: p.update(config={"model": {"path": "/x"}}), "config.model: set it with the run's 'base_model' field instead"),
    (lambda p: p["domains"].append({"slug": "nope", "weight": 1}), "domains[1].slug: unknown domain 'nope'"),
    (lambda p: p["domains"].append({"slug": "addition", "weight": 1}), "domains[1].slug: 'addition' is listed twice"),
    (lambda p: p.update(base_model="/does/not/exist"), "base_model: no model at /does/not/exist (expected a directory with config.json)"),
])
def test_run_errors_name_the_field(world, mutate, expected):
    payload = factories.run_payload(["addition"], team="acme")
    mutate(payload)
    with pytest.raises(InvalidInput) as err:
        run_validate(actor=factories.actor(world.users["member"]), data=payload)
    assert expected in messages(err.value.errors)


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
