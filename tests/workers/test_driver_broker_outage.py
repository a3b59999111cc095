"""A broker outage holds a run; a longer one pauses it, naming the broker, and it resumes.

``HeldSend`` on a clock the test holds: a send the broker refuses is retried with backoff and
the "Waiting on" note says so, until it is answered (the note cleared) or the run's
``parallel.collective_timeout_s`` has passed (``BrokerUnreachable``).

Then for real: the driver runs in this process and sends a sandboxed domain's verify batches to
a real Celery verify worker, both through a proxy in front of a Redis of the test's own
(tests/faults.py). The proxy is cut after step 2 and restored once the run's "Waiting on" note
says the broker is unreachable: the run goes on, no verification lost. It is cut again after
step 4 and left cut: after the hold (8 s) the run pauses with cause ``broker``. Restored and
started again, the run resumes from its last checkpoint and completes, every step recorded once.
"""
from __future__ import annotations

import threading

import pytest
from django.db import connection
from kombu.exceptions import OperationalError

from controlplane import dispatch
from controlplane.live.selectors import run_status
from controlplane.runs.models import MetricPoint, Run, RunEvent
from tests import factories
from tests.faults import CuttableProxy, private_redis
from tests.services import require_postgres, start_celery_worker, wait_for, worker_env
from tests.workers.driving import code_domain, running_run
from tests.workers.test_driver import steps_of
from workers.broker import BrokerUnreachable, HeldSend

HOLD_S = 8
STEPS = 8


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_a_refused_send_is_retried_with_backoff_and_the_note_cleared():
    clock, notes, refusals = Clock(), [], [3]

    def send(name, args):
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError("Error 111 connecting to 127.0.0.1:16380. Connection refused.")
        return ("sent", name, args)

    held = HeldSend(send, hold_s=30, on_wait=notes.append, clock=clock, sleep=clock.sleep)
    assert held("temper.verify.batch", (1,)) == ("sent", "temper.verify.batch", (1,))
    assert clock.now == 0.5 + 1 + 2  # backing off
    assert len(notes) == 4 and notes[-1] is None
    assert all("the broker is unreachable (Error 111" in n and "of at most 30 s" in n for n in notes[:3])
    assert held.outages == 1 and held.since is None


def test_a_send_refused_past_the_hold_raises_broker_unreachable():
    clock = Clock()

    def send(name, args):
        raise OperationalError("Connection refused")

    held = HeldSend(send, hold_s=10, clock=clock, sleep=clock.sleep)
    with pytest.raises(BrokerUnreachable) as info:
        held("temper.verify.batch", ())
    assert info.value.waited_s == 10 and "parallel.collective_timeout_s = 10 s" in str(info.value)
    assert clock.now == 10  # the last wait is cut to the hold


@pytest.fixture
def through_proxy(tmp_path, settings):
    """A private Redis behind a cuttable proxy, a real verify worker on it, and this process's
    producer pointed at it."""
    require_postgres()
    with private_redis(tmp_path) as port, CuttableProxy(port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = url
        settings.TEMPER_WORKER_STALE_S = 24 * 3600
        dispatch.producer.cache_clear()
        log = tmp_path / "verify.log"
        env = worker_env(connection.settings_dict, url, TEMPER_VAR_DIR=str(tmp_path / "var"))
        worker = start_celery_worker(env, "verify", "verify", concurrency=2, log_path=log)
        try:
            yield proxy, log
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            dispatch.producer.cache_clear()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_outage_holds_the_run_and_a_longer_one_pauses_it(through_proxy, tmp_path, settings, monkeypatch):
    from trainer.models.tiny import build_tiny
    from workers.driver import drive

    proxy, log = through_proxy
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no scheduler here: the test starts the driver
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(["builtin-addition"])
    code_domain(actor, "remote-code", "Remote")
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = running_run(actor, model, steps=STEPS, domains=["remote-code"])
    run.config = {**run.config, "parallel": {"collective_timeout_s": HOLD_S}}  # the test's own hold
    run.save(update_fields=["config"])
    reasons = []
    driver = threading.Thread(target=lambda: reasons.append(drive(run.id, worker="w1")))
    driver.start()

    def driving(predicate):
        """``predicate()``, failing at once (with why) if the driver has returned."""
        def check():
            if not driver.is_alive():
                raise AssertionError(f"the driver returned {reasons}: {Run.objects.get(pk=run.pk).error[-3000:]}")
            return predicate()
        return check

    def held_note() -> bool:
        return "broker is unreachable" in ((run_status(run.id) or {}).get("inflight") or {}).get("phase", "")
    try:
        wait_for(driving(lambda: len(steps_of(run)) >= 2), 300, "step 2", logs=[log])
        proxy.cut()
        wait_for(driving(held_note), 120, "the Waiting-on note to say the broker is unreachable", logs=[log])
        proxy.restore()
        wait_for(driving(lambda: len(steps_of(run)) >= 4), 300, "step 4 after the short outage", logs=[log])
        assert not RunEvent.objects.filter(run=run, kind="paused").exists()  # held, not paused
        proxy.cut()
        driver.join(timeout=HOLD_S * 20)
        assert reasons == ["paused (broker unreachable)"]
    finally:
        proxy.restore()
        driver.join(timeout=300)
    paused = Run.objects.get(pk=run.pk)
    assert paused.state == "paused" and paused.scheduler_note["binding"] == "broker"
    event = RunEvent.objects.get(run=run, kind="paused")
    assert event.data["cause"] == "broker" and event.data["waited_s"] >= HOLD_S
    assert "the broker has been unreachable" in event.message and "resumes from its last checkpoint" in event.message
    assert "broker has been unreachable" in run_status(run.pk)["paused"]["reason"]
    paused.transition("queued"); paused.transition("running"); paused.save()  # what a resume and the scheduler do
    assert drive(run.id, worker="w2") == "completed"
    assert steps_of(run) == list(range(1, STEPS + 1))  # no step lost or recorded twice
    lost = MetricPoint.objects.filter(run=run, key="verify/lost_items").values_list("value", flat=True)
    assert list(lost) and all(v == 0 for v in lost)  # the held step lost no verification


def test_the_result_stores_retry_limit_counts_as_unreachable_and_other_errors_do_not():
    clock, calls = Clock(), []

    def send(name, args):
        calls.append(name)
        if len(calls) == 1:
            try:
                raise ConnectionError("Error 111 connecting to 127.0.0.1:6380. Connection refused.")
            except ConnectionError as exc:
                raise RuntimeError("Retry limit exceeded while trying to reconnect to the Celery result store") from exc
        if len(calls) == 2:
            raise RuntimeError("a bug, not an outage")
        return "sent"

    held = HeldSend(send, hold_s=30, clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError, match="a bug"):
        held("temper.verify.batch", ())
    assert calls == ["temper.verify.batch"] * 2 and held.since is not None
    assert held("temper.verify.batch", ()) == "sent" and held.since is None
