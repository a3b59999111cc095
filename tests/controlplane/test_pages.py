"""The server-rendered pages: what each role sees, team scoping, and the data the scripts start from."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from controlplane.runs.models import MetricPoint, RunEvent
from controlplane.web import vendor
from tests import factories

pytestmark = pytest.mark.django_db


def _page_data(response, element_id):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', response.content.decode(), re.S)
    assert match, f"no #{element_id} block"
    return json.loads(match.group(1))


def test_pages_need_login(client, world):
    for url in ("/", "/runs/new/", "/domains/", "/queue/", f"/domains/{world.domain.slug}/"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login/"), url


def test_runs_list_shows_team_runs_with_latest_reward(client, world):
    run = factories.run(world.team, name="visible-run", state="running", budget_steps=40, current_step=10)
    MetricPoint.objects.create(run=run, step=9, key="reward/mean", value=0.25)
    MetricPoint.objects.create(run=run, step=10, key="reward/mean", value=0.625)
    factories.run(world.other, name="hidden-run")
    client.force_login(world.users["viewer"])
    body = client.get("/").content.decode()
    assert "visible-run" in body and "hidden-run" not in body
    assert "0.625" in body and 'value="10"' in body
    assert 'data-testid="new-run"' not in body  # viewers do not create runs
    client.force_login(world.users["member"])
    assert 'data-testid="new-run"' in client.get("/").content.decode()


def test_run_page_controls_follow_the_role(client, world):
    run = factories.run(world.team, domains=[world.domain, world.domain2], state="running")
    url = f"/runs/{run.id}/"
    client.force_login(world.users["viewer"])
    r = client.get(url)
    assert r.status_code == 200
    body = r.content.decode()
    assert 'data-testid="controls"' not in body and 'id="weights-form"' not in body
    data = _page_data(r, "page-data")
    assert data["domains"] == ["addition", "parity"] and data["can_control"] is False
    assert data["outcomes"][0] == "pass" and "judge_error" in data["outcomes"]
    # The server refuses what the page hides.
    assert client.post(f"/api/runs/{run.id}/pause", HTTP_X_CSRFTOKEN="x").status_code in (403, 401)
    client.force_login(world.users["member"])
    r = client.get(url)
    assert 'data-testid="controls"' in r.content.decode() and _page_data(r, "page-data")["can_control"] is True
    assert 'id="weights-form"' in r.content.decode()
    ended = factories.run(world.team, domains=[world.domain], state="completed")
    assert 'id="weights-form"' not in client.get(f"/runs/{ended.id}/").content.decode()  # nothing to apply it to
    client.force_login(world.other_users["admin"])
    assert client.get(url).status_code == 404


def test_a_clone_takes_the_weights_and_priority_the_run_was_created_with(client, world):
    """Weights (a domain paused at 0 among them) and priority changed mid-run are the run's; its
    clone starts from what it was created with."""
    from controlplane.runs.services import run_create, run_set_priority, run_set_weights

    actor = factories.actor(world.users["member"])
    payload = factories.run_payload(["addition", "parity"], team="acme", priority=30)
    payload["domains"][0]["weight"] = 2.0
    source = run_create(actor=actor, data=payload)
    run_set_weights(actor=actor, run=source, weights={"addition": 5.0, "parity": 0})
    run_set_priority(actor=factories.actor(world.users["admin"]), run=source, priority=10)
    client.force_login(world.users["member"])
    clone = _page_data(client.get(f"/runs/new/?clone={source.id}"), "form-data")["clone"]
    assert clone["domains"] == [{"slug": "addition", "weight": 2.0}, {"slug": "parity", "weight": 1.0}]
    assert clone["priority"] == 30


def test_the_favicon_is_served_and_named_by_the_pages(client, world):
    """Browsers ask every page that names no icon (the admin, the API docs) for /favicon.ico."""
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r["Content-Type"] == "image/x-icon"
    body = b"".join(r.streaming_content) if r.streaming else r.content
    assert body[:4] == b"\x00\x00\x01\x00" and body[22:26] == b"\x89PNG"  # one PNG image in an ICO
    client.force_login(world.users["member"])
    assert '<link rel="icon" href="/static/favicon.ico">' in client.get("/").content.decode()


def test_new_run_form_data_and_clone(client, world):
    source = factories.run(world.team, domains=[world.domain], name="source", priority=30, staleness=2,
                           config={"algorithm": {"clip_high": 0.3}})
    client.force_login(world.users["member"])
    r = client.get("/runs/new/")
    assert r.status_code == 200
    data = _page_data(r, "form-data")
    slugs = {d["slug"] for d in data["domains"]}
    assert {"addition", "parity", "acme-private"} <= slugs and "globex-private" not in slugs
    sections = data["config_schema"]["properties"]
    assert "algorithm" in sections and "domains" not in sections
    assert "path" not in sections["model"]["properties"]  # the run's base_model sets it; dtype and others stay
    assert "staleness" not in sections["rollout"]["properties"]  # the run's own field sets it
    assert sections["algorithm"]["properties"]["clip_high"]["description"]
    clone = _page_data(client.get(f"/runs/new/?clone={source.id}"), "form-data")["clone"]
    assert clone["clone_from"] == source.id and clone["priority"] == 30 and clone["staleness"] == 2
    assert clone["domains"] == [{"slug": "addition", "weight": 1.0}] and clone["config"] == {"algorithm": {"clip_high": 0.3}}
    other = factories.run(world.other)
    assert client.get(f"/runs/new/?clone={other.id}").status_code == 404
    client.force_login(world.users["viewer"])
    assert 'data-testid="no-create"' in client.get("/runs/new/").content.decode()


def test_domain_page_edit_form_only_for_editors(client, world):
    client.force_login(world.users["admin"])
    team_page = client.get(f"/domains/{world.team_domain.slug}/").content.decode()
    assert 'id="quota-form"' in team_page  # a team admin edits the team's own domain
    global_page = client.get(f"/domains/{world.domain.slug}/").content.decode()
    assert 'id="quota-form"' not in global_page and "Platform admins edit these" in global_page
    client.force_login(world.staff)
    assert 'id="quota-form"' in client.get(f"/domains/{world.domain.slug}/").content.decode()
    client.force_login(world.users["member"])
    assert client.get(f"/domains/{world.other_domain.slug}/").status_code == 404


def test_domain_stats_from_recent_points(client, world):
    run = factories.run(world.team, domains=[world.domain])
    MetricPoint.objects.bulk_create([
        MetricPoint(run=run, step=1, domain="addition", key="verify/addition/p50_s", value=0.125),
        MetricPoint(run=run, step=1, domain="addition", key="verify/addition/p99_s", value=0.5),
        MetricPoint(run=run, step=1, domain="addition", key="outcome/addition/pass", value=6),
        MetricPoint(run=run, step=2, domain="addition", key="outcome/addition/pass", value=2),
        MetricPoint(run=run, step=2, domain="addition", key="outcome/addition/timeout", value=2),
    ])
    client.force_login(world.users["viewer"])
    stats = client.get(f"/domains/{world.domain.slug}/").context["stats"]
    assert (stats["p50_s"], stats["p99_s"], stats["total"]) == (0.125, 0.5, 10)
    assert [(o["outcome"], o["count"]) for o in stats["outcomes"]] == [("pass", 8), ("timeout", 2)]
    assert client.get(f"/api/domains/{world.domain.slug}/stats").json() == {**stats, "outcomes": [
        {"outcome": "pass", "count": 8, "share": 0.8}, {"outcome": "timeout", "count": 2, "share": 0.2}]}
    client.force_login(world.other_users["viewer"])  # their teams ran nothing on it
    assert client.get(f"/api/domains/{world.domain.slug}/stats").json()["total"] == 0


def test_queue_page_explains_queued_runs_and_hides_other_teams_names(client, world):
    queued = factories.run(world.team, name="waiting-run", state="queued",
                           scheduler_note={"position": 2, "binding": "team quota", "reason": "team acme holds 2 of 2 runs", "used": 2, "limit": 2})
    factories.run(world.other, name="their-secret-run", state="running")
    client.force_login(world.users["viewer"])
    r = client.get("/queue/")
    body = r.content.decode()
    assert "waiting-run" in body and "team acme holds 2 of 2 runs" in body and "bound by team quota: 2/2" in body
    assert "their-secret-run" not in body and "another team's run" in body
    assert client.get("/queue/?partial=1").content.decode().lstrip().startswith("<div")
    assert queued.id


def test_queue_page_shows_of_another_teams_running_run_only_what_the_pools_need(client, world):
    """Its private domains in flight, its phase and its step were shown beside the masked name."""
    theirs = factories.run(world.other, name="theirs", state="running")
    theirs.inflight = {"per_domain": {"globex-private": 7}, "phase": "verifying globex-private"}
    theirs.current_step, theirs.budget_steps = 123, 456
    theirs.save()
    ours = factories.run(world.team, name="ours", state="running")
    ours.inflight = {"per_domain": {"acme-private": 3}, "phase": "verifying acme-private"}
    ours.save()
    client.force_login(world.users["viewer"])
    body = client.get("/queue/").content.decode()
    assert "globex-private" not in body and "123 / 456" not in body
    assert "acme-private: 3" in body and "verifying acme-private" in body


def test_scheduler_notes_name_only_the_waiting_runs_own_teams_runs():
    from controlplane.scheduling.scheduler import Quota, RunView, schedule

    ours = RunView(id=1, team="acme", pool="cpu", slots=1, priority=10, queued_at=1.0)
    holders = [RunView(id=2, team="globex", pool="cpu", slots=1, priority=50, started_at=0.0),
               RunView(id=3, team="acme", pool="cpu", slots=1, priority=60, started_at=0.0)]
    decision = schedule(queued=[ours], running=holders, capacity={"cpu": 2},
                      quotas={"acme": Quota(max_gpus=0, max_concurrent_runs=5)}, now=1.0, min_run_s=60)
    reason = decision.pending[1]["reason"]
    assert "run 3 (priority 60)" in reason and "another team's run (priority 50)" in reason and "run 2" not in reason


@pytest.mark.parametrize("url", ["/runs/new/?clone=%EF%BC%91", "/runs/new/?clone=%D9%A1", "/runs/new/?clone=+1",
                                 "/runs/new/?clone=9223372036854775808", "/registry/compare/?run=9223372036854775808",
                                 "/registry/compare/?v=" + "9" * 4301 + "&v=1", "/usage/?end=9999-12-31",
                                 "/usage/?start=0001-01-01T00:00:00%2B05:00", "/api/teams/acme/usage?end=9999-12-31",
                                 "/api/registry/evals?version=" + "9" * 4301, "/api/registry/compare?versions=" + "9" * 4301 + ",1"])
def test_hostile_ids_and_dates_in_page_queries_are_not_a_500(client, world, url):
    factories.run(world.team, name="one")
    client.force_login(world.users["admin"])
    r = client.get(url)
    assert r.status_code in (200, 400, 404, 422), (url, r.status_code)
    assert b"Traceback" not in r.content


def test_team_switcher_changes_the_runs_list(client, world):
    from controlplane.accounts.models import Membership

    u = world.users["member"]
    Membership.objects.create(user=u, team=world.other, role="viewer")
    factories.run(world.team, name="acme-run")
    factories.run(world.other, name="globex-run")
    client.force_login(u)
    assert "acme-run" in client.get("/").content.decode()
    r = client.post("/team/", {"team": "globex", "next": "/"})
    assert r.status_code == 302
    body = client.get("/").content.decode()
    assert "globex-run" in body and "acme-run" not in body
    assert 'data-testid="new-run"' not in body  # a viewer in globex
    assert client.post("/team/", {"team": "globex", "next": "https://evil.example/"})["Location"] == "/"


def test_plotly_is_served_from_the_package():
    path = finders.find("vendor/plotly/plotly.min.js")
    assert path and open(path, "rb").read(200).lstrip().startswith(b"/**")


def test_pages_load_the_basic_plotly_bundle_when_it_was_fetched(client, world, settings):
    """``make install`` fetches plotly.js's basic bundle (controlplane/web/vendor.py); the run page
    and the comparison page load it, and the full bundle only where it was never fetched."""
    if os.environ.get("TEMPER_REQUIRE_SERVICES") == "1":  # CI and `make test` install it: its absence is a failure
        assert vendor.is_fetched(), "plotly.js's basic bundle was not fetched: make install runs `python -m controlplane.web.vendor fetch`"
    expected = vendor.PLOTLY_BASIC.static_path if vendor.is_fetched() else vendor.FULL_BUNDLE
    assert settings.TEMPER_PLOTLY_JS == expected
    if vendor.is_fetched():
        found = finders.find(expected)
        assert found and Path(found).read_bytes().startswith(b"/**\n* plotly.js (basic - minified) v")
    run, other = factories.run(world.team, name="charts"), factories.run(world.team, name="more charts")
    client.force_login(world.users["member"])
    for url in (f"/runs/{run.id}/", f"/runs/compare/?run={run.id}&run={other.id}"):
        body = client.get(url).content.decode()
        assert f'src="/static/{expected}"' in body, url
    settings.TEMPER_PLOTLY_JS = vendor.FULL_BUNDLE  # TEMPER_PLOTLY_BUNDLE=full, the bench's baseline
    assert 'src="/static/vendor/plotly/plotly.min.js"' in client.get(f"/runs/{run.id}/").content.decode()


def test_service_worker_precaches_plotly_under_a_name_that_follows_the_file(client, settings, tmp_path):
    r = client.get("/sw.js")  # no sign-in needed: the sign-in page registers it
    assert r.status_code == 200 and r["Content-Type"].startswith("text/javascript") and r["Cache-Control"] == "no-cache"
    body = r.content.decode()
    assert f'const PRECACHE = ["/static/{settings.TEMPER_PLOTLY_JS}"];' in body
    name = re.search(r'const CACHE = "(temper-[0-9a-f]{12})";', body).group(1)
    assert client.get("/sw.js").content.decode() == body  # stable while the file is
    changed = tmp_path / Path(settings.TEMPER_PLOTLY_JS)
    changed.parent.mkdir(parents=True)
    changed.write_text("/** another plotly */")
    settings.STATICFILES_DIRS = [tmp_path, *settings.STATICFILES_DIRS]
    finders.get_finder.cache_clear()
    try:
        other = re.search(r'const CACHE = "(temper-[0-9a-f]{12})";', client.get("/sw.js").content.decode()).group(1)
    finally:
        finders.get_finder.cache_clear()
    assert other != name  # a new plotly makes a new worker, which drops the old cache


def test_events_reach_the_page_data_via_api(client, world):
    run = factories.run(world.team)
    RunEvent.objects.create(run=run, kind="weights", message="changed")
    client.force_login(world.users["viewer"])
    items = client.get(f"/api/runs/{run.id}/events").json()["items"]
    assert [e["kind"] for e in items] == ["weights"]


def test_run_page_warns_about_an_unconfigured_or_uncalibrated_judge(client, world):
    judged = factories.domain("judged-dom", kind="text", verifier={
        "stages": [{"type": "judge", "params": {"judge": "nobody", "threshold": 0.5}, "timeout_s": 30}]})
    run = factories.run(world.team, domains=[judged])
    plain = factories.run(world.team, domains=[world.domain])
    client.force_login(world.users["viewer"])
    body = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="run-warning"' in body and "judge &#x27;nobody&#x27;" in body
    assert 'data-testid="run-warning"' not in client.get(f"/runs/{plain.id}/").content.decode()


def _at(schema, path):
    node = schema
    for part in path.split("."):
        node = (node.get("properties") or {}).get(part)
        if node is None:
            return None
    return node


def test_the_run_form_shows_every_trainer_setting_with_the_trainers_default_bounds_and_help(client, world):
    """Every setting of trainer/config.py but those the run owns is in the form, as the trainer
    declares it (a run's own default where RUN_DEFAULTS gives one); the owned ones are not."""
    from trainer.run_fields import RUN_DEFAULTS, RUN_OWNED
    from trainer.config_schema import SCHEMA_BOUNDS, config_settings

    client.force_login(world.users["member"])
    form = _page_data(client.get("/runs/new/"), "form-data")["config_schema"]
    owned = {o.path for o in RUN_OWNED}
    for path, setting in config_settings().items():
        field = _at(form, path)
        if path in owned:
            assert field is None, f"{path} is the run's, yet the form shows it"
            continue
        assert field is not None, f"{path} is missing from the run form"
        assert field["default"] == RUN_DEFAULTS.get(path, setting.default), path
        assert {k: field[k] for k in SCHEMA_BOUNDS.values() if k in field} == \
               {SCHEMA_BOUNDS[op]: v for op, v in setting.bounds.items()}, path
        assert field["description"] == setting.help, path
    assert set(form["order"]) == set(form["properties"])


def test_the_run_forms_own_fields_render_the_trainers_default_and_bounds(client, world):
    from trainer.config_schema import config_setting

    client.force_login(world.users["member"])
    body = client.get("/runs/new/").content.decode()
    staleness = config_setting("rollout.staleness")
    tag = re.search(r'<input[^>]*name="staleness"[^>]*>', body).group(0)
    assert f'value="{staleness.default}"' in tag
    assert f'min="{staleness.bounds["ge"]}"' in tag and f'max="{staleness.bounds["le"]}"' in tag
    steps = config_setting("limits.max_steps")
    tag = re.search(r'<input[^>]*name="budget.steps"[^>]*>', body).group(0)
    assert f'value="{steps.default}"' in tag and f'max="{steps.bounds["le"]}"' in tag


def test_the_domains_page_searches_filters_pages_and_leaves_out_columns_that_never_change(world):
    """150 domains are pages of 50; family, owner and audit filters narrow them; a column whose
    value is the same in every row shown is left out and said once instead."""
    from controlplane.domains.models import Domain

    for i in range(150):
        factories.domain(f"gen-{i:03d}", family="gen" if i % 3 else "other")
    c = Client()
    c.force_login(world.users["viewer"])
    first = c.get("/domains/").content.decode()
    total = Domain.objects.filter(team__isnull=True).count() + 1  # the catalogue's and acme's own (not globex's)
    assert f"{total} match, 1–50 shown" in first and first.count('data-testid="domain-row"') == 50
    assert 'data-testid="domains-next"' in first and "globex-private" not in first
    last = c.get("/domains/?page=4").content.decode()
    assert last.count('data-testid="domain-row"') == total - 150
    other = c.get("/domains/?family=other").content.decode()
    assert other.count('data-testid="domain-row"') == 50 and "<th>Family</th>" not in other
    assert "The same in every row, so not a column: " in other and "family <b>other</b>" in other
    mine = c.get("/domains/?owner=acme").content.decode()
    assert mine.count('data-testid="domain-row"') == 1 and 'data-slug="acme-private"' in mine
    found = c.get("/domains/?q=gen-14&family=gen").content.decode()
    assert [s for s in ("gen-140", "gen-141", "gen-142", "gen-143", "gen-144") if f'data-slug="{s}"' in found] == \
        ["gen-140", "gen-142", "gen-143"]  # 141 and 144 are family "other"
    assert 'href="?q=gen-14&amp;family=gen' not in found  # one page: no pager
    none = c.get("/domains/?audit=unsafe").content.decode()
    assert "No domains match." in none


def test_the_runs_list_draws_each_domains_reward_the_step_time_and_the_time_left(world):
    """Per-domain reward sparklines from the last steps, seconds a step, and for a running run the
    steps left at its median step time; a run with no steps shows dashes."""
    run = factories.run(world.team, domains=[world.domain, world.domain2], state="running", budget_steps=100, current_step=10)
    idle = factories.run(world.team, state="draft")
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, domain=d.slug, key=f"reward/{d.slug}", value=v)
         for s in range(1, 11) for d, v in ((world.domain, s / 10), (world.domain2, 0.5))]
        + [MetricPoint(run=run, step=s, key="stage/step_s", value=3.0) for s in range(1, 11)]
        + [MetricPoint(run=run, step=s, key="reward/mean", value=0.4) for s in range(1, 11)])
    c = Client()
    c.force_login(world.users["viewer"])
    page = c.get("/").content.decode()
    row = page[page.index(f'data-run="{run.id}"'):page.index(f'data-run="{idle.id}"') if page.index(f'data-run="{idle.id}"') > page.index(f'data-run="{run.id}"') else None]
    assert f'data-domain="{world.domain.slug}"' in row and f'data-domain="{world.domain2.slug}"' in row
    assert 'data-domain="mean"' not in row
    assert 'points="0.0,13.6' in row and "60.0,1.0" in row  # 0.1 .. 1.0 on a 0..1 scale
    assert "3.0 s" in row and "4.5 min" in row  # 90 steps left at 3 s
    idle_row = page[page.index(f'data-run="{idle.id}"'):]
    assert '<td data-testid="run-eta"><span class="muted">–</span>' in idle_row
