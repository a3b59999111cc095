"""JSONL uploads: one broken line refuses the whole upload with that line's number; a good one
becomes a team domain whose tasks a run trains on."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.domains.models import Domain
from tests import factories

GOOD = "\n".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) for a in range(5))


def upload(client, jsonl, slug="sums"):
    body = {"team": "acme", "slug": slug, "title": "Sums", "kind": "math", "jsonl": jsonl,
            "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}}
    return client.post("/api/domains/upload", json.dumps(body), content_type="application/json")


def test_one_broken_line_refuses_everything(world):
    client = Client()
    client.force_login(world.users["admin"])
    lines = GOOD.splitlines()
    lines.insert(2, json.dumps({"prompt": "no answer here"}))
    r = upload(client, "\n".join(lines))
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "jsonl.lines[3].answer", "message": "required (or tests)"}]
    assert not Domain.objects.filter(slug="sums").exists()


def test_invalid_json_line_is_named(world):
    client = Client()
    client.force_login(world.users["admin"])
    r = upload(client, GOOD + "\n{not json")
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "jsonl.lines[6]"


def test_good_upload_becomes_a_versioned_team_domain(world):
    client = Client()
    client.force_login(world.users["admin"])
    r = upload(client, GOOD)
    assert r.status_code == 201, r.content
    d = Domain.objects.get(slug="sums")
    assert d.team == world.team and d.family == "jsonl" and len(d.task_source["tasks"]) == 5
    assert d.versions.count() == 1
    # Invisible to another team; members cannot upload.
    other = Client()
    other.force_login(world.other_users["admin"])
    assert other.get("/api/domains/sums").status_code == 404
    member = Client()
    member.force_login(world.users["member"])
    assert upload(member, GOOD, slug="sums2").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_run_trains_on_uploaded_tasks(tmp_path, settings, monkeypatch):
    from controlplane import dispatch
    from controlplane.accounts.models import Membership
    from controlplane.domains.services import domain_upload_jsonl
    from controlplane.runs.models import MetricPoint, Trajectory
    from controlplane.runs.services import run_create
    from trainer.models.tiny import build_tiny
    from workers.driver import drive

    settings.VAR_DIR = tmp_path
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: sent.append(name))  # no broker message left behind
    team = factories.team("acme")
    admin = factories.member(team, "admin")
    actor = factories.actor(admin)
    domain_upload_jsonl(actor=actor, team=team, jsonl=GOOD, data={
        "slug": "sums", "title": "Sums", "kind": "math", "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}})
    assert sent == ["temper.verify.audit"]  # committed: the upload's version is audited by a worker
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(["sums"], team="acme", base_model=model, budget={"steps": 2},
                                                             config={"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 3}}))
    run.transition("queued"); run.transition("running"); run.save()
    assert drive(run.id, worker="w", send=lambda *a: None) == "completed"
    prompts = set(Trajectory.objects.filter(run=run).values_list("prompt", flat=True))
    assert prompts and prompts <= {f"{a}+{a}=" for a in range(5)}
    assert MetricPoint.objects.filter(run=run, key="reward/sums").count() == 2


# ----------------------------------------------------------------------------- tasks only by upload
INLINE = [
    {"family": "jsonl", "tasks": "x"},
    {"family": "jsonl", "tasks": [{"id": 1}]},
    {"family": "jsonl", "tasks": [{"id": "1", "prompt": "p", "answer": "a", "level": 2**70}]},
    {"family": "jsonl"},
    {"family": "builtin", "tasks": [{"prompt": "p", "answer": "a"}]},
]


@pytest.mark.parametrize("source", INLINE)
def test_tasks_written_into_a_domain_body_are_refused(world, source):
    """The attack: tasks given in POST /api/domains skipped every line check of the upload and
    failed on the worker (Task(**{"id": 1}): TypeError). Tasks come only through the upload."""
    client = Client()
    client.force_login(world.users["admin"])
    body = {"team": "acme", "slug": "inline", "title": "I", "kind": "math", "task_source": source,
            "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}}
    r = client.post("/api/domains", json.dumps(body), content_type="application/json")
    assert r.status_code == 422, r.content
    assert {e["path"] for e in r.json()["errors"]} <= {"task_source.family", "task_source.tasks"}
    assert not Domain.objects.filter(slug="inline").exists()


@pytest.mark.parametrize("source", INLINE)
def test_an_uploaded_domains_tasks_are_not_rewritten_through_a_change(world, source):
    client = Client()
    client.force_login(world.users["admin"])
    assert upload(client, GOOD).status_code == 201
    r = client.patch("/api/domains/sums", json.dumps({"task_source": source}), content_type="application/json")
    assert r.status_code == 422, r.content
    d = Domain.objects.get(slug="sums")
    assert d.version == 1 and len(d.task_source["tasks"]) == 5


@pytest.mark.parametrize("family", ["/etc/passwd", "os.system", "", "a" * 65])
def test_a_task_source_family_is_a_name(world, family):
    client = Client()
    client.force_login(world.users["admin"])
    body = {"team": "acme", "slug": "fam", "title": "F", "kind": "math", "task_source": {"family": family},
            "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}}
    r = client.post("/api/domains", json.dumps(body), content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "task_source.family"


@pytest.mark.parametrize("line,path", [
    ({"prompt": "p", "answer": "a", "level": 2**70}, "level"),
    ({"prompt": "p", "answer": "a", "level": 1001}, "level"),
    ({"prompt": "p", "answer": "a", "id": 2**70}, "id"),
    ({"prompt": "p", "answer": "a", "id": "x" * 201}, "id"),
    ({"prompt": "p", "answer": "a", "id": ""}, "id"),
    ({"prompt": "p", "answer": "a", "id": True}, "id"),
])
def test_upload_levels_and_ids_are_bounded(world, line, path):
    client = Client()
    client.force_login(world.users["admin"])
    r = upload(client, GOOD + "\n" + json.dumps(line))
    assert r.status_code == 422, r.content
    assert r.json()["errors"] == [{"path": f"jsonl.lines[6].{path}", "message": r.json()["errors"][0]["message"]}]
    assert not Domain.objects.filter(slug="sums").exists()


@pytest.mark.parametrize("stage,path", [
    ({"type": "code_tests", "params": {"backend": "../../bin/sh"}}, "verifier.stages[0].params.backend"),
    ({"type": "environment", "params": {"env": "os:system"}}, "verifier.stages[0].params.env"),
    ({"type": "json_schema", "params": {"schema": {"$ref": "file:///etc/passwd"}}}, "verifier.stages[0].params.schema.$ref"),
])
def test_a_domains_stage_params_are_checked_when_it_is_saved(world, stage, path):
    client = Client()
    client.force_login(world.users["admin"])
    body = {"team": "acme", "slug": "staged", "title": "S", "kind": "code", "task_source": {"family": "test"},
            "verifier": {"stages": [stage]}}
    r = client.post("/api/domains", json.dumps(body), content_type="application/json")
    assert r.status_code == 422 and [e["path"] for e in r.json()["errors"]] == [path], r.content
    assert not Domain.objects.filter(slug="staged").exists()
