"""Temper's sandbox runtime: run untrusted code under limits and get a Verdict back.

    from workers.sandbox import execute, Limits, python_test_job
    files, command = python_test_job("def add(a, b): return a + b", ["assert add(1, 2) == 3"])
    verdict = execute(files, command, Limits(cpu_s=2, wall_s=5))
    verdict.status, [t.passed for t in verdict.tests]

Backends: `bwrap` (warm bubblewrap sandboxes per domain), `bwrap-cold` (a fresh bubblewrap
sandbox per execution) and `docker` (pre-warmed containers per domain); every one runs the
Temper agent (agent.py) as the sandbox's pid 1. Chosen by the `backend` argument, else
TEMPER_SANDBOX_BACKEND, else bwrap when bubblewrap is installed. Never imports Django.
"""
from __future__ import annotations

import os
import threading

from trainer.verifiers.stages import SANDBOX_BACKENDS

from . import bwrap, cgroups
from .bwrap_backend import BwrapBackend
from .bwrap_pool import WarmBwrapBackend
from .docker_backend import DockerBackend, reap_containers
from .figures import process_pool_figures, read_pool_figures, write_pool_figures
from .outcome import check_command, check_files
from .pool import PoolConfig, SandboxPool
from .session import SessionEnded, ShellSession, start_session
from .testjob import parse_tests, python_test_job
from .types import STATUSES, Artifact, Limits, Outputs, SandboxBusy, SandboxError, TestResult, Verdict
from trainer.verifiers.limits import SessionLimits

__all__ = [
    "execute", "Limits", "Outputs", "Artifact", "Verdict", "TestResult", "STATUSES", "SandboxError", "SandboxBusy",
    "SandboxPool", "PoolConfig", "get_runtime", "close_runtimes", "reap", "python_test_job",
    "default_backend", "open_session", "ShellSession", "SessionEnded", "SessionLimits",
    "pool_figures", "read_pool_figures", "write_pool_figures", "execute_group", "group_limit",
]

_runtimes: dict[str, SandboxPool] = {}
_lock = threading.Lock()


def default_backend() -> str:
    """TEMPER_SANDBOX_BACKEND, else bwrap when bubblewrap is installed, else docker."""
    name = os.environ.get("TEMPER_SANDBOX_BACKEND", "").strip().lower()
    if name:
        if name not in ("bwrap", "bwrap-cold", "docker"):
            raise ValueError(f"TEMPER_SANDBOX_BACKEND={name!r}: expected bwrap, bwrap-cold or docker")
        return name
    return "bwrap" if bwrap.available() else "docker"


def _make_backend(name: str, config: PoolConfig):
    if name not in SANDBOX_BACKENDS:  # the names a domain's code_tests stage may give (checked when it is saved)
        raise ValueError(f"unknown sandbox backend {name!r}: expected {', '.join(SANDBOX_BACKENDS)}")
    if name == "bwrap" and config.bwrap_warm:
        return WarmBwrapBackend(config)
    if name in ("bwrap", "bwrap-cold"):
        return BwrapBackend(config)
    if name == "docker":
        return DockerBackend(config)
    raise ValueError(f"unknown sandbox backend {name!r}: expected bwrap, bwrap-cold or docker")


def get_runtime(backend: str | None = None, config: PoolConfig | None = None) -> SandboxPool:
    """The process-wide pool for a backend, created on first use (config from the environment).

    The docker backend's first creation runs the reaper, as a worker start should.
    """
    name = backend or default_backend()
    with _lock:
        pool = _runtimes.get(name)
        if pool is None:
            pool = SandboxPool(_make_backend(name, config or PoolConfig.from_env()), config or PoolConfig.from_env())
            _runtimes[name] = pool
        return pool


def pool_figures() -> dict[str, dict]:
    """Per domain, the figures of this process's pools (size, idle, target, waits p50/p99,
    creations per second; figures.merge over the backends); empty when no sandbox ran here."""
    with _lock:
        pools = list(_runtimes.values())
    return process_pool_figures(pools)


