"""``manage.py bootstrap``: a new installation's first run. It makes the platform admin, a team
the admin administers, its quota, a CPU pool, the catalogue, a base model every team may name and
a token, prints what to do next, and run again changes nothing."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from controlplane.accounts.models import ApiToken, Membership, Role, Team
from controlplane.domains.models import Domain
from controlplane.registry.models import BaseModel
from controlplane.scheduling.models import ResourcePool, TeamQuota
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def var(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path / "var"
    settings.TEMPER_MODEL_DIRS = [tmp_path / "var" / "models"]
    monkeypatch.delenv("TEMPER_ADMIN_PASSWORD", raising=False)
    return settings.VAR_DIR


def bootstrap(*args) -> tuple[str, dict]:
    out = io.StringIO()
    call_command("bootstrap", *args, "--json", stdout=out)
    text = out.getvalue()
    return text, json.loads(text.strip().splitlines()[-1])


def model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_a_new_installation_is_ready_for_its_first_run(var):
    text, out = bootstrap("--base-model", "tiny", "--token", "ci", "--team", "research")

    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    assert out["password"] and admin.check_password(out["password"])
    assert out["password"] in text  # shown once, with what to do next
    assert "Next:" in text and "/runs/new/" in text
    team = Team.objects.get(slug="research")
    assert Membership.objects.get(user=admin, team=team).role == Role.ADMIN
    assert TeamQuota.objects.filter(team=team).exists()
    assert ResourcePool.objects.get(name="cpu").capacity == 1
    assert Domain.objects.filter(slug="builtin-addition").exists() and Domain.objects.filter(slug="code-humaneval").exists()
    assert out["base_model"] == "base:tiny"
    assert (Path(BaseModel.objects.get(name="tiny").path) / "config.json").is_file()

    # The token signs the API in as the team's admin, and the team trains from the base model.
    api = Client(HTTP_AUTHORIZATION=f"Bearer {out['token']}")
    assert api.get("/api/runs").status_code == 200
    payload = factories.run_payload(["builtin-addition"], team="research", base_model="base:tiny")
    r = api.post("/api/runs", json.dumps(payload), content_type="application/json")
    assert r.status_code == 201, r.content


def test_running_it_again_changes_nothing(var):
    _, first = bootstrap("--base-model", "tiny", "--no-sync")
    text, again = bootstrap("--base-model", "tiny", "--no-sync")
    admin = get_user_model().objects.get(username="admin")
    assert "password" not in again and admin.check_password(first["password"])
    assert "exists (password unchanged)" in text
    assert Team.objects.count() == Membership.objects.count() == TeamQuota.objects.count() == 1
    assert BaseModel.objects.count() == 1 and ResourcePool.objects.count() == 1
    assert again["base_model"] == "base:tiny" and again["token"] == ""
    assert ApiToken.objects.count() == 0


def test_the_admin_password_comes_from_the_environment_and_is_checked(var, monkeypatch):
    monkeypatch.setenv("TEMPER_ADMIN_PASSWORD", "admin")
    with pytest.raises(CommandError, match="TEMPER_ADMIN_PASSWORD: .*too short"):
        bootstrap("--no-sync")
    assert not get_user_model().objects.exists() and not Team.objects.exists()

    monkeypatch.setenv("TEMPER_ADMIN_PASSWORD", "a long and unusual passphrase 7")
    text, out = bootstrap("--no-sync", "--admin", "ops", "--email", "ops@example.com")
    assert "password" not in out and "a long and unusual" not in text
    assert get_user_model().objects.get(username="ops").check_password("a long and unusual passphrase 7")


def test_an_existing_user_becomes_the_platform_admin_and_the_teams_admin(var):
    factories.member(factories.team("main"), Role.VIEWER, username="ada")
    _, out = bootstrap("--admin", "ada", "--no-sync")
    ada = get_user_model().objects.get(username="ada")
    assert ada.is_superuser and ada.is_staff and "password" not in out
    assert Membership.objects.get(user=ada, team__slug="main").role == Role.ADMIN


@pytest.mark.parametrize("spec, message", [
    ("tiny=", "expected 'tiny' or NAME=DIR"),
    ("bad name=/tmp", "is not a name"),
    ("qwen=/nonexistent/qwen", "no model at"),
])
def test_a_bad_base_model_is_refused_with_the_reason(var, spec, message):
    with pytest.raises(CommandError, match=message):
        bootstrap("--base-model", spec, "--no-sync")
    assert not BaseModel.objects.exists()


def test_a_base_model_inside_the_servers_storage_is_refused(var, settings):
    from controlplane.common.model_refs import storage_dirs

    inside = model_dir(storage_dirs()[0] / "run-1" / "step-20" / "model")
    with pytest.raises(CommandError, match="server's storage"):
        bootstrap("--base-model", f"stolen={inside}", "--no-sync")


def test_a_directory_is_registered_and_re_pointed(var, tmp_path):
    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    bootstrap("--base-model", f"qwen={a}", "--no-sync")
    bootstrap("--base-model", f"qwen={b}", "--no-sync")
    assert BaseModel.objects.get(name="qwen").path == str(b.resolve())


@pytest.mark.parametrize("args, message", [
    (["--team", "Not A Slug"], "--team: 'Not A Slug' is not a slug"),
    (["--cpu-slots", "-1"], "--cpu-slots: must be between"),
    (["--token", "x", "--token-days", "0"], "--token-days: must be between"),
])
def test_bad_options_say_which_and_nothing_is_made(var, args, message):
    with pytest.raises(CommandError, match=message):
        bootstrap("--no-sync", *args)
    assert not get_user_model().objects.exists() and not ResourcePool.objects.exists()


def test_cpu_slots_set_the_pool(var):
    bootstrap("--no-sync", "--cpu-slots", "4")
    assert ResourcePool.objects.get(name="cpu").capacity == 4
    bootstrap("--no-sync", "--cpu-slots", "2")
    assert ResourcePool.objects.get(name="cpu").capacity == 2
