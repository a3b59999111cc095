"""The review API end to end: real judged trajectories, queues, blind labelling by several
reviewers, statistics, calibration, shadow re-scoring, promotion and rollback, all audited."""
from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.accounts.models import AuditLog
from controlplane.review.models import JudgeConfig, Label, Reservation, ReviewItem, ReviewQueue, ShadowScore
from controlplane.runs.models import Trajectory
from tests import factories
from tests.review.conftest import record_judged_run

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def post(c: Client, path: str, body=None):
    return c.post(path, json.dumps(body if body is not None else {}), content_type="application/json")


def label_all(c: Client, queue_id: int, truth: dict, limit: int = 1000) -> list[dict]:
    """Label like a careful human (the truth) until the queue is empty for this reviewer."""
    answers = []
    for _ in range(limit):
        nxt = post(c, f"/api/review/queues/{queue_id}/next").json()
        if nxt["item"] is None:
            break
        item = ReviewItem.objects.get(pk=nxt["item"]["id"])
        r = post(c, f"/api/review/items/{item.pk}/label", {"value": truth[item.trajectory_id]})
        assert r.status_code == 201, r.content
        answers.append(r.json())
    return answers


def test_rewards_record_judge_and_verifier_versions_and_runs_warn(judged):
    w = judged
    rows = list(Trajectory.objects.filter(run=w.run))
    assert len(rows) == 45
    config = w.judge.active
    assert {t.judge_version for t in rows} == {config.pk}
    assert {t.verifier_version for t in rows} == {w.judged_domain.version}
    assert all(t.details["details"]["judge"] == "sim" and t.details["details"]["judge_version"] == "1" for t in rows)
    # the judge separates right answers from off-topic ones, with real scores
    passes = {t.completion: t.outcome for t in rows}
    assert passes["Paris is the capital city of France."] == "pass"
    assert passes["Bananas are an excellent source of potassium."] == "fail"
    detail = client_for(w.users["viewer"]).get(f"/api/runs/{w.run.pk}").json()
    assert any("judge sim v1" in x and "not calibrated" in x for x in detail["warnings"])


def test_judge_errors_are_masked_outcomes_never_zero_rewards(world):
    domain = factories.domain("unjudged", kind="text", verifier={"stages": [{"type": "judge", "params": {"judge": "missing"}}]})
    run, _ = record_judged_run(team=world.team, domain=domain, by=world.users["member"])
    rows = list(Trajectory.objects.filter(run=run))
    assert rows and {t.outcome for t in rows} == {"judge_error"}
    assert all(t.reward is None for t in rows)  # masked: never a reward of 0
    assert all(t.judge_version is None for t in rows)
    detail = client_for(world.users["viewer"]).get(f"/api/runs/{run.pk}").json()
    assert any("not configured" in x for x in detail["warnings"])


