"""The reward-hacking watch: training up while held-out down, and tampering in completions."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.utils import timezone

from controlplane.runs.models import MetricPoint, RunEvent
from controlplane.runs.watch import HACKING_DELTA, run_watch_heldout, run_watch_tampering, tampering_counts, tampering_metrics
from tests import factories

pytestmark = pytest.mark.django_db


def _points(run, key, values: dict[int, float], domain="code"):
    now = timezone.now()
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=s, domain=domain, key=key, value=v, time=now) for s, v in values.items()])


@pytest.fixture
def run():
    team = factories.team("watchers")
    return factories.run(team, domains=[factories.domain("code")], state="running")


def test_training_up_while_heldout_down_is_one_event_until_it_recovers(run):
    _points(run, "reward/code", {s: 0.3 for s in range(1, 11)} | {s: 0.3 + 2 * HACKING_DELTA for s in range(11, 21)})
    _points(run, "eval/reward/code", {10: 0.5, 20: 0.5 - 2 * HACKING_DELTA})
    [event] = run_watch_heldout(run=run, step=20)
    assert event.kind == "reward_hacking" and event.data["domain"] == "code" and event.data["from_step"] == 10
    assert event.data["heldout"] == [0.5, round(0.5 - 2 * HACKING_DELTA, 4)]
    # still diverging at the next evaluation: no second event
    _points(run, "reward/code", {s: 0.9 for s in range(21, 31)})
    _points(run, "eval/reward/code", {30: 0.2})
    assert run_watch_heldout(run=run, step=30) == []
    # held-out recovers: resolved, and a new divergence later fires again
    _points(run, "eval/reward/code", {40: 0.6})
    _points(run, "reward/code", {s: 0.9 for s in range(31, 41)})
    assert [e.kind for e in run_watch_heldout(run=run, step=40)] == ["reward_hacking_resolved"]


def test_both_rising_is_learning_not_hacking(run):
    _points(run, "reward/code", {s: 0.2 for s in range(1, 11)} | {s: 0.6 for s in range(11, 21)})
    _points(run, "eval/reward/code", {10: 0.2, 20: 0.5})
    assert run_watch_heldout(run=run, step=20) == []
    assert not RunEvent.objects.filter(run=run, kind="reward_hacking").exists()


def test_tampering_signatures_are_counted_and_reported_when_they_double(run):
    traj = lambda text: SimpleNamespace(task=SimpleNamespace(domain="code"), completion=text)  # noqa: E731
    honest = traj("def f(x):\n    return x + 1\n")
    hostile = traj("import builtins\nbuiltins.exec = lambda *a: None\ndef f(x):\n    return None\n")
    counts, examples = tampering_counts([honest, hostile, hostile])
    assert counts == {"code": {"builtins tampering": 2}} and "builtins.exec" in examples["code"]["builtins tampering"]

    def step(n: int, per_step: dict) -> list[RunEvent]:
        _points(run, "x", {n: 0.0})
        for key, value in tampering_metrics(per_step).items():
            _points(run, key, {n: value})
        return run_watch_tampering(run=run, step=n, counts=per_step, examples=examples)

    [event] = step(3, counts)
    assert event.kind == "tampering" and event.data["total"] == 2 and event.data["signature"] == "builtins tampering"
    assert step(4, {"code": {"builtins tampering": 1}}) == []  # 3 in all: not yet twice 2
    [again] = step(5, {"code": {"builtins tampering": 1}})
    assert again.data["total"] == 4
    assert step(6, {}) == []
