"""Fixtures for the sandbox suite: backend parametrisation, and checks that nothing is left behind."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # the repository root, so `workers` imports without an install
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from sandbox_helpers import bwrap_ready, docker_ready, require, wait_no_sandbox_processes  # noqa: E402,F401
from workers.sandbox import PoolConfig, close_runtimes, get_runtime  # noqa: E402
from workers.sandbox import cgroups  # noqa: E402


@pytest.fixture(scope="session", params=["bwrap", "docker"])
def backend(request):
    """Each backend's process-wide pool, created once; skipped (or failed in CI) when missing."""
    name = request.param
    ok, reason = bwrap_ready() if name == "bwrap" else docker_ready()
    require(ok, reason)
    pool = get_runtime(name, PoolConfig(global_limit=4, domain_limit=4, warm_per_domain=1, max_uses=50))
    yield name
    if name == "docker":
        close_runtimes_for(name)


def close_runtimes_for(name: str) -> None:
    from workers import sandbox

    pool = sandbox._runtimes.pop(name, None)
    if pool is not None:
        pool.close()


def settle(name: str) -> None:
    """Let the docker pool finish its background resets before checking the host."""
    if name == "docker":
        get_runtime("docker").backend.wait_idle(60)


@pytest.fixture
def clean(backend):
    """After the test: no sandbox process and no execution cgroup remain on the host."""
    yield backend
    settle(backend)
    leftovers = wait_no_sandbox_processes()
    assert not leftovers, f"sandbox processes left behind: {leftovers}"
    assert cgroups.leftover_cgroups(only_dead_owners=False) == [], "execution cgroups left behind"


def pytest_sessionfinish(session, exitstatus):
    close_runtimes()
