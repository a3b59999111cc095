"""Without cgroups (not root, or no delegation), rlimits alone still end hostile programs."""
from __future__ import annotations

import pytest

from sandbox_helpers import bwrap_ready, own_pool, require
from workers.sandbox import Limits, PoolConfig, cgroups
from workers.sandbox.bwrap_backend import BwrapBackend
from workers.sandbox.bwrap_pool import WarmBwrapBackend


@pytest.fixture
def no_cgroups(monkeypatch):
    ok, reason = bwrap_ready()
    require(ok, reason)
    monkeypatch.setattr(cgroups, "_detected", None)


LIMITS = Limits(cpu_s=1, wall_s=10, memory_mb=128, pids=32)
"""Wall time well above CPU time: a loaded machine may need seconds to give 1 s of CPU."""


@pytest.fixture(params=[BwrapBackend, WarmBwrapBackend], ids=["cold", "warm"])
def runner(request, no_cgroups):
    """Runs one job through a cold or a warm bwrap pool, both without cgroups."""
    config = PoolConfig(warm_per_domain=1)
    with own_pool(request.param(config), config, idle_s=30) as pool:
        yield lambda files, command: pool.execute(files, command, LIMITS, domain="fallback")


@pytest.mark.parametrize("program, status", [
    ("print('fine')", "ok"),
    ("x = bytearray(300 << 20)", "memory_limit"),
    ("while True:\n    pass", "timeout_cpu"),
    ("import time\ntime.sleep(1000)", "timeout_wall"),
])
def test_rlimits_alone(runner, program, status):
    v = runner({"a.py": program}, ["python3", "a.py"])
    assert v.status == status, v


def test_peak_memory_is_the_jobs_own(runner):
    """Without a cgroup the peak comes from the job's own rusage, not the largest of every job
    the (warm) agent ran before."""
    big = runner({"a.py": "x = bytearray(100 << 20)\nx[::4096] = b'1' * len(x[::4096])"}, ["python3", "a.py"])
    assert big.status == "ok" and big.peak_memory_bytes >= 100 << 20, big
    small = runner({"a.py": "print(1)"}, ["python3", "a.py"])
    assert small.status == "ok" and small.peak_memory_bytes < 50 << 20, small
