"""A lost rank pauses its run, naming it, and the run resumes from its last checkpoint.

A two-rank CPU run of 16 steps through a real Celery worker (workers/launch.py starts torchrun; rank 0
drives and leads, rank 1 follows) with ``parallel.collective_timeout_s`` of 20 s. After its
checkpoint at step 2, rank 1 is stopped (SIGSTOP): the leader's watchdog finds it silent, the run
pauses (not fails) with an event naming rank 1, its host and the stage it was in, the "Waiting on"
note says so, and the stopped process is ended. Resumed, the run goes on from step 2; after its
checkpoint at step 4, rank 1 is killed (SIGKILL): the leader's collective fails at once, and the
run pauses again naming the rank. Resumed again, it completes with every step recorded once.
"""
from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from controlplane.live.selectors import run_status
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent
from controlplane.runs.services import run_create, run_resume, run_start
from controlplane.scheduling.models import ResourcePool
from tests import factories
from tests.services import celery_workers, require_postgres, wait_for
from trainer.watchdog import STAGES

STEPS = 16
TIMEOUT_S = 20


def follower_pid(run_id: int) -> int | None:
    """The process of rank 1 of run ``run_id`` of this test's worker (torchrun's worker with
    RANK=1, launched for ``ranks-<this pid>@host``: another test process may drive a run with the
    same id on a database of its own), if it runs."""
    worker = f"ranks-{os.getpid()}@".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"workers.launch" in cmdline and str(run_id).encode() in cmdline and b"RANK=1" in environ \
                and b"LOCAL_RANK=1" in environ and any(arg.startswith(worker) for arg in cmdline):
            return int(entry.name)
    return None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def paused_for_rank(run: Run, count: int):
    """The ``count``-th ``paused`` event of cause ``rank`` once the run is paused, else None."""
    current = Run.objects.get(pk=run.pk)
    events = list(RunEvent.objects.filter(run=run, kind="paused", data__cause="rank").order_by("id"))
    return events[count - 1] if current.state == "paused" and len(events) >= count else None


@pytest.mark.slow
def test_a_stopped_or_killed_rank_pauses_the_run_which_resumes(transactional_db, tmp_path):
    require_postgres()
    from trainer.models.tiny import build_tiny

    _, actor = factories.synced_team(["builtin-addition"], "member")
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=2)
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(
        ["builtin-addition"], team="acme", base_model=model, budget={"steps": STEPS},
        config={"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2},
                "parallel": {"ranks": 2, "collective_timeout_s": TIMEOUT_S}}))
    logs = [tmp_path / "ranks.log"]
    with celery_workers(tmp_path, {"ranks": "control,rollout"}, concurrency=2):
        run_start(actor=actor, run=run)
        resumes_from, seen = [], 0
        for count, (sig, after) in enumerate([(signal.SIGSTOP, 2), (signal.SIGKILL, 4)], start=1):
            # A checkpoint at ``after`` or later written by this driver (after ``seen``, the last
            # row before it started): its ranks are past their start, and the run has steps enough
            # left (each a second or more) for the signal to land while it trains.
            wait_for(lambda: Checkpoint.objects.filter(run=run, step__gte=after, id__gt=seen).exists(), 300,
                     f"the checkpoint at step {after}", logs=logs)
            pid = wait_for(lambda: follower_pid(run.pk), 60, "rank 1's process", logs=logs)
            os.kill(pid, sig)
            event = wait_for(lambda: paused_for_rank(run, count), 10 * TIMEOUT_S,
                             f"the run to pause for rank 1 ({sig.name})", logs=logs)
            assert event.data["rank"] == 1 and event.data["host"] == socket.gethostname()
            assert event.data["pid"] == pid and event.data["stage"] in STAGES
            assert f"rank 1 on host {socket.gethostname()}" in event.message
            assert "resumes from its last checkpoint" in event.message
            note = run_status(run.pk)["paused"]  # what the "Waiting on" panel shows
            assert note["binding"] == "rank" and f"rank 1 on host {socket.gethostname()}" in note["reason"]
            wait_for(lambda: not alive(pid), 120, "the lost rank's process to end", logs=logs)
            assert Run.objects.get(pk=run.pk).state == "paused"  # paused, not failed
            resumes_from.append(Checkpoint.objects.filter(run=run).order_by("-step").first().step)
            seen = Checkpoint.objects.filter(run=run).order_by("-id").first().id
            run_resume(actor=actor, run=Run.objects.get(pk=run.pk))
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300,
                         "the resumed run to end", logs=logs)
    assert final.state == "completed", final.error
    resumed = RunEvent.objects.filter(run=run, kind="resumed", data__checkpoint_step__isnull=False).order_by("id")
    assert [e.data["checkpoint_step"] for e in resumed] == resumes_from  # each time from the last checkpoint
    assert resumes_from[0] >= 2 and resumes_from[1] >= 4
    steps = list(MetricPoint.objects.filter(run=run, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, STEPS + 1))  # every step once: the lost steps were rewound, redone
