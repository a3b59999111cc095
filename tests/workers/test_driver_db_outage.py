"""A database outage holds a run; a longer one pauses it, naming the database, and it resumes.

``HeldDatabase`` on a clock the test holds: a read or write the database refuses is retried with
backoff and a note, and past the hold it raises ``DatabaseUnreachable``; other errors are not an
outage.

Then for real: the driver runs in this process and reaches PostgreSQL only through a proxy the
test cuts (tests/faults.py). Cut after step 2 for a few seconds (less than the run's
``parallel.collective_timeout_s``): the run goes on, nothing paused. Cut after step 4 and left cut
past the hold: the driver waits for the database and then pauses the run with cause ``database``.
Started again, it resumes from its last checkpoint and completes, every step recorded once.
"""
from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError, ProgrammingError, connection, connections

from controlplane.runs import services as runs_services
from controlplane.runs.models import Run, RunEvent
from tests import factories
from tests.faults import CuttableProxy
from tests.services import require_postgres, wait_for
from tests.workers.driving import running_run
from tests.workers.test_driver import _no_send, steps_of
from tests.workers.test_driver_broker_outage import Clock
from workers.outage import DatabaseUnreachable, HeldDatabase

HOLD_S = 10
STEPS = 8


def test_a_refused_read_is_retried_with_backoff_and_a_long_outage_raises():
    clock, notes, refusals = Clock(), [], [3]

    def write():
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError('connection to server at "127.0.0.1", port 5433 failed: Connection refused')
        return "written"

    held = HeldDatabase(hold_s=30, on_wait=notes.append, clock=clock, sleep=clock.sleep)
    assert held(write) == "written" and clock.now == 0.5 + 1 + 2
    assert len(notes) == 4 and notes[-1] is None and held.ended_within(1) and not held.ended_within(0)
    assert all("the database is unreachable (connection to server" in n and "of at most 30 s" in n for n in notes[:3])
    with pytest.raises(ProgrammingError):  # a bug, not an outage: never retried
        held(lambda: (_ for _ in ()).throw(ProgrammingError("relation does not exist")))
    refusals[0] = 1000
    with pytest.raises(DatabaseUnreachable) as info:
        held(write)
    assert info.value.waited_s == 30 and "the database has been unreachable for 30 s" in str(info.value)


@pytest.fixture
def through_proxy(settings):
    """This process's database connections (every thread's) go through a cuttable proxy."""
    require_postgres()
    db = connection.settings_dict  # the dict every thread's connection is made from
    before = (db["HOST"], db["PORT"])
    with CuttableProxy(int(db["PORT"] or 5432)) as proxy:
        db["HOST"], db["PORT"] = "127.0.0.1", str(proxy.port)
        connections.close_all()
        try:
            yield proxy
        finally:
            proxy.restore()
            db["HOST"], db["PORT"] = before
            connections.close_all()


class Seen(logging.Handler):
    """Set when the driver logs that it gave up holding and waits to record the pause."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.waiting = threading.Event()

    def emit(self, record):
        message = record.getMessage()
        if "waiting for the database to record the pause" in message:
            self.waiting.set()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_outage_holds_the_run_and_a_longer_one_pauses_it(through_proxy, tmp_path, settings, monkeypatch):
    from trainer.models.tiny import build_tiny
    from workers.driver import drive

    proxy = through_proxy
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(["builtin-addition"])
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = running_run(actor, model, steps=STEPS, domains=["builtin-addition"])
    run.config = {**run.config, "parallel": {"collective_timeout_s": HOLD_S}, "checkpoint": {"every_steps": 2}}
    run.save(update_fields=["config"])
    waited, long_enough = [], threading.Event()
    failed = HeldDatabase._failed

    def noting(self, exc):
        seconds = failed(self, exc)
        waited.append(seconds)
        if seconds >= 1:
            long_enough.set()
        return seconds
    monkeypatch.setattr(HeldDatabase, "_failed", noting)
    # The driver stops after recording steps 2 and 4 until the test has cut the proxy (tiny
    # steps take a fraction of a second: polling would miss them).
    record, at, go = runs_services.run_record_step, {2: threading.Event(), 4: threading.Event()}, {2: threading.Event(), 4: threading.Event()}

    def recording(**kwargs):
        written = record(**kwargs)
        if kwargs["step"] in at:
            at[kwargs["step"]].set()
            assert go[kwargs["step"]].wait(300)
        return written
    monkeypatch.setattr(runs_services, "run_record_step", recording)
    seen = Seen()
    logging.getLogger("workers.driver").addHandler(seen)
    reasons = []
    driver = threading.Thread(target=lambda: reasons.append(drive(run.id, worker="w1", send=_no_send)))
    driver.start()

    def driving(predicate):
        def check():
            if not driver.is_alive():
                raise AssertionError(f"the driver returned {reasons}: {Run.objects.get(pk=run.pk).error[-3000:]}")
            try:
                return predicate()
            except OperationalError:  # this thread's connection was cut too: the next poll connects anew
                connections.close_all()
                return False
        return check
    try:
        wait_for(driving(at[2].is_set), 300, "step 2")
        proxy.cut()
        go[2].set()
        assert long_enough.wait(120), "the driver never held the run for a second"
        proxy.restore()
        wait_for(driving(at[4].is_set), 300, "step 4 after the short outage")
        connections.close_all()  # this thread's connection was cut with the others
        assert steps_of(run) == [1, 2, 3, 4]
        assert not RunEvent.objects.filter(run=run, kind="paused").exists()  # held, not paused
        assert max(waited) < HOLD_S
        proxy.cut()
        go[4].set()
        assert seen.waiting.wait(HOLD_S * 20), "the driver never gave up holding"
        proxy.restore()
        driver.join(timeout=120)
        connections.close_all()
        assert reasons == ["paused (database unreachable)"]
    finally:
        logging.getLogger("workers.driver").removeHandler(seen)
        proxy.restore()
        go[2].set(), go[4].set()
        driver.join(timeout=300)
        connections.close_all()
    paused = Run.objects.get(pk=run.pk)
    assert paused.state == "paused" and paused.scheduler_note["binding"] == "database"
    event = RunEvent.objects.get(run=run, kind="paused")
    assert event.data["cause"] == "database" and event.data["waited_s"] >= HOLD_S
    assert "the database has been unreachable" in event.message and "resumes from its last checkpoint" in event.message
    paused.transition("queued"); paused.transition("running"); paused.save()  # what a resume and the scheduler do
    assert drive(run.id, worker="w2", send=_no_send) == "completed"
    assert steps_of(run) == list(range(1, STEPS + 1))  # no step lost or recorded twice
