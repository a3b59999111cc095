"""Heartbeats of a job's ranks and the leader's watchdog over them.

Every rank of a led job (:mod:`trainer.ranks`) beats: a thread of its own writes a counter, its
host, its process id and the stage it is in (:data:`STAGES`) to the process group's store every
``interval`` seconds. The leader's watchdog reads every rank's beat and, by its own clock (hosts'
clocks need not agree), notes when each last changed. A rank is lost within ``timeout`` seconds
(``parallel.collective_timeout_s``) of its last beat (silent for the timeout less two beats, as
the watchdog saw it): the watchdog calls its ``on_lost`` once, with a
:class:`Lost` naming the rank, its host and the stage it was in. A rank that is stopped (SIGSTOP)
stops beating with everything else in its process; one that is killed (SIGKILL) as well, and the
leader's next collective with it fails at once: :meth:`Watchdog.suspect` then names the rank
that went silent, without waiting for the whole timeout.

Nothing here knows what a run is: the run driver passes ``on_lost`` (it pauses the run and ends
the ranks; workers/driver.py).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

STAGES = ("start", "generate", "verify", "update", "weight sync", "checkpoint", "waiting for the leader")
"""What a rank can be doing when it is lost."""

_stage = "start"


def set_stage(name: str) -> None:
    """This rank is now in stage ``name`` (one of :data:`STAGES`); its next beat says so."""
    global _stage
    assert name in STAGES, name
    _stage = name


def stage() -> str:
    return _stage


class staged:
    """``with staged("update"): ...``: the stage while the block runs, the previous one after."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.before = _stage
        set_stage(self.name)

    def __exit__(self, *exc) -> None:
        set_stage(self.before)


def interval_for(timeout_s: float) -> float:
    """Seconds between beats: a tenth of the timeout, at most 5 s and at least 0.2 s.

    >>> interval_for(600), interval_for(20), interval_for(1)
    (5.0, 2.0, 0.2)
    """
    return max(0.2, min(5.0, timeout_s / 10))


KEY = "temper/heartbeat/{}"


@dataclass(frozen=True)
class Lost:
    """A rank that stopped beating."""

    rank: int
    host: str
    pid: int
    stage: str
    silent_s: float
    """Seconds (by the leader's clock) since its beat last changed."""

    def describe(self) -> str:
        return f"rank {self.rank} on host {self.host} (pid {self.pid}) stopped answering during {self.stage}"


class Heartbeat:
    """This rank's beat, written to ``store`` every ``interval`` seconds by a daemon thread."""

    def __init__(self, store, rank: int, interval: float, *, start: bool = True):
        self.store, self.rank, self.interval = store, rank, interval
        self.count = 0
        self.stopped = threading.Event()
        self.host = socket.gethostname()
        self._write()  # before any collective: the leader finds every rank's key
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat-rank-{rank}", daemon=True)
        if start:
            self.thread.start()

    def _write(self) -> None:
        self.count += 1
        self.store.set(KEY.format(self.rank), json.dumps(
            {"beat": self.count, "host": self.host, "pid": os.getpid(), "stage": _stage}))

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - the store went with the leader: nothing to tell
                return

    def stop(self) -> None:
        self.stopped.set()


class Watchdog:
    """The leader's view of every rank's beat; ``on_lost(Lost)`` once when one falls silent for
    ``timeout`` seconds."""

    def __init__(self, store, world: int, timeout: float, on_lost: Callable[[Lost], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, *, start: bool = True):
        self.store, self.world, self.timeout = store, world, timeout
        self.on_lost = on_lost
        self.clock = clock
        self.interval = interval_for(timeout)
        self.limit = timeout - 2 * self.interval
        """Silence that makes a rank lost. A beat is seen up to one interval after it was written and
        the watchdog looks once an interval, so a rank is named within ``timeout`` of its last beat."""
        self.seen: dict[int, tuple[int, float, dict]] = {}
        """rank -> (its last beat count, when it changed by our clock, its last beat)"""
        self.fired: Lost | None = None
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="rank-watchdog", daemon=True)
        if start:
            self.thread.start()

    def read(self) -> None:
        """Take every rank's current beat."""
        now = self.clock()
        for rank in range(1, self.world):
            key = KEY.format(rank)
            if not self.store.check([key]):
                continue
            beat = json.loads(self.store.get(key))
            before = self.seen.get(rank)
            if before is None or before[0] != beat["beat"]:
                self.seen[rank] = (beat["beat"], now, beat)

    def silent(self, limit: float) -> Lost | None:
        """The rank silent longest, if it has been silent ``limit`` seconds or more."""
        now = self.clock()
        worst = max(self.seen.items(), key=lambda kv: now - kv[1][1], default=None)
        if worst is None or now - worst[1][1] < limit:
            return None
        rank, (_, since, beat) = worst
        return Lost(rank=rank, host=beat["host"], pid=beat["pid"], stage=beat["stage"], silent_s=now - since)

    def _fire(self, lost: Lost) -> Lost:
        """``on_lost(lost)`` unless a rank was found lost before; a second caller waits for the
        first's ``on_lost`` (which may end the process) and gets the first rank found."""
        with self._lock:
            if self.fired is None:
                self.fired = lost
                if self.on_lost is not None:
                    self.on_lost(lost)
            return self.fired

    def check(self) -> Lost | None:
        """One look: read every beat; a rank silent for the timeout is lost (``on_lost``, once)."""
        try:
            self.read()
        except Exception:  # noqa: BLE001 - the store is unreachable: what is silent stays silent
            pass
        lost = self.silent(self.limit)
        return self._fire(lost) if lost is not None else None

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            if self.check() is not None:
                return

    def suspect(self, wait_s: float | None = None) -> Lost | None:
        """After a collective failed: the rank that went silent (three beats without one), waiting
        up to ``wait_s`` seconds (default: the timeout) for it to show; None if every rank beats."""
        if self.fired is not None:
            return self.fired
        deadline = self.clock() + (self.timeout if wait_s is None else wait_s)
        while True:
            try:
                self.read()
            except Exception:  # noqa: BLE001
                pass
            lost = self.silent(3 * self.interval)
            if lost is not None:
                self.stopped.set()
                return self._fire(lost)
            if self.clock() >= deadline:
                return self.fired
            time.sleep(self.interval / 2)

    def stop(self) -> None:
        self.stopped.set()
