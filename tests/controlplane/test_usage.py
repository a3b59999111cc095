"""Compute accounting: usage recorded with each step (idempotent for a retried write, counted
again for work redone after a resume), read per run, per domain and per team; the team's figures
are the sum of its runs' on the page, in the API and in the CSV; a running run's projection."""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.runs.models import MetricPoint, Run, UsageRecord
from controlplane.runs.services import run_record_step
from controlplane.runs.usage import USAGE_FIELDS
from tests import factories

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def driven(team, *, budget=100, gpus=0, name="r", domains=None):
    run = factories.run(team, state="running", budget_steps=budget, gpus=gpus, name=name, domains=domains)
    Run.objects.filter(pk=run.pk).update(driver="w1")
    run.refresh_from_db()
    return run


def figures(domain: str, step: int) -> dict:
    """Distinct numbers per domain and step, so a sum that drops or doubles a row shows."""
    k = step + (7 if domain == "parity" else 0)
    if not domain:
        return {"wall_s": 1.5 + step, "cpu_s": 2.25 * step, "gpu_s": 0.0}
    return {"generated_tokens": 100 * k, "trained_tokens": 60 * k, "completions": 8, "sandbox_s": 0.5 * k,
            "judge_calls": step % 3, "judge_tokens": 40 * (step % 3), "outcomes": {"pass": k % 8, "fail": 8 - k % 8}}


def record(run, step, *, worker="w1", domains=("addition", "parity"), metrics=None):
    usage = {d: figures(d, step) for d in ("", *domains)}
    run_record_step(run=run, worker=worker, step=step, metrics=metrics or {}, samples=[], verifier_versions={},
                    usage=usage)


def test_a_retried_write_counts_once_and_work_redone_after_a_resume_counts_again(world):
    run = driven(world.team)
    record(run, 1)
    record(run, 1)  # the same driver retries the write
    assert UsageRecord.objects.filter(run=run, step=1).count() == 3
    Run.objects.filter(pk=run.pk).update(driver="w2")  # resumed on another worker: step 1 is done again
    record(run, 1, worker="w2")
    assert UsageRecord.objects.filter(run=run, step=1).count() == 6
    totals = client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/usage").json()["totals"]
    assert totals["generated_tokens"] == 2 * (100 * 1 + 100 * 8)


def test_the_team_report_is_the_sum_of_its_runs_on_the_page_in_the_api_and_in_the_csv(world):
    runs = [driven(world.team, name=f"run {i}") for i in range(3)]
    for i, run in enumerate(runs):
        for step in range(1, 4 + i):
            record(run, step)
    other = driven(world.other, name="globex run")
    record(other, 1)

    admin = client_for(world.users["admin"])
    per_run = [admin.get(f"/api/runs/{r.id}/usage").json()["totals"] for r in runs]
    report = admin.get("/api/teams/acme/usage").json()
    for field in (*USAGE_FIELDS, "verifications"):
        assert report["totals"][field] == pytest.approx(sum(t[field] for t in per_run)), field
        assert report["totals"][field] == pytest.approx(sum(r[field] for r in report["runs"])), field
    assert [r["run"] for r in report["runs"]] == [r.id for r in runs]  # never another team's
    assert report["totals"]["generated_tokens"] == sum(UsageRecord.objects.filter(team=world.team).values_list("generated_tokens", flat=True))

    page = admin.get("/usage/?team=acme").content.decode()
    totals_table = page.split('data-testid="usage-team-totals"')[1].split("</table>")[0]
    for field in ("generated_tokens", "trained_tokens", "judge_calls", "judge_tokens", "verifications"):
        shown = re.search(rf'data-field="{field}"[^>]*>([^<]+)<', totals_table).group(1)
        assert int(shown) == sum(t[field] for t in per_run), field
    assert "globex run" not in page

    rows = list(csv.DictReader(io.StringIO(admin.get("/api/teams/acme/usage?format=csv").content.decode())))
    total = next(r for r in rows if r["kind"] == "total")
    assert float(total["sandbox_s"]) == pytest.approx(sum(float(r["sandbox_s"]) for r in rows if r["kind"] == "run"))
    assert int(total["generated_tokens"]) == report["totals"]["generated_tokens"]


