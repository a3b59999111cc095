"""Admission control, refusal and retries of SandboxPool (with a scripted backend), and
infrastructure failures of the real backends coming back as sandbox_error."""
from __future__ import annotations

import gc
import os
import threading

import pytest

from sandbox_helpers import docker_ready, require
from workers.sandbox import Limits, PoolConfig, SandboxError, SandboxPool, Verdict, execute
from workers.sandbox.outcome import check_files


class ScriptedBackend:
    """Backend whose runs block on an event and whose first `fail_runs` runs are infra failures."""

    name = "scripted"

    def __init__(self, fail_runs: int = 0, gate: threading.Event | None = None):
        self.fail_runs = fail_runs
        self.gate = gate
        self.slots_used: list[int] = []
        self.retired: list[int] = []
        self.started = threading.Semaphore(0)
        self._n = 0
        self._lock = threading.Lock()

    def acquire(self, domain, limits):
        with self._lock:
            self._n += 1
            return self._n

    def run(self, slot, files, command, limits, stdin, *, outputs=None):
        self.slots_used.append(slot)
        self.started.release()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_runs > 0:
            self.fail_runs -= 1
            raise SandboxError("engine went away")
        return Verdict(status="ok", exit_code=0, backend=self.name)

    def release(self, slot, verdict):
        if verdict is None:
            self.retired.append(slot)

    def close(self):
        pass


def test_infrastructure_failure_is_retried_on_another_slot():
    backend = ScriptedBackend(fail_runs=2)
    pool = SandboxPool(backend, PoolConfig(retries=2))
    v = pool.execute({"a.py": "pass"}, ["python3", "a.py"])
    assert v.status == "ok"
    assert backend.slots_used == [1, 2, 3] and backend.retired == [1, 2]


def test_infrastructure_failure_after_retries_is_sandbox_error():
    pool = SandboxPool(ScriptedBackend(fail_runs=5), PoolConfig(retries=1))
    v = pool.execute({"a.py": "pass"}, ["python3", "a.py"])
    assert v.status == "sandbox_error" and "engine went away" in v.error


def test_full_domain_and_full_queue_is_refused_fast():
    gate = threading.Event()
    backend = ScriptedBackend(gate=gate)
    pool = SandboxPool(backend, PoolConfig(global_limit=4, domain_limit=1, queue_size=1, queue_timeout_s=30))
    results: list[Verdict] = []
    running = threading.Thread(target=lambda: results.append(pool.execute({}, ["x"], domain="d")))
    running.start()
    assert backend.started.acquire(timeout=10)
    queued = threading.Thread(target=lambda: results.append(pool.execute({}, ["x"], domain="d")))
    queued.start()
    while pool.stats()["waiting"] < 1:  # the second caller is now queued
        threading.Event().wait(0.01)
    refused = pool.execute({}, ["x"], domain="d")
    assert refused.status == "sandbox_error" and "queue is full" in refused.error
    other = threading.Thread(target=lambda: results.append(pool.execute({}, ["x"], domain="other")))
    other.start()  # another domain is not blocked by d's limit
    assert backend.started.acquire(timeout=10)
    gate.set()
    for t in (running, queued, other):
        t.join(10)
    assert [v.status for v in results] == ["ok", "ok", "ok"]


def test_queue_timeout_refuses_with_clear_error():
    gate = threading.Event()
    backend = ScriptedBackend(gate=gate)
    pool = SandboxPool(backend, PoolConfig(global_limit=1, domain_limit=1, queue_size=5, queue_timeout_s=0.2))
    t = threading.Thread(target=lambda: pool.execute({}, ["x"]))
    t.start()
    assert backend.started.acquire(timeout=10)
    v = pool.execute({}, ["x"])
    gate.set()
    t.join(10)
    assert v.status == "sandbox_error" and "waited" in v.error


def test_bad_files_are_refused_with_the_name():
    for bad in ("/etc/passwd", "../x", "a//b", ""):
        with pytest.raises(ValueError, match="file name"):
            check_files({bad: "x"})
    with pytest.raises(ValueError, match="command"):
        execute({"a.py": "pass"}, [], backend="bwrap")


def test_limits_validate():
    with pytest.raises(ValueError, match="Limits.cpu_s"):
        Limits(cpu_s=0)


def test_missing_image_is_sandbox_error_not_a_wrong_answer():
    ok, reason = docker_ready()
    require(ok, reason)
    from workers.sandbox.docker_backend import DockerBackend

    with pytest.raises(SandboxError, match="missing"):
        DockerBackend(PoolConfig(), image="temper-sandbox:does-not-exist", reap_on_start=False)


def test_unreachable_engine_is_sandbox_error(monkeypatch):
    from workers import sandbox

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    saved = sandbox._runtimes.pop("docker", None)
    try:
        v = execute({"a.py": "pass"}, ["python3", "a.py"], backend="docker")
    finally:
        sandbox._runtimes.pop("docker", None)
        if saved is not None:
            sandbox._runtimes["docker"] = saved
    assert v.status == "sandbox_error" and "unreachable" in v.error


def test_a_verdict_is_never_retried():
    """Whatever the backend returns is the job's outcome; only a SandboxError (the job did not
    reach the sandbox) is retried."""

    class Broken(ScriptedBackend):
        def run(self, slot, files, command, limits, stdin, *, outputs=None):
            self.slots_used.append(slot)
            return Verdict(status="runtime_error", error="the job broke its sandbox", backend=self.name)

    backend = Broken()
    v = SandboxPool(backend, PoolConfig(retries=2)).execute({"a.py": "pass"}, ["python3", "a.py"])
    assert v.status == "runtime_error" and backend.slots_used == [1]


@pytest.mark.parametrize("name", ["bwrap", "bwrap-cold", "docker"])
def test_closing_a_pool_releases_its_file_descriptors(name):
    from sandbox_helpers import make_backend, ready

    ok, reason = ready(name)
    require(ok, reason)
    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=2)

    def cycle() -> int:
        pool = SandboxPool(make_backend(name, config), config)
        v = pool.execute({"a.py": "print(1)"}, ["python3", "a.py"], Limits(), domain="fds")
        assert v.status == "ok", v
        pool.backend.wait_idle(60)
        pool.close()
        gc.collect()  # earlier tests' garbage (a Docker client's socket) is freed before the count, not during it
        return len(os.listdir("/proc/self/fd"))

    first = cycle()
    assert [cycle() for _ in range(3)] == [first] * 3
