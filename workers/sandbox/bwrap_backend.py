"""The cold bubblewrap backend (`bwrap-cold`): a fresh sandbox for every job, discarded after it.

The sandbox is the warm pool's (bwrap_pool.py: the same bwrap command line, the same agent as
pid 1, the same supervision in agent_host.py), started when the job arrives and removed after
its one job, so nothing a job does can reach another job, and there is one supervision path for
every backend. Costs the sandbox's start (bwrap's namespaces and the agent's start) per job.
"""
from __future__ import annotations

from .agent_host import pool_key
from .bwrap_pool import MAX_SLOTS, WarmBwrapBackend, WarmSandbox
from .types import Limits, SandboxError, Verdict

__all__ = ["BwrapBackend", "MAX_SLOTS", "SLOT_UID_BASE"]

SLOT_UID_BASE = 1_300_000
"""Cold sandboxes run as SLOT_UID_BASE + (worker pid % 1000) * MAX_SLOTS + n: unique per live
sandbox and (almost always) per worker process, so per-user rlimits of one job never limit another."""


class BwrapBackend(WarmBwrapBackend):
    """Fresh namespaces per job: every sandbox serves exactly one job."""

    uid_base = SLOT_UID_BASE
    zygote = False

    def acquire(self, domain: str, limits: Limits) -> WarmSandbox:
        if self._closed:
            raise SandboxError("the sandbox backend is closed")
        return self._create(pool_key(domain, limits))

    def release(self, sb: WarmSandbox, verdict: Verdict | None) -> None:
        sb.retiring = True
        self._submit(self._remove, sb)  # off the job's clock

    def warm(self, domain: str, limits: Limits | None = None) -> None:
        """Nothing: no sandbox is started before its job."""
