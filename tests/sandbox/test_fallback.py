"""Without cgroups (not root, or no delegation), rlimits alone still end hostile programs."""
from __future__ import annotations

import pytest

from sandbox_helpers import CPU_BOUND, bwrap_ready, own_pool, require
from workers.sandbox import Limits, PoolConfig, cgroups
from workers.sandbox.bwrap_backend import BwrapBackend
from workers.sandbox.bwrap_pool import WarmBwrapBackend


@pytest.fixture
def no_cgroups(monkeypatch):
    ok, reason = bwrap_ready()
    require(ok, reason)
    monkeypatch.setattr(cgroups, "_detected", None)


LIMITS = Limits(cpu_s=1, wall_s=10, memory_mb=128, pids=32)
"""For jobs that end before either time limit, or on the wall limit; a busy loop runs under
CPU_BOUND instead, whose wall limit a loaded machine cannot reach first."""


@pytest.fixture(params=[BwrapBackend, WarmBwrapBackend], ids=["cold", "warm"])
def runner(request, no_cgroups):
    """Runs one job through a cold or a warm bwrap pool, both without cgroups."""
    config = PoolConfig(warm_per_domain=1)
    with own_pool(request.param(config), config, idle_s=30) as pool:
        yield lambda files, command, limits=LIMITS: pool.execute(files, command, limits, domain="fallback")


@pytest.mark.parametrize("program, limits, status", [
    ("print('fine')", LIMITS, "ok"),
    ("x = bytearray(300 << 20)", LIMITS, "memory_limit"),
    ("while True:\n    pass", CPU_BOUND, "timeout_cpu"),
    ("import time\ntime.sleep(1000)", LIMITS, "timeout_wall"),
])
def test_rlimits_alone(runner, program, limits, status):
    v = runner({"a.py": program}, ["python3", "a.py"], limits)
    assert v.status == status, v


def test_peak_memory_is_the_jobs_own(runner):
    """Without a cgroup the peak comes from the job's own rusage, not the largest of every job
    the (warm) agent ran before."""
    big = runner({"a.py": "x = bytearray(100 << 20)\nx[::4096] = b'1' * len(x[::4096])"}, ["python3", "a.py"])
    assert big.status == "ok" and big.peak_memory_bytes >= 100 << 20, big
    small = runner({"a.py": "print(1)"}, ["python3", "a.py"])
    assert small.status == "ok" and small.peak_memory_bytes < 50 << 20, small
