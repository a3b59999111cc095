"""The registry's REST API: roles, field errors, lineage, evaluations and their tasks, export."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane import dispatch
from controlplane.registry.models import EvalRun
from tests import factories
from tests.controlplane.test_registry_gate import N, evaluated, version


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def clients(world):
    out = {}
    for role, user in world.users.items():
        out[role] = Client()
        out[role].force_login(user)
    out["other"] = Client()
    out["other"].force_login(world.other_users["admin"])
    return out


def test_suites_evaluations_and_roles(world, clients, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: sent.append((name, args)))
    suite = {"slug": "core", "team": "acme", "items": [{"domain": "addition", "tasks": 8}]}
    assert post(clients["viewer"], "/api/registry/suites", suite).status_code == 403
    r = post(clients["member"], "/api/registry/suites", {**suite, "items": [{"domain": "addition", "tasks": 0, "layer": "x"}]})
    assert r.status_code == 422
    assert {e["path"] for e in r.json()["errors"]} == {"items[0].tasks", "items[0].layer"}
    r = post(clients["member"], "/api/registry/suites", suite)
    assert r.status_code == 201 and r.json()["version"] == 1 and r.json()["items"][0]["domain_version"] == 1
    assert clients["viewer"].get("/api/registry/suites/core").json()["items"][0]["seed"] == 1234
    assert clients["other"].get("/api/registry/suites/core").status_code == 404

    v = version(world.team, "tiny@1/1")
    assert post(clients["viewer"], f"/api/registry/versions/{v.id}/evaluate", {"suite": "core"}).status_code == 403
    assert post(clients["other"], f"/api/registry/versions/{v.id}/evaluate", {"suite": "core"}).status_code == 404
    r = post(clients["member"], f"/api/registry/versions/{v.id}/evaluate", {"suite": "core", "engine": "jax"})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "engine"
    with django_capture_on_commit_callbacks(execute=True):
        r = post(clients["member"], f"/api/registry/versions/{v.id}/evaluate", {"suite": "core"})
    assert r.status_code == 201 and r.json()["state"] == "queued" and r.json()["suite"] == "core"
    assert sent == [("temper.eval.run", (r.json()["id"],))]


def test_a_suite_item_pools_levels_and_says_which_levels_are_wrong(world, clients):
    """``levels`` pools the held-out tasks of several levels (a small domain's few held-out tasks
    per level, trainer.evaluation.spec_tasks); each level is checked where it is given."""
    from trainer.evaluation import EvalSpec

    bad = post(clients["member"], "/api/registry/suites", {"slug": "pooled", "team": "acme", "items": [
        {"domain": "addition", "levels": [1, 1]}, {"domain": "addition", "layer": "end_to_end", "levels": [-1, "2"]}]})
    assert bad.status_code == 422
    assert {e["path"] for e in bad.json()["errors"]} >= {"items[0].levels", "items[1].levels[0]", "items[1].levels[1]"}
    r = post(clients["member"], "/api/registry/suites", {"slug": "pooled", "team": "acme",
                                                        "items": [{"domain": "addition", "levels": [1, 2, 3, 4]}]})
    assert r.status_code == 201 and r.json()["items"][0]["levels"] == [1, 2, 3, 4]
    item = clients["viewer"].get("/api/registry/suites/pooled").json()["items"][0]
    assert EvalSpec.from_item(item).levels == (1, 2, 3, 4)
    single = post(clients["member"], "/api/registry/suites", {"slug": "single", "team": "acme", "items": [{"domain": "addition"}]})
    assert single.json()["items"][0]["levels"] == [] and EvalSpec.from_item(single.json()["items"][0]).levels == ()
    # an item without levels stores none: saving it again (as a suite saved before levels existed) is no new version
    again = post(clients["member"], "/api/registry/suites", {"slug": "single", "team": "acme",
                                                            "items": [{"domain": "addition", "levels": []}]})
    assert again.json()["version"] == single.json()["version"] == 1
    from controlplane.registry.models import EvalSuiteVersion
    assert "levels" not in EvalSuiteVersion.objects.get(suite__slug="single").items[0]


def test_versions_evals_and_export(world, clients, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    admin = factories.actor(world.users["admin"])
    from controlplane.registry import services

    sv = services.suite_save(actor=admin, data={"slug": "core", "team": "acme", "items": [{"domain": "addition", "tasks": N}]})
    v = version(world.team, "tiny@1/1")
    weights = tmp_path / "w"
    weights.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        (weights / name).write_text("{}")
    v.path, v.pinned = str(weights), {"addition": 1}
    v.save()
    ev = evaluated(v, sv, {"addition": [1.0] * N})
    detail = clients["viewer"].get(f"/api/registry/versions/{v.id}").json()
    assert detail["name"] == "tiny@1/1" and detail["pinned"] == {"addition": 1} and detail["aliases"] == []
    listing = clients["viewer"].get("/api/registry/versions?base=tiny").json()
    assert listing["count"] == 1
    e = clients["viewer"].get(f"/api/registry/evals/{ev.id}").json()
    assert e["results"][0]["pass_at"] == {"1": 1.0} and e["version"] == "tiny@1/1"
    tasks = clients["viewer"].get(f"/api/registry/evals/{ev.id}/tasks?domain=addition").json()
    assert len(tasks) == N and tasks[0]["rewards"] == [1.0]
    assert clients["other"].get(f"/api/registry/evals/{ev.id}").status_code == 404

    r = post(clients["member"], f"/api/registry/versions/{v.id}/export", {})
    assert r.status_code == 409 and "never promoted" in r.json()["detail"]
    assert post(clients["member"], "/api/registry/aliases/canary", {"version": v.id}).json()["version"] == "tiny@1/1"
    assert post(clients["member"], "/api/registry/aliases/staging", {"version": v.id}).status_code == 404
    assert post(clients["viewer"], f"/api/registry/versions/{v.id}/export", {}).status_code == 403
    r = post(clients["member"], f"/api/registry/versions/{v.id}/export", {"name": "../../etc"})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "name"
    r = post(clients["member"], f"/api/registry/versions/{v.id}/export", {"name": "tiny-prod"})
    out = tmp_path / "exports" / "acme" / "tiny-prod"
    assert r.status_code == 200 and r.json()["path"] == str(out) and (out / "model.safetensors").is_file()
    assert json.loads((out / "temper.json").read_text())["aliases"] == ["canary"]
    assert clients["viewer"].get("/api/registry/aliases").json()[0]["name"] == "canary"
    assert EvalRun.objects.count() == 1


def _promoted(team, name, root, payload: str):
    """A version of ``team`` with files holding ``payload``, that an alias pointed at."""
    from controlplane.registry.models import Alias, AliasMove

    v = version(team, name)
    weights = root / name.replace("/", "_")
    weights.mkdir(parents=True)
    for f in ("model.safetensors", "config.json", "tokenizer.json"):
        (weights / f).write_text(payload)
    v.path = str(weights)
    v.save()
    alias, _ = Alias.objects.update_or_create(team=team, base="tiny", name="canary", defaults={"version": v})
    AliasMove.objects.create(alias=alias, to_version=v)
    return v


def test_exports_of_the_same_name_by_two_teams_never_meet(world, clients, tmp_path, settings):
    """The attack: globex exports as "shared", then acme exports as "shared" too; acme's files
    overwrote globex's in one directory. Each team's exports have a directory of their own; a name
    holding another version is a 409; the same version's re-export replaces it whole."""
    settings.VAR_DIR = tmp_path
    theirs = _promoted(world.other, "tiny@9/9", tmp_path / "w", "globex")
    ours = _promoted(world.team, "tiny@1/1", tmp_path / "w", "acme")
    assert post(clients["other"], f"/api/registry/versions/{theirs.id}/export", {"name": "shared"}).status_code == 200
    r = post(clients["member"], f"/api/registry/versions/{ours.id}/export", {"name": "shared"})
    assert r.status_code == 200, r.content
    assert (tmp_path / "exports" / "globex" / "shared" / "model.safetensors").read_text() == "globex"
    assert (tmp_path / "exports" / "acme" / "shared" / "model.safetensors").read_text() == "acme"

    later = _promoted(world.team, "tiny@1/2", tmp_path / "w", "acme-later")
    r = post(clients["member"], f"/api/registry/versions/{later.id}/export", {"name": "shared"})
    assert r.status_code == 409 and "already holds an export of tiny@1/1" in r.json()["detail"]
    assert (tmp_path / "exports" / "acme" / "shared" / "model.safetensors").read_text() == "acme"

    stale = tmp_path / "exports" / "acme" / "shared" / "left-over.bin"
    stale.write_text("x")
    assert post(clients["member"], f"/api/registry/versions/{ours.id}/export", {"name": "shared"}).status_code == 200
    assert not stale.exists()  # replaced whole, not copied over
    assert sorted(p.name for p in (tmp_path / "exports" / "acme").iterdir()) == ["shared"]  # no staging left