def test_judge_versions_are_immutable_and_edits_make_new_versions(judged):
    w = judged
    admin = client_for(w.users["admin"])
    r = post(admin, "/api/judges/sim/versions", {"rubric": "Be strict.", "note": "stricter"})
    assert r.status_code == 201 and r.json()["version"] == 2
    again = post(admin, "/api/judges/sim/versions", {"rubric": "Be strict."})
    assert again.json()["version"] == 2  # nothing changed: no new version
    detail = admin.get("/api/judges/sim").json()
    assert detail["active_version"] == 1 and [v["version"] for v in detail["versions"]] == [2, 1]
    v1 = JudgeConfig.objects.get(judge=w.judge, version=1)
    v1.rubric = "sneaky"
    with pytest.raises(TypeError):
        v1.save()
    with pytest.raises(TypeError):
        JudgeConfig.objects.filter(pk=v1.pk).update(rubric="sneaky")
    bad = post(admin, "/api/judges/sim/versions", {"kind": "http", "api_key_env": "lower-case", "params": {"retries": -1}})
    assert bad.status_code == 422
    assert {e["path"] for e in bad.json()["errors"]} == {"api_key_env", "params.retries"}
    bad = post(admin, "/api/judges/sim/versions", {"kind": "http", "endpoint": "nowhere"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "endpoint"
    assert post(client_for(w.users["reviewer"]), "/api/judges/sim/versions", {"rubric": "x"}).status_code == 403
    assert post(client_for(w.other_users["admin"]), "/api/judges/sim/versions", {"rubric": "x"}).status_code == 404
    assert AuditLog.objects.filter(action="judge.version").count() == 1


def test_http_judge_stores_the_key_name_never_the_key(world, settings):
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://127.0.0.1:8000/v1"}
    admin = client_for(world.users["admin"])
    r = post(admin, "/api/judges", {"team": "acme", "slug": "llm", "title": "LLM", "kind": "http", "model": "qwen",
                                    "score_format": "ordinal", "endpoint": "vllm", "api_key_env": "TEMPER_JUDGE_KEY_LLM",
                                    "rubric": "Grade {completion}", "params": {"timeout_s": 20, "retries": 3, "max_concurrent": 8}})
    assert r.status_code == 201, r.content
    assert r.json()["versions"][0]["api_key_env"] == "TEMPER_JUDGE_KEY_LLM"
    missing = post(admin, "/api/judges", {"team": "acme", "slug": "llm2", "title": "x", "kind": "http", "score_format": "binary"})
    assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "endpoint"


def test_queue_strategies_store_propensities(judged):
    w = judged
    admin = client_for(w.users["admin"])
    uni = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "u", "size": 15})
    assert uni.status_code == 202, uni.content  # sampled at once here, as the judge worker does it (conftest)
    assert uni.json()["state"] == "ready" and uni.json()["population"] == 45 and uni.json()["progress"]["items"] == 15
    assert [i.propensity for i in ReviewItem.objects.filter(queue_id=uni.json()["id"])] == pytest.approx([15 / 45] * 15)
    strat = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "s", "strategy": "stratified", "size": 10})
    items = ReviewItem.objects.filter(queue_id=strat.json()["id"])
    assert {i.stratum for i in items} == {"0", "1"}
    for i in items:
        n_h = Trajectory.objects.filter(run=w.run, reward=float(i.stratum)).count()
        assert i.propensity == pytest.approx(5 / n_h)
    dis = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "d", "strategy": "disagreement",
                                             "size": 10, "compare_to": {"rule": {"stages": [{"type": "regex", "params": {"pattern": "(?i)capital"}}]}}})
    assert dis.status_code == 202, dis.content
    items = list(ReviewItem.objects.filter(queue_id=dis.json()["id"]))
    assert items and all(i.compare_score in (0.0, 1.0) and 0 < i.propensity <= 1 for i in items)
    low = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "l", "strategy": "low_confidence", "size": 10})
    assert low.status_code == 202 and low.json()["params"]["threshold"] == 0.5
    bad = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "x", "strategy": "disagreement",
                                             "compare_to": {"rule": {"stages": [{"type": "judge"}]}}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "compare_to.rule"
    assert post(client_for(w.users["reviewer"]), "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "r"}).status_code == 403
    assert AuditLog.objects.filter(action="review_queue.create").count() == 4


def test_blind_labelling_reservations_skips_and_several_reviewers(judged):
    w = judged
    admin = client_for(w.users["admin"])
    q = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "pair", "size": 4,
                                           "reviewers_per_item": 2, "reservation_s": 60}).json()
    rev, adm = client_for(w.users["reviewer"]), admin
    first = post(rev, f"/api/review/queues/{q['id']}/next").json()["item"]
    assert first["judge_score"] is None and first["judge_raw"] is None  # blind
    assert post(rev, f"/api/review/queues/{q['id']}/next").json()["item"]["id"] == first["id"]  # the same reservation
    bad = post(rev, f"/api/review/items/{first['id']}/label", {"value": 3})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "value"
    r = post(rev, f"/api/review/items/{first['id']}/label", {"value": 1})
    assert r.status_code == 201
    assert r.json()["judge_score"] is not None and r.json()["agrees"] in (True, False)  # revealed after submitting
    assert post(rev, f"/api/review/items/{first['id']}/label", {"value": 1}).status_code == 409
    # a second reviewer gets the same item (two reviewers per item)
    second = post(adm, f"/api/review/queues/{q['id']}/next").json()["item"]
    assert second["id"] == first["id"]
    assert post(adm, f"/api/review/items/{second['id']}/skip", {"reason": ""}).status_code == 422
    assert post(adm, f"/api/review/items/{second['id']}/skip", {"reason": "cannot tell"}).status_code == 201
    assert Label.objects.get(item_id=second["id"], skipped=True).skip_reason == "cannot tell"
    # reservations hold an item, and expire: then another reviewer takes the abandoned item
    q1 = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "single", "size": 2,
                                            "strategy": "stratified"}).json()  # two items: one of each class
    held = post(rev, f"/api/review/queues/{q1['id']}/next").json()["item"]
    r2, r3 = factories.member(w.team, "reviewer", "acme-reviewer-2"), factories.member(w.team, "reviewer", "acme-reviewer-3")
    assert post(client_for(r2), f"/api/review/queues/{q1['id']}/next").json()["item"]["id"] != held["id"]
    assert post(client_for(r3), f"/api/review/queues/{q1['id']}/next").json()["item"] is None  # both items held
    Reservation.objects.filter(item_id=held["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert post(client_for(r3), f"/api/review/queues/{q1['id']}/next").json()["item"]["id"] == held["id"]
    late = post(rev, f"/api/review/items/{held['id']}/label", {"value": 1})
    assert late.status_code == 409  # the item went to someone else while the reservation was expired
    # viewers and members do not label; other teams do not see the queue
    assert post(client_for(w.users["viewer"]), f"/api/review/queues/{q['id']}/next").status_code == 403
    assert post(client_for(w.users["member"]), f"/api/review/items/{first['id']}/label", {"value": 1}).status_code == 403
    assert post(client_for(w.other_users["reviewer"]), f"/api/review/queues/{q['id']}/next").status_code == 404


def test_two_reviewers_give_krippendorff_alpha(judged):
    w = judged
    admin = client_for(w.users["admin"])
    q = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "alpha", "size": 12,
                                           "reviewers_per_item": 2}).json()
    label_all(client_for(w.users["reviewer"]), q["id"], w.truth)
    label_all(admin, q["id"], w.truth)
    stats = admin.get(f"/api/review/queues/{q['id']}/stats").json()
    # 12 drawn, topped up to five of each of the judge's classes
    assert stats["n"] == ReviewItem.objects.filter(queue_id=q["id"]).count() >= 12
    assert stats["krippendorff_alpha"] == pytest.approx(1.0)