def close_runtimes() -> None:
    """Close every pool this process created (removes their containers)."""
    with _lock:
        pools = list(_runtimes.values())
        _runtimes.clear()
    for pool in pools:
        pool.close()


def execute(
    files: dict[str, str | bytes],
    command: list[str],
    limits: Limits | None = None,
    stdin: bytes | None = None,
    *,
    backend: str | None = None,
    domain: str = "default",
    outputs: Outputs | None = None,
) -> Verdict:
    """Run `command` in a fresh work dir holding `files`; never raises for infrastructure
    failures (those come back as status sandbox_error). Bad arguments raise ValueError/TypeError.
    ``outputs``: files of the work dir the job hands back, as the verdict's ``artifacts``
    (agent_outputs.py: regular files only, within their bounds, read inside the sandbox).
    """
    check_files(files)
    check_command(command)
    if stdin is not None and not isinstance(stdin, (bytes, bytearray)):
        raise TypeError(f"stdin must be bytes or None, got {type(stdin).__name__}")
    try:
        pool = get_runtime(backend)
    except SandboxError as e:
        return Verdict(status="sandbox_error", error=str(e), backend=backend or "")
    verdict = pool.execute(files, command, limits, stdin, domain=domain, outputs=outputs)
    if verdict.status != "sandbox_error":
        verdict.tests = parse_tests(files, verdict.stdout)
    return verdict


def group_limit(backend: str | None = None) -> int:
    """The most jobs :func:`execute_group` takes at once on a backend's pool (its domain and
    global execution limits); 0 when the backend cannot start."""
    try:
        config = get_runtime(backend).config
    except SandboxError:
        return 0
    return min(config.domain_limit, config.global_limit)


def execute_group(jobs: list[tuple[dict[str, str | bytes], list[str]]], limits: Limits | None = None, *,
                  backend: str | None = None, domain: str = "default", outputs: Outputs | None = None) -> list[Verdict]:
    """Run a group's jobs (``[(files, command)]``: the G completions of one task) at once, each in
    its own sandbox of ``domain``, their places and sandboxes taken in one allocation
    (SandboxPool.execute_group); verdicts in the jobs' order, as :func:`execute` gives them (each
    job hands back ``outputs``). A group of more than :func:`group_limit` jobs raises ValueError."""
    try:
        pool = get_runtime(backend)
    except SandboxError as e:
        return [Verdict(status="sandbox_error", error=str(e), backend=backend or "") for _ in jobs]
    verdicts = pool.execute_group(jobs, limits, domain=domain, outputs=outputs)
    for (files, _command), verdict in zip(jobs, verdicts):
        if verdict.status != "sandbox_error":
            verdict.tests = parse_tests(files, verdict.stdout)
    return verdicts


def open_session(files: dict[str, str | bytes] | None = None, *, limits: SessionLimits | None = None,
                 setup: str = "", backend: str | None = None, domain: str = "shell") -> ShellSession:
    """A shell session (:mod:`workers.sandbox.session`) in a sandbox of the backend's pool, held
    until its ``close()``: ``files`` written into /work, then ``setup`` run there. Raises
    SandboxError when no sandbox could be held or the setup failed."""
    if files is not None:
        check_files(files)
    return start_session(get_runtime(backend), files, limits=limits, setup=setup, domain=domain)


def reap(*, all_workers: bool = False, docker_client=None) -> dict[str, int]:
    """Remove what dead workers left: execution cgroups, and containers whose lease expired
    (or, with all_workers, every Temper sandbox container). Safe to run at any time."""
    result = {"cgroups": cgroups.reap_cgroups(), "containers": 0}
    try:
        result["containers"] = reap_containers(all_workers=all_workers, client=docker_client)
    except SandboxError:
        pass
    return result
