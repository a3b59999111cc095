"""Without cgroups (not root, or no delegation), rlimits alone still end hostile programs."""
from __future__ import annotations

import pytest

from sandbox_helpers import bwrap_ready, require
from workers.sandbox import Limits, bwrap, cgroups
from workers.sandbox.bwrap_backend import SLOT_UID_BASE


@pytest.fixture
def no_cgroups(monkeypatch):
    ok, reason = bwrap_ready()
    require(ok, reason)
    monkeypatch.setattr(cgroups, "_detected", None)


LIMITS = Limits(cpu_s=1, wall_s=10, memory_mb=128, pids=32)
"""Wall time well above CPU time: a loaded machine may need seconds to give 1 s of CPU."""


@pytest.mark.parametrize("program, status", [
    ("print('fine')", "ok"),
    ("x = bytearray(300 << 20)", "memory_limit"),
    ("while True:\n    pass", "timeout_cpu"),
    ("import time\ntime.sleep(1000)", "timeout_wall"),
])
def test_rlimits_alone(no_cgroups, program, status):
    v = bwrap.run(bwrap.BwrapSlot(SLOT_UID_BASE + 99_999, "fallback"), {"a.py": program}, ["python3", "a.py"], LIMITS, None)
    assert v.status == status, v
