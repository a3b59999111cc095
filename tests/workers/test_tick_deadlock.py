"""A scheduler tick that PostgreSQL aborts to break a deadlock (with a driver's writes) ticks again
at once: a preemption or an admission does not wait for the next period."""
from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest
from django.db import OperationalError

from workers import tasks


def _deadlock() -> OperationalError:
    err = OperationalError("deadlock detected")
    err.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return err


def test_a_tick_aborted_by_a_deadlock_ticks_again(monkeypatch):
    calls = []

    def tick(worker=""):
        calls.append(worker)
        if len(calls) < 3:
            raise _deadlock()
        return SimpleNamespace(admit=[7], preempt=[3])

    monkeypatch.setattr(tasks.scheduling, "schedule_tick", tick)
    assert tasks.schedule_tick.apply().get() == {"admit": [7], "preempt": [3]}
    assert len(calls) == 3


def test_other_database_errors_and_endless_deadlocks_are_raised(monkeypatch):
    monkeypatch.setattr(tasks.scheduling, "schedule_tick", lambda worker="": (_ for _ in ()).throw(OperationalError("gone")))
    with pytest.raises(OperationalError, match="gone"):
        tasks.schedule_tick.apply().get()
    calls = []

    def always(worker=""):
        calls.append(worker)
        raise _deadlock()

    monkeypatch.setattr(tasks.scheduling, "schedule_tick", always)
    with pytest.raises(OperationalError, match="deadlock"):
        tasks.schedule_tick.apply().get()
    assert len(calls) == tasks.DEADLOCK_RETRIES + 1