def test_calibration_promotion_shadow_and_rollback(judged):
    w = judged
    admin, reviewer = client_for(w.users["admin"]), client_for(w.users["reviewer"])
    q = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "main", "size": 30,
                                           "strategy": "stratified"}).json()
    # no labels yet: calibration and promotion are refused
    assert post(admin, "/api/judges/sim/versions/1/calibrate").status_code == 409
    answers = label_all(reviewer, q["id"], w.truth, limit=3)
    assert [a["stats"]["n"] for a in answers] == [1, 2, 3]  # kappa is recomputed after every label
    assert post(admin, "/api/judges/sim/threshold", {"threshold": 0.95}).status_code == 200
    answers += label_all(reviewer, q["id"], w.truth)
    final = answers[-1]["stats"]
    kappa = final["metrics"]["kappa"]
    assert final["n"] == 30 and kappa["ci"][0] <= kappa["value"] <= kappa["ci"][1]
    assert kappa["ipw"] is not None and final["confusion"]["matrix"]
    assert kappa["ci"][0] < 0.95
    refused = post(admin, "/api/judges/sim/versions/1/calibrate")
    assert refused.status_code == 409 and "below the threshold" in refused.json()["detail"]
    assert post(reviewer, "/api/judges/sim/threshold", {"threshold": 0.1}).status_code == 403
    assert post(admin, "/api/judges/sim/threshold", {"threshold": 2}).status_code == 422
    assert post(admin, "/api/judges/sim/threshold", {"threshold": round(kappa["ci"][0] - 0.05, 3)}).status_code == 200
    check = admin.get("/api/judges/sim/versions/1/calibration").json()
    assert check["ok"] is True
    ok = post(admin, "/api/judges/sim/versions/1/calibrate")
    assert ok.status_code == 200 and ok.json()["calibrated"] is True
    assert client_for(w.users["viewer"]).get(f"/api/runs/{w.run.pk}").json()["warnings"] == []

    # a proposed version: re-scored in shadow on the labelled set, compared side by side
    v2 = post(admin, "/api/judges/sim/versions", {"params": {"similarity_cut": 0.9}, "note": "stricter cut"}).json()
    assert v2["version"] == 2
    shadow = post(admin, "/api/judges/sim/versions/2/shadow")
    assert shadow.status_code == 202 and shadow.json()["queued_items"] == 30
    from workers.judge import shadow_run

    assert shadow_run(JudgeConfig.objects.get(judge=w.judge, version=2).pk) == {"scored": 30, "errors": 0}
    assert shadow_run(JudgeConfig.objects.get(judge=w.judge, version=2).pk) == {"scored": 0, "errors": 0}  # idempotent
    assert ShadowScore.objects.filter(judge_config__version=2).count() == 30
    side = admin.get("/api/judges/sim/compare?a=1&b=2").json()
    assert side["n_common"] == 30 and [v["version"] for v in side["versions"]] == [1, 2]
    assert all(v["report"]["n"] == 30 for v in side["versions"])

    v2_check = admin.get("/api/judges/sim/versions/2/calibration").json()
    promote = post(admin, "/api/judges/sim/versions/2/promote")
    if v2_check["ok"]:
        assert promote.status_code == 200 and promote.json()["active_version"] == 2
    else:  # the server refuses what the page would not offer
        assert promote.status_code == 409
        assert post(admin, "/api/judges/sim/threshold", {"threshold": round(v2_check["kappa_lower"] - 0.01, 3)}).status_code == 200
        promote = post(admin, "/api/judges/sim/versions/2/promote")
        assert promote.status_code == 200
    assert promote.json()["active_version"] == 2 and promote.json()["previous_version"] == 1
    back = post(admin, "/api/judges/sim/rollback")
    assert back.status_code == 200 and back.json()["active_version"] == 1
    actions = set(AuditLog.objects.filter(object_type="review.judge").values_list("action", flat=True))
    assert {"judge.create", "judge.threshold", "judge.calibrate", "judge.version", "judge.shadow", "judge.promote", "judge.rollback"} <= actions


