"""A worker killed with SIGKILL in the middle of a batch leaves nothing after the next reap."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox_helpers import sandbox_uids, wait_no_sandbox_processes
from workers.sandbox import cgroups, reap

ROOT = str(Path(__file__).resolve().parents[2])

WORKER = textwrap.dedent('''
    import sys, threading, time
    sys.path.insert(0, {root!r})
    from workers.sandbox import Limits, PoolConfig, execute, get_runtime
    from sandbox_helpers import sandbox_uids, wait_no_sandbox_processes
    backend, token = sys.argv[1], sys.argv[2]
    get_runtime(backend, PoolConfig(global_limit=4, domain_limit=4, warm_per_domain=2, lease_s=3600))
    program = "import time, sys\\ntime.sleep(120)\\n"
    def job():
        execute({{"m.py": program}}, ["python3", "m.py", token], Limits(wall_s=120, cpu_s=60),
                backend=backend, domain="batch")
    for _ in range(4):
        threading.Thread(target=job, daemon=True).start()
    while sum(token in p for procs in sandbox_uids().values() for p in procs) < 4:
        time.sleep(0.05)
    print("RUNNING", flush=True)
    time.sleep(600)
''')


def _token_procs(token: str) -> list[str]:
    return [p for procs in sandbox_uids().values() for p in procs if token in p]


def _containers_of(pid: int) -> list:
    import docker

    client = docker.from_env()
    return client.containers.list(all=True, filters={"label": f"temper.worker_pid={pid}"})


@pytest.mark.parametrize("name", ["bwrap", "bwrap-cold", "docker"])
def test_sigkill_mid_batch_then_reap_leaves_nothing(name, tmp_path):
    from sandbox_helpers import ready, require

    ok, reason = ready(name)
    require(ok, reason)
    token = f"reaptoken{os.getpid()}{name}{int(time.time() * 1000)}"
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=ROOT))
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{Path(__file__).parent}")
    worker = subprocess.Popen([sys.executable, str(script), name, token], stdout=subprocess.PIPE, env=env)
    try:
        ready, _, _ = select.select([worker.stdout], [], [], 120)
        assert ready and worker.stdout.readline().strip() == b"RUNNING", "worker never started its batch"
        assert len(_token_procs(token)) >= 4
        if name == "docker":
            assert len(_containers_of(worker.pid)) >= 4
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    result = reap()
    if name == "docker":
        assert result["containers"] >= 4
        assert _containers_of(worker.pid) == []
    assert wait_no_sandbox_processes(token) == {}, "sandbox processes outlived the reap"
    assert cgroups.leftover_cgroups(only_dead_owners=True) == []
