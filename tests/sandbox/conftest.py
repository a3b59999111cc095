"""Fixtures for the sandbox suite: backend parametrisation, and checks that nothing is left behind."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # the repository root, so `workers` imports without an install
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from sandbox_helpers import live_pool_cgroups, own_cgroup, ready, require, wait_no_sandbox_processes  # noqa: E402,F401
from workers.sandbox import PoolConfig, close_runtimes, get_runtime, reap  # noqa: E402
from workers.sandbox import cgroups  # noqa: E402


@pytest.fixture(scope="session", params=["bwrap", "bwrap-cold", "docker"])
def backend(request):
    """Each backend's process-wide pool, created once; skipped (or failed in CI) when missing.
    `bwrap` is the warm pooled path `execute` uses by default; `bwrap-cold` fresh namespaces per job."""
    name = request.param
    ok, reason = ready(name)
    require(ok, reason)
    reap()  # as a worker start does: what workers stopped by earlier tests left is not this suite's
    get_runtime(name, PoolConfig(global_limit=4, domain_limit=4, warm_per_domain=1, max_uses=50))
    yield name
    close_runtimes_for(name)


@pytest.fixture
def fresh_pool(backend):
    """A pool of its own on the backend: one warm sandbox per domain, counters from zero, no
    retirement by use count, so a test can tell which sandbox ran each job."""
    from sandbox_helpers import make_backend, own_pool

    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1, max_uses=10_000)
    with own_pool(make_backend(backend, config), config) as pool:
        yield pool
    assert wait_no_sandbox_processes() == {}, "sandbox processes left after the pool closed"


def close_runtimes_for(name: str) -> None:
    from workers import sandbox

    pool = sandbox._runtimes.pop(name, None)
    if pool is not None:
        pool.close()


def settle(name: str) -> None:
    """Let a pooled backend finish its background resets before checking the host."""
    backend = get_runtime(name).backend
    if hasattr(backend, "wait_idle"):
        backend.wait_idle(60)


@pytest.fixture
def clean(backend):
    """After the test: no sandbox process and no execution cgroup remain on the host."""
    yield backend
    settle(backend)
    leftovers = wait_no_sandbox_processes()
    assert not leftovers, f"sandbox processes left behind: {leftovers}"
    left = [d for d in cgroups.leftover_cgroups(only_dead_owners=False) if own_cgroup(d) and d not in live_pool_cgroups()]
    assert left == [], "execution cgroups left behind"


def pytest_sessionfinish(session, exitstatus):
    close_runtimes()