def test_queue_and_judge_lists_take_a_constant_number_of_queries(judged, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    w = judged
    admin = client_for(w.users["admin"])

    def count(path):
        with CaptureQueriesContext(connection) as ctx:
            assert admin.get(path).status_code == 200
        return len(ctx.captured_queries)

    post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "q0", "size": 3})
    one = count("/api/review/queues"), count("/api/judges")
    for i in range(1, 4):
        post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": f"q{i}", "size": 3})
    assert (count("/api/review/queues"), count("/api/judges")) == one
    with django_assert_max_num_queries(12):
        admin.get("/api/review/queues")


def test_a_rule_that_backtracks_is_stopped_at_its_timeout_not_run_in_the_web_process(judged, monkeypatch):
    """The attack: a team admin's rule regex ``(?:(?:.?)*){9}X`` ran inline in the web request for
    minutes. Its stages now run in a verifier process killed at the stage's timeout, and the
    population's total within RULE_BUDGET_S."""
    from controlplane.review import queues

    admin = client_for(judged.users["admin"])
    slow = {"rule": {"stages": [{"type": "regex", "params": {"pattern": "(?:(?:.?)*){9}X"}, "timeout_s": 0.05}]}}
    r = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "slow",
                                           "strategy": "disagreement", "size": 5, "compare_to": slow})
    assert r.status_code == 202 and r.json()["state"] == "ready", r.content
    assert all(i.compare_score == 0.0 for i in ReviewItem.objects.filter(queue_id=r.json()["id"]))  # each timed out
    monkeypatch.setattr(queues, "RULE_BUDGET_S", 0.0)
    r = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "slower",
                                           "strategy": "disagreement", "size": 5, "compare_to": slow})
    assert r.status_code == 202 and r.json()["state"] == "failed", r.content  # the worker's sample failed, saying why
    assert re.search(r"^compare_to.rule: the rule took more than 0 s over \d+ of 45 trajectories", r.json()["error"])
    assert not ReviewItem.objects.filter(queue_id=r.json()["id"]).exists()
    reviewer = client_for(judged.users["reviewer"])
    refused = post(reviewer, f"/api/review/queues/{r.json()['id']}/next")
    assert refused.status_code == 409 and "could not be sampled: compare_to.rule" in refused.json()["detail"]
    monkeypatch.setattr(queues, "RULE_BUDGET_S", 60.0)  # the same name again replaces the failed queue
    again = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "slower",
                                               "strategy": "disagreement", "size": 5, "compare_to": slow})
    assert again.status_code == 202 and again.json()["state"] == "ready", again.content
    assert not ReviewQueue.objects.filter(pk=r.json()["id"]).exists()


