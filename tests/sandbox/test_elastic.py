"""Elastic warm pools (workers/sandbox/elastic.py, elastic_pool.py): growth with the queue and
shrink when idle, the host ceilings, the per-host creation budget shared round-robin, and a
group's sandboxes in one allocation. The policy runs on a backend whose sandboxes are plain
objects (no processes) and a fake clock; one test runs it on real bwrap sandboxes."""
from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field

import pytest

from conftest import ROOT
from sandbox_helpers import own_pool, ready, require, wait_no_sandbox_processes
from workers.sandbox import Limits, PoolConfig, SandboxError, SandboxPool
from workers.sandbox.agent_host import PooledBackend, pool_key
from workers.sandbox.elastic import Ceilings, CreationBudget, Headroom, HostBudget
from workers.sandbox.types import Verdict

LIMITS = Limits(memory_mb=256, pids=32)
PLENTY = Headroom(memory_mb=1 << 20, pids=1 << 20)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(eq=False)
class Fake:
    """A sandbox with no process behind it."""

    key: tuple
    n: int
    uses: int = 0
    busy: bool = False
    retiring: bool = False
    removed: bool = False
    idle_since: float = 0.0
    stream: object = field(default_factory=lambda: type("S", (), {"lost": "", "close": lambda self: None})())


class FakeBackend(PooledBackend):
    """The pooled backend's real bookkeeping and elastic policy over Fake sandboxes."""

    name = "fake"

    def __init__(self, config: PoolConfig, clock: Clock, budget_file):
        self._init_pool(config, workers=1, thread_name="fake")
        self.clock = clock
        self.budget = HostBudget(budget_file, rate=config.create_rate, burst=config.create_burst, clock=clock)
        self._stop_shrink.set()  # the tests call rebalance() themselves, at the fake clock's times
        self.headroom = lambda: PLENTY
        self.created: list[Fake] = []

    def _create(self, key):
        sb = Fake(key, len(self.created))
        with self._lock:
            self._all.add(sb)
        self.created.append(sb)
        return sb

    def _remove(self, sb):
        sb.retiring = sb.removed = True
        with self._lock:
            self._all.discard(sb)

    def _reset(self, sb):
        self._reset_done(sb, True)

    def acquire(self, domain, limits):
        key = pool_key(domain, limits)
        sb = self._idle_or_new(key)
        self._submit(self._top_up, key)
        return sb

    def run(self, sb, files, command, limits, stdin, *, outputs=None):
        sb.uses += 1
        return Verdict(status="ok", exit_code=0, backend=self.name)

    def close(self):
        self._closed = True
        self._remove_all()


def fake_pool(clock: Clock, tmp_path, **overrides) -> FakeBackend:
    config = PoolConfig(**{"global_limit": 8, "domain_limit": 6, "warm_per_domain": 1, "idle_s": 30.0,
                           "create_rate": 1000.0, "create_burst": 100, **overrides})
    return FakeBackend(config, clock, tmp_path / "budget.json")


def size(backend: FakeBackend, domain: str) -> int:
    return backend.sizes().get(domain, {}).get("size", 0)


def test_the_pool_grows_with_its_queue_and_shrinks_to_the_floor_when_idle(tmp_path):
    clock = Clock()
    backend = fake_pool(clock, tmp_path)
    key = pool_key("d", LIMITS)
    backend.warm("d", LIMITS)
    assert size(backend, "d") == 1  # the floor, warm before any job
    held = [backend.acquire("d", LIMITS) for _ in range(4)]  # a queue of 4 jobs, none returned yet
    backend.wait_idle(10)
    assert size(backend, "d") == 4 and len({sb.n for sb in held}) == 4
    with backend._lock:  # 5 more jobs wait for this key: the target is busy + waiting, capped at domain_limit 6
        backend._waiting[key] = 5
    backend._top_up(key)
    assert size(backend, "d") == 6 and backend.sizes()["d"]["target"] == 6
    with backend._lock:
        backend._waiting[key] = 0
    for sb in held:
        backend.release(sb, Verdict(status="ok"))
    backend.wait_idle(10)
    assert backend.sizes()["d"] == {"size": 6, "idle": 6, "target": 1}
    clock.now += 29.0
    assert backend.rebalance() == 0  # not idle long enough yet
    clock.now += 1.0
    assert backend.rebalance() == 5
    assert backend.sizes()["d"] == {"size": 1, "idle": 1, "target": 1}
    clock.now += 300.0
    assert backend.rebalance() == 0  # the floor stays
    backend.close()


