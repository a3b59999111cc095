"""The runs workspace: the runs list searched, filtered and sorted; ticked runs compared with
their settings side by side (the curves are drawn by the browser: tests/browser/test_charts.py)."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from controlplane.runs.models import MetricPoint
from tests import factories

pytestmark = pytest.mark.django_db


def listed(client, **q) -> list[int]:
    html = client.get("/", q).content.decode()
    return [int(x) for x in re.findall(r'<tr data-run="(\d+)"', html)]


@pytest.fixture
def runs(world):
    a = factories.run(world.team, name="addition sweep lr 1e-3", state="running", budget_steps=100, current_step=80, priority=20,
                      base_model="/models/tiny")
    b = factories.run(world.team, name="parity baseline", state="completed", budget_steps=50, current_step=50, priority=70,
                      base_model="/models/small")
    c = factories.run(world.team, name="addition sweep lr 3e-3", state="failed", budget_steps=100, current_step=10, priority=50,
                      base_model="/models/tiny")
    for run, reward in ((a, 0.7), (b, 0.2)):
        MetricPoint.objects.create(run=run, step=run.current_step, key="reward/mean", value=reward)
    factories.run(world.other, name="addition elsewhere")
    client = Client()
    client.force_login(world.users["viewer"])
    return a, b, c, client


def test_the_runs_list_is_searched_filtered_and_sorted(runs):
    a, b, c, client = runs
    assert listed(client) == [c.id, b.id, a.id]  # newest first; another team's run is not there
    assert listed(client, q="sweep") == [c.id, a.id]
    assert listed(client, q="small") == [b.id]  # the base model
    assert listed(client, q=f"#{b.id}") == [b.id]
    assert listed(client, state="failed") == [c.id]
    assert listed(client, sort="-reward") == [a.id, b.id, c.id]  # no reward yet: last
    assert listed(client, sort="-progress") == [b.id, a.id, c.id]
    assert listed(client, sort="-priority") == [b.id, c.id, a.id]
    assert listed(client, sort="name") == [a.id, c.id, b.id]
    assert listed(client, sort="; drop table", state="nope") == [c.id, b.id, a.id]  # unknown values: the defaults


def test_ticked_runs_are_compared_with_their_settings_side_by_side(runs, world):
    a, b, _, client = runs
    a.config = {"algorithm": {"clip_high": 0.3}, "rollout": {"n": 8}}
    b.config = {"rollout": {"n": 8}}
    a.save(); b.save()
    html = client.get("/runs/compare/", {"run": [a.id, b.id]}).content.decode()
    rows = {k: (d, body) for k, d, body in re.findall(
        r'<tr data-testid="diff-row" data-key="([^"]+)" data-differs="(\w+)"[^>]*>(.*?)</tr>', html, re.S)}
    assert rows["config.algorithm.clip_high"][0] == "true"
    cells = re.findall(r"<td>(.*?)</td>", rows["config.algorithm.clip_high"][1])
    from trainer.config_schema import config_setting

    assert cells[1:] == ["0.3", str(config_setting("algorithm.clip_high").default)]  # b ran with the default
    assert rows["config.rollout.n"][0] == "false" and rows["base_model"][0] == "true" and rows["priority"][0] == "true"
    keys = list(rows)
    assert keys.index("priority") < keys.index("config.rollout.n")  # differing settings first
    assert f'data-run="{a.id}"' in html and f'data-run="{b.id}"' in html
    # One run, too many, not ids, another team's: said or not found.
    assert "Tick from 2 to 6 runs" in client.get("/runs/compare/", {"run": [a.id]}).content.decode()
    assert "Tick from 2 to 6 runs" in client.get("/runs/compare/", {"run": list(range(1, 8))}).content.decode()
    assert "named by their ids" in client.get("/runs/compare/", {"run": [a.id, "x"]}).content.decode()
    foreign = factories.run(world.other)
    assert client.get("/runs/compare/", {"run": [a.id, foreign.id]}).status_code == 404