def test_the_date_range_selects_what_was_recorded_in_it(world):
    run = driven(world.team)
    record(run, 1)
    record(run, 2)
    old = timezone.now() - timedelta(days=40)
    UsageRecord.objects.filter(run=run, step=1).update(at=old)
    admin = client_for(world.users["admin"])
    today = timezone.now().date().isoformat()
    recent = admin.get(f"/api/teams/acme/usage?start={today}&end={today}").json()
    assert recent["totals"]["generated_tokens"] == 100 * 2 + 100 * 9
    past = admin.get(f"/api/teams/acme/usage?start={old.date().isoformat()}&end={old.date().isoformat()}").json()
    assert past["totals"]["generated_tokens"] == 100 * 1 + 100 * 8


@pytest.mark.parametrize("query, path", [("start=yesterday", "start"), ("start=2026-12-02&end=2026-12-01", "end")])
def test_a_bad_range_names_the_parameter(world, query, path):
    r = client_for(world.users["admin"]).get(f"/api/teams/acme/usage?{query}")
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == path
    page = client_for(world.users["admin"]).get(f"/usage/?team=acme&{query}")
    assert page.status_code == 400 and b'data-testid="usage-error"' in page.content


def test_team_reports_are_for_its_admins_and_platform_admins(world):
    assert client_for(world.users["member"]).get("/api/teams/acme/usage").status_code == 403
    assert client_for(world.users["member"]).get("/usage/?team=acme").status_code == 403
    assert client_for(world.other_users["admin"]).get("/api/teams/acme/usage").status_code == 404
    assert client_for(world.staff).get("/api/teams/acme/usage").status_code == 200
    assert client_for(world.staff).get("/usage/?team=globex").status_code == 200


def test_a_running_runs_projection(world):
    run = driven(world.team, budget=100, gpus=2, domains=[world.domain, world.domain2])
    for step in range(1, 11):
        usage = {"": {"wall_s": 3.0, "cpu_s": 4.0, "gpu_s": 6.0}, "addition": {"generated_tokens": 500, "completions": 8}}
        metrics = {"reward/addition": 0.1 + 0.02 * step, "reward/parity": 0.5}
        run_record_step(run=run, worker="w1", step=step, metrics=metrics, samples=[], verifier_versions={}, usage=usage)
    assert MetricPoint.objects.filter(run=run, domain="addition", key="reward/addition").count() == 10
    body = client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/usage").json()
    p = body["projection"]
    assert p["steps_left"] == 90 and p["eta_s"] == pytest.approx(270.0) and p["gpu_s_to_finish"] == pytest.approx(540.0)
    assert p["cpu_s_to_finish"] == pytest.approx(360.0)
    addition = p["domains"]["addition"]
    assert addition["slope_per_step"] == pytest.approx(0.02)
    assert addition["per_point"]["steps"] == pytest.approx(0.5) and addition["per_point"]["gpu_s"] == pytest.approx(3.0)
    assert addition["per_point"]["generated_tokens"] == 250
    assert p["domains"]["parity"]["per_point"] is None and "not improving" in p["domains"]["parity"]["note"]

    card = client_for(world.users["viewer"]).get(f"/runs/{run.id}/usage/").content.decode()
    assert 'data-testid="usage-projection"' in card and "90 steps" in card
    page = client_for(world.users["viewer"]).get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="usage"' in page and 'data-live="1"' in page
    # Filled on the first render: the totals of the ten steps, not an empty card waiting for a refresh.
    assert '<td data-field="generated_tokens">5000</td>' in page and 'data-testid="usage-projection"' in page

    Run.objects.filter(pk=run.pk).update(state="completed")
    assert client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/usage").json()["projection"] is None
    finished = client_for(world.users["viewer"]).get(f"/runs/{run.id}/").content.decode()
    assert '<td data-field="generated_tokens">5000</td>' in finished and 'data-live="1"' not in finished


def test_another_teams_run_usage_is_not_found(world):
    run = driven(world.other)
    assert client_for(world.users["admin"]).get(f"/api/runs/{run.id}/usage").status_code == 404
    assert client_for(world.users["admin"]).get(f"/runs/{run.id}/usage/").status_code == 404
