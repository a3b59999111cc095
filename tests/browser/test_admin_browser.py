"""Admin work in the app, in Chromium: a team admin's quota form shows every error at once and
saves; a platform admin adds a pool; a member is refused /manage/ and a gated promotion (with the
regressions shown), and an admin overrides it with a reason; a member tags a run and the runs
list filters by the tag."""
from __future__ import annotations

import pytest

from controlplane.registry import aliases
from controlplane.registry import services as registry_services
from controlplane.registry.models import Alias
from controlplane.scheduling.models import ResourcePool, TeamQuota
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user, screenshot
from tests.controlplane.test_registry_gate import evaluated, version

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_manage_and_promotion_by_role(server, browser):
    team = factories.team("acme")
    admin, _member = browser_user(team, "admin", "ada"), browser_user(team, "member", "mel")
    root = factories.user("root", staff=True, password=PASSWORD)
    actor = factories.actor(admin)
    factories.domain("addition"), factories.domain("parity", kind="reasoning")
    sv = registry_services.suite_save(actor=actor, data={"slug": "core", "team": "acme", "items": [
        {"domain": "addition", "tasks": 24}, {"domain": "parity", "tasks": 24}]})
    v1, v2 = version(team, "tiny@1/10"), version(team, "tiny@1/20")
    evaluated(v1, sv, {"addition": [1.0] * 24, "parity": [1.0, 0.0] * 12})
    evaluated(v2, sv, {"addition": [1.0, 0.0] * 12, "parity": [1.0, 0.0] * 12})  # addition regresses
    aliases.alias_move(actor=actor, version=v1, name="production")

    # A member: no Manage link, the page refuses; the gate refuses the promotion and says why.
    page = server.logged_in_page(browser, "member", "mel")
    assert page.locator("[data-testid=nav-manage]").count() == 0
    response = page.goto("/manage/")
    assert response.status == 403 and page.locator("[data-testid=manage-forbidden]").is_visible()
    page.goto("/registry/")
    assert page.locator("[data-testid=alias-move-override]").count() == 0
    page.select_option("[data-testid=alias-move-version]", str(v2.id))
    page.select_option("[data-testid=alias-move-alias]", "production")
    page.click("[data-testid=alias-move-submit]")
    refused = page.locator("[data-testid=gate-refused]")
    refused.wait_for()
    assert "addition" in page.locator("[data-testid=gate-regressions]").inner_text()
    screenshot(page, "20-promotion-refused")
    assert Alias.objects.get(team=team, name="production").version == v1
    page.context.close()

    # The team admin: every error of the quota form at once, then a save; the override moves production.
    page = server.logged_in_page(browser, "admin", "ada")
    page.click("[data-testid=nav-manage]")
    assert page.locator("[data-testid=quota-max-gpus]").is_disabled()  # platform admins set GPUs
    page.fill("[data-testid=quota-ceilings]", "rollout.n = many\nsequences_per_step 64")
    page.click("[data-testid=quota-save-acme]")
    errors = page.locator("[data-testid=manage-team-acme] [data-testid=error-ceilings]").inner_text()
    assert "line 1" in errors and "line 2" in errors
    page.fill("[data-testid=quota-ceilings]", "rollout.n = 4")
    page.click("[data-testid=quota-save-acme]")
    assert "saved" in page.locator("[data-testid=manage-message]").inner_text()
    assert TeamQuota.objects.get(team=team).ceilings == {"rollout.n": 4}
    screenshot(page, "21-manage")
    page.goto("/registry/")
    page.select_option("[data-testid=alias-move-version]", str(v2.id))
    page.select_option("[data-testid=alias-move-alias]", "production")
    page.check("[data-testid=alias-move-override]")
    page.fill("[data-testid=alias-move-reason]", "parity is what ships")
    page.click("[data-testid=alias-move-submit]")
    assert "now points at tiny@1/20" in page.locator("[data-testid=registry-message]").inner_text()
    assert page.locator("[data-testid=alias-tiny-production] [data-testid=alias-version]").inner_text() == "tiny@1/20"
    page.context.close()

    # A platform admin adds a resource pool.
    page = server.logged_in_page(browser, "root", root.username)
    page.goto("/manage/")
    page.fill("[data-testid=pool-name]", "h200")
    page.select_option("[data-testid=pool-kind]", "train_gpu")
    page.fill("[data-testid=pool-capacity]", "8")
    page.click("[data-testid=pool-save]")
    page.locator("[data-pool=h200] [data-field=capacity]").wait_for()
    assert ResourcePool.objects.get(name="h200").capacity == 8


def test_member_tags_a_run_and_filters_by_it(server, browser):
    team = factories.team("acme")
    browser_user(team, "member", "mel")
    d = factories.domain("tagged")
    run = factories.run(team, domains=[d], state="completed", name="kl sweep")
    other = factories.run(team, domains=[d], state="completed", name="untagged")
    page = server.logged_in_page(browser, "tags", "mel")
    page.goto(f"/runs/{run.id}/")
    page.fill("[data-testid=tags-input]", "Sweep-KL, bad tag!")
    page.click("[data-testid=tags-save]")
    page.wait_for_function("() => document.querySelector('[data-testid=tags-error]').textContent.includes('lower-case')")
    page.fill("[data-testid=tags-input]", "sweep-kl, baseline")
    page.click("[data-testid=tags-save]")
    page.locator("[data-testid=tag-list] [data-testid=run-tag]", has_text="sweep-kl").wait_for()
    page.locator("[data-testid=tag-list] [data-testid=run-tag]", has_text="sweep-kl").click()
    page.wait_for_url(lambda u: "tag=sweep-kl" in u)
    # The live rows have arrived and left the filter alone: the untagged run is not added.
    page.locator("#runs tbody[data-synced]").wait_for(state="attached")
    assert page.locator(f"tr[data-run='{run.id}']").count() == 1 and page.locator(f"tr[data-run='{other.id}']").count() == 0
    assert page.locator("[data-testid=runs-tag]").input_value() == "sweep-kl"