@pytest.mark.parametrize("name", ["x\n", "x\n\n", "\nx", "x\r"])
def test_an_export_name_with_a_newline_is_refused(world, clients, tmp_path, settings, name):
    settings.VAR_DIR = tmp_path
    ours = _promoted(world.team, "tiny@1/1", tmp_path / "w", "acme")
    r = post(clients["member"], f"/api/registry/versions/{ours.id}/export", {"name": name})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "name"
    assert not (tmp_path / "exports").exists()


def test_openapi_documents_the_registry(world, clients):
    doc = clients["viewer"].get("/api/openapi.json").json()
    paths = set(doc["paths"])
    assert {"/api/registry/versions", "/api/registry/compare", "/api/registry/aliases/{name}",
            "/api/registry/aliases/{name}/rollback", "/api/registry/versions/{version_id}/export"} <= paths


def test_auto_evaluate_suites_queue_an_evaluation_of_every_new_version(world, monkeypatch, django_capture_on_commit_callbacks, tmp_path, settings):
    from controlplane.registry import services
    from controlplane.registry.models import ModelVersion
    from controlplane.runs.models import Checkpoint

    settings.VAR_DIR = tmp_path
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: sent.append((name, args)))
    admin = factories.actor(world.users["admin"])
    services.suite_save(actor=admin, data={"slug": "auto", "team": "acme", "auto_evaluate": True, "items": [{"domain": "addition"}]})
    services.suite_save(actor=admin, data={"slug": "manual", "team": "acme", "items": [{"domain": "addition"}]})
    run = factories.run(world.team, base_model="/models/tiny")
    with django_capture_on_commit_callbacks(execute=True):
        Checkpoint.objects.create(run=run, step=5, path=str(tmp_path / "missing"))
    v = ModelVersion.objects.get(run=run, step=5)
    evals = EvalRun.objects.filter(suite_version__suite__slug="auto")
    assert {e.version.name for e in evals} == {"tiny", v.name}, "the base and the new version"
    assert not EvalRun.objects.filter(suite_version__suite__slug="manual").exists()
    assert sorted(sent) == sorted(("temper.eval.run", (e.pk,)) for e in evals)
    # A checkpoint saved again (after a resume) refreshes its version without a second evaluation.
    with django_capture_on_commit_callbacks(execute=True):
        Checkpoint.objects.filter(run=run, step=5).get().save()
    assert evals.count() == 2
