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
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

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
    """Slots as lock files under ``root``: a holder keeps an exclusive, non-blocking ``flock`` on a
    file of its own (one open file per holder, so threads of one process exclude each other too),
    with the time its lease ends written in it; closing the file, or the holder's death, frees it.
    Taking one happens under the domain's guard lock: the slots held now (any file, whatever limit
    it was taken under, so a lowered quota binds at once) are counted, a slot whose lease ran out
    no longer counts (its holder hung: as Redis forgets it), and a free file is locked."""

    def __init__(self, root: Path, lease_s: float = 600.0):
        self.root = Path(root)
        self.lease_s = lease_s
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def _dir(self, domain: str) -> Path:
        """The domain's folder: its name quoted (injective; never ``.`` or ``..``)."""
        path = self.root / quote(domain, safe="-_").replace(".", "%2E")
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def _guard(self, folder: Path):
        fd = os.open(folder / ".guard", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _held(self, folder: Path, now: float) -> tuple[int, list[Path]]:
        """Slots held with a live lease, and the files free to take."""
        held, free = 0, []
        for path in sorted(folder.glob("*.lock")):
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    ends = float(os.pread(fd, 32, 0).decode() or "inf")
                except ValueError:
                    ends = float("inf")  # being written by its holder right now
                held += ends > now
                continue
            finally:
                os.close(fd)
            free.append(path)
        return held, free

    def try_acquire(self, domain: str, limit: int, now: float | None = None, lease_s: float | None = None) -> str | None:
        folder = self._dir(domain)
        now = time.time() if now is None else now
        with self._guard(folder):
            held, free = self._held(folder, now)
            if held >= limit:
                return None
            taken = {p.name for p in folder.glob("*.lock")}
            candidates = free + [folder / f"{i}.lock" for i in range(len(taken) + 1) if f"{i}.lock" not in taken]
            for path in candidates:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, repr(now + (lease_s or self.lease_s)).encode(), 0)
                except BlockingIOError:
                    os.close(fd)
                    continue
                except BaseException:
                    os.close(fd)
                    raise
                holder = f"{path.name}:{uuid.uuid4().hex}"
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
        """Slots of ``domain`` held now with a live lease, by any process of this machine."""
        folder = self._dir(domain)
        with self._guard(folder):
            return self._held(folder, time.time())[0]


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


@contextmanager
def domain_slots_now(slots, domain: str, limit: int, n: int, lease_s: float | None = None):
    """Hold ``n`` of ``limit`` slots of ``domain`` at once when they are free now (a group's
    sandboxes); yields whether they were. Never waits and never holds part of them: a group that
    cannot have all its slots now leaves them for its jobs to take one at a time (no worker holds
    some of a domain's slots while waiting for the rest)."""
    held: list[str] = []
    try:
        if 0 < n <= limit:
            for _ in range(n):
                holder = slots.try_acquire(domain, limit, lease_s=lease_s)
                if holder is None:
                    break
                held.append(holder)
        if len(held) < n:
            for holder in held:
                slots.release(domain, holder)
            held = []
            yield False
        else:
            yield True
    finally:
        for holder in held:
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
