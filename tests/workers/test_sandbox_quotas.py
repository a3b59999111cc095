"""A domain's ``max_concurrent_sandboxes`` means the same with and without Redis, for every consumer
of sandboxes (verify batches, a run's environments, evaluations, audits), and a change reaches
them at their next batch (a running run's environments: at the next step boundary).

Each scenario runs twice: on the embedded default (no Redis: the slots are the machine's lock
files) and on Redis. tests/workers/test_slots.py runs the slots themselves across processes."""
from __future__ import annotations

import pytest

from controlplane.domains.models import Domain, DomainVersion
from trainer.catalogue import DomainSpec
from trainer.catalogue.jsonl import UploadedSource
from tests import factories
from tests.services import require_redis
from trainer.verifiers.limits import Limits
from workers import audit, driver, evaluate, observers, slots, tasks, verify
from workers.slots import FileSlots, RedisSlots, SlotsBusy

pytestmark = pytest.mark.django_db

CODE = {"stages": [{"type": "code_tests", "params": {}}]}


@pytest.fixture(params=["embedded", "redis"])
def backend(request, settings, monkeypatch, tmp_path):
    """``settings.REDIS_URL`` as each setup has it, and the slots it gives (made afresh)."""
    settings.REDIS_URL = require_redis() if request.param == "redis" else ""
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(slots, "_default", None)
    yield request.param
    monkeypatch.setattr(slots, "_default", None)


@pytest.fixture
def pin():
    domain = factories.domain("quota-code", kind="code", verifier=CODE, max_concurrent_sandboxes=0)
    version = DomainVersion.objects.get(domain=domain, version=1)
    # as controlplane.domains.pins.pinned gives it, with a task source of its own (a test domain is in no catalogue)
    return DomainSpec(slug="quota-code", title="quota-code", kind="code", family="test", source=UploadedSource("quota-code", [_code_task()]),
                      verifier_spec=version.snapshot["verifier"], version=version.version)


@pytest.fixture
def limits_asked(monkeypatch):
    """The sandbox limit each consumer hands the verify path, per call."""
    asked = []

    def verify_items(spec, items, max_concurrent_sandboxes=None):
        asked.append(max_concurrent_sandboxes)
        return [{"outcome": "fail", "score": 0.0, "details": {}} for _ in items]
    monkeypatch.setattr(verify, "verify_items", verify_items)
    return asked


def _code_task():
    from trainer.tasks.base import Task

    return Task("quota-code", "1", "add", answer={"tests": ["assert add(1, 2) == 3"], "entry_point": "add"})


def _consumers(pin):
    """Each consumer's call on one item: the verify task, an evaluation, an audit."""
    item = [("def add(a, b): return a + b", _code_task())]
    return {
        "verify": lambda: tasks.verify_batch(pin.slug, pin.version, [{"completion": item[0][0], "task": verify.task_to_dict(item[0][1])}]),
        "evaluation": lambda: evaluate._verifier(pin)(item),
        "audit": lambda: audit.verify_path(pin)(item),
    }


def test_every_consumer_asks_for_the_domains_quota_as_it_stands(backend, pin, limits_asked):
    consumers = _consumers(pin)
    for call in consumers.values():
        call()
    assert limits_asked == [0, 0, 0]  # before: evaluations and audits went unbounded without Redis
    Domain.objects.filter(slug=pin.slug).update(max_concurrent_sandboxes=3)
    for call in consumers.values():
        call()
    assert limits_asked[3:] == [3, 3, 3]  # the change, at each consumer's next batch


def test_a_quota_of_zero_refuses_the_sandbox_and_a_limit_holds(backend):
    """The slot every consumer's sandbox takes (workers.verify.sandbox_slot) on this setup's slots."""
    assert isinstance(slots.default_slots(), RedisSlots if backend == "redis" else FileSlots)
    limits = Limits(wall_s=5.0)
    with pytest.raises(SlotsBusy, match="allows no sandboxes"):
        with verify.sandbox_slot(0)("quota-code", limits):
            pass
    with verify.sandbox_slot(1, wait_s=0.0)("quota-code", limits):
        with pytest.raises(SlotsBusy, match="stayed busy"):
            with verify.sandbox_slot(1, wait_s=0.0)("quota-code", limits):
                pass
    with verify.sandbox_slot(1, wait_s=0.0)("quota-code", limits):  # freed when the first one ended
        pass


def test_a_running_runs_environments_follow_a_quota_change_at_the_next_step(backend, pin, monkeypatch):
    """The leader's environments read the quotas LiveQuotas refreshes at every step boundary; a
    follower rank's read them again within SANDBOX_LIMITS_EVERY_S."""
    limits = Limits(wall_s=5.0)
    live = observers.LiveQuotas([pin.slug])
    leader = driver.run_environment_context([pin.slug], live.sandboxes.get)
    monkeypatch.setattr(driver, "SANDBOX_LIMITS_EVERY_S", 0.0)
    follower = driver.run_environment_context([pin.slug])
    for context in (leader, follower):
        with pytest.raises(SlotsBusy, match="allows no sandboxes"):
            with context.sandbox_slot(pin.slug, limits):
                pass
    Domain.objects.filter(slug=pin.slug).update(max_concurrent_sandboxes=1)
    live.refresh()  # the step boundary
    for context in (leader, follower):
        with context.sandbox_slot(pin.slug, limits):
            pass
