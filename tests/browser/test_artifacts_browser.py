"""The trajectory explorer lists a trajectory's artifacts (name, size, why one was not kept) and
downloads them as files, an HTML one too (saved, never rendered): Chromium, the web app over
PostgreSQL, the artifacts written to the store by the step's real write."""
from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.runs.models import Run
from controlplane.runs.services import run_record_step
from tests import factories
from tests.browser.conftest import screenshot
from trainer.verifiers.artifacts import Artifact

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_the_explorer_lists_and_downloads_a_trajectorys_artifacts(server, browser, world, settings):
    settings.TEMPER_STORE = str(server.var_dir)  # the server's store (its TEMPER_VAR_DIR)
    run = factories.run(world.team, domains=[world.domain], state="running", current_step=1)
    Run.objects.filter(pk=run.pk).update(driver="w1")
    report = Artifact.of("report.xml", b"<?xml version='1.0'?><testsuite tests='3' failures='1'/>", 1 << 10)
    page_html = Artifact.of("logs/page.html", b"<script>document.title='rendered'</script>", 1 << 10)
    refused = Artifact("passwd", b"", 0, "not a regular file: a symbolic link")
    run_record_step(run=run, worker="w1", step=1, metrics={}, verifier_versions={}, samples=[
        {"domain": world.domain.slug, "task_id": "t1", "prompt": "p", "completion": "c", "reward": 0.0, "outcome": "fail",
         "details": {"stage": "repo_tests"}, "artifacts": [a.to_dict() for a in (report, refused, page_html)]}])

    page = server.page(browser, "artifacts")
    server.login(page, "acme-viewer", "pw-123456")
    page.goto(f"/runs/{run.id}/?t.step=1")
    page.wait_for_selector("[data-testid=traj-artifact]")
    items = page.eval_on_selector_all("[data-testid=traj-artifact]", "xs => xs.map((x) => [x.dataset.name, x.innerText])")
    assert items == [["report.xml", f"report.xml {len(report.data)} B"], ["passwd", "passwd 0 B · not a regular file: a symbolic link"],
                     ["logs/page.html", f"logs/page.html {len(page_html.data)} B"]]
    assert page.locator("[data-testid=traj-artifact][data-name=passwd] a").count() == 0  # nothing to download
    screenshot(page, "trajectory-artifacts")
    with page.expect_download() as got:
        page.click("[data-testid=traj-artifact][data-name='report.xml'] a")
    assert got.value.suggested_filename == "report.xml"
    assert Path(got.value.path()).read_bytes() == report.data
    with page.expect_download() as got:
        page.click("[data-testid=traj-artifact][data-name='logs/page.html'] a")
    assert got.value.suggested_filename == "page.html" and Path(got.value.path()).read_bytes() == page_html.data
    assert page.title() != "rendered" and f"/runs/{run.id}/" in page.url