def test_the_next_item_is_fetched_ahead_and_the_latest_label_can_be_taken_back(judged):
    """The page reserves the next item while the reviewer reads one (``exclude``); a slip of the
    key is taken back (the latest label only, audited), and the item comes back blind."""
    w = judged
    q = post(client_for(w.users["admin"]), "/api/review/queues",
             {"team": "acme", "domain": "capitals", "judge": "sim", "name": "ahead", "size": 6}).json()
    rev = client_for(w.users["reviewer"])
    nxt = f"/api/review/queues/{q['id']}/next"
    first = post(rev, nxt).json()["item"]
    ahead = post(rev, f"{nxt}?exclude={first['id']}").json()["item"]
    assert ahead["id"] != first["id"] and ahead["judge_score"] is None  # blind, like any next
    assert Reservation.objects.filter(item_id__in=[first["id"], ahead["id"]], reviewer=w.users["reviewer"]).count() == 2
    assert post(rev, nxt).json()["item"]["id"] == first["id"]  # a reload shows the first held one again
    # The label of the first on its way, the one ahead on the screen: a third item comes next.
    third = post(rev, f"{nxt}?exclude={first['id']},{ahead['id']}").json()["item"]
    assert third["id"] not in (first["id"], ahead["id"])
    assert post(rev, f"{nxt}?exclude=1,x").status_code == 422
    assert post(rev, f"{nxt}?exclude=" + ",".join(["1"] * 21)).status_code == 422

    answer = post(rev, f"/api/review/items/{first['id']}/label", {"value": 1}).json()
    history = rev.get(f"/api/review/queues/{q['id']}/history").json()
    assert [(h["item"], h["value"], h["agrees"], h["judge_raw"]) for h in history] == \
        [(first["id"], 1.0, answer["agrees"], answer["judge_raw"])]

    # Only the latest label is taken back, only by its reviewer.
    assert post(rev, f"/api/review/items/{ahead['id']}/undo").status_code == 409
    assert post(client_for(w.users["admin"]), f"/api/review/items/{first['id']}/undo").status_code == 409
    assert post(client_for(w.users["viewer"]), f"/api/review/items/{first['id']}/undo").status_code == 403
    assert post(client_for(w.other_users["reviewer"]), f"/api/review/items/{first['id']}/undo").status_code == 404
    undone = post(rev, f"/api/review/items/{first['id']}/undo")
    assert undone.status_code == 200, undone.content
    assert undone.json()["item"]["id"] == first["id"] and undone.json()["item"]["judge_score"] is None
    assert not Label.objects.filter(item_id=first["id"]).exists()
    assert Reservation.objects.filter(item_id=first["id"], reviewer=w.users["reviewer"]).exists()
    audit = AuditLog.objects.get(action="review_label.undo")
    assert audit.before == {"item": first["id"], "value": 1.0, "skipped": False, "skip_reason": ""}
    assert rev.get(f"/api/review/queues/{q['id']}/history").json() == []
    assert post(rev, f"/api/review/items/{first['id']}/label", {"value": 0}).status_code == 201
    assert Label.objects.get(item_id=first["id"]).value == 0.0


