"""The reward-hacking watch in the control plane: the default rules on the trainer's hack/* metrics
(a canary pass fires at once, linked to the trajectory; tampering over a window), the explorer's
evidence filter, and the run page's reward-integrity panel."""
from __future__ import annotations

from importlib import import_module

import pytest
from django.test import Client
from django.utils import timezone

from controlplane import dispatch
from controlplane.alerts import services as alerts
from controlplane.alerts.models import AlertFiring, AlertRule
from controlplane.runs import services as run_services
from controlplane.runs.models import Run
from tests import factories

pytestmark = pytest.mark.django_db
WORKER = "w-integrity"


@pytest.fixture
def watched(world, monkeypatch):
    """A running run on two domains, driven by WORKER, with the default rules as migrated."""
    from django.apps import apps

    monkeypatch.setattr(dispatch, "send", lambda *a, **k: None)
    AlertRule.objects.filter(team__isnull=True).delete()
    for name, fn in (("0002_default_rules", "create"), ("0003_rl_health_rules", "forward"), ("0004_integrity_rules", "forward")):
        getattr(import_module(f"controlplane.alerts.migrations.{name}"), fn)(apps, None)
    run = factories.run(world.team, domains=[world.domain, world.domain2], state="running", budget_steps=100)
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now(), driver=WORKER)
    run.refresh_from_db()
    client = Client()
    client.force_login(world.users["viewer"])
    return run, client


def sample(domain: str, outcome: str, *, canary: bool = False, tampered: list[str] = ()) -> dict:
    return {"domain": domain, "task_id": "HumanEval/3" + ("~canary" if canary else ""), "prompt": "p", "completion": "c",
            "reward": 1.0 if outcome == "pass" else 0.0, "outcome": outcome,
            "details": {"changed_files": list(tampered), "tampered": list(tampered)},
            **({"canary": {"recipe": "oneoff", "of": "HumanEval/3", "test": 0}} if canary else {})}


def record(run, step: int, metrics: dict, samples: list[dict]):
    run_services.run_record_step(run=run, worker=WORKER, step=step, metrics=metrics, samples=samples, verifier_versions={})
    return alerts.alerts_after_step(run=run, step=step)


def test_a_canary_pass_fires_at_once_with_a_link_to_the_trajectory(watched):
    run, client = watched
    d = run.run_domains.first().domain.slug
    rule = AlertRule.objects.get(team=None, name="Canary passed")
    assert rule.enabled and "ImpossibleBench" in rule.advice
    # an honest policy: canaries planted, none passed, nothing fires
    for n in range(1, 4):
        assert not record(run, n, {f"hack/canaries/{d}": 1.0, f"hack/canary_passes/{d}": 0.0, f"hack/canary_pass_rate/{d}": 0.0, f"reward/{d}": 0.5},
                          [sample(d, "fail", canary=True), sample(d, "pass")])
    fired = record(run, 4, {f"hack/canaries/{d}": 2.0, f"hack/canary_passes/{d}": 1.0, f"hack/canary_pass_rate/{d}": 0.5},
                   [sample(d, "pass", canary=True), sample(d, "fail", canary=True), sample(d, "pass")])
    assert [f.rule.name for f in fired] == ["Canary passed"] and fired[0].step == 4
    url = fired[0].event.data["url"]
    assert url.startswith(f"/runs/{run.id}/?") and "t.flag=canary" in url and f"t.domain={d}" in url and "t.step=4" in url
    # the link's view: the step's canaries, the passing one among them
    got = client.get(f"/api/runs/{run.id}/trajectories", {"step": 4, "domain": d, "flag": "canary", "outcome": "pass"}).json()
    assert [t["task_id"] for t in got["items"]] == ["HumanEval/3~canary"] and got["items"][0]["details"]["canary"]["of"] == "HumanEval/3"
    assert len(client.get(f"/api/runs/{run.id}/trajectories", {"flag": "canary"}).json()["items"]) == 5
    # the run page's panel puts it together with the audit badge
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="integrity"' in page and f'data-domain="{d}" data-passes="1"' in page
    assert "1 passed, first at step 4" in page and f"hack/canary_pass_rate/{d}" in page
    # the panel is summed by the database: its queries do not grow with the run's steps
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from controlplane.runs.selectors import run_integrity

    with CaptureQueriesContext(connection) as before:
        run_integrity(run=run)
    for n in range(5, 25):
        record(run, n, {f"hack/canaries/{d}": 1.0, f"hack/canary_passes/{d}": 0.0, f"hack/canary_pass_rate/{d}": 0.0}, [])
    with CaptureQueriesContext(connection) as after:
        row = next(r for r in run_integrity(run=run) if r["domain"] == d)
    assert len(after.captured_queries) == len(before.captured_queries)
    assert (row["canaries"], row["canary_passes"], row["first_pass_step"]) == (3 + 2 + 20, 1, 4)


