"""A rollout engine the installation cannot run is refused where it is named, never queued to fail
on a worker: the run API and the evaluation API answer 422 at the field with what to install,
nothing is saved, and a worker without the engine refuses a run row written around the API with a
``refused`` event. vLLM is installed where the tests run, so "not installed" is a package name that
exists nowhere (the same ``importlib.util.find_spec`` lookup a host without vLLM answers None to)."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.registry.models import EvalRun
from controlplane.runs.models import Run, RunEvent, RunState
from tests import factories
from tests.controlplane.test_registry_gate import version
from trainer import rollout
from trainer.config import ConfigError


@pytest.fixture
def no_vllm(monkeypatch):
    """This host as one without vLLM (``make demo`` installs requirements.txt only)."""
    monkeypatch.setitem(rollout._PACKAGES, "vllm", ("temper_test_no_such_package", rollout._PACKAGES["vllm"][1]))


def _member(world) -> Client:
    client = Client()
    client.force_login(world.users["member"])
    return client


def _post(client, path, body):
    return client.post(path, json.dumps(body), content_type="application/json")


def _run_body(engine: str | None) -> dict:
    config = {"rollout": {"n": 4, "prompts_per_step": 2, **({"engine": engine} if engine else {})}}
    return factories.run_payload(["addition"], team="acme", config=config)


def test_without_vllm_a_vllm_run_is_refused_at_the_field_and_nothing_is_saved(world, no_vllm):
    client = _member(world)
    for endpoint in ("/api/runs/validate", "/api/runs"):
        r = _post(client, endpoint, _run_body("vllm"))
        assert r.status_code == 422, r.content
        [error] = r.json()["errors"]
        assert error["path"] == "config.rollout.engine"
        assert "needs the vllm package, which is not installed" in error["message"]
        assert "make vllm" in error["message"] and error["message"].endswith("available: torch")
    assert Run.objects.count() == 0
    assert _post(client, "/api/runs", _run_body("torch")).status_code == 201
    assert _post(client, "/api/runs", _run_body(None)).status_code == 201  # torch is the default


def test_the_installations_engines_can_be_named_for_workers_elsewhere(world, no_vllm, settings):
    """Web without vLLM, GPU workers with it: TEMPER_ROLLOUT_ENGINES says what the workers run."""
    settings.TEMPER_ROLLOUT_ENGINES = ["torch", "vllm"]
    assert _post(_member(world), "/api/runs", _run_body("vllm")).status_code == 201


def test_an_engine_left_out_of_the_installations_list_is_refused_even_where_installed(world, settings):
    assert rollout.engine_problem("vllm") is None  # installed here
    settings.TEMPER_ROLLOUT_ENGINES = ["torch"]
    r = _post(_member(world), "/api/runs", _run_body("vllm"))
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "config.rollout.engine", "message":
                                   "the vllm engine is not among this installation's engines "
                                   "(TEMPER_ROLLOUT_ENGINES); available: torch"}]
    assert Run.objects.count() == 0


def test_without_vllm_an_evaluation_on_vllm_is_refused(world, no_vllm, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)
    client = _member(world)
    assert _post(client, "/api/registry/suites", {"slug": "core", "team": "acme",
                                                  "items": [{"domain": "addition", "tasks": 8}]}).status_code == 201
    v = version(world.team, "tiny@1/1")
    r = _post(client, f"/api/registry/versions/{v.id}/evaluate", {"suite": "core", "engine": "vllm"})
    assert r.status_code == 422, r.content
    assert r.json()["errors"][0]["path"] == "engine"
    assert "not installed" in r.json()["errors"][0]["message"]
    assert not EvalRun.objects.exists()
    assert _post(client, f"/api/registry/versions/{v.id}/evaluate", {"suite": "core", "engine": "torch"}).status_code == 201


def test_a_worker_without_the_engine_refuses_a_run_row_written_around_the_api(world, settings, tmp_path, monkeypatch):
    from controlplane import dispatch
    from workers.driver import drive

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)
    settings.VAR_DIR = tmp_path
    run = Run.objects.get(pk=_post(_member(world), "/api/runs", _run_body("torch")).json()["id"])
    run.transition(RunState.QUEUED)
    run.transition(RunState.RUNNING)
    run.save()
    Run.objects.filter(pk=run.pk).update(config={"rollout": {"n": 4, "prompts_per_step": 2, "engine": "vllm"}})
    monkeypatch.setitem(rollout._PACKAGES, "vllm", ("temper_test_no_such_package", rollout._PACKAGES["vllm"][1]))

    def no_send(name, args):
        raise AssertionError("a refused run sends no work")

    assert drive(run.id, worker="test-worker", send=no_send).startswith("refused")
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    [refused] = RunEvent.objects.filter(run=run, kind="refused")
    assert [e["path"] for e in refused.data["errors"]] == ["config.rollout.engine"]
    assert "needs the vllm package" in refused.message


def test_the_trainer_refuses_an_engine_its_host_cannot_run(no_vllm):
    with pytest.raises(ConfigError) as exc:
        rollout.make_engine("vllm", model=None, tokenizer=None)
    assert exc.value.errors[0][0] == "rollout.engine" and "not installed" in exc.value.errors[0][1]
    with pytest.raises(ConfigError, match="unknown engine 'jax'"):
        rollout.make_engine("jax", model=None, tokenizer=None)
    assert rollout.installed_engines() == ["torch"]
