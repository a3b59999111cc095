"""The trajectory explorer's reads: a run's sampled trajectories by step, domain, outcome, task
across steps, reward range, completion length, or one by id; bad filters are refused."""
from __future__ import annotations

import pytest
from django.test import Client

from controlplane.runs.models import Trajectory
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def explored(world):
    run = factories.run(world.team, domains=[world.domain, world.domain2])
    rows = []
    for step in range(3):
        for i, (domain, outcome, reward, completion) in enumerate([
                ("addition", "pass", 1.0, "4"), ("addition", "fail", 0.0, "five"), ("parity", "partial", 0.5, "odd or even"),
                ("parity", "timeout", None, "")]):
            rows.append(Trajectory(run=run, step=step, domain=domain, task_id=f"t{i}", prompt="p", completion=completion,
                                   reward=reward, outcome=outcome,
                                   details={"details": {"expected": "4", "found": completion[:3]}}))
    Trajectory.objects.bulk_create(rows)
    client = Client()
    client.force_login(world.users["viewer"])
    return run, client


def ids(client, run, **q):
    r = client.get(f"/api/runs/{run.id}/trajectories", q)
    assert r.status_code == 200, r.content
    return [(t["step"], t["task_id"]) for t in r.json()["items"]]


def test_filters_narrow_the_sampled_trajectories(explored):
    run, client = explored
    assert len(ids(client, run)) == 12
    assert ids(client, run, step=1, domain="addition") == [(1, "t0"), (1, "t1")]
    assert ids(client, run, task_id="t1") == [(0, "t1"), (1, "t1"), (2, "t1")]  # the same task across steps
    assert ids(client, run, outcome="partial", step=2) == [(2, "t2")]
    assert ids(client, run, min_reward=0.25, step=0) == [(0, "t0"), (0, "t2")]  # a masked outcome has no reward
    assert ids(client, run, max_reward=0.5, step=0) == [(0, "t1"), (0, "t2")]
    assert ids(client, run, min_length=2, max_length=4, step=0) == [(0, "t1")]
    one = Trajectory.objects.get(run=run, step=2, task_id="t3")
    r = client.get(f"/api/runs/{run.id}/trajectories", {"trajectory": one.id}).json()
    assert [t["id"] for t in r["items"]] == [one.id] and r["items"][0]["details"]["details"]["expected"] == "4"


@pytest.mark.parametrize("q", [{"min_reward": "nan"}, {"max_reward": "inf"}, {"min_length": -1}, {"trajectory": 0},
                               {"step": "x"}, {"task_id": "x" * 201}])
def test_bad_filters_are_refused_with_the_field(explored, q):
    run, client = explored
    r = client.get(f"/api/runs/{run.id}/trajectories", q)
    assert r.status_code == 422, (q, r.status_code)
    assert r.json()["errors"][0]["path"].endswith(next(iter(q)))


def test_another_teams_trajectories_are_not_found(explored, world):
    run, _ = explored
    other = Client()
    other.force_login(world.other_users["admin"])
    assert other.get(f"/api/runs/{run.id}/trajectories", {"task_id": "t1"}).status_code == 404