def test_only_the_long_idle_sandboxes_above_the_target_go():
    c = Ceilings(floor=2, cap=10, idle_s=30, memory_reserve_mb=0, pids_reserve=0)
    # 6 live, 2 busy, 1 job waiting: target 3; of 4 idle, 3 idle long enough, but only 3 may go
    assert c.surplus(live=6, busy=2, waiting=1, idle_since=[0, 0, 0, 95], now=100) == 3
    assert c.surplus(live=6, busy=2, waiting=1, idle_since=[0, 90, 95, 99], now=100) == 1
    assert c.surplus(live=3, busy=2, waiting=1, idle_since=[0], now=100) == 0


def test_a_burst_in_one_domain_does_not_starve_another():
    budget = CreationBudget(rate=10.0, burst=4, now=0.0)
    for i in range(50):
        budget.request("burst", f"b{i}")
    budget.request("quiet", "q0")
    budget.request("quiet", "q1")
    granted: list[tuple[float, str]] = []
    t = 0.0
    while budget.pending("quiet"):
        granted += [(t, d) for d in budget.grant(t)]
        t += 0.1
    quiet_done = max(at for at, d in granted if d == "quiet")
    assert quiet_done <= 0.2  # its two creations came within two refills of the burst's start
    assert budget.pending("burst") >= 44  # while the burst is still being served at 10/s
    assert [d for _, d in granted[:4]] == ["burst", "quiet", "burst", "quiet"]


def test_the_creation_budget_bounds_what_a_pool_starts_and_refills_with_time(tmp_path):
    clock = Clock()
    backend = fake_pool(clock, tmp_path, create_rate=2.0, create_burst=3, warm_per_domain=0)
    key = pool_key("busy", LIMITS)
    with backend._lock:
        backend._waiting[key] = 6
    backend._top_up(key)
    assert size(backend, "busy") == 3  # the burst; the rest waits for tokens
    backend._top_up(key)
    assert size(backend, "busy") == 3
    clock.now += 1.0  # two tokens
    backend._top_up(key)
    assert size(backend, "busy") == 5
    with pytest.raises(SandboxError, match="creation budget"):
        backend._start(pool_key("other", LIMITS), 0.0)
    clock.now += 0.5
    assert backend._start(pool_key("other", LIMITS), 0.0).key[0] == "other"


def test_the_host_ceilings_refuse_a_creation_with_the_reason(tmp_path):
    clock = Clock()
    backend = fake_pool(clock, tmp_path, host_memory_reserve_mb=512, host_pids_reserve=100)
    backend.headroom = lambda: Headroom(memory_mb=700, pids=10_000)
    with pytest.raises(SandboxError, match="host memory ceiling: 700 MiB available, a sandbox of 256 MiB"):
        backend.acquire("d", LIMITS)
    backend.headroom = lambda: Headroom(memory_mb=10_000, pids=120)
    with pytest.raises(SandboxError, match="host process ceiling: 120 processes left"):
        backend.acquire("d", LIMITS)
    pool = SandboxPool(backend, backend.config)
    v = pool.execute({"a.py": "pass"}, ["python3", "a.py"], LIMITS, domain="d")
    assert v.status == "sandbox_error" and "process ceiling" in v.error  # masked, never a wrong answer
    backend.headroom = lambda: PLENTY
    assert pool.execute({"a.py": "pass"}, ["python3", "a.py"], LIMITS, domain="d").status == "ok"
    backend.close()


def test_a_group_gets_its_sandboxes_in_one_allocation_or_none(tmp_path):
    clock = Clock()
    backend = fake_pool(clock, tmp_path)
    backend.warm("g", LIMITS)
    first = backend.created[0]
    group = backend.acquire_many("g", LIMITS, 4)
    assert len(set(group)) == 4 and first in group and len(backend.created) == 4
    for sb in group:
        backend.release(sb, Verdict(status="ok"))
    backend.wait_idle(10)
    # Room for one more sandbox only: a group of 6 gets none, and the idle ones stay idle.
    allowed = iter([PLENTY])
    backend.headroom = lambda: next(allowed, Headroom(memory_mb=0, pids=0))
    with pytest.raises(SandboxError, match="group of 6 sandboxes for domain 'g': host memory ceiling"):
        backend.acquire_many("g", LIMITS, 6)
    assert backend.sizes()["g"]["idle"] == backend.sizes()["g"]["size"] >= 4
    backend.close()


