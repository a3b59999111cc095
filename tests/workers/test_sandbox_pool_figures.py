"""The sandbox pools' figures reach the pages: a verification carries its wait and its domain's
pool size and creation rate (run page: ``sandbox/<d>/...`` metrics of each step), and a worker's
heartbeat carries its processes' pools (queue page)."""
from __future__ import annotations

import os
import subprocess
import time
from types import SimpleNamespace

import pytest
from django.test import Client

from controlplane.scheduling.models import WorkerHeartbeat
from controlplane.scheduling.services import heartbeat_record
from tests.services import require
from trainer.verifiers.code import verdict_to_verification
from trainer.verifiers.code_harness import build_job
from workers.compute_observers import SandboxPools, pool_metrics
from workers.sandbox import figures
from workers.sandbox.types import Verdict

pytestmark = pytest.mark.django_db


def test_a_verification_carries_its_sandbox_wait_and_pool_figures():
    job = build_job("def f():\n    return 1\n", ["assert f() == 1"], entry_point="f")
    v = verdict_to_verification(Verdict(status="runtime_error", exit_code=1, wait_s=0.25, pool_size=3, creations_per_s=0.05), job)
    assert (v.details["sandbox_wait_s"], v.details["sandbox_pool_size"], v.details["sandbox_creations_per_s"]) == (0.25, 3, 0.05)


def test_the_step_metrics_name_each_sandboxed_domain_and_skip_the_others():
    def traj(domain, details):
        return SimpleNamespace(task=SimpleNamespace(domain=domain), verification=SimpleNamespace(details=details))

    trajs = [traj("code", {"sandbox_wait_s": w, "sandbox_pool_size": n, "sandbox_creations_per_s": 0.1})
             for w, n in [(0.01, 2), (0.02, 3), (0.9, 4)]] + [traj("math", {"verify_s": 0.001})]
    done = SimpleNamespace(trajectories=trajs, metrics={})
    SandboxPools().after_step(done)
    assert done.metrics == {"sandbox/code/wait_p50_s": 0.02, "sandbox/code/wait_p99_s": pytest.approx(0.8824),
                            "sandbox/code/pool_size": 4.0, "sandbox/code/creations_per_s": 0.1}
    assert pool_metrics([], []) == {}


def test_a_verify_batch_leaves_its_pools_for_the_heartbeat_and_the_queue_page_shows_them(settings, tmp_path, world):
    """Real sandboxes: a code domain's batch runs through verify_items; the process's figures
    are written as the verify task does, read into this worker's heartbeat, and shown on /queue/."""
    from tests.verifiers.conftest import sandbox_execute
    from workers import heartbeat
    from workers.verify import verify_items

    require(sandbox_execute() is not None, "workers.sandbox is not importable")
    settings.REDIS_URL = ""
    settings.VAR_DIR = tmp_path
    spec = {"stages": [{"type": "code_tests", "params": {"limits": {"cpu_s": 3, "wall_s": 6, "memory_mb": 256}}}]}
    task = {"domain": "pool-figures", "id": "1", "prompt": "add", "answer": {"tests": ["assert add(2, 3) == 5"], "entry_point": "add"}}
    results = verify_items(spec, [{"completion": "def add(a, b):\n    return a + b\n", "task": task}] * 2)
    assert [r["outcome"] for r in results] == ["pass", "pass"], results
    assert all(r["details"]["sandbox_pool_size"] >= 1 and r["details"]["sandbox_wait_s"] >= 0 for r in results)
    heartbeat.publish_sandbox_figures()
    heartbeat_record(worker="verify@pools", queues=["verify"], meta=heartbeat.heartbeat_meta([]))
    pools = WorkerHeartbeat.objects.get(worker="verify@pools").meta["sandbox_pools"]
    assert pools["pool-figures"]["size"] >= 1 and pools["pool-figures"]["wait_p99_s"] is not None
    c = Client()
    c.force_login(world.users["viewer"])
    page = c.get("/queue/").content.decode()
    row = page[page.index('data-domain="pool-figures"'):]
    assert 'data-worker="verify@pools"' in page and f'data-field="size">{pools["pool-figures"]["size"]} (' in row


def test_only_the_figures_of_a_workers_own_live_processes_count(tmp_path):
    host = figures.socket.gethostname()
    figures.write_pool_figures(tmp_path, {"d": {"size": 2, "idle": 2, "target": 1, "wait_p50_s": 0.1, "wait_p99_s": 0.2,
                                                "creations_per_s": 0.5}})
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f"{host}-{dead.pid}.json").write_text('{"at": %f, "pools": {"d": {"size": 9}}}' % time.time())
    (tmp_path / f"{host}-1.json").write_text('{"at": %f, "pools": {"d": {"size": 7}}}' % time.time())  # another worker's
    (tmp_path / f"{host}-{os.getppid()}.json").write_text('{"at": 1.0, "pools": {"d": {"size": 5}}}')  # stale
    merged = figures.read_pool_figures(tmp_path, pids={os.getpid(), os.getppid()})
    assert merged == {"d": {"size": 2, "idle": 2, "target": 1, "creations_per_s": 0.5, "wait_p50_s": 0.1, "wait_p99_s": 0.2}}
    assert not (tmp_path / f"{host}-{dead.pid}.json").exists()  # a dead process's file is removed
