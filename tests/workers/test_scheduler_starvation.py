"""The scheduler never queues behind training: with the demo's own worker layout (a worker of
two processes for a run's queues, one of its own for the scheduler's ``control`` queue) and both
training processes held busy, a run started now is admitted within one scheduler period, and
/api/scheduler says when the scheduler last ran and on which worker."""
from __future__ import annotations

import os
import sys

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from controlplane.runs.models import Run, RunEvent
from controlplane.runs.services import run_cancel, run_create, run_start
from controlplane.scheduling.models import SchedulerTick
from controlplane.web.management.commands.demo import demo_processes
from tests import factories
from tests.services import require_postgres, require_redis, start_celery_process, stop_processes, wait_for, worker_env
from tests.workers.hold_tasks import HOLD_TASK

pytestmark = pytest.mark.slow


def named(cmd: list[str], name: str, *extra: str) -> list[str]:
    """The demo's worker command under a name of this test's, without mingle and gossip."""
    cmd = list(cmd)
    cmd[cmd.index("-n") + 1] = f"{name}-{os.getpid()}@%h"
    return [*cmd, "--without-mingle", "--without-gossip", *extra]


@pytest.fixture
def demo_workers(transactional_db, tmp_path):
    require_postgres()
    env = worker_env(connection.settings_dict, require_redis(), TEMPER_VAR_DIR=str(tmp_path / "var"))
    procs = demo_processes(python=sys.executable, var_dir=tmp_path / "var", host="127.0.0.1", port=0)
    assert "-Q" in procs["control"][0] and procs["control"][0][procs["control"][0].index("-Q") + 1] == "control"
    assert "control" not in procs["worker"][0][procs["worker"][0].index("-Q") + 1].split(",")
    started = []
    try:
        started.append(start_celery_process(named(procs["worker"][0], "starve-worker", "--include", "tests.workers.hold_tasks"),
                                            env, "worker", log_path=tmp_path / "worker.log"))
        started.append(start_celery_process(named(procs["control"][0], "starve-control"), env, "control",
                                            log_path=tmp_path / "control.log"))
        yield tmp_path
    finally:
        stop_processes(started, timeout=120, then_kill="session")


def test_a_run_is_admitted_while_both_training_processes_are_busy(demo_workers):
    from workers.celery import app

    hold_dir = demo_workers / "hold"
    hold_dir.mkdir()
    logs = [demo_workers / "worker.log", demo_workers / "control.log"]
    for ident in ("a", "b"):  # a run's queue: both of the worker's processes take one
        app.send_task(HOLD_TASK, args=[str(hold_dir), ident], queue="rollout")
    wait_for(lambda: all((hold_dir / f"{i}.started").exists() for i in ("a", "b")), 120,
             "both training processes to be busy", logs=logs)

    _, actor = factories.synced_team(["builtin-addition"], "member")
    run = run_create(actor=actor, data=factories.run_payload(["builtin-addition"], team="acme", base_model="tiny-llama"))
    run = run_start(actor=actor, run=run)  # asks the scheduler at once; beat would ask every period
    try:
        admitted = wait_for(lambda: RunEvent.objects.filter(run=run, kind="admitted").first(), 120,
                            "the run to be admitted while the training processes are busy", logs=logs)
        run.refresh_from_db()
        assert run.state == "running"
        # Both processes were still held: the admission did not wait for training to end.
        assert not (hold_dir / "release").exists()
        waited = (admitted.at - run.queued_at).total_seconds()
        assert waited <= settings.TEMPER_SCHEDULE_PERIOD_S, f"admitted {waited:.1f} s after it was queued"

        tick = SchedulerTick.objects.get(pk=1)
        assert tick.worker.startswith("starve-control-") and tick.admitted == 1
        status = Client().get("/api/scheduler", HTTP_AUTHORIZATION=f"Bearer {factories.token(actor.user, run.team, 'viewer')[1]}")
        assert status.status_code == 200, status.content
        body = status.json()
        assert body["at"] and body["late"] is False and body["worker"] == tick.worker
    finally:
        run_cancel(actor=actor, run=Run.objects.get(pk=run.pk))
        (hold_dir / "release").touch()
        # The cancelled run's driver, dispatched at admission, is taken before this ping (FIFO,
        # one message a process), so no message of this test is left on the broker for the next.
        assert app.send_task("temper.control.ping", args=[1], queue="rollout").get(timeout=300) == 2
