"""What a member and a viewer do in the browser, against the real stack.

A member logs in, fills the run form (an inline validation error first), creates and starts a
run, watches the reward chart gain points while the tiny model trains, pauses and resumes it,
and clicks a point to read that step's trajectories. A viewer sees no controls, and a forged POST
from their session is refused by the server.
"""
from __future__ import annotations

import json

import re

import pytest
from django.core.management import call_command

from controlplane.runs.models import Run, RunEvent
from tests import factories
from tests.browser.conftest import browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

DOMAINS = ["builtin-addition", "builtin-parity"]


def _points(page) -> int:
    return int(page.get_attribute("#chart-reward", "data-points") or 0)


def _wait_points_above(page, n: int, timeout_ms: int = 180_000) -> int:
    page.wait_for_function(f"() => Number(document.getElementById('chart-reward').dataset.points || 0) > {n}",
                           timeout=timeout_ms)
    return _points(page)


def _click_a_point(page, chart_id: str) -> None:
    """Click, with the mouse, the next-to-last point of the chart's first data trace."""
    x, y = page.evaluate("""(id) => {
        const gd = document.getElementById(id);
        const trace = gd._fullData.findIndex((t) => t.meta && t.x && t.x.length);
        const t = gd._fullData[trace];
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const i = Math.max(0, t.x.length - 2);
        const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return [box.left + xa.l2p(xa.d2l(t.x[i])), box.top + ya.l2p(ya.d2l(gd.data[trace].y[i]))];
    }""", chart_id)
    page.mouse.move(x, y)
    page.mouse.click(x, y)


