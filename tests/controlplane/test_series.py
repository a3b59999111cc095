"""Long series as min/max/last buckets: kept on write, equal to a recomputation, read at any zoom."""
from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs import services as run_services
from controlplane.runs.models import MetricBucket, MetricPoint
from tests import factories

pytestmark = pytest.mark.django_db


def _points(run, steps, key="reward/x", value=lambda s: (s * 7919 % 101) / 100.0):
    t0 = timezone.now()
    pts = [MetricPoint(run=run, step=s, domain="x", key=key, value=value(s), time=t0 + timedelta(seconds=s)) for s in steps]
    MetricPoint.objects.bulk_create(pts)
    return pts


def _expected(run, width, key="reward/x"):
    """Buckets recomputed from the raw points, the slow way."""
    out = {}
    for p in MetricPoint.objects.filter(run=run, key=key).order_by("step"):
        b = out.setdefault(p.step // width, [p.value, p.value, p.value, p.step])
        b[0], b[1] = min(b[0], p.value), max(b[1], p.value)
        b[2], b[3] = p.value, p.step
    return out


def _stored(run, width, key="reward/x"):
    return {b.bucket: [b.vmin, b.vmax, b.vlast, b.last_step]
            for b in MetricBucket.objects.filter(run=run, key=key, width=width)}


def test_rollup_equals_recomputation_in_any_order_and_twice(world):
    run = factories.run(world.team)
    pts = _points(run, range(5000))
    shuffled = pts[:]
    random.Random(1).shuffle(shuffled)
    for chunk in range(0, len(shuffled), 700):  # out of order, in batches
        series.rollup(shuffled[chunk:chunk + 700])
    series.rollup(pts[:1000])  # written again: nothing changes
    for width in series.WIDTHS:
        assert _stored(run, width) == _expected(run, width)


def test_view_widths_and_spike_survives(world):
    run = factories.run(world.team)
    pts = _points(run, range(20_000), value=lambda s: 100.0 if s == 12_345 else 0.5)
    series.rollup(pts)
    whole = series.series(run=run, keys=["reward/x"])
    assert (whole["lo"], whole["hi"], whole["width"]) == (0, 19_999, 256)
    s = whole["series"]["reward/x"]
    assert len(s["step"]) == len(range(0, 20_000, 256)) <= series.MAX_POINTS
    assert max(s["max"]) == 100.0 and min(s["min"]) == 0.5  # the one-step spike is a bucket's max
    last = MetricPoint.objects.get(run=run, step=19_999)
    assert s["step"][-1] == 19_999 and abs(s["time"][-1] - last.time.timestamp() * 1000) <= 1
    zoom = series.series(run=run, keys=["reward/x"], lo=12_000, hi=12_500)
    assert zoom["width"] == 1 and zoom["series"]["reward/x"]["step"] == list(range(12_000, 12_501))
    assert zoom["series"]["reward/x"]["max"][345] == 100.0
    mid = series.series(run=run, keys=["reward/x"], lo=10_000, hi=14_000)
    assert mid["width"] == 16 and 100.0 in mid["series"]["reward/x"]["max"]


def test_raw_view_stops_at_the_cursor(world):
    run = factories.run(world.team)
    _points(run, range(10))
    view = series.series(run=run, keys=["reward/x"])
    assert view["cursor"] == MetricPoint.objects.filter(run=run).latest("id").id
    assert view["series"]["reward/x"]["step"] == list(range(10))
    times = [round(p.time.timestamp() * 1000) for p in MetricPoint.objects.filter(run=run).order_by("step")]
    assert all(abs(a - b) <= 1 for a, b in zip(view["series"]["reward/x"]["time"], times, strict=True))


def test_record_step_rolls_up_and_rewind_refolds(world):
    run = factories.run(world.team, domains=[world.domain], state="running", driver="w1")
    for step in range(1, 41):
        run_services.run_record_step(run=run, worker="w1", step=step, metrics={"reward/addition": step / 100}, samples=[],
                                verifier_versions={})
    # A retried step with other values keeps the stored point, and the buckets agree with it.
    run_services.run_record_step(run=run, worker="w1", step=40, metrics={"reward/addition": 99.0}, samples=[], verifier_versions={})
    assert _stored(run, 16, "reward/addition") == _expected(run, 16, "reward/addition")
    run_services.run_rewind(run=run, to_step=20)
    for step in range(21, 31):
        run_services.run_record_step(run=run, worker="w1", step=step, metrics={"reward/addition": -step / 100}, samples=[],
                                verifier_versions={})
    for width in series.WIDTHS:
        assert _stored(run, width, "reward/addition") == _expected(run, width, "reward/addition")
    assert _stored(run, 16, "reward/addition")[1][3] == 30


def test_series_api_is_team_scoped_and_validates(client, world):
    run = factories.run(world.team)
    series.rollup(_points(run, range(3000)))
    client.force_login(world.users["viewer"])
    r = client.get(f"/api/runs/{run.id}/series", {"prefix": "reward/", "lo": 0, "hi": 2999})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["width"] == 16 and len(body["series"]["reward/x"]["last"]) == 188
    assert client.get(f"/api/runs/{run.id}/keys").json() == ["reward/x"]
    bad = client.get(f"/api/runs/{run.id}/series", {"key": "reward/x", "lo": 10, "hi": 5})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "hi"
    client.force_login(world.other_users["admin"])
    assert client.get(f"/api/runs/{run.id}/series", {"key": "reward/x"}).status_code == 404
