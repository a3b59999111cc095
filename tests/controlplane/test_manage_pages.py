"""Admin work in the app (/manage/ and the registry's alias forms): each role sees and changes
what the services allow it, bad input comes back beside its fields with nothing saved, and a
refusal says why."""
from __future__ import annotations

import pytest
from django.test import Client

from controlplane.accounts.models import AuditLog, Membership
from controlplane.registry import aliases
from controlplane.registry import services as registry_services
from controlplane.registry.models import Alias, BaseModel
from controlplane.scheduling.models import ResourcePool, TeamQuota
from controlplane.web.manage_views import parse_ceilings
from controlplane.common.errors import InvalidInput
from tests import factories
from tests.controlplane.test_registry_gate import evaluated, version  # noqa: F401  (helpers, not tests)


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.mark.parametrize("role", ["viewer", "reviewer", "member"])
def test_manage_is_for_admins_only(world, role):
    c = client_for(world.users[role])
    r = c.get("/manage/")
    assert r.status_code == 403 and b"team admins and platform admins" in r.content
    assert b'data-testid="nav-manage"' not in c.get("/").content
    assert c.post("/manage/pools/", {"name": "gpus", "kind": "train_gpu", "capacity": "4"}).status_code == 403
    assert c.post("/manage/teams/acme/quota/", {"ceilings": ""}).status_code == 403
    assert not ResourcePool.objects.exists() and not TeamQuota.objects.exists()


def test_team_admin_sees_own_team_and_may_only_tighten(world):
    c = client_for(world.users["admin"])
    assert b'data-testid="nav-manage"' in c.get("/").content
    page = c.get("/manage/").content.decode()
    assert 'data-testid="manage-team-acme"' in page and "manage-team-globex" not in page
    assert 'data-testid="pool-form"' not in page and 'data-testid="base-form"' not in page  # platform admins only

    r = c.post("/manage/teams/acme/quota/", {"ceilings": "rollout.n = 8\nsequences_per_step = 64"})
    assert r.status_code == 302
    assert TeamQuota.objects.get(team=world.team).ceilings == {"rollout.n": 8, "sequences_per_step": 64}
    # Raising a ceiling needs a platform admin: refused with the reason, nothing saved.
    r = c.post("/manage/teams/acme/quota/", {"ceilings": "rollout.n = 16\nsequences_per_step = 64"})
    assert r.status_code == 403 and "platform admin" in r.content.decode()
    # So does the GPU count, even from a form that sends it.
    r = c.post("/manage/teams/acme/quota/", {"max_gpus": "50", "ceilings": "rollout.n = 8"})
    assert r.status_code == 403
    quota = TeamQuota.objects.get(team=world.team)
    assert quota.ceilings == {"rollout.n": 8, "sequences_per_step": 64} and quota.max_gpus == 1
    # Another team's quota is not theirs to see or change.
    assert c.post("/manage/teams/globex/quota/", {"ceilings": "rollout.n = 1"}).status_code == 404
    assert not TeamQuota.objects.filter(team=world.other).exists()


def test_quota_errors_all_at_once_beside_their_fields(world):
    c = client_for(world.staff)
    r = c.post("/manage/teams/globex/quota/", {"max_gpus": "-1", "max_concurrent_runs": "two",
                                               "ceilings": "rollout.n = 8\nrollout.n 9\nsft.steps = lots"})
    assert r.status_code == 422
    html = r.content.decode()
    section = html[html.index('data-testid="manage-team-globex"'):]
    for field, text in [("max_gpus", "at least 0"), ("max_concurrent_runs", "not a whole number"),
                        ("ceilings", "line 2"), ("ceilings", "line 3")]:
        error = section[section.index(f'data-testid="error-{field}"'):]
        assert text in error[:error.index("</span>")], (field, text)
    assert "rollout.n 9" in section  # what was typed is kept
    assert not TeamQuota.objects.filter(team=world.other).exists()
    # An unknown setting is the service's error, beside the ceilings.
    r = c.post("/manage/teams/globex/quota/", {"max_gpus": "4", "max_concurrent_runs": "3", "ceilings": "rollout.nope = 8"})
    assert r.status_code == 422 and "rollout.nope" in r.content.decode()
    r = c.post("/manage/teams/globex/quota/", {"max_gpus": "4", "max_concurrent_runs": "3", "ceilings": "rollout.n = 4"})
    assert r.status_code == 302
    quota = TeamQuota.objects.get(team=world.other)
    assert (quota.max_gpus, quota.max_concurrent_runs, quota.ceilings) == (4, 3, {"rollout.n": 4})
    assert AuditLog.objects.filter(action="quota.set", team=world.other).count() == 1


