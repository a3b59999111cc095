"""Pinned vs live: a run pins its domains' verifiers and tasks, while the admins' quota and
priority reach it at its next step (and every run on a domain shares one live sandbox quota)."""
from __future__ import annotations

import pytest

from controlplane.domains.pins import domain_quotas, pinned_verifier
from controlplane.domains.services import domain_update
from controlplane.runs.models import RunEvent
from tests import factories
from workers.observers import LiveQuotas, _apply_weights

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return factories.actor(factories.user("root", staff=True))


def test_a_quota_change_reaches_the_live_view_and_the_pin_does_not_move(admin):
    code = factories.domain("code", max_share=1.0, task_timeout_s=10.0, priority=50)
    pin = pinned_verifier(slug="code", version=1)
    live = LiveQuotas(["code"])
    timeouts = live.timeouts
    assert live.refresh() is False and live.caps == {"code": 1.0}
    domain_update(actor=admin, domain=code, changes={"max_share": 0.25, "task_timeout_s": 30.0, "priority": 90})
    assert live.refresh() is True
    assert live.caps == {"code": 0.25} and timeouts == {"code": 30.0} and live.timeouts is timeouts
    assert live.message_priority("code") < 5  # Redis serves a lower number first
    assert pinned_verifier(slug="code", version=1) == pin  # the verifier a run pinned stays


def test_changed_caps_are_applied_to_the_sampler_at_the_step_boundary(admin):
    a, b = factories.domain("a"), factories.domain("b")
    run = factories.run(factories.team("t"), domains=[a, b], state="running")

    class Sampler:
        weights = None

        def set_weights(self, weights):
            self.weights = weights

    job = type("Job", (), {"sampler": Sampler(), "step_count": 7})()
    live = LiveQuotas(["a", "b"])
    weights = {"a": 1.0, "b": 1.0}
    assert _apply_weights(job, run, weights, live, set()) == (weights, {"a": 1.0, "b": 1.0})
    assert job.sampler.weights is None  # nothing changed: nothing applied
    domain_update(actor=admin, domain=a, changes={"max_share": 0.2})
    _, caps = _apply_weights(job, run, weights, live, set())
    assert caps["a"] == 0.2 and job.sampler.weights == {"a": pytest.approx(0.2), "b": pytest.approx(0.8)}
    event = RunEvent.objects.get(run=run, kind="quotas_applied")
    assert event.data["max_share"]["a"] == 0.2


def test_the_verify_task_uses_the_live_sandbox_quota_for_every_pinned_version(admin, monkeypatch):
    from workers import tasks, verify

    code = factories.domain("code", max_concurrent_sandboxes=8, verifier={"stages": [{"type": "code_tests"}]})
    seen = []
    monkeypatch.setattr(verify, "verify_items", lambda spec, items, max_concurrent_sandboxes=None: seen.append(max_concurrent_sandboxes) or [])
    domain_update(actor=admin, domain=code, changes={"max_concurrent_sandboxes": 2})
    domain_update(actor=admin, domain=code, changes={"verifier": {"stages": [{"type": "code_tests", "timeout_s": 20.0}]}})
    domain_update(actor=admin, domain=code, changes={"verifier": {"stages": [{"type": "exact"}]}})
    assert code.versions.count() == 4
    tasks.verify_batch("code", 1, [])  # a run pinned to version 1
    tasks.verify_batch("code", 3, [])  # another pinned to version 3
    tasks.verify_batch("code", 4, [])  # version 4 runs no sandbox: no quota to read
    assert seen == [2, 2, None] and domain_quotas(slugs=["code"])["code"].max_concurrent_sandboxes == 2


def test_batches_of_higher_priority_domains_are_sent_first():
    from trainer.tasks.base import Task
    from workers.verify import make_verify_batch

    sent = []

    class Done:
        def get(self, **kw):
            return [{"outcome": "pass", "score": 1.0, "details": {}}]

    code = {"stages": [{"type": "code_tests"}]}
    priorities = {"low": 10, "high": 90}
    verify, _ = make_verify_batch(cascades={"low": code, "high": code}, versions={"low": 1, "high": 1},
                                  timeouts={"low": 1.0, "high": 1.0}, priorities=priorities,
                                  send=lambda name, args: sent.append(args[0]) or Done())
    verify([("x", Task("low", "1", "q")), ("x", Task("high", "1", "q"))])
    assert sent == ["high", "low"]
    priorities.update(low=95)  # live: the next call sees it
    sent.clear()
    verify([("x", Task("low", "1", "q")), ("x", Task("high", "1", "q"))])
    assert sent == ["low", "high"]