def test_a_uniform_sample_holds_both_of_the_judges_classes(judged):
    """Where the judge passes few of the population, a uniform sample is topped up to five of each
    class and weighted by its class's rate (the weighted estimates stay unbiased); the page says so.
    A population the judge scores one way only is named as such."""
    from controlplane.review.selectors import queue_class_note

    w = judged
    scores = [float(t.details["details"]["judge_score"]) for t in Trajectory.objects.filter(run=w.run)]
    n_pass = sum(s >= 0.5 for s in scores)
    assert 5 <= n_pass <= len(scores) - 5
    admin = client_for(w.users["admin"])
    q = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "tiny", "size": 2}).json()
    items = list(ReviewItem.objects.filter(queue_id=q["id"]))
    passed = [i for i in items if i.judge_score >= 0.5]
    assert len(passed) == 5 and len(items) - len(passed) == 5  # two drawn, the rest added
    for i in items:
        assert i.propensity == pytest.approx(5 / (n_pass if i.judge_score >= 0.5 else len(scores) - n_pass))
    note = client_for(w.users["reviewer"]).get(f"/review/queues/{q['id']}/").content.decode()
    assert 'data-testid="class-note"' in note and "were added from the population" in note

    # The judge scored everything fail: said, and nothing can be added.
    for t in Trajectory.objects.filter(run=w.run):
        t.details = {**t.details, "details": {**t.details["details"], "judge_score": 0.0, "judge_raw": 0.0}}
        t.save(update_fields=["details"])
    q = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "one", "size": 8}).json()
    from controlplane.review.models import ReviewQueue

    assert ReviewItem.objects.filter(queue_id=q["id"]).count() == 8
    assert "as fail: its agreement with reviewers cannot be told from a constant" in queue_class_note(ReviewQueue.objects.get(pk=q["id"]))


def test_a_label_being_saved_in_the_queue_does_not_hide_its_other_items(transactional_db, judged):
    """Another reviewer's label holds its item's row while it is saved; the next item of the same
    queue is still handed out (the lock taken for an item is that item's row only, never the
    queue's, which the items' ordering joins)."""
    import psycopg
    from django.db import connection

    from controlplane.review import services as review_services
    from controlplane.review.models import ReviewQueue

    w = judged
    q = post(client_for(w.users["admin"]), "/api/review/queues",
             {"team": "acme", "domain": "capitals", "judge": "sim", "name": "busy", "size": 6, "strategy": "stratified"}).json()
    queue = ReviewQueue.objects.get(pk=q["id"])
    first = review_services.queue_next(actor=factories.actor(w.users["admin"]), queue=queue)
    s = connection.settings_dict
    other = psycopg.connect(host=s["HOST"], port=s["PORT"] or 5432, user=s["USER"], password=s["PASSWORD"] or None,
                            dbname=s["NAME"])
    try:  # a transaction holding `first` and the queue's row (as a label's lock did)
        other.execute("SELECT 1 FROM review_reviewitem i JOIN review_reviewqueue q ON q.id = i.queue_id "
                      "WHERE i.id = %s FOR UPDATE", [first.pk])
        item = review_services.queue_next(actor=factories.actor(w.users["reviewer"]), queue=queue)
        assert item is not None and item.pk != first.pk
        with connection.cursor() as cursor:  # and a label waits on nothing but its own item
            cursor.execute("SET lock_timeout = '2s'")
        try:
            review_services.label_submit(actor=factories.actor(w.users["reviewer"]), item=item, value=1)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    finally:
        other.rollback()
        other.close()