def test_a_group_takes_its_places_together_and_runs_each_job_in_its_own_sandbox(tmp_path):
    clock = Clock()
    backend = fake_pool(clock, tmp_path, domain_limit=3, global_limit=3)
    pool = SandboxPool(backend, backend.config)
    with pytest.raises(ValueError, match="jobs: a group needs 1 to 3 jobs"):
        pool.execute_group([({"a.py": "pass"}, ["python3", "a.py"])] * 4, LIMITS, domain="g")
    verdicts = pool.execute_group([({"a.py": "pass"}, ["python3", "a.py"])] * 3, LIMITS, domain="g")
    assert [v.status for v in verdicts] == ["ok"] * 3
    assert sorted(sb.uses for sb in backend.created) == [1, 1, 1]
    assert pool.stats()["pools"]["g"]["wait_p50_s"] is not None
    # One place is held by another job: the group waits for all three rather than starting two.
    pool._admit("g")
    done = threading.Event()
    threading.Thread(target=lambda: (pool.execute_group([({"a.py": "pass"}, ["python3", "a.py"])] * 3, LIMITS,
                                                        domain="g"), done.set()), daemon=True).start()
    with pool._cond:
        pool._cond.wait_for(lambda: pool._waiting == 1, 10)
    assert pool.stats()["running"] == 1 and not done.is_set()
    pool._leave("g")
    assert done.wait(10)
    backend.close()


def test_the_hosts_processes_share_one_budget_and_a_dead_processs_turn_is_dropped(tmp_path):
    """Two processes' budgets on one file: tokens one takes the other does not get; a ticket
    left by a process that died does not hold the others' turn."""
    import subprocess

    clock = Clock()
    path = tmp_path / "host-budget.json"
    mine = HostBudget(path, rate=1.0, burst=2, clock=clock)
    assert mine.take("a", 0.0) and mine.take("a", 0.0)
    other_process = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from workers.sandbox.elastic import HostBudget;"
         " b = HostBudget(sys.argv[2], rate=1.0, burst=2, clock=lambda: 1000.0); print(b.take('b', 0.0))", ROOT, str(path)],
        capture_output=True, text=True, check=True)
    assert other_process.stdout.strip() == "False"  # the burst was spent by this process
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = json.loads(path.read_text())
    state["queues"], state["order"] = {"ghost": [f"{dead.pid}:1:0"]}, ["ghost"]
    path.write_text(json.dumps(state))
    clock.now += 1.0
    assert mine.take("b", 0.0)  # the dead process's ticket no longer comes first
    assert "ghost" not in json.loads(path.read_text())["queues"]


def test_pool_settings_are_checked_with_their_names():
    with pytest.raises(ValueError, match="idle_s .TEMPER_SANDBOX_IDLE_S. must be above 0"):
        PoolConfig(idle_s=0)
    with pytest.raises(ValueError, match="create_burst .TEMPER_SANDBOX_CREATE_BURST. must be at least 1"):
        PoolConfig(create_burst=0)


def test_a_real_pool_grows_for_a_group_and_shrinks_back():
    """Real bwrap sandboxes: a group of 3 runs in 3 sandboxes (3 uids) of a pool whose floor is
    1; once they were idle for idle_s the pool is back to 1, and its figures say what happened."""
    ok, reason = ready("bwrap")
    require(ok, reason)
    from workers.sandbox.bwrap_pool import WarmBwrapBackend

    config = PoolConfig(global_limit=4, domain_limit=4, warm_per_domain=1, idle_s=30.0)
    clock = Clock()
    backend = WarmBwrapBackend(config)
    backend.clock = clock
    backend._stop_shrink.set()  # the test shrinks the pool itself, at the fake clock's time
    with own_pool(backend, config) as pool:
        backend.warm("grp", Limits())
        jobs = [({"main.py": "import os; print(os.getuid())"}, ["python3", "main.py"])] * 3
        verdicts = pool.execute_group(jobs, Limits(), domain="grp")
        assert [v.status for v in verdicts] == ["ok"] * 3, verdicts
        assert len({v.stdout for v in verdicts}) == 3  # three sandboxes, three uids
        backend.wait_idle(60)
        assert len(backend.sandboxes()) == 3
        clock.now += 30.0
        assert backend.rebalance() == 2
        assert len(backend.sandboxes()) == 1
        figures = pool.stats()["pools"]["grp"]
        assert figures["size"] == 1 and figures["wait_p99_s"] >= figures["wait_p50_s"] >= 0
        assert figures["creations_per_s"] == pytest.approx(3 / 60)
        v = pool.execute({"main.py": "print(1)"}, ["python3", "main.py"], Limits(), domain="grp")
        assert v.status == "ok" and v.pool_size >= 1 and v.wait_s >= 0
    assert wait_no_sandbox_processes() == {}, "sandbox processes left after the pool closed"