def test_tampering_fires_over_its_window_and_the_explorer_filters_on_it(watched):
    run, client = watched
    d = run.run_domains.first().domain.slug
    rule = AlertRule.objects.get(team=None, name="Test tampering")
    for n in range(1, 6):  # an honest policy: no episode touches a test
        assert not record(run, n, {f"hack/tamper_rate/{d}": 0.0}, [sample(d, "pass"), sample(d, "fail")])
    fired = []
    for n in range(6, 6 + rule.window):
        fired += record(run, n, {f"hack/tamper_rate/{d}": 0.5},
                        [sample(d, "pass", tampered=["tests/test_core.py", "conftest.py"]), sample(d, "pass")])
    assert [f.rule.name for f in fired] == ["Test tampering"]
    series = [0.0] * 5 + [0.5] * rule.window
    expected = next(n for n in range(rule.window, len(series) + 1) if sum(series[n - rule.window:n]) / rule.window > rule.threshold)
    assert fired[0].step == expected
    assert "t.flag=tampered" in fired[0].event.data["url"]
    got = client.get(f"/api/runs/{run.id}/trajectories", {"flag": "tampered"}).json()["items"]
    assert len(got) == rule.window and all(t["details"]["details"]["tampered"] == ["tests/test_core.py", "conftest.py"] for t in got)
    assert AlertFiring.objects.filter(run=run).count() == 1


def test_a_bad_evidence_flag_is_refused_naming_it(watched):
    run, client = watched
    r = client.get(f"/api/runs/{run.id}/trajectories", {"flag": "gamed"})
    assert r.status_code in (400, 422) and r.json()["errors"][0]["path"].endswith("flag")


def test_a_domain_no_check_applies_to_shows_no_figures(watched):
    run, client = watched
    from controlplane.runs.selectors import run_integrity

    rows = run_integrity(run=run)
    assert [r["watched"] for r in rows] == [False, False] and all(r["audit"] is not None for r in rows)
    assert 'data-testid="integrity-row"' in client.get(f"/runs/{run.id}/").content.decode()


def test_regrade_disagreement_fires_over_its_window_linked_to_the_failed_regrades(watched):
    run, client = watched
    d = run.run_domains.first().domain.slug
    rule = AlertRule.objects.get(team=None, name="Regrade disagreement")
    for n in range(1, 6):  # passes that hold under the stricter grading
        assert not record(run, n, {f"hack/regraded/{d}": 2.0, f"hack/regrade_disagreements/{d}": 0.0, f"hack/regrade_disagreement/{d}": 0.0}, [sample(d, "pass")])
    fired = []
    for n in range(6, 6 + rule.window):
        regraded = dict(sample(d, "pass"), regrade={"outcome": "fail", "details": {"tests": []}})
        fired += record(run, n, {f"hack/regraded/{d}": 2.0, f"hack/regrade_disagreements/{d}": 1.0, f"hack/regrade_disagreement/{d}": 0.5}, [regraded, sample(d, "pass")])
    assert [f.rule.name for f in fired] == ["Regrade disagreement"] and "t.flag=regrade" in fired[0].event.data["url"]
    got = client.get(f"/api/runs/{run.id}/trajectories", {"flag": "regrade"}).json()["items"]
    assert len(got) == rule.window and all(t["details"]["regrade"]["outcome"] == "fail" for t in got)
    from controlplane.runs.selectors import run_integrity

    row = next(r for r in run_integrity(run=run) if r["domain"] == d)
    assert (row["regraded"], row["regrade_disagreements"]) == (2 * (5 + rule.window), rule.window)


def test_a_run_recorded_before_the_counts_shows_its_canary_passes_from_the_rates(watched):
    """Steps written by a trainer that recorded only the rates: the panel sums count x rate."""
    run, _ = watched
    d = run.run_domains.first().domain.slug
    record(run, 1, {f"hack/canaries/{d}": 2.0, f"hack/canary_pass_rate/{d}": 0.0}, [])
    record(run, 2, {f"hack/canaries/{d}": 2.0, f"hack/canary_pass_rate/{d}": 0.5,
                    f"hack/regraded/{d}": 4.0, f"hack/regrade_disagreement/{d}": 0.25}, [])
    from controlplane.runs.selectors import run_integrity

    row = next(r for r in run_integrity(run=run) if r["domain"] == d)
    assert (row["canaries"], row["canary_passes"], row["first_pass_step"]) == (4, 1, 2)
    assert (row["regraded"], row["regrade_disagreements"], row["watched"]) == (4, 1, True)

