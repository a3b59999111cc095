"""The review pages with Django's test client: stable ids for the browser test, blind items,
the promote button enabled only once the threshold is met (and the server refusing otherwise)."""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from controlplane.review.models import JudgeConfig, ReviewItem

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def post(c, path, body=None):
    return c.post(path, json.dumps(body or {}), content_type="application/json")


def make_queue(w, size=20):
    r = post(client_for(w.users["admin"]), "/api/review/queues",
             {"team": "acme", "domain": "capitals", "judge": "sim", "name": "page", "size": size, "strategy": "stratified"})
    assert r.status_code == 202, r.content
    return r.json()["id"]


def test_index_lists_queues_and_judges(judged):
    w = judged
    qid = make_queue(w)
    page = client_for(w.users["viewer"]).get("/review/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-testid="queue-link-{qid}"' in html and 'data-testid="judge-link-sim"' in html
    assert 'data-testid="nav-review"' in html
    assert client_for(w.other_users["admin"]).get("/review/").content.decode().count("queue-link-") == 0
    assert Client().get("/review/").status_code == 302  # sign in first
    # the list page's queries do not grow with the number of queues
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    viewer = client_for(w.users["viewer"])
    with CaptureQueriesContext(connection) as one:
        viewer.get("/review/")
    for i in range(3):
        post(client_for(w.users["admin"]), "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": f"more{i}", "size": 2})
    with CaptureQueriesContext(connection) as four:
        html = viewer.get("/review/").content.decode()
    assert len(four.captured_queries) == len(one.captured_queries) and html.count("queue-link-") == 4


def test_only_team_admins_get_the_new_queue_form_with_the_judged_domains(judged):
    w = judged
    html = client_for(w.users["admin"]).get("/review/").content.decode()
    assert 'data-testid="queue-create"' in html
    form = html[html.index('id="queue-form"'):html.index("</form>", html.index('id="queue-form"'))]
    assert "<option>capitals</option>" in form and "<option>sim</option>" in form
    assert "addition" not in form  # a rule-verified domain has no judge to calibrate
    for role in ("viewer", "reviewer", "member"):
        assert 'data-testid="queue-create"' not in client_for(w.users[role]).get("/review/").content.decode()


def test_queue_page_has_the_labeller_shortcuts_and_stats(judged):
    w = judged
    qid = make_queue(w)
    html = client_for(w.users["reviewer"]).get(f"/review/queues/{qid}/").content.decode()
    for testid in ("labeller", "item-prompt", "item-completion", "label-pass", "label-fail", "skip", "skip-reason",
                   "reveal", "stats", "stat-kappa", "stat-kappa-ci", "stat-kappa-ipw", "stat-n", "progress-mine", "shortcuts", "done"):
        assert f'data-testid="{testid}"' in html, testid
    assert "js/review.js" in html and 'id="review-initial"' in html
    assert "<kbd>p</kbd>" in html and "<kbd>s</kbd>" in html
    # reviewers see no admin panel and no judge score in the page
    assert 'data-testid="promote"' not in html
    assert 'data-testid="item-judge"' in html and "item-judge-score" in html  # shown only for non-blind queues (by review.js)
    viewer = client_for(w.users["viewer"]).get(f"/review/queues/{qid}/").content.decode()
    assert 'data-testid="cannot-label"' in viewer
    assert client_for(w.other_users["reviewer"]).get(f"/review/queues/{qid}/").status_code == 404


