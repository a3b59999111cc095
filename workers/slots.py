"""Per-domain sandbox concurrency across every verify worker: a domain's ``max_concurrent_sandboxes``.

With Redis, each held slot is a member of a sorted set scored by the time it was taken; taking a
slot is one atomic script that first drops members older than the lease (a worker killed while
holding a slot frees it when the lease runs out). Without Redis (embedded default: one worker
process group), a process-local counter does the same job.
"""
from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager

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
    """Redis slots when REDIS_URL is set, else process-local ones."""
    global _default
    with _default_lock:
        if _default is None:
            if settings.REDIS_URL:
                import redis  # lazy: only with REDIS_URL; on the embedded default (no Redis) nothing pays its ~0.15 s import

                _default = RedisSlots(redis.Redis.from_url(settings.REDIS_URL))
            else:
                _default = LocalSlots()
        return _default
