"""The machine's bwrap sandboxes share one CPU weight (cgroups.set_cpu_weight, PoolConfig.cpu_weight).

Without it every sandbox job ran in a fresh session, an autogroup of its own, and the scheduler
gave each the share of a whole session: N sandboxes at once took N shares of a contended CPU from
the trainer's generation. The contention test pins a spinning thread of a trainer-like process and
four spinning sandbox jobs to one CPU, and compares the CPU time each side got.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_helpers import SMALL, bwrap_ready, own_pool, require
from workers.sandbox import PoolConfig, cgroups
from workers.sandbox.bwrap_pool import WarmBwrapBackend

REPO = Path(__file__).resolve().parents[2]


def weighted_layout() -> cgroups.CgroupLayout:
    ok, reason = bwrap_ready()
    require(ok, reason)
    layout = cgroups.detect()
    require(layout is not None and layout.cpu_parent is not None, "no CPU controller delegated to this process")
    return layout


def test_every_sandbox_joins_the_weighted_cgroup():
    layout = weighted_layout()
    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1)  # the default weight, as every pool sets it
    with own_pool(WarmBwrapBackend(config), config, idle_s=30) as pool:
        assert pool.backend.cpu_weighted
        v = pool.execute({"main.py": "print('ok')"}, ["python3", "main.py"], SMALL, domain="weight")
        assert v.status == "ok", v
        (sb,) = [s for s in pool.backend.sandboxes() if s.key[0] == "weight"]
        (mine,) = [d for d in sb.cgroup.dirs.values() if d.parent == layout.cpu_parent]
        assert sb.agent_pid in {int(p) for p in (mine / "cgroup.procs").read_text().split()}
        if layout.version == 2:
            assert (layout.cpu_parent / "cpu.weight").read_text().split() == [str(config.cpu_weight)]
        else:
            assert (layout.cpu_parent / "cpu.shares").read_text().split() == [str(config.cpu_weight * 1024 // 100)]


@pytest.mark.parametrize("version, weight, name, written", [
    (2, 30, "cpu.weight", "30"), (2, 10000, "cpu.weight", "10000"),
    (1, 30, "cpu.shares", "307"), (1, 100, "cpu.shares", "1024"), (1, 1, "cpu.shares", "10"),
])
def test_the_weight_is_written_on_each_hierarchys_scale(tmp_path, version, weight, name, written):
    (tmp_path / name).write_text("0")
    assert cgroups.set_cpu_weight(cgroups.CgroupLayout(version, {}, tmp_path), weight)
    assert (tmp_path / name).read_text() == written
    assert not cgroups.set_cpu_weight(cgroups.CgroupLayout(version, {}, None), weight)


@pytest.mark.parametrize("bad", [0, -1, 10001])
def test_a_weight_out_of_range_is_refused_with_its_setting(bad, monkeypatch):
    monkeypatch.setenv("TEMPER_SANDBOX_CPU_WEIGHT", str(bad))
    with pytest.raises(ValueError, match=r"TEMPER_SANDBOX_CPU_WEIGHT\) must be 1-10000, not " + str(bad)):
        PoolConfig.from_env()


CONTEND = """
import json, os, resource, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # threads and processes started from now on inherit it
from workers.sandbox import Limits, PoolConfig, SandboxPool
from workers.sandbox.bwrap_pool import WarmBwrapBackend
SPIN = "import time\\nend = time.monotonic() + 2\\nwhile time.monotonic() < end:\\n    pass\\n"


def trainer_share(others):
    # a spinning thread of this process against others() on the same CPU: its share of the CPU
    stop, spent = threading.Event(), {}
    def trainer():
        t0 = time.thread_time()
        while not stop.is_set():
            pass
        spent["trainer"] = time.thread_time() - t0
    t = threading.Thread(target=trainer)
    t.start()
    theirs = others()
    stop.set()
    t.join()
    return spent["trainer"] / (spent["trainer"] + theirs)


def sessions():
    # four spinning processes, each in a session of its own as every sandbox job is
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True) for _ in range(4)]
    assert all(p.wait() == 0 for p in procs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


config = PoolConfig(global_limit=4, domain_limit=4, warm_per_domain=4)
pool = SandboxPool(WarmBwrapBackend(config), config)
limits = Limits(cpu_s=10, wall_s=30, memory_mb=256)
job = lambda program: pool.execute({"main.py": program}, ["python3", "main.py"], limits, domain="contend")
with ThreadPoolExecutor(4) as ex:
    assert all(v.status == "ok" for v in ex.map(job, ["pass"] * 4))  # four sandboxes started
    pool.backend.wait_idle(30)
    def sandboxes():
        verdicts = list(ex.map(job, [SPIN] * 4))
        assert all(v.status == "ok" and v.cpu_s > 0 for v in verdicts), verdicts
        return sum(v.cpu_s for v in verdicts)
    out = {"sessions": trainer_share(sessions), "sandboxes": trainer_share(sandboxes), "weighted": pool.backend.cpu_weighted}
pool.close()
print(json.dumps(out))
"""


def test_sandboxes_take_their_weights_share_of_a_contended_cpu():
    weighted_layout()
    # a session of its own, so that the test runner's other threads are not in the trainer's group
    out = subprocess.run([sys.executable, "-c", CONTEND], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    share = json.loads(out.stdout.strip().splitlines()[-1])
    assert share["weighted"], share
    # four processes in sessions of their own take about four fifths of the CPU from the
    # trainer's thread (each session an autogroup as heavy as the trainer's) ...
    assert share["sessions"] < 0.4, share
    # ... four sandbox jobs take their weight's share of it: the trainer keeps about 100 / (100 + w)
    assert share["sandboxes"] > 0.6, share