def test_a_gpu_quota_with_no_gpu_pool_to_draw_from_is_saved_with_a_warning(world):
    """A quota of 4 GPUs where no train_gpu pool exists is saved (a pool may come later), and the
    page, the API and the CLI say it cannot be used; with a pool of 2 they say how much can."""
    import io

    from django.core.management import call_command

    c = client_for(world.staff)
    r = c.post("/manage/teams/globex/quota/", {"max_gpus": "4", "max_concurrent_runs": "3", "ceilings": ""}, follow=True)
    page = r.content.decode()
    assert TeamQuota.objects.get(team=world.other).max_gpus == 4
    assert "Quota of globex: no GPU pool exists (kind train_gpu): a quota of 4 GPUs has nothing to draw from" in page
    assert 'data-testid="quota-gpu-warning"' in page and 'class="flash warn" data-testid="manage-warning"' in page
    api = c.get("/api/teams/globex/quota").json()
    assert api["warnings"] == [{"path": "max_gpus", "message": "no GPU pool exists (kind train_gpu): a quota of 4 GPUs "
                                "has nothing to draw from until a platform admin adds one"}]
    ResourcePool.objects.create(name="gpus", kind="train_gpu", capacity=2)
    assert "at most 2 of this quota of 4 can be used at once" in c.get("/manage/").content.decode()
    out = io.StringIO()
    call_command("temper", "--user", world.staff.username, "quota", "show", "globex", stdout=out)
    assert "warning: the GPU pools hold 2 GPUs" in out.getvalue()
    ResourcePool.objects.filter(name="gpus").update(capacity=8)
    assert 'data-testid="quota-gpu-warning"' not in c.get("/manage/").content.decode()
    assert c.get("/api/teams/globex/quota").json()["warnings"] == []


@pytest.mark.parametrize("text, message", [("a", "expected 'path = number'"), ("a = nan", "not a finite number"),
                                           ("a = 1\na = 2", "set twice"), ("= 3", "expected")])
def test_parse_ceilings_names_the_line(text, message):
    with pytest.raises(InvalidInput, match=message):
        parse_ceilings(text)


def test_members_added_and_roles_changed_by_team_admin(world):
    c = client_for(world.users["admin"])
    r = c.post("/manage/teams/acme/members/", {"username": "globex-member", "role": "reviewer"})
    assert r.status_code == 302
    assert Membership.objects.get(user=world.other_users["member"], team=world.team).role == "reviewer"
    r = c.post("/manage/teams/acme/members/", {"username": "nobody-here", "role": "viewer"})
    assert r.status_code == 422 and "no user named" in r.content.decode()
    r = c.post("/manage/teams/acme/members/", {"username": "acme-viewer", "role": "owner"})
    assert r.status_code == 422 and "must be one of" in r.content.decode()
    assert Membership.objects.get(user=world.users["viewer"], team=world.team).role == "viewer"
    assert AuditLog.objects.filter(action="membership.set").count() == 1