@pytest.mark.workers
def test_member_creates_watches_pauses_resumes_and_reads_trajectories(server, browser):
    from trainer.models.tiny import build_tiny

    model = build_tiny(server.var_dir / "models" / "tiny-browser", layers=2)
    call_command("domains", "sync", "--no-progress", "--only", *DOMAINS, verbosity=0)
    factories.audits_passed()  # the audit worker's part: audits gate every use of a version
    team = factories.team("acme")
    browser_user(team, "member", "alice")

    page = server.logged_in_page(browser, "member", "alice")
    page.goto("/runs/new/")
    page.fill("[data-testid=run-name]", "browser run")
    assert page.input_value("[data-testid=base-model]") == str(model)  # the local model catalogue pre-fills it
    page.fill("[data-testid=domain-search]", "builtin-")
    for slug in DOMAINS:
        page.check(f"[data-testid=pick-{slug}]")
    page.fill("[data-testid=weight-builtin-addition]", "3")
    assert page.inner_text("[data-testid=share-builtin-addition]") == "75.0%"
    page.fill("[data-testid=budget-steps]", "400")
    page.fill("[data-testid=staleness]", "0")
    page.fill("[data-testid=cfg-rollout-prompts_per_step]", "8")
    page.fill("[data-testid=cfg-rollout-n]", "4")
    page.fill("[data-testid=cfg-rollout-max_new_tokens]", "4")
    # Bad values first: every error comes in one pass, each beside its field, and nothing is saved.
    page.fill("[data-testid=cfg-algorithm-clip_low]", "1.5")
    page.fill("[data-testid=budget-steps]", "0")
    page.click("[data-testid=validate]")
    page.wait_for_selector("[data-testid=cfg-algorithm-clip_low].invalid")
    error = page.inner_text("[data-testid=form-errors]")
    assert "config.algorithm.clip_low" in error and "budget.steps" in error
    assert "budget.steps" in page.inner_text("[data-path-error='budget.steps']")
    screenshot(page, "01-run-form-inline-error")
    assert not Run.objects.exists()
    page.fill("[data-testid=budget-steps]", "400")
    page.fill("[data-testid=cfg-algorithm-clip_low]", "0.2")
    page.click("[data-testid=validate]")
    page.wait_for_selector("[data-testid=plan][data-state=valid]")
    # settings changed from their defaults are marked, and counted on their section
    assert page.locator("[data-testid=cfg-rollout-n].changed").count() == 1
    assert page.locator("[data-testid=cfg-algorithm-clip_low].changed").count() == 0  # back at its default
    assert page.locator("[data-testid=cfg-rollout-temperature].changed").count() == 0
    assert "3 changed" in page.inner_text("details.cfg-section:has([data-testid=cfg-rollout-n]) summary")
    assert "builtin-addition" in page.inner_text("[data-testid=plan]")
    screenshot(page, "02-run-form-valid")
    page.click("[data-testid=create-start]")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(name="browser run")
    assert run.staleness == 0 and run.config["rollout"]["n"] == 4 and "algorithm" not in run.config  # defaults are not sent

    # The reward chart gains points while the run trains.
    page.wait_for_selector("[data-testid=run-state]:text('running')", timeout=120_000)
    first = _wait_points_above(page, 0)
    later = _wait_points_above(page, first + 2)
    assert later > first
    assert page.get_attribute("[data-testid=live-state]", "data-state") == "live"
    screenshot(page, "03-run-live")

    page.click("[data-testid=pause]")
    page.wait_for_selector("[data-testid=run-state]:text('paused')", timeout=120_000)
    paused_at = _points(page)
    screenshot(page, "04-run-paused")
    page.click("[data-testid=resume]")
    # as after the first start: a scheduler tick, a worker and the checkpoint's load come first
    page.wait_for_selector("[data-testid=run-state]:text('running')", timeout=120_000)
    _wait_points_above(page, paused_at + 1)
    assert RunEvent.objects.filter(run=run, kind="paused").exists() and RunEvent.objects.filter(run=run, kind="resumed").exists()
    page.wait_for_selector("[data-testid=events] li[data-kind=paused]")

    # The worker resumed from its checkpoint: once the page has reloaded the series (steps after
    # the checkpoint are trained again) and drawn new points, click one of them.
    resumed = RunEvent.objects.filter(run=run, kind="resumed", data__checkpoint_step__isnull=False).exists()
    if resumed:
        page.wait_for_function("() => (window.TemperLive.loads || 0) >= 2")
    _wait_points_above(page, 2)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(4):  # a live redraw between reading a point's place and the click moves the point
        _click_a_point(page, "chart-reward")
        try:
            page.wait_for_selector("[data-testid=trajectory]", timeout=20_000)
            break
        except PlaywrightTimeout:
            if attempt == 3:
                raise
    rows = page.locator("[data-testid=trajectory]")
    assert rows.count() >= 1
    title = page.inner_text("#traj-title")
    assert "step" in title and ("builtin-addition" in title or "builtin-parity" in title)
    screenshot(page, "05-trajectories")

    # A weight of 0 pauses a domain mid-run; the page says so in a success colour, not an error's.
    page.fill("[data-testid=run-weight-builtin-parity]", "0")
    page.click("[data-testid=save-weights]")
    page.wait_for_selector("#weights-error.field-ok:text('builtin-parity paused')")
    assert run.run_domains.get(domain__slug="builtin-parity").weight == 0
    assert "builtin-parity 1 -> 0 (paused)" in RunEvent.objects.get(run=run, kind="weights").message
    page.once("dialog", lambda d: d.accept())
    page.click("[data-testid=cancel]")
    page.wait_for_selector("[data-testid=run-state]:text('cancelled')", timeout=60_000)
    assert page.locator("#weights-form").count() == 0 or page.locator("#weights-form button[disabled]").count() == 1

    # A clone starts from the run's original settings (parity's weight 1, not the 0 set mid-run)
    # and marks what is changed from them.
    page.goto(f"/runs/new/?clone={run.id}")
    assert page.input_value("[data-testid=cfg-rollout-n]") == "4"
    assert page.input_value("[data-testid=weight-builtin-parity]") == "1"
    assert page.locator("[data-testid=cfg-rollout-n].changed-from-clone").count() == 0
    page.fill("[data-testid=cfg-rollout-n]", "6")
    assert page.locator("[data-testid=cfg-rollout-n].changed-from-clone").count() == 1
    page.fill("[data-testid=budget-steps]", "10")
    assert page.locator("[data-testid=budget-steps].changed-from-clone").count() == 1


def test_viewer_sees_no_controls_and_a_forged_post_is_refused(server, browser):
    team = factories.team("acme")
    browser_user(team, "viewer", "victor")
    run = factories.run(team, name="watched", state="running")
    page = server.logged_in_page(browser, "viewer", "victor")
    page.goto(f"/runs/{run.id}/")
    page.wait_for_selector("[data-testid=live-state][data-state=live]")
    assert page.locator("[data-testid=controls]").count() == 0
    assert page.locator("[data-testid=weights-form]").count() == 0
    status = page.evaluate("""async (id) => {
        const r = await fetch(`/api/runs/${id}/pause`, {method: 'POST', credentials: 'same-origin',
            headers: {'X-CSRFToken': Temper.cookie('csrftoken')}});
        return [r.status, await r.text()];
    }""", run.id)
    assert status[0] == 403, status
    run.refresh_from_db()
    assert run.state == "running"
    page.goto("/")
    assert page.locator("[data-testid=new-run]").count() == 0
    screenshot(page, "06-viewer-runs")