def test_reviewer_labels_twenty_items_and_kappa_updates_then_admin_promotes(judged):
    """What the browser test will do with the keyboard, through the same API calls review.js makes."""
    w = judged
    qid = make_queue(w, size=24)
    reviewer, admin = client_for(w.users["reviewer"]), client_for(w.users["admin"])
    post(admin, "/api/judges/sim/threshold", {"threshold": 0.5})
    seen = []
    for _ in range(20):
        item = post(reviewer, f"/api/review/queues/{qid}/next").json()["item"]
        assert item["judge_score"] is None  # blind
        trajectory = ReviewItem.objects.get(pk=item["id"]).trajectory_id
        r = post(reviewer, f"/api/review/items/{item['id']}/label", {"value": w.truth[trajectory]}).json()
        seen.append((r["stats"]["n"], r["stats"]["metrics"]["kappa"]["value"], tuple(r["stats"]["metrics"]["kappa"]["ci"])))
    assert [n for n, _, _ in seen] == list(range(1, 21))
    assert len({ci for _, _, ci in seen[5:]}) > 1  # the interval moves as labels come in
    page = admin.get(f"/review/queues/{qid}/").content.decode()
    assert 'data-testid="promote"' in page and 'id="promote" data-testid="promote" disabled' in page  # JS enables it from the check
    check = admin.get("/api/judges/sim/versions/1/calibration").json()

    def v1_button():
        return re.search(r'<button[^>]*id="promote-v1"[^>]*>', admin.get("/review/judges/sim/").content.decode()).group(0)

    # v1 is active but not calibrated: its button marks it calibrated, enabled only above the threshold
    post(admin, "/api/judges/sim/threshold", {"threshold": 0.99})
    assert "disabled" in v1_button()
    assert post(admin, "/api/judges/sim/versions/1/promote").status_code == 409  # the server refuses
    assert post(admin, "/api/judges/sim/versions/1/calibrate").status_code == 409
    assert admin.get("/api/judges/sim/versions/1/calibration").json()["ok"] is False
    post(admin, "/api/judges/sim/threshold", {"threshold": round(check["kappa_lower"] - 0.01, 3)})
    assert admin.get("/api/judges/sim/versions/1/calibration").json()["ok"] is True
    assert "disabled" not in v1_button()
    assert post(admin, "/api/judges/sim/versions/1/promote").status_code == 200
    assert JudgeConfig.objects.get(judge__slug="sim", version=1).is_calibrated
    assert "disabled" in v1_button()  # active and calibrated: nothing left to do
    # a proposed v2 with its shadow scores: its promote button is enabled only once it clears the threshold
    post(admin, "/api/judges/sim/versions", {"params": {"similarity_cut": 0.7}})
    from workers.judge import shadow_run

    shadow_run(JudgeConfig.objects.get(judge__slug="sim", version=2).pk)
    v2 = admin.get("/api/judges/sim/versions/2/calibration").json()
    post(admin, "/api/judges/sim/threshold", {"threshold": min(1.0, round(v2["kappa_lower"] + 0.05, 3))})
    html = admin.get("/review/judges/sim/").content.decode()
    assert "disabled" in re.search(r'<button[^>]*id="promote-v2"[^>]*>', html).group(0)
    assert post(admin, "/api/judges/sim/versions/2/promote").status_code == 409
    post(admin, "/api/judges/sim/threshold", {"threshold": round(v2["kappa_lower"] - 0.01, 3)})
    html = admin.get("/review/judges/sim/").content.decode()
    assert "disabled" not in re.search(r'<button[^>]*id="promote-v2"[^>]*>', html).group(0)
    assert post(admin, "/api/judges/sim/versions/2/promote").json()["active_version"] == 2
    html = admin.get("/review/judges/sim/").content.decode()
    assert 'data-testid="rollback"' in html and 'data-testid="active-version">v2' in html
    reviewer_view = client_for(w.users["reviewer"]).get("/review/judges/sim/").content.decode()
    assert 'data-testid="promote-v1"' not in reviewer_view and 'id="threshold-input"' in reviewer_view


def test_a_queue_being_sampled_shows_the_workers_progress_then_its_items(judged):
    """The request that creates a queue returns before its sample is drawn: the queue's page shows
    the worker's stage and count (polled by review.js) and no labeller until the queue is ready;
    a sample that failed shows why."""
    from controlplane.review import queues
    from controlplane.review.models import ReviewQueue

    w = judged
    admin = factories_actor(w)
    queue = queues.queue_create(actor=admin, team=w.team, data={"domain": "capitals", "judge": "sim", "name": "slowly", "size": 5},
                                send=False)
    ReviewQueue.objects.filter(pk=queue.pk).update(sampling={"stage": "scoring with the rule", "done": 12, "total": 45})
    reviewer = client_for(w.users["reviewer"])
    html = reviewer.get(f"/review/queues/{queue.pk}/").content.decode()
    assert 'data-state="sampling"' in html and 'data-testid="sampling-bar"' in html
    assert "scoring with the rule" in html and "12 of 45" in html
    assert post(reviewer, f"/api/review/queues/{queue.pk}/next").status_code == 409  # nothing to label yet
    assert queues.queue_sample(queue.pk) == "ready"
    assert queues.queue_sample(queue.pk) == "ready"  # a redelivered task draws nothing twice
    assert ReviewItem.objects.filter(queue=queue).count() == ReviewQueue.objects.get(pk=queue.pk).params["size"] + sum(
        ReviewQueue.objects.get(pk=queue.pk).params["added_per_class"].values())
    html = reviewer.get(f"/review/queues/{queue.pk}/").content.decode()
    assert 'data-state="ready"' in html and 'data-testid="sampling"' not in html
    ReviewQueue.objects.filter(pk=queue.pk).update(state="failed", error="strategy: drew no item")
    html = reviewer.get(f"/review/queues/{queue.pk}/").content.decode()
    assert 'data-testid="sampling-error"' in html and "strategy: drew no item" in html


def factories_actor(w):
    from tests import factories

    return factories.actor(w.users["admin"])
