"""Per-domain sandbox concurrency across every verify worker: a domain's ``max_concurrent_sandboxes``.

With Redis, each held slot is a member of a sorted set scored by the time it was taken; taking a
slot is one atomic script that first drops members older than the lease (a worker killed while
holding a slot frees it when the lease runs out). Without Redis (the embedded default: every
worker process on one machine), slot i of a domain is a lock file, ``<var>/slots/<domain>/<i>.lock``,
held by an exclusive ``flock``: the bound holds across every process and thread of the machine,
and the kernel frees a slot when its holder dies. Either way a domain's quota means the same: at
most ``limit`` sandboxes at once, 0 refuses every sandbox (tests/workers/test_sandbox_quotas.py runs
the same scenarios on both).
"""
from __future__ import annotations

import fcntl
import os
import re
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
  return 1
end
return 0
"""


class SlotsBusy(Exception):
    """No slot of the domain came free in time."""


class RedisSlots:
    def __init__(self, client, lease_s: float = 600.0, prefix: str = "temper:sandbox-slots:"):
        self.client = client
        self.lease_s = lease_s
        self.prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)

    def try_acquire(self, domain: str, limit: int, now: float | None = None, lease_s: float | None = None) -> str | None:
        """Take a slot; ``lease_s`` bounds how long a dead holder keeps it (default: the pool's)."""
        holder = uuid.uuid4().hex
        ok = self._acquire(keys=[self.prefix + domain],
                           args=[now if now is not None else time.time(), lease_s or self.lease_s, limit, holder])
        return holder if ok == 1 else None

    def release(self, domain: str, holder: str) -> None:
        self.client.zrem(self.prefix + domain, holder)

    def held(self, domain: str) -> int:
        return int(self.client.zcard(self.prefix + domain))


class LocalSlots:
    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[str, set[str]] = {}

    def try_acquire(self, domain: str, limit: int, now: float | None = None, lease_s: float | None = None) -> str | None:
        with self._lock:
            holders = self._held.setdefault(domain, set())
            if len(holders) >= limit:
                return None
            holder = uuid.uuid4().hex
            holders.add(holder)
            return holder

    def release(self, domain: str, holder: str) -> None:
        with self._lock:
            self._held.get(domain, set()).discard(holder)

    def held(self, domain: str) -> int:
        return len(self._held.get(domain, ()))


class FileSlots:
    """Slots as lock files under ``root``: slot i of a domain is held by an exclusive, non-blocking
    ``flock`` on its own open file (one per holder, so threads of one process exclude each other
    too); closing the file, or the holder's death, frees it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def _dir(self, domain: str) -> Path:
        path = self.root / re.sub(r"[^A-Za-z0-9._-]", "_", domain)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def try_acquire(self, domain: str, limit: int, now: float | None = None, lease_s: float | None = None) -> str | None:
        folder = self._dir(domain)
        for i in range(limit):
            fd = os.open(folder / f"{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            holder = f"{i}:{uuid.uuid4().hex}"
            with self._lock:
                self._open[holder] = fd
            return holder
        return None

    def release(self, domain: str, holder: str) -> None:
        with self._lock:
            fd = self._open.pop(holder, None)
        if fd is not None:
            os.close(fd)  # frees the lock

    def held(self, domain: str) -> int:
        """Slots of ``domain`` held now, by any process of this machine."""
        n = 0
        for path in self._dir(domain).glob("*.lock"):
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                n += 1
            finally:
                os.close(fd)
        return n


@contextmanager
def domain_slot(slots, domain: str, limit: int, wait_s: float, poll_s: float = 0.02, lease_s: float | None = None):
    """Hold one of ``limit`` slots of ``domain``; waits up to ``wait_s`` (a bounded queue), then
    refuses with SlotsBusy. ``limit`` 0 means the domain may not run sandboxes at all."""
    if limit <= 0:
        raise SlotsBusy(f"domain {domain!r} allows no sandboxes (max_concurrent_sandboxes is 0)")
    deadline = time.monotonic() + wait_s
    holder = slots.try_acquire(domain, limit, lease_s=lease_s)
    while holder is None:
        if time.monotonic() >= deadline:
            raise SlotsBusy(f"all {limit} sandbox slots of domain {domain!r} stayed busy for {wait_s:.0f} s")
        time.sleep(poll_s)
        holder = slots.try_acquire(domain, limit, lease_s=lease_s)
    try:
        yield holder
    finally:
        slots.release(domain, holder)


_default = None
_default_lock = threading.Lock()


def default_slots():
    """Redis slots when REDIS_URL is set, else lock files of this machine (``<var>/slots``)."""
    global _default
    with _default_lock:
        if _default is None:
            if settings.REDIS_URL:
                import redis  # lazy: only with REDIS_URL; on the embedded default (no Redis) nothing pays its ~0.15 s import

                _default = RedisSlots(redis.Redis.from_url(settings.REDIS_URL))
            else:
                _default = FileSlots(settings.VAR_DIR / "slots")
        return _default
