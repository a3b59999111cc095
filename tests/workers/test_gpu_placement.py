"""A GPU run through a real Celery train worker whose host reports GPUs (a fake ``nvidia-smi`` on
its PATH: the inventory goes through the real heartbeat, the real scheduler tick and the real
routing). The worker consumes its own queue; the scheduler gives the run a device another run
does not hold and sends its driver there; the driver runs in a launched process whose
CUDA_VISIBLE_DEVICES is that device, and the run completes."""
from __future__ import annotations

import os
import stat
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.runs.models import Run, RunEvent
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.models import ResourcePool, TeamQuota
from controlplane.scheduling.selectors import train_hosts
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.services import require_postgres, require_redis, start_celery_worker, wait_for, worker_env

FAKE_SMI = "#!/bin/sh\nprintf '0, Fake H200, 143771\\n1, Fake H200, 143771\\n'\n"


@pytest.mark.slow
def test_a_gpu_run_is_driven_on_the_device_the_scheduler_assigned(transactional_db, tmp_path):
    require_postgres()
    redis_url = require_redis()
    from trainer.models.tiny import build_tiny

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"),
                     PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    team, actor = factories.synced_team(["builtin-addition"], "admin")
    TeamQuota.objects.create(team=team, max_gpus=2, max_concurrent_runs=3)
    ResourcePool.objects.create(name="gpus", kind="train_gpu", capacity=2)
    model = str(build_tiny(tmp_path / "model", layers=2))
    worker = start_celery_worker(env, "gpu", "train", log_path=tmp_path / "train.log")
    try:
        hosts = wait_for(lambda: train_hosts() or None, 60, "the train worker's heartbeat with its GPUs")
        (name, devices), = hosts.items()
        assert devices == (0, 1)
        # Another run holds device 0 on this worker (its driver is alive: a fresh lease).
        holder = factories.run(team, state="running", gpus=1, placement={"worker": name, "devices": [0]},
                               driver="elsewhere", driver_seen_at=timezone.now() + timedelta(hours=1))
        run = run_create(actor=actor, data=factories.run_payload(
            ["builtin-addition"], team="acme", base_model=model, gpus=1, budget={"steps": 2},
            config={"rollout": {"prompts_per_step": 2, "n": 2, "max_new_tokens": 4}}))
        run_start(actor=actor, run=run)
        wait_for(lambda: schedule_tick() and Run.objects.get(pk=run.pk).state != "queued", 60, "admission")
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300,
                         "the run to end", logs=[tmp_path / "train.log"])
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert final.state == "completed", final.error
    assert final.placement == {"worker": name, "devices": [1]}
    seen = RunEvent.objects.get(run=run, kind="devices").data
    assert seen["worker"] == name and seen["cuda_visible_devices"] == "1" and seen["devices"] == [1]
    assert RunEvent.objects.filter(run=run, kind="driver", message__startswith=f"driven by {name}").exists()
    holder.refresh_from_db()
    assert holder.placement["devices"] == [0]
