"""Adapter of the bubblewrap runner to the pool's Backend protocol: slots are uids."""
from __future__ import annotations

import os
import threading

from . import bwrap, cgroups
from .types import Limits, SandboxError, Verdict

SLOT_UID_BASE = 1_300_000
"""Sandboxed processes run as SLOT_UID_BASE + (worker pid % 1000) * 100 + slot: unique per slot
and (almost always) per worker process, so per-user rlimits of one job never limit another."""
MAX_SLOTS = 100
"""Slots per worker process (the uid block size)."""


class BwrapBackend:
    """Fresh namespaces per job; a slot is a uid no other running job uses."""

    name = "bwrap"

    def __init__(self, slots: int):
        if not bwrap.available():
            raise SandboxError("bubblewrap is not installed (apt-get install bubblewrap)")
        if not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"bwrap slots must be 1..{MAX_SLOTS}, got {slots}")
        base = SLOT_UID_BASE + (os.getpid() % 1000) * MAX_SLOTS
        self._free = list(range(base, base + slots))
        cgroups.reap_cgroups()  # a worker start reaps what dead workers left
        self._lock = threading.Lock()

    def acquire(self, domain: str, limits: Limits) -> bwrap.BwrapSlot:
        with self._lock:
            if not self._free:
                raise SandboxError("no free bwrap slot (pool accounting error)")
            return bwrap.BwrapSlot(self._free.pop(), domain)

    def run(self, slot: bwrap.BwrapSlot, files: dict, command: list[str], limits: Limits,
            stdin: bytes | None) -> Verdict:
        return bwrap.run(slot, files, command, limits, stdin)

    def release(self, slot: bwrap.BwrapSlot, verdict: Verdict | None) -> None:
        with self._lock:
            self._free.append(slot.uid)

    def close(self) -> None:
        pass
