"""The run page's charts as a team would use them: one zoom for every chart, events marked on the
curves, step / minutes-since-start / wall-time axes, a log scale, throughput on two axes, and CSV
and PNG export of any chart; and the trajectory explorer: filters, expected beside found, one task
across steps, shareable links (Chromium, the web app over PostgreSQL)."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs.models import MetricPoint, RunEvent, Trajectory
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

STEPS = 50


def _run_with_curves(world):
    t0 = timezone.now() - timedelta(minutes=10)
    run = factories.run(world.team, domains=[world.domain], state="completed", budget_steps=STEPS, current_step=STEPS - 1,
                        started_at=t0)
    d = world.domain.slug
    values = {f"reward/{d}": lambda s: s / STEPS, f"pass_rate/{d}": lambda s: s / (2 * STEPS),
              "perf/tokens_per_s": lambda s: 2000.0 + s, "perf/completions_per_s": lambda s: 40.0 + s / 10,
              f"sampler/level/{d}": lambda s: 0.0 if s < 24 else 1.0}
    points = [MetricPoint(run=run, step=s, domain=d if "/" + d in key else "", key=key, value=f(s),
                          time=t0 + timedelta(seconds=6 * s))
              for key, f in values.items() for s in range(STEPS)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)
    for kind, step in (("checkpoint", 20), ("paused", 30), ("weights_applied", 35), ("alert", 40)):
        RunEvent.objects.create(run=run, kind=kind, message=f"{kind} at step {step}", data={"step": step},
                                at=t0 + timedelta(seconds=6 * step))
    # The curriculum moved the domain up after step 24: its batches from step 25 are at level 1.
    RunEvent.objects.create(run=run, kind="level", message=f"{d} moved up to curriculum level 1 after step 24",
                            data={"domain": d, "from": 0, "to": 1, "recorded_step": 24, "step": 25},
                            at=t0 + timedelta(seconds=6 * 24))
    return run


def _chart(page, id_, expr):
    return page.evaluate(f"() => {{ const c = document.getElementById('{id_}'); return {expr}; }}")


def test_charts_zoom_together_mark_events_switch_axes_and_export(server, browser, world):
    run = _run_with_curves(world)
    page = server.page(browser, "charts")
    server.login(page, "acme-admin", "pw-123456")
    page.goto(f"/runs/{run.id}/")
    for chart in ("chart-reward", "chart-pass", "chart-throughput"):
        page.wait_for_function(f"() => Number(document.getElementById('{chart}').dataset.points || 0) > 0")

    # Events are lines on every chart, at their steps.
    page.wait_for_function("() => (document.getElementById('chart-pass').layout.shapes || []).length >= 4")
    shapes = _chart(page, "chart-reward", "c.layout.shapes.map((s) => [s.name, s.x0])")
    assert {("checkpoint", 20), ("paused", 30), ("weights_applied", 35), ("alert", 40), ("level", 25)} <= {tuple(s) for s in shapes}
    # Labels say what happened in words (a level change names its domain and level), at staggered heights.
    labels = dict(_chart(page, "chart-reward", "c.layout.shapes.map((s) => [s.name, s.label.text])"))
    assert labels["level"] == f"{world.domain.slug} L1" and labels["weights_applied"] == "weights applied"
    assert len(set(_chart(page, "chart-reward", "c.layout.shapes.map((s) => s.y1)"))) > 1
    # The per-domain level chart: a step line from level 0 to 1 at step 24.
    page.wait_for_function("() => Number(document.getElementById('chart-level').dataset.points || 0) > 0")
    level = _chart(page, "chart-level", "c.data.filter((t) => t.showlegend !== false).map((t) => [t.line.shape, t.y[0], t.y[t.y.length - 1]])")
    assert level == [["hv", 0, 1]]
    page.uncheck("[data-testid=show-events]")
    page.wait_for_function("() => document.getElementById('chart-reward').layout.shapes.length === 0")
    page.check("[data-testid=show-events]")
    page.wait_for_function("() => document.getElementById('chart-reward').layout.shapes.length > 0")
    screenshot(page, "16-run-charts-events")

    # Tokens/s on the left axis, completions/s on the right.
    axes = dict(_chart(page, "chart-throughput", "c.data.filter((t) => t.showlegend !== false).map((t) => [t.name, t.yaxis || 'y'])"))
    assert axes["tokens_per_s"] == "y" and axes["completions_per_s"] == "y2"

    # Zooming one chart zooms them all (the server re-buckets each); a double-click resets them all.
    page.evaluate("Plotly.relayout('chart-reward', {'xaxis.range[0]': 10, 'xaxis.range[1]': 20})")
    for chart in ("chart-pass", "chart-throughput"):
        page.wait_for_function(f"() => document.getElementById('{chart}').dataset.zoomRange === '10-20'")
        page.wait_for_function(f"() => String(document.getElementById('{chart}').layout.xaxis.range) === '10,20'")
    page.evaluate("Plotly.relayout('chart-pass', {'xaxis.autorange': true})")
    page.wait_for_function("() => document.getElementById('chart-throughput').dataset.zoomRange === undefined")
    page.uncheck("[data-testid=sync-zoom]")
    page.evaluate("Plotly.relayout('chart-reward', {'xaxis.range[0]': 5, 'xaxis.range[1]': 15})")
    page.wait_for_function("() => document.getElementById('chart-reward').dataset.zoomRange === '5-15'")
    assert _chart(page, "chart-pass", "c.dataset.zoomRange") is None
    page.evaluate("Plotly.relayout('chart-reward', {'xaxis.autorange': true})")
    page.wait_for_function("() => document.getElementById('chart-reward').dataset.zoomRange === undefined")

    # Minutes since the run started: the first point at 0, the last at 49 x 6 s; log scale.
    page.select_option("[data-testid=x-axis]", "relative")
    page.wait_for_function("() => document.getElementById('chart-reward').layout.xaxis.title.text === 'minutes since start'")
    xs = _chart(page, "chart-reward", "c.data.filter((t) => t.showlegend !== false)[0].x")
    assert xs[0] == pytest.approx(0, abs=1e-3) and xs[-1] == pytest.approx(49 * 6 / 60, abs=1e-3)  # the clock in ms
    assert _chart(page, "chart-reward", "c.layout.shapes.find((s) => s.name === 'checkpoint').x0") == pytest.approx(20 * 6 / 60, abs=1e-3)
    page.check("[data-testid=log-y]")
    page.wait_for_function("() => document.getElementById('chart-reward').layout.yaxis.type === 'log'")

    # CSV of a chart: every point of its series; PNG: the chart as an image.
    with page.expect_download() as csv:
        page.click("[data-testid=csv-chart-reward]")
    lines = Path(csv.value.path()).read_text().splitlines()
    assert csv.value.suggested_filename == f"run-{run.id}-reward.csv"
    assert lines[0] == "key,step,time,value,min,max" and len(lines) == 1 + STEPS
    key, step, _, value, *_ = lines[1 + 25].split(",")
    assert key == f"reward/{world.domain.slug}" and int(step) == 25 and float(value) == pytest.approx(25 / STEPS)
    with page.expect_download() as png:
        page.click("[data-testid=png-chart-reward]")
    assert png.value.suggested_filename == f"run-{run.id}-reward.png"
    assert Path(png.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_trajectory_explorer_filters_compares_and_shares(server, browser, world):
    run = _run_with_curves(world)
    d = world.domain.slug
    Trajectory.objects.bulk_create([
        Trajectory(run=run, step=step, domain=d, task_id=f"t{i}", prompt=f"What is {i} + {i}?", completion=answer,
                   reward=float(answer == str(2 * i)), outcome="pass" if answer == str(2 * i) else "fail",
                   details={"details": {"expected": str(2 * i), "found": answer, "stage": "exact"}})
        for step in (10, 20, 30) for i, answer in enumerate(["0", "3", str(step // 10 + 1)])])  # t2 learned at step 30
    page = server.page(browser, "explorer")
    server.login(page, "acme-viewer", "pw-123456")
    page.goto(f"/runs/{run.id}/?t.step=20")  # a shared view opens on load
    page.wait_for_selector("[data-testid=trajectory]")
    assert page.locator("[data-testid=trajectory]").count() == 3
    # It opens in view: its title and first row inside the window, not below the charts.
    top = page.evaluate("() => document.getElementById('traj-title').getBoundingClientRect().top")
    row = page.evaluate("() => document.querySelector('[data-testid=trajectory]').getBoundingClientRect().bottom")
    assert 0 <= top < row <= page.viewport_size["height"], (top, row)
    first = page.locator("[data-testid=trajectory]").first
    assert first.locator("[data-testid=traj-expected]").inner_text() == "0"
    assert first.locator("[data-testid=traj-verifier]").get_attribute("open") is None  # collapsed
    # Failures only, of this step.
    page.select_option("[data-testid=traj-outcome]", "fail")
    page.click("[data-testid=traj-apply]")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=trajectory]')].every((r) => r.dataset.outcome === 'fail')")
    assert page.locator("[data-testid=trajectory]").count() == 2
    assert "t.outcome=fail" in page.url and "t.step=20" in page.url
    # The same task at every step: learned at step 30 (expected 6, found 6).
    page.locator("[data-testid=trajectory]").last.locator("[data-testid=traj-across]").click()
    page.wait_for_function("() => document.querySelector('[data-testid=traj-task]').value === 't2'")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=trajectory]').length === 3")
    outcomes = page.eval_on_selector_all("[data-testid=trajectory]", "rows => rows.map((r) => r.dataset.outcome)")
    assert outcomes == ["fail", "fail", "pass"]
    screenshot(page, "14-trajectory-across-steps")
    # Each row links to itself; the link opens that one trajectory.
    href = page.locator("[data-testid=traj-link]").last.get_attribute("href")
    page.goto(href)
    page.wait_for_selector("[data-testid=trajectory]")
    assert page.locator("[data-testid=trajectory]").count() == 1
    assert "trajectory" in page.inner_text("#traj-title")
    # A view taller than the window opens at its top (its title and filters), not scrolled to its end.
    Trajectory.objects.bulk_create([Trajectory(run=run, step=40, domain=d, task_id=f"u{i}", prompt="p", completion="c\n" * 6,
                                               reward=0.0, outcome="fail") for i in range(40)])
    page.goto(f"/runs/{run.id}/?t.step=40")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=trajectory]').length === 40")
    assert page.evaluate("() => document.getElementById('trajectories').getBoundingClientRect().height") > page.viewport_size["height"]
    top = page.evaluate("() => document.getElementById('traj-title').getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"] / 2, top


def test_ticked_runs_open_overlaid_with_their_settings(server, browser, world):
    first, second = _run_with_curves(world), _run_with_curves(world)
    second.config = {"algorithm": {"clip_high": 0.3}}
    second.save()
    means = MetricPoint.objects.bulk_create([MetricPoint(run=r, step=s, key="reward/mean", value=s / STEPS, time=r.started_at)
                                             for r in (first, second) for s in range(STEPS)])
    series.rollup(means)
    page = server.page(browser, "compare-runs")
    server.login(page, "acme-viewer", "pw-123456")
    page.goto("/")
    page.check(f"[data-testid=compare-run-{first.id}]")
    page.check(f"[data-testid=compare-run-{second.id}]")
    with page.expect_navigation():
        page.click("[data-testid=runs-compare-submit]")
    for chart in ("cmp-reward-mean", "cmp-reward", "cmp-pass", "cmp-throughput"):
        # one line per run, in the runs list's order (newest first)
        page.wait_for_function(f"() => document.getElementById('{chart}').dataset.runs === '{second.id},{first.id}'")
    assert page.input_value("[data-testid=compare-domain]") == world.domain.slug
    differing = page.locator("[data-testid=diff-row][data-differs=true]:visible")
    assert "config.algorithm.clip_high" in [differing.nth(i).get_attribute("data-key") for i in range(differing.count())]
    assert page.locator("[data-testid=diff-row][data-differs=false]:visible").count() == 0
    screenshot(page, "15-runs-overlaid")
    page.check("[data-testid=diff-all]")
    assert page.locator("[data-testid=diff-row][data-differs=false]:visible").count() > 0


def test_the_trajectory_explorer_shows_an_episodes_turns_and_a_solids_thumbnail(server, browser, world):
    """A multi-turn episode: each model turn and each tool output (marked as not trained on), and
    the final diff the verifier judged; a shell episode: each command with its output and how it
    ended; a CAD answer: the picture of its solid the verifier drew."""
    import base64

    import numpy as np

    from trainer.verifiers.cad import thumbnail_png

    run = _run_with_curves(world)
    d = world.domain.slug
    cube_v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float)
    cube_t = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1], [2, 3, 7], [2, 7, 6], [0, 2, 6],
                       [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    picture = thumbnail_png(cube_v, cube_t)
    assert base64.b64decode(picture.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    transcript = [{"role": "model", "text": '{"tool": "read", "path": "pkg/text.py"}'},
                  {"role": "tool", "text": "   1  def slugify(text):"},
                  {"role": "model", "text": '{"tool": "submit"}'}]
    Trajectory.objects.bulk_create([
        Trajectory(run=run, step=10, domain=d, task_id="repo", prompt="Fix the bug", completion="diff --git a/pkg/text.py b/pkg/text.py",
                   reward=0.0, outcome="fail", details={"details": {"stage": "repo_tests"}, "transcript": transcript, "turns": 2}),
        Trajectory(run=run, step=10, domain=d, task_id="shell", prompt="Summarise the CSV", completion="diff --git a/out.txt b/out.txt",
                   reward=None, outcome="timeout", details={"details": {"stage": "shell_state"}, "turns": 2, "transcript": [
                       {"role": "model", "text": '{"tool": "bash", "command": "wc -l data.csv"}'},
                       {"role": "tool", "text": "[stdout]\n3 data.csv\n[exit status 0]", "command": "wc -l data.csv", "exit": "exit 0"},
                       {"role": "model", "text": '{"tool": "bash", "command": "sleep 99"}'},
                       {"role": "tool", "text": "[killed: wall time limit]", "command": "sleep 99", "exit": "killed: wall time limit"}]}),
        Trajectory(run=run, step=10, domain=d, task_id="cad", prompt="Model a cube", completion="```python\nresult = ...\n```",
                   reward=1.0, outcome="pass", details={"details": {"stage": "cad_mesh", "thumbnail": picture}}),
    ])
    page = server.page(browser, "turns")
    server.login(page, "acme-viewer", "pw-123456")
    page.goto(f"/runs/{run.id}/?t.step=10")
    page.wait_for_selector("[data-testid=trajectory]")
    episode = page.locator("[data-testid=trajectory][data-outcome=fail]")
    episode.locator("[data-testid=traj-transcript] summary").click()
    turns = episode.locator("[data-testid=traj-transcript] .turn")
    assert turns.count() == 3 and "2 turns" in episode.locator("[data-testid=traj-transcript] summary").inner_text()
    assert "not trained on" in turns.nth(1).inner_text() and "def slugify" in turns.nth(1).inner_text()
    assert "diff --git" in episode.inner_text()
    shell = page.locator("[data-testid=trajectory][data-outcome=timeout]")
    shell.locator("[data-testid=traj-transcript] summary").click()
    assert "2 turns · 2 commands" in shell.locator("[data-testid=traj-transcript] summary").inner_text()
    lines = shell.locator("[data-testid=traj-command-line]")
    assert [lines.nth(i).inner_text() for i in range(lines.count())] == ["$ wc -l data.csv", "$ sleep 99"]
    ends = shell.locator("[data-testid=traj-exit]")
    assert [ends.nth(i).inner_text() for i in range(2)] == ["exit 0", "killed: wall time limit"]
    assert "exit-bad" in ends.nth(1).get_attribute("class") and "3 data.csv" in shell.inner_text()
    assert episode.locator("[data-testid=traj-command]").count() == 0  # tool calls that are not commands
    solid = page.locator("[data-testid=trajectory][data-outcome=pass] [data-testid=traj-thumbnail]")
    page.wait_for_function("() => { const i = document.querySelector('[data-testid=traj-thumbnail]'); return i && i.complete && i.naturalWidth === 72; }")
    assert solid.count() == 1
    screenshot(page, "15-trajectory-turns-and-thumbnail")
