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


def test_a_tick_locks_only_run_rows_and_in_id_order(world):
    """The tick reads each run's team with it but locks the runs alone (``FOR UPDATE OF``), and in
    id order: a lock on a team row, or runs taken in another order than a driver takes them,
    is how two transactions come to wait for each other."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from controlplane.scheduling import services as scheduling
    from tests import factories

    for _ in range(3):
        factories.run(world.team, domains=[world.domain], state="queued")
    with CaptureQueriesContext(connection) as queries:
        scheduling.schedule_tick()
    locking = [q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"] and '"runs_run"' in q["sql"]]
    assert locking, "the tick locks the runs it decides on"
    for sql in locking:
        assert 'FOR UPDATE OF "runs_run"' in sql or '"accounts_team"' not in sql, sql
        assert 'ORDER BY "runs_run"."id" ASC' in sql, sql
