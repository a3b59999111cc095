"""A domain's sandbox quota holds across workers (Redis) and in one process (embedded)."""
from __future__ import annotations

import threading

import pytest

from tests.services import require_redis
from workers.slots import LocalSlots, RedisSlots, SlotsBusy, domain_slot


@pytest.fixture(params=["local", "redis"])
def slots(request):
    if request.param == "local":
        yield LocalSlots()
        return
    import redis

    client = redis.Redis.from_url(require_redis())
    client.delete("temper-test-slots:code")
    yield RedisSlots(client, lease_s=30, prefix="temper-test-slots:")
    client.delete("temper-test-slots:code")


def test_limit_is_held_and_released(slots):
    a = slots.try_acquire("code", 2)
    b = slots.try_acquire("code", 2)
    assert a and b and slots.try_acquire("code", 2) is None
    slots.release("code", a)
    c = slots.try_acquire("code", 2)
    assert c is not None and slots.held("code") == 2


def test_a_full_domain_refuses_after_its_bounded_wait(slots):
    holder = slots.try_acquire("code", 1)
    with pytest.raises(SlotsBusy, match="stayed busy"):
        with domain_slot(slots, "code", 1, wait_s=0.0):
            pass
    slots.release("code", holder)
    with domain_slot(slots, "code", 1, wait_s=0.0):
        assert slots.held("code") == 1
    assert slots.held("code") == 0


def test_waiters_get_the_slot_when_it_frees(slots):
    holder = slots.try_acquire("code", 1)
    got = threading.Event()

    def wait_for_slot():
        with domain_slot(slots, "code", 1, wait_s=30):
            got.set()

    t = threading.Thread(target=wait_for_slot)
    t.start()
    assert not got.is_set()
    slots.release("code", holder)
    t.join(timeout=30)
    assert got.is_set()


def test_a_dead_holders_slot_expires_with_its_lease():
    import redis

    client = redis.Redis.from_url(require_redis())
    client.delete("temper-test-slots:code")
    slots = RedisSlots(client, lease_s=30, prefix="temper-test-slots:")
    assert slots.try_acquire("code", 1, now=1000.0)  # taken by a worker that was then killed
    assert slots.try_acquire("code", 1, now=1010.0) is None
    assert slots.try_acquire("code", 1, now=1031.0) is not None  # its lease ran out
    client.delete("temper-test-slots:code")


def test_zero_means_no_sandboxes():
    with pytest.raises(SlotsBusy, match="allows no sandboxes"):
        with domain_slot(LocalSlots(), "code", 0, wait_s=1):
            pass


def test_code_stage_with_limits_under_a_quota_runs_in_the_sandbox(settings):
    """Issue 15's bug: on the verify queue a code_tests stage that sets params.limits gave
    sandbox_error for every item whenever a concurrency quota applied (the limits reached the
    sandbox as a dict)."""
    from tests.services import require
    from tests.verifiers.conftest import sandbox_execute
    from workers.verify import verify_items

    require(sandbox_execute() is not None, "workers.sandbox is not importable")
    settings.REDIS_URL = ""  # the process-local quota
    spec = {"stages": [{"type": "code_tests", "params": {"limits": {"cpu_s": 3, "wall_s": 6, "memory_mb": 256}}}]}
    task = {"domain": "quota-code", "id": "1", "prompt": "add", "answer": {"tests": ["assert add(2, 3) == 5"], "entry_point": "add"}}
    items = [{"completion": "def add(a, b):\n    return a + b\n", "task": task},
             {"completion": "def add(a, b):\n    return a - b\n", "task": task}]
    results = verify_items(spec, items, max_concurrent_sandboxes=1)
    assert [r["outcome"] for r in results] == ["pass", "fail"], results
