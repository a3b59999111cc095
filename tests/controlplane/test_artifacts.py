"""Verification artifacts of sampled trajectories: the run setting that keeps or drops them, their
storage in the checkpoint store (paths of numbers only), the listing on the trajectory and the
download, with the trajectory's permissions, never rendered."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.runs import store
from controlplane.runs.models import Run, Trajectory
from controlplane.runs.services import run_record_step, run_rewind
from tests import factories
from trainer.verifiers.artifacts import Artifact

pytestmark = pytest.mark.django_db

REPORT = Artifact.of("report.xml", b"<testsuite tests='1'/>", 1 << 10)
PAGE = Artifact.of("logs/page.html", b"<script>alert(1)</script>", 1 << 10)
REFUSED = Artifact("passwd", b"", 0, "not a regular file: a symbolic link")


def sample(*artifacts: Artifact, **extra) -> dict:
    return {"domain": "addition", "task_id": "t1", "prompt": "p", "completion": "c", "reward": 1.0, "outcome": "pass",
            "details": {"stage": "repo_tests"}, "artifacts": [a.to_dict() for a in artifacts], **extra}


@pytest.fixture
def stored(world, settings, tmp_path):
    settings.TEMPER_STORE = str(tmp_path / "store")
    run = factories.run(world.team, domains=[world.domain])
    Run.objects.filter(pk=run.pk).update(driver="w1")
    run.refresh_from_db()
    run_record_step(run=run, worker="w1", step=3, metrics={}, verifier_versions={},
                    samples=[sample(REPORT, REFUSED, PAGE), sample()])
    return run, Trajectory.objects.filter(run=run, step=3).order_by("id").first()


def test_the_bytes_go_to_numbered_files_and_the_row_lists_them(stored, tmp_path):
    run, row = stored
    assert row.artifacts == [
        {"name": "report.xml", "size": 22, "truncated": False, "refused": "", "stored": True},
        {"name": "passwd", "size": 0, "truncated": False, "refused": "not a regular file: a symbolic link", "stored": False},
        {"name": "logs/page.html", "size": 25, "truncated": False, "refused": "", "stored": True},
    ]
    assert "artifacts" not in row.details  # the bytes never sit in the row
    files = sorted(p.relative_to(tmp_path / "store") for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert [str(p) for p in files] == [f"checkpoints/run-{run.id}/artifacts/step-3/{row.id}-0",
                                       f"checkpoints/run-{run.id}/artifacts/step-3/{row.id}-2"]
    assert store.artifact_path(run.id, 3, row.id, 0).read_bytes() == REPORT.data


def test_a_retried_step_replaces_them_and_a_rewind_forgets_them(stored, tmp_path):
    run, row = stored
    run_record_step(run=run, worker="w1", step=3, metrics={}, verifier_versions={}, samples=[sample(PAGE)])
    again = Trajectory.objects.get(run=run, step=3)
    assert [p.name for p in store.artifacts_root(run.id).rglob("*") if p.is_file()] == [f"{again.id}-0"]
    run_rewind(run=run, to_step=2)
    assert not any(p.is_file() for p in store.artifacts_root(run.id).rglob("*"))


def test_a_name_that_leaves_the_directory_is_not_an_artifact(stored, tmp_path):
    run, _ = stored
    hostile = {"name": "../../../../evil", "size": 4, "refused": "", "data_b64": "ZXZpbA=="}
    run_record_step(run=run, worker="w1", step=4, metrics={}, verifier_versions={},
                    samples=[{**sample(), "artifacts": [hostile, {"name": "/etc/passwd", "size": 1, "data_b64": "eA=="}]}])
    assert Trajectory.objects.get(run=run, step=4).artifacts == []
    assert not (tmp_path / "evil").exists() and not any(p.name == "evil" for p in tmp_path.rglob("*"))


def download(client: Client, run, row, index: int):
    return client.get(f"/api/runs/{run.id}/trajectories/{row.id}/artifacts/{index}")


def test_the_explorer_lists_them_and_downloads_are_attachments_never_pages(stored, world):
    run, row = stored
    client = Client()
    client.force_login(world.users["viewer"])  # the trajectory's permission: read
    listed = client.get(f"/api/runs/{run.id}/trajectories", {"trajectory": row.id}).json()["items"][0]["artifacts"]
    assert [(a["name"], a["size"], a["stored"], a["url"]) for a in listed] == [
        ("report.xml", 22, True, f"/api/runs/{run.id}/trajectories/{row.id}/artifacts/0"),
        ("passwd", 0, False, None),
        ("logs/page.html", 25, True, f"/api/runs/{run.id}/trajectories/{row.id}/artifacts/2")]
    r = client.get(listed[2]["url"])
    assert r.status_code == 200 and b"".join(r.streaming_content) == PAGE.data
    assert r["Content-Type"] == "application/octet-stream"
    assert r["Content-Disposition"] == 'attachment; filename="page.html"'
    assert r["X-Content-Type-Options"] == "nosniff" and r["Content-Security-Policy"].startswith("sandbox")
    assert download(client, run, row, 1).status_code == 404  # refused: no bytes
    assert download(client, run, row, 5).status_code == 404
    assert download(client, run, row, 99).status_code == 422


def test_another_team_cannot_list_or_download_them(stored, world):
    run, row = stored
    other = Client()
    other.force_login(world.other_users["admin"])
    assert download(other, run, row, 0).status_code == 404
    _, secret = factories.token(world.other_users["admin"], world.other, "admin")
    assert Client().get(f"/api/runs/{run.id}/trajectories/{row.id}/artifacts/0",
                        HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 404
    assert Client().get(f"/api/runs/{run.id}/trajectories/{row.id}/artifacts/0").status_code in (401, 403)
    theirs = factories.run(world.other, domains=[world.domain])  # a trajectory id under another run
    mine = Client()
    mine.force_login(world.users["admin"])
    assert mine.get(f"/api/runs/{theirs.id}/trajectories/{row.id}/artifacts/0").status_code == 404


@pytest.mark.parametrize("artifacts, path, message", [
    ({"keep": "yes"}, "config.artifacts.keep", "must be true or false"),
    ({"max_bytes": -1}, "config.artifacts.max_bytes", "must be at least 0"),
    ({"max_bytes": (16 << 20) + 1}, "config.artifacts.max_bytes", "must be at most 16777216"),
    ({"keep": True, "everything": 1}, "config.artifacts.everything", None),
])
def test_the_run_setting_is_validated_with_the_field(world, artifacts, path, message):
    client = Client()
    client.force_login(world.users["member"])
    payload = factories.run_payload(["addition"], team="acme", config={"artifacts": artifacts})
    r = client.post("/api/runs/validate", json.dumps(payload), content_type="application/json")
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert [e["path"] for e in errors] == [path] and (message is None or errors[0]["message"] == message)
    payload["config"] = {"artifacts": {"keep": False, "max_bytes": 0}}
    assert client.post("/api/runs", json.dumps(payload), content_type="application/json").status_code == 201
