"""A domain's sandbox quota means the same with Redis (every worker of every host) and on the
embedded default (lock files: every worker process of the one machine): each scenario runs on both."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading

import pytest

from tests.services import require_redis, wait_for
from workers.slots import FileSlots, LocalSlots, RedisSlots, SlotsBusy, domain_slot

BACKENDS = ["embedded", "redis"]


def make_slots(kind: str, where: str):
    """The slots of ``kind``: lock files under ``where``, or Redis at ``where`` (a short lease,
    so a dead holder's slot comes back within the test)."""
    if kind == "embedded":
        return FileSlots(where)
    import redis

    return RedisSlots(redis.Redis.from_url(where), lease_s=3, prefix="temper-test-slots:")


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    if request.param == "embedded":
        yield "embedded", str(tmp_path / "slots")
        return
    import redis

    url = require_redis()
    client = redis.Redis.from_url(url)
    client.delete("temper-test-slots:code")
    yield "redis", url
    client.delete("temper-test-slots:code")


@pytest.fixture
def slots(backend):
    return make_slots(*backend)


def _hold(kind: str, where: str, limit: int, got) -> None:
    """A worker process: take a slot of ``code`` if one is free, say whether, and hold it until it
    is killed (it never releases it)."""
    slots = make_slots(kind, where)
    got.put(slots.try_acquire("code", limit) is not None)
    while True:
        signal.pause()


def test_the_limit_holds_across_worker_processes_and_a_killed_holder_frees_its_slot(backend, slots):
    """Three worker processes ask for a domain limited to 2: two get a slot, one does not; the
    holders killed with SIGKILL never release, yet their slots come back (the lock's owner is gone;
    Redis: the lease runs out) and a new worker gets one."""
    ctx = mp.get_context("fork")
    got = ctx.Queue()
    workers = [ctx.Process(target=_hold, args=(*backend, 2, got)) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        answers = sorted(got.get(timeout=60) for _ in workers)
        assert answers == [False, True, True]
        assert slots.held("code") == 2 and slots.try_acquire("code", 2) is None
    finally:
        for w in workers:
            if w.is_alive():
                os.kill(w.pid, signal.SIGKILL)
            w.join(30)
    holder = wait_for(lambda: slots.try_acquire("code", 2), 30, "a dead holder's slot to come back")
    slots.release("code", holder)


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


def test_a_hung_holders_slot_stops_counting_when_its_lease_ends(slots):
    """A holder that never returns (a hung job) keeps its slot for its lease only, on both setups."""
    assert slots.try_acquire("code", 1, now=1000.0, lease_s=30)
    assert slots.try_acquire("code", 1, now=1010.0, lease_s=30) is None
    assert slots.try_acquire("code", 1, now=1031.0, lease_s=30) is not None  # its lease ran out


def test_a_lowered_quota_binds_at_once(slots):
    """Four sandboxes under a quota of 4; lowered to 2, none more starts until only one is left."""
    holders = [slots.try_acquire("code", 4) for _ in range(4)]
    assert all(holders) and slots.try_acquire("code", 2) is None
    slots.release("code", holders.pop())
    slots.release("code", holders.pop())
    assert slots.try_acquire("code", 2) is None  # two still run
    slots.release("code", holders.pop())
    assert slots.try_acquire("code", 2) is not None


def test_domain_folders_are_injective_and_stay_inside(tmp_path):
    files = FileSlots(tmp_path / "slots")
    names = {files._dir(d).name for d in ("a/b", "a_b", "..", ".", "a.b")}
    assert len(names) == 5 and all(files._dir(d).parent == tmp_path / "slots" for d in ("..", "a/b"))


def test_zero_means_no_sandboxes(slots):
    with pytest.raises(SlotsBusy, match="allows no sandboxes"):
        with domain_slot(slots, "code", 0, wait_s=1):
            pass
    with pytest.raises(SlotsBusy, match="allows no sandboxes"):
        with domain_slot(LocalSlots(), "code", 0, wait_s=1):  # the judges' process-local limiter too
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