def test_pools_and_base_models_by_platform_admin(world, tmp_path):
    c = client_for(world.staff)
    r = c.post("/manage/pools/", {"name": "h200", "kind": "train_gpu", "capacity": "8", "description": "rack 1"})
    assert r.status_code == 302 and ResourcePool.objects.get(name="h200").capacity == 8
    r = c.post("/manage/pools/", {"name": "h200", "kind": "disk", "capacity": "x"})
    assert r.status_code == 422
    html = r.content.decode()
    assert "not a whole number" in html and ResourcePool.objects.get(name="h200").kind == "train_gpu"
    assert client_for(world.users["admin"]).post("/manage/pools/", {"name": "h200", "kind": "cpu", "capacity": "1"}).status_code == 403

    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    r = c.post("/manage/base-models/", {"name": "tiny", "path": str(model), "description": "for everyone"})
    assert r.status_code == 302 and BaseModel.objects.get(name="tiny").description == "for everyone"
    r = c.post("/manage/base-models/", {"name": "empty", "path": str(tmp_path)})
    assert r.status_code == 422 and "expected a directory with config.json" in r.content.decode()
    assert client_for(world.users["admin"]).post("/manage/base-models/tiny/remove/").status_code == 403
    assert c.post("/manage/base-models/tiny/remove/").status_code == 302 and not BaseModel.objects.exists()


@pytest.fixture
def gated(world):
    """production on v1; v2 regresses addition significantly (the gate refuses it)."""
    admin = factories.actor(world.users["admin"])
    sv = registry_services.suite_save(actor=admin, data={"slug": "core", "team": "acme", "items": [
        {"domain": "addition", "tasks": 24}, {"domain": "parity", "tasks": 24}]})
    v1, v2 = version(world.team, "tiny@1/10"), version(world.team, "tiny@1/20")
    evaluated(v1, sv, {"addition": [1.0] * 24, "parity": [1.0, 0.0] * 12})
    evaluated(v2, sv, {"addition": [1.0, 0.0] * 12, "parity": [1.0, 0.0] * 12})
    aliases.alias_move(actor=admin, version=v1, name="production")
    return type("Gated", (), {"v1": v1, "v2": v2})


def production(world):
    return Alias.objects.get(team=world.team, base="tiny", name="production").version


def test_alias_forms_follow_the_gate_and_the_roles(world, gated):
    member, admin, viewer = (client_for(world.users[r]) for r in ("member", "admin", "viewer"))
    assert 'data-testid="alias-move-form"' not in viewer.get("/registry/").content.decode()
    assert viewer.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "candidate"}).status_code == 403

    page = member.get("/registry/").content.decode()
    assert 'data-testid="alias-move-form"' in page and 'data-testid="alias-move-override"' not in page
    assert member.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "candidate"}).status_code == 302
    assert Alias.objects.get(team=world.team, name="candidate").version == gated.v2

    r = member.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "production"})
    assert r.status_code == 409
    html = r.content.decode()
    assert 'data-testid="gate-refused"' in html and "addition" in html[html.index('data-testid="gate-regressions"'):]
    r = member.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "production", "override": "on",
                                                "reason": "ship it"})
    assert r.status_code == 403 and "may not do this" in r.content.decode()
    assert production(world) == gated.v1

    assert 'data-testid="alias-move-override"' in admin.get("/registry/").content.decode()
    r = admin.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "production", "override": "on", "reason": " "})
    assert r.status_code == 422 and "needs a reason" in r.content.decode()
    r = admin.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "production", "override": "on",
                                               "reason": "parity matters more"})
    assert r.status_code == 302 and production(world) == gated.v2
    assert "now points at tiny@1/20" in admin.get("/registry/").content.decode()
    assert AuditLog.objects.get(action="alias.override").after["reason"] == "parity matters more"

    assert member.post("/registry/aliases/rollback/", {"base": "tiny", "alias": "production"}).status_code == 302
    assert production(world) == gated.v1
    r = member.post("/registry/aliases/rollback/", {"base": "tiny", "alias": "canary"})
    assert r.status_code == 404 and "no canary alias" in r.content.decode()
    # Another team's version is not found, whatever the form says.
    other = client_for(world.other_users["admin"])
    assert other.post("/registry/aliases/move/", {"version": gated.v2.id, "alias": "candidate"}).status_code == 404
