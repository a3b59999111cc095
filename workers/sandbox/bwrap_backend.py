"""Adapter of the bubblewrap runner to the pool's Backend protocol: slots are uids."""
from __future__ import annotations

import threading

from . import bwrap
from .types import Limits, SandboxError, Verdict

SLOT_UID_BASE = 30000
"""First host uid used for sandboxed processes; slot n runs as SLOT_UID_BASE + n."""


class BwrapBackend:
    """Fresh namespaces per job; a slot is a uid no other running job uses."""

    name = "bwrap"

    def __init__(self, slots: int):
        if not bwrap.available():
            raise SandboxError("bubblewrap is not installed (apt-get install bubblewrap)")
        self._free = list(range(SLOT_UID_BASE, SLOT_UID_BASE + slots))
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
