"""The run page's server-drawn first reward chart (controlplane/web/sketch.py): the same buckets the
series API returns, smoothed as the page smooths them, escaped, and no script in it."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs.models import MetricPoint
from controlplane.web import sketch
from tests import factories

pytestmark = pytest.mark.django_db


def _points(run, slug: str, n: int, value=lambda s: s / 100):
    t0 = timezone.now() - timedelta(hours=1)
    points = [MetricPoint(run=run, step=s, domain=slug, key=f"reward/{slug}", value=value(s), time=t0 + timedelta(seconds=s))
              for s in range(n)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)


def _decode(d: str) -> list[tuple[int, int]]:
    """The absolute points of a path_data() string."""
    numbers = [int(n) for n in re.findall(r"-?\d+", d)]
    x, y = numbers[0], numbers[1]
    out = [(x, y)]
    for dx, dy in zip(numbers[2::2], numbers[3::2]):
        x, y = x + dx, y + dy
        out.append((x, y))
    return out


def _sketch_block(body: str) -> str:
    match = re.search(r'<div class="sketch" data-testid="reward-sketch".*?<span class="sk-xtitle">step</span>', body, re.S)
    assert match, "no server-drawn reward chart"
    return match.group(0)


def test_run_page_arrives_with_the_reward_chart_drawn(client, world):
    a, b = factories.domain("sk-a"), factories.domain("sk-b")
    run = factories.run(world.team, domains=[a, b], state="running", budget_steps=100, current_step=99)
    _points(run, "sk-a", 100)
    _points(run, "sk-b", 100, value=lambda s: 1 - s / 100)
    client.force_login(world.users["viewer"])
    block = _sketch_block(client.get(f"/runs/{run.id}/").content.decode())
    assert 'data-points="200"' in block
    # one raw and one smoothed line per domain, in the page's palette, in the chart's order
    assert re.findall(r'<path class="(\w+)" d="M[^"]+" stroke="(#\w+)"', block) == [
        ("raw", "#3b5bdb"), ("smooth", "#3b5bdb"), ("raw", "#e8590c"), ("smooth", "#e8590c")]
    assert ">sk-a</span>" in block and ">sk-b</span>" in block
    assert [t for t in re.findall(r'class="sk-ytick"[^>]*>([^<]+)<', block)] == ["0", "0.2", "0.4", "0.6", "0.8", "1"]
    assert "<script" not in block and " on" not in block.replace(" one", "")


def test_the_sketch_draws_the_buckets_the_series_api_returns(world):
    d = factories.domain("sk-long")
    run = factories.run(world.team, domains=[d], state="running", budget_steps=20_000, current_step=19_999)
    _points(run, "sk-long", 20_000, value=lambda s: (s % 97) / 97)
    view = series.series(run=run, keys=["reward/sk-long"])
    drawn = sketch.reward_sketch(view, ["reward/sk-long"])
    assert drawn.points == len(view["series"]["reward/sk-long"]["step"]) == len(range(0, 20_000, 256))
    raw = _decode(drawn.lines[0].raw)
    assert raw[0][0] == 0 and raw[-1][0] == sketch.VIEW  # the x range is the series' own, as plotly's autorange
    last = view["series"]["reward/sk-long"]["last"][-1]
    assert raw[-1][1] == round((1.05 - last) / 1.05 * sketch.VIEW)
    assert [t.label for t in drawn.x_ticks][-1] == "15000"


def test_no_points_no_sketch(client, world):
    run = factories.run(world.team, domains=[factories.domain("sk-empty")], state="running")
    assert sketch.run_reward_sketch(run, ["reward/sk-empty"]) is None
    client.force_login(world.users["viewer"])
    assert 'data-testid="reward-sketch"' not in client.get(f"/runs/{run.id}/").content.decode()


def test_labels_are_escaped():
    drawn = sketch.Sketch(lines=[sketch.Line(label='<script>alert(1)</script>"', color="#3b5bdb", smooth="0,0 1000,1000", raw="")],
                          points=2)
    html = render_to_string("runs/_reward_sketch.html", {"sketch": drawn})
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in html


def test_path_data_round_trips():
    points = [(0, 500), (2, 480), (3, 495), (7, 0), (1000, 1000)]
    assert sketch.path_data(points) == "M0 500l2-20 1 15 4-495 993 1000"
    assert _decode(sketch.path_data(points)) == points
    assert sketch.path_data([(5, 5)]) == "M5 5" and sketch.path_data([]) == ""


def test_ema_and_ticks_match_the_page():
    assert sketch.ema([1.0], 0.6) == [1.0]  # debiased: the first point is not pulled towards 0
    assert sketch.nice_ticks(0, 1.05) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert sketch.nice_ticks(0, 199_999) == [0.0, 50_000.0, 100_000.0, 150_000.0]
