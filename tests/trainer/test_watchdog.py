"""The leader's watchdog over its ranks' heartbeats (trainer/watchdog.py), on a store and a clock
the test holds: a rank that stops beating is named once, with its host, pid and stage, when it
has been silent for the timeout less two beats (so within the timeout of its last beat) and not
before; after a failed collective, a rank silent for three
beats is named without waiting for the timeout. The real signals, through a run, are in
tests/workers/test_rank_watchdog.py."""
from __future__ import annotations

import os
import socket

from trainer import watchdog
from trainer.watchdog import Heartbeat, Watchdog


class Store:
    """The three calls of a c10d store the heartbeats use."""

    def __init__(self):
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_rank_is_named_once_after_the_timeout():
    store, clock, lost = Store(), Clock(), []
    beats = [Heartbeat(store, rank, 1.0, start=False) for rank in (1, 2)]
    dog = Watchdog(store, 3, timeout=20.0, on_lost=lost.append, clock=clock, start=False)
    watchdog.set_stage("update")
    for _ in range(5):  # both beat for 5 s
        clock.now += 1
        for b in beats:
            b._write()
        assert dog.check() is None
    # rank 2 goes on, rank 1 is silent: beats 2 s apart, looks 2 s apart, so the watchdog names a
    # rank silent for 16 s by its clock, at most 20 s after its last beat
    assert dog.interval == 2.0 and dog.limit == 16.0
    for _ in range(15):
        clock.now += 1
        beats[1]._write()
        assert dog.check() is None
    clock.now += 1
    beats[1]._write()
    found = dog.check()
    assert found is not None and lost == [found]
    assert (found.rank, found.host, found.pid, found.stage) == (1, socket.gethostname(), os.getpid(), "update")
    assert found.silent_s == 16.0
    assert "rank 1 on host" in found.describe() and "during update" in found.describe()
    clock.now += 30
    dog.check()
    assert len(lost) == 1  # once


def test_after_a_failed_collective_three_silent_beats_name_the_rank():
    store, clock, lost = Store(), Clock(), []
    watchdog.set_stage("generate")
    beats = [Heartbeat(store, rank, 1.0, start=False) for rank in (1, 2)]
    dog = Watchdog(store, 3, timeout=600.0, on_lost=lost.append, clock=clock, start=False)
    assert dog.interval == 5.0
    dog.read()
    clock.now += 16  # rank 2 was killed 16 s ago: more than 3 beats of 5 s
    beats[0]._write()
    found = dog.suspect(wait_s=0)
    assert found is not None and found.rank == 2 and found.stage == "generate" and lost == [found]


def test_every_rank_beating_is_no_suspect():
    store, clock = Store(), Clock()
    beat = Heartbeat(store, 1, 1.0, start=False)
    dog = Watchdog(store, 2, timeout=600.0, clock=clock, start=False)
    dog.read()
    clock.now += 4
    beat._write()
    assert dog.suspect(wait_s=0) is None


def test_stages_are_named_and_restored():
    watchdog.set_stage("waiting for the leader")
    with watchdog.staged("checkpoint"):
        assert watchdog.stage() == "checkpoint"
    assert watchdog.stage() == "waiting for the leader"