def test_a_queue_with_nothing_to_sample_is_refused_saying_why(judged):
    """No empty queue: a domain the team never ran, and a judge version that judged nothing, are
    each refused with the reason and nothing is saved."""
    from controlplane.review.models import ReviewQueue

    admin = client_for(judged.users["admin"])
    factories.domain("capitals-2", kind="text", team_=judged.team)
    r = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals-2", "judge": "sim", "name": "none", "size": 5})
    assert r.status_code == 422
    error = r.json()["errors"][0]
    assert error["path"] == "domain" and "no run of team acme has trajectories of capitals-2 yet" in error["message"]
    v2 = post(admin, "/api/judges/sim/versions", {"rubric": "Be strict.", "note": "stricter"})
    assert v2.status_code == 201, v2.content
    r = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "v2", "size": 5,
                                           "version": v2.json()["version"]})
    assert r.status_code == 422 and "judged by version(s) v1 of sim, none by v2" in r.json()["errors"][0]["message"]
    assert not ReviewQueue.objects.exists()


def test_a_queue_and_its_judge_versions_calibration_give_one_interval_for_the_same_labels(judged):
    """The calibration text's lower bound is the interval the queue's table shows: with one queue
    and no shadow scores both read the same labelled items, whatever order the database returns."""
    from controlplane.review import selectors
    from controlplane.review.models import ReviewQueue

    admin = client_for(judged.users["admin"])
    queue = post(admin, "/api/review/queues", {"team": "acme", "domain": "capitals", "judge": "sim", "name": "one",
                                               "strategy": "uniform", "size": 30}).json()
    label_all(admin, queue["id"], judged.truth, limit=24)
    table = selectors.queue_report(ReviewQueue.objects.get(pk=queue["id"]))["metrics"]["kappa"]["ci"]
    check = admin.get(f"/api/judges/sim/versions/1/calibration").json()
    assert check["kappa_lower"] == pytest.approx(table[0]) and check["n"] == 24
    assert f"{table[0]:.3f}" in check["reason"]


def test_a_queue_is_never_stuck_sampling_and_a_team_samples_two_at_once(judged, monkeypatch):
    """An error the sample did not plan for fails the queue (the worker's error is kept); a team has
    at most MAX_SAMPLING queues sampling on the judge queue every team shares; a queue lost with its
    worker (still sampling past the deadline) neither counts nor keeps its name."""
    from controlplane.common.errors import Conflict
    from controlplane.review import queues

    actor, team = factories.actor(judged.users["admin"]), judged.team
    body = {"domain": "capitals", "judge": "sim", "size": 5}
    first = queues.queue_create(actor=actor, team=team, data={**body, "name": "a"}, send=False)
    monkeypatch.setattr(queues, "_draw", lambda queue, also=None: (_ for _ in ()).throw(RuntimeError("judge weights missing")))
    with pytest.raises(RuntimeError):
        queues.queue_sample(first.pk)
    first.refresh_from_db()
    assert first.state == "failed" and first.error.startswith("sampling stopped: RuntimeError: judge weights missing")
    a = queues.queue_create(actor=actor, team=team, data={**body, "name": "a"}, send=False)  # replaces the failed one
    queues.queue_create(actor=actor, team=team, data={**body, "name": "b"}, send=False)
    with pytest.raises(Conflict, match=r"has 2 queues being sampled \(at most 2 at once\)"):
        queues.queue_create(actor=actor, team=team, data={**body, "name": "c"}, send=False)
    ReviewQueue.objects.filter(pk=a.pk).update(created_at=timezone.now() - timedelta(seconds=queues.SAMPLE_DEADLINE_S + 1))
    assert queues.queue_lost(ReviewQueue.objects.get(pk=a.pk))
    again = queues.queue_create(actor=actor, team=team, data={**body, "name": "a"}, send=False)  # the lost one is replaced
    assert not ReviewQueue.objects.filter(pk=a.pk).exists() and again.state == "sampling"
