"""A team's ceilings on the size of its runs: set through the team quota API by a platform admin, or
tightened by the team's admin, each within its setting's global bound; a run above them is refused at validate
and create naming the field and the ceiling, one at them is accepted; and the worker that starts a
run checks its config again (bounds and ceilings of that moment), so a Run row written around the
API fails with an event instead of allocating."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.accounts.models import AuditLog
from controlplane.runs.models import Run, RunEvent, RunState
from controlplane.runs.ceilings import api_field, body_trainer_config, team_ceilings
from controlplane.scheduling.models import TeamQuota
from controlplane.scheduling.services import team_quota_set
from tests import factories


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _put_quota(client, body, team="acme"):
    return client.put(f"/api/teams/{team}/quota", json.dumps(body), content_type="application/json")


def _post_run(client, **overrides):
    payload = factories.run_payload(["addition"], team="acme", **overrides)
    return client.post("/api/runs", json.dumps(payload), content_type="application/json")


CEILINGS = {"rollout.n": 8, "rollout.max_new_tokens": 256, "limits.max_steps": 50, "sequences_per_step": 64}


def test_a_team_admin_sets_its_teams_ceilings_and_members_see_them(world):
    r = _put_quota(_client(world.users["admin"]), {"ceilings": CEILINGS})
    assert r.status_code == 200, r.content
    assert r.json()["ceilings"] == CEILINGS
    got = _client(world.users["viewer"]).get("/api/teams/acme/quota").json()
    assert got["ceilings"] == CEILINGS and got["team"] == "acme"
    audit = AuditLog.objects.get(action="quota.set")
    assert audit.before["ceilings"] == {} and audit.after["ceilings"] == CEILINGS
    assert team_ceilings(world.team) == CEILINGS and team_ceilings(world.other) == {}


@pytest.mark.parametrize("role", ["viewer", "reviewer", "member"])
def test_below_the_team_admin_role_ceilings_cannot_be_set(world, role):
    r = _put_quota(_client(world.users[role]), {"ceilings": {"rollout.n": 2}})
    assert r.status_code == 403
    assert not TeamQuota.objects.filter(team=world.team).exclude(ceilings={}).exists()


def test_a_team_admin_may_not_set_gpus_nor_another_teams_ceilings(world):
    admin = _client(world.users["admin"])
    assert _put_quota(admin, {"max_gpus": 8, "ceilings": {"rollout.n": 2}}).status_code == 403
    assert _put_quota(admin, {"ceilings": {"rollout.n": 2}}, team="globex").status_code == 404
    assert team_ceilings(world.team) == {} and team_ceilings(world.other) == {}


def test_a_platform_admin_sets_any_teams_ceilings(world):
    r = _put_quota(_client(world.staff), {"max_gpus": 2, "ceilings": {"rollout.n": 4}}, team="globex")
    assert r.status_code == 200 and r.json() == {"team": "globex", "max_gpus": 2, "max_concurrent_runs": 2,
                                                  "ceilings": {"rollout.n": 4}, "warnings": [
        {"path": "max_gpus", "message": "no GPU pool exists (kind train_gpu): a quota of 2 GPUs has nothing to draw "
                                        "from until a platform admin adds one"}]}
    assert _put_quota(_client(world.staff), {"ceilings": {}}, team="globex").json()["ceilings"] == {}


@pytest.mark.parametrize("ceilings,expected", [
    ({"rollout.n": 4096}, ("quota.ceilings.rollout.n", "must be at most 1024")),
    ({"sequences_per_step": 10**9}, ("quota.ceilings.sequences_per_step", "must be at most 65536")),
    ({"rollout.engine": 1}, ("quota.ceilings.rollout.engine", "not a numeric setting or a size (e.g. rollout.n, sequences_per_step)")),
    ({"rollout.n": 0}, ("quota.ceilings.rollout.n", "must be at least 1")),
    ({"rollout.n": "8"}, ("quota.ceilings.rollout.n", "must be a number")),
])
def test_a_ceiling_above_the_global_bound_or_of_no_setting_is_refused(world, ceilings, expected):
    r = _put_quota(_client(world.users["admin"]), {"ceilings": ceilings})
    assert r.status_code == 422
    assert [(e["path"], e["message"]) for e in r.json()["errors"]] == [expected]
    assert team_ceilings(world.team) == {}


def test_the_admin_form_checks_ceilings_too(world):
    from django.core.exceptions import ValidationError

    quota = TeamQuota(team=world.team, ceilings={"rollout.n": 10**6})
    with pytest.raises(ValidationError) as err:
        quota.full_clean()
    assert err.value.message_dict["ceilings"] == ["ceilings.rollout.n: must be at most 1024"]


def test_a_run_above_its_teams_ceiling_is_refused_naming_the_field_and_the_ceiling(world):
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": CEILINGS})
    member = _client(world.users["member"])
    config = {"rollout": {"n": 9, "max_new_tokens": 257, "prompts_per_step": 8}}
    for endpoint in ("/api/runs/validate", "/api/runs"):
        payload = factories.run_payload(["addition"], team="acme", config=config, budget={"steps": 51})
        r = member.post(endpoint, json.dumps(payload), content_type="application/json")
        assert r.status_code == 422, r.content
        assert r.json()["errors"] == [
            {"path": "config.rollout.n", "message": "is 9; at most 8 for team acme (team ceiling)"},
            {"path": "config.rollout.max_new_tokens", "message": "is 257; at most 256 for team acme (team ceiling)"},
            {"path": "budget.steps", "message": "is 51; at most 50 for team acme (team ceiling)"},
            {"path": "config.rollout.prompts_per_step",
             "message": "times rollout.n is 72 sequences per step; at most 64 for team acme (team ceiling)"},
        ]
    assert Run.objects.count() == 0


def test_a_run_at_its_teams_ceiling_is_accepted_and_other_teams_are_not_bound(world):
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": CEILINGS})
    r = _post_run(_client(world.users["member"]), config={"rollout": {"n": 8, "max_new_tokens": 256, "prompts_per_step": 8}},
                  budget={"steps": 50})
    assert r.status_code == 201, r.content
    other = {"rollout": {"n": 64, "prompts_per_step": 16}}
    payload = factories.run_payload(["addition"], team="globex", config=other, budget={"steps": 500})
    r = _client(world.other_users["member"]).post("/api/runs", json.dumps(payload), content_type="application/json")
    assert r.status_code == 201, r.content


@pytest.mark.parametrize("ceiling,budget", [
    ({"limits.max_wall_s": 3600}, {"steps": 5}),
    ({"limits.max_wall_s": 3600}, {"steps": 5, "wall_s": None}),
])
def test_no_limit_is_above_a_ceiling_on_a_setting_whose_zero_means_no_limit(world, ceiling, budget):
    """A wall-time ceiling binds a run that leaves its wall-time budget out (the trainer's 0: no
    limit) as one that asks for more; one within the ceiling is accepted."""
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": ceiling})
    member = _client(world.users["member"])
    r = _post_run(member, budget=budget)
    assert r.status_code == 422, r.content
    assert r.json()["errors"] == [{"path": "budget.wall_s", "message": "is 0 (no limit); at most 3600 for team acme (team ceiling)"}]
    assert _post_run(member, budget={**budget, "wall_s": 3600}).status_code == 201
    grads = {"optimizer": {"max_grad_norm": 0}}  # no clipping, under a ceiling on the clipping norm
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": {"optimizer.max_grad_norm": 2}})
    r = _post_run(member, config=grads, budget={"steps": 5})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "config.optimizer.max_grad_norm"


def test_a_run_defaults_count_against_the_ceilings(world):
    """A ceiling below a default binds a run that leaves the setting out: the run form's default is
    not a way around it."""
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": {"rollout.n": 4}})
    r = _post_run(_client(world.users["member"]))
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "config.rollout.n", "message": "is 8; at most 4 for team acme (team ceiling)"}]


def test_the_run_body_fills_the_settings_the_run_owns():
    cfg = body_trainer_config({"config": {"rollout": {"n": 4}}, "staleness": 2, "budget": {"steps": 7, "wall_s": None}})
    assert cfg["rollout"] == {"n": 4, "staleness": 2, "autoscale": "off"} and cfg["limits"] == {"max_steps": 7, "max_wall_s": 0.0}
    assert cfg["checkpoint"]["every_steps"] == 5  # RUN_DEFAULTS
    assert api_field("limits.max_wall_s") == "budget.wall_s" and api_field("eval.seed") == "config.eval.seed"


# ----------------------------------------------------------------------------- the worker
@pytest.fixture
def driver_world(world, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in-process
    settings.VAR_DIR = tmp_path
    return world


def _running(run: Run) -> Run:
    run.transition(RunState.QUEUED)
    run.transition(RunState.RUNNING)
    run.save()
    return run


def _no_send(name, args):
    raise AssertionError("a refused run sends no work")


def _drive(run: Run) -> str:
    from workers.driver import drive

    return drive(run.id, worker="test-worker", send=_no_send)


def test_the_worker_refuses_a_run_row_written_around_the_api(driver_world):
    world = driver_world
    r = _post_run(_client(world.users["member"]), config={"rollout": {"n": 4, "prompts_per_step": 2}})
    assert r.status_code == 201
    run = _running(Run.objects.get(pk=r.json()["id"]))
    # written directly in the database, past the API's checks
    Run.objects.filter(pk=run.pk).update(config={"rollout": {"n": 4, "prompts_per_step": 10**9, "max_new_tokens": 10**9}})

    assert _drive(run).startswith("refused")
    run.refresh_from_db()
    assert run.state == RunState.FAILED and run.driver == ""
    assert "config.rollout.prompts_per_step: must be at most 4096" in run.error
    refused = RunEvent.objects.get(run=run, kind="refused")
    assert refused.data["errors"] == [
        {"path": "config.rollout.prompts_per_step", "message": "must be at most 4096"},
        {"path": "config.rollout.max_new_tokens", "message": "must be at most 65536"},
    ]
    assert "refused by the worker before starting" in refused.message
    assert RunEvent.objects.filter(run=run, kind="failed").count() == 1
    assert not run.checkpoints.exists() and run.current_step == 0


def test_the_worker_applies_the_teams_ceilings_of_the_moment(driver_world):
    world = driver_world
    r = _post_run(_client(world.users["member"]), config={"rollout": {"n": 4, "prompts_per_step": 2}},
                  budget={"steps": 20})
    run = _running(Run.objects.get(pk=r.json()["id"]))
    team_quota_set(actor=factories.actor(world.users["admin"]), team=world.team, changes={"ceilings": {"limits.max_steps": 10}})

    assert _drive(run).startswith("refused")
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    refused = RunEvent.objects.get(run=run, kind="refused")
    assert refused.data["errors"] == [{"path": "budget.steps", "message": "is 20; at most 10 for team acme (team ceiling)"}]


def test_the_worker_refuses_a_config_that_is_not_an_object(driver_world):
    world = driver_world
    run = _running(factories.run(world.team, domains=[world.domain], config=[1, 2]))
    assert _drive(run).startswith("refused")
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert RunEvent.objects.get(run=run, kind="refused").data["errors"] == [{"path": "config", "message": "must be an object"}]


# ----------------------------------------------------------------------------- the CLI
def test_the_cli_sets_and_shows_ceilings(world):
    import io

    from django.core.management import CommandError, call_command

    def cli(*args, user="acme-admin"):
        out = io.StringIO()
        call_command("temper", "--user", user, *args, stdout=out)
        return out.getvalue()

    out = cli("quota", "set", "acme", "--ceiling", "rollout.n=16", "--ceiling", "sequences_per_step=256")
    assert "rollout.n" in out and "256" in out
    cli("quota", "set", "acme", "--ceiling", "rollout.n=8")  # added to the others
    assert team_ceilings(world.team) == {"rollout.n": 8, "sequences_per_step": 256}
    shown = cli("quota", "show", "acme", user="acme-viewer")
    assert "sequences_per_step" in shown and "rollout.n" in shown
    with pytest.raises(CommandError, match=r"quota.ceilings.rollout.n: must be at most 1024"):
        cli("quota", "set", "acme", "--ceiling", "rollout.n=5000")
    with pytest.raises(CommandError, match=r"raising or removing a team ceiling .*needs a platform admin"):
        cli("quota", "set", "acme", "--clear-ceilings")
    cli("quota", "set", "acme", "--clear-ceilings", user="root")
    assert team_ceilings(world.team) == {}


def test_a_team_admin_may_tighten_ceilings_but_not_loosen_them(world):
    """A platform admin's ceiling holds against the team's own admin: lowering one or adding one
    is the team's choice, raising or removing one is the platform's."""
    team_quota_set(actor=factories.actor(world.staff), team=world.team, changes={"ceilings": {"rollout.n": 8}})
    admin = _client(world.users["admin"])
    for loosen in ({"rollout.n": 16}, {}, {"rollout.max_new_tokens": 64}):
        r = _put_quota(admin, {"ceilings": loosen})
        assert r.status_code == 403 and "rollout.n: 8 ->" in r.json()["detail"]
        assert team_ceilings(world.team) == {"rollout.n": 8}
    r = _put_quota(admin, {"ceilings": {"rollout.n": 4, "rollout.max_new_tokens": 64}})
    assert r.status_code == 200 and team_ceilings(world.team) == {"rollout.n": 4, "rollout.max_new_tokens": 64}


def test_a_run_asking_for_gpus_nobody_could_give_is_refused_when_submitted(world):
    """More GPUs than the train GPU pools hold, or than the team may hold at once: 422 at ``gpus``
    with the numbers (it would otherwise wait in the queue for ever); within both, accepted."""
    from controlplane.scheduling.models import ResourcePool

    member = _client(world.users["member"])
    r = _post_run(member, gpus=2)
    assert r.status_code == 422, r.content
    assert [e["path"] for e in r.json()["errors"]] == ["gpus", "gpus"]
    messages = " | ".join(e["message"] for e in r.json()["errors"])
    assert "no train GPU pool exists" in messages and "may hold at most 1" in messages  # the default quota
    ResourcePool.objects.create(name="h200", kind="train_gpu", capacity=4)
    ResourcePool.objects.create(name="rollout", kind="rollout_gpu", capacity=8)  # not for training
    r = _post_run(member, gpus=6)
    assert r.status_code == 422 and "pools hold 4 in all" in r.json()["errors"][0]["message"]
    TeamQuota.objects.update_or_create(team=world.team, defaults={"max_gpus": 4})
    assert _post_run(member, gpus=5).status_code == 422
    assert not Run.objects.exists()
    r = _post_run(member, gpus=4)
    assert r.status_code == 201, r.content
    assert Run.objects.get().gpus == 4
    assert _post_run(member, gpus=0).status_code == 201  # CPU runs need no pool