def test_the_form_shows_one_engines_fields_takes_pasted_json_and_picks_whole_families(server, browser):
    """The torch engine's form has no vLLM-only fields (and sends none); the run as JSON can be
    read, edited and applied, validated at once with the server's errors beside their fields; a
    family is picked whole with one box."""
    call_command("domains", "sync", "--no-progress", "--only", *DOMAINS, "builtin-reversal", "builtin-sorting", verbosity=0)
    team = factories.team("acme")
    browser_user(team, "member", "alice")
    page = server.logged_in_page(browser, "form", "alice")
    page.goto("/runs/new/")
    for vllm_only in ("gpu_memory_utilization", "prefix_caching", "tensor_parallel_size"):
        assert not page.is_visible(f"[data-testid=cfg-rollout-{vllm_only}]"), vllm_only
    assert page.is_visible("[data-testid=cfg-rollout-batch_size]")
    page.select_option("[data-testid=cfg-rollout-engine]", "vllm")
    assert page.is_visible("[data-testid=cfg-rollout-gpu_memory_utilization]")
    assert not page.is_visible("[data-testid=cfg-rollout-batch_size]")
    page.fill("[data-testid=cfg-rollout-gpu_memory_utilization]", "0.5")
    page.select_option("[data-testid=cfg-rollout-engine]", "torch")
    assert "gpu_memory_utilization" not in page.evaluate("() => JSON.stringify(window.TemperRunForm.body().config)")

    # One box picks every built-in domain of the family.
    page.fill("[data-testid=domain-search]", "builtin-")
    family = page.evaluate("() => document.querySelector('[data-testid^=family-]').dataset.testid.slice(7)")
    page.check(f"[data-testid=pick-family-{family}]")
    picked = page.evaluate("() => [...window.TemperRunForm.mix.keys()]")
    assert len(picked) >= 2 and all(s.startswith("builtin-") for s in picked), picked

    # The run as JSON: edited with a bad value and applied, its error is beside its field at once.
    page.fill("[data-testid=run-name]", "json run")
    page.click("[data-testid=json-show]")
    body = page.input_value("[data-testid=json-text]")
    assert '"name": "json run"' in body and '"domains"' in body
    edited = body.replace('"config": {}', '"config": {"rollout": {"n": 0, "engine": "vllm", "gpu_memory_utilization": 0.4}}')
    assert edited != body
    page.fill("[data-testid=json-text]", edited)
    page.click("[data-testid=json-apply]")
    page.wait_for_selector("[data-testid=cfg-rollout-n].invalid")
    assert "config.rollout.n" in page.inner_text("[data-testid=form-errors]")
    assert page.input_value("[data-testid=cfg-rollout-gpu_memory_utilization]") == "0.4"
    assert page.is_visible("[data-testid=cfg-rollout-gpu_memory_utilization]")  # the pasted engine's fields
    page.fill("[data-testid=json-text]", "{not json")
    page.click("[data-testid=json-apply]")
    assert "not JSON" in page.inner_text("[data-testid=json-error]")

    # The same run as YAML: switching formats keeps the text's values; a pasted YAML body is
    # applied and validated like the JSON one, and YAML that does not parse says where.
    page.click("[data-testid=json-show]")  # the form's body again
    page.select_option("[data-testid=text-format]", "yaml")
    page.wait_for_function("() => document.querySelector('[data-testid=json-text]').value.includes('name: json run')")
    yaml_body = page.input_value("[data-testid=json-text]")
    assert "\n  rollout:\n" in yaml_body and "gpu_memory_utilization: 0.4" in yaml_body, yaml_body
    edited = yaml_body.replace("name: json run", "name: yaml run").replace("\n    n: 0\n", "\n    n: 3\n")
    assert edited.count(": 3\n") == 1 and "yaml run" in edited, yaml_body
    page.fill("[data-testid=json-text]", edited)
    page.click("[data-testid=json-apply]")
    page.wait_for_function("() => document.querySelector('[data-testid=run-name]').value === 'yaml run'")
    page.wait_for_function("() => !document.querySelector('[data-testid=cfg-rollout-n]').classList.contains('invalid')")
    # the value lands in its field, not in the error listed for the same path by the last apply
    assert page.input_value("[data-testid=cfg-rollout-n]") == "3"
    page.fill("[data-testid=json-text]", "name: broken\ndomains: [\n")
    page.click("[data-testid=json-apply]")
    page.wait_for_function("() => document.querySelector('[data-testid=json-error]').textContent.includes('line')")
    assert "not YAML" in page.inner_text("[data-testid=json-error]")
    assert page.input_value("[data-testid=run-name]") == "yaml run"  # the form kept its values
    page.fill("[data-testid=json-text]", "name: back to json\ndomains: []\n")
    page.select_option("[data-testid=text-format]", "json")
    page.wait_for_function("() => document.querySelector('[data-testid=json-text]').value.includes('\"back to json\"')")
    assert json.loads(page.input_value("[data-testid=json-text]")) == {"name": "back to json", "domains": []}
    assert not Run.objects.exists()
