"""Helpers shared by the sandbox tests (no fixtures here; see conftest.py)."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest  # noqa: F401

from workers.sandbox import Limits, SandboxPool
from workers.sandbox.bwrap_backend import SLOT_UID_BASE
from workers.sandbox.bwrap_pool import MAX_SLOTS, WARM_UID_BASE
from workers.sandbox.docker_backend import JOB_UID_BASE

REQUIRE = os.environ.get("TEMPER_REQUIRE_SERVICES") == "1"


def require(cond: bool, reason: str) -> None:
    """Skip when `cond` is false, but fail under TEMPER_REQUIRE_SERVICES=1 (CI)."""
    if not cond:
        if REQUIRE:
            pytest.fail(f"required service missing: {reason}")
        pytest.skip(reason)


def docker_ready() -> tuple[bool, str]:
    """(ok, reason) for the Docker engine and the sandbox image."""
    client = None
    try:
        import docker

        from workers.sandbox.image import IMAGE

        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(IMAGE)
        return True, ""
    except Exception as e:  # engine down, image missing, SDK missing
        return False, f"Docker engine or sandbox image unavailable: {e}"
    finally:  # its socket closes now, not at a garbage collection inside a later test's fd count
        if client is not None:
            client.close()


def ready(name: str) -> tuple[bool, str]:
    """(ok, reason) for a backend name (bwrap, bwrap-cold, docker)."""
    return docker_ready() if name == "docker" else bwrap_ready()


def bwrap_ready() -> tuple[bool, str]:
    return (shutil.which("bwrap") is not None, "bubblewrap is not installed")


def make_backend(name: str, config):
    """A new backend object of that name (bwrap: warm, bwrap-cold, docker) with `config`."""
    from workers.sandbox.bwrap_backend import BwrapBackend
    from workers.sandbox.bwrap_pool import WarmBwrapBackend
    from workers.sandbox.docker_backend import DockerBackend

    return {"bwrap": WarmBwrapBackend, "bwrap-cold": BwrapBackend, "docker": DockerBackend}[name](config)


def run_in(pool, program: str, limits: "Limits | None" = None, domain: str = "t", stdin: bytes | None = None):
    """Run a Python program as a job of `pool` and wait until the sandbox's reset is done, so
    that the next job of the domain finds it idle again (or its replacement started)."""
    v = pool.execute({"main.py": program}, ["python3", "main.py"], limits or SMALL, stdin, domain=domain)
    pool.backend.wait_idle(60)
    return v


def counts(pool) -> tuple[int, int]:
    """(sandboxes started, sandboxes retired) by the pool's backend so far."""
    return pool.backend.started, pool.backend.retired


SMALL = Limits(cpu_s=2, wall_s=4, memory_mb=256, pids=48, output_bytes=256 << 10, tmpfs_mb=32)
"""Limits used by the hostile suite: small enough to hit quickly."""

CPU_BOUND = Limits(cpu_s=1, wall_s=120, memory_mb=128, pids=32)
"""Limits for a job that must end on its CPU limit: the wall limit is far above it because a
loaded CI machine once gave a busy loop only 0.7 s of CPU in 10 s of wall time. A busy loop still
ends after about 1 s of CPU; only a starved one waits longer."""


def _live_agents() -> set[int]:
    """Pids of the agents (container pid 1, warm bwrap sandbox pid 1 and its bwrap) of this
    process's pools: they belong there."""
    from workers import sandbox

    pids: set[int] = set()
    for pool in list(sandbox._runtimes.values()) + list(EXTRA_POOLS):
        if hasattr(pool.backend, "agent_pids"):
            pids |= pool.backend.agent_pids()
    return pids


def live_pool_cgroups() -> set[Path]:
    """Cgroup directories held by live warm bwrap sandboxes of this process's pools."""
    from workers import sandbox

    dirs: set[Path] = set()
    for pool in list(sandbox._runtimes.values()) + list(EXTRA_POOLS):
        if hasattr(pool.backend, "cgroup_dirs"):
            dirs |= pool.backend.cgroup_dirs()
    return dirs


EXTRA_POOLS: list = []
"""Pools tests create outside get_runtime (their sandboxes are expected to be alive)."""


@contextlib.contextmanager
def own_pool(backend, config, *, idle_s: float = 60):
    """A pool of the test's own on ``backend`` (in EXTRA_POOLS while it is open); on the way out
    the backend finishes its background resets and the pool is closed."""
    pool = SandboxPool(backend, config)
    EXTRA_POOLS.append(pool)
    try:
        yield pool
    finally:
        pool.backend.wait_idle(idle_s)
        EXTRA_POOLS.remove(pool)
        pool.close()


def own_uid(uid: int) -> bool:
    """True for a sandbox uid of this process's blocks (other test runs on the machine have theirs)."""
    n = os.getpid() % 1000
    return any(base + n * size <= uid < base + (n + 1) * size for base, size in
               ((SLOT_UID_BASE, MAX_SLOTS), (WARM_UID_BASE, MAX_SLOTS), (JOB_UID_BASE, 1000)))


def own_cgroup(d: Path) -> bool:
    """True for an execution cgroup this process created (named `<pid>-<n>`)."""
    return d.name.startswith(f"{os.getpid()}-")


def sandbox_uids(own_only: bool = False) -> dict[int, list[str]]:
    """Host processes running as a sandbox uid (bwrap slots or docker job uids; with `own_only`
    only this process's) -> cmdlines, except the agents of live pool sandboxes."""
    found: dict[int, list[str]] = {}
    agents = _live_agents()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in agents:
            continue
        try:
            uid_line = next(l for l in (d / "status").read_text().splitlines() if l.startswith("Uid:"))
            uid = int(uid_line.split()[1])
            if own_only and not own_uid(uid):
                continue
            if SLOT_UID_BASE <= uid < WARM_UID_BASE + 100_000 or JOB_UID_BASE <= uid < JOB_UID_BASE + 1_000_000:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.setdefault(uid, []).append(f"{d.name}: {cmd}")
        except (OSError, StopIteration):
            continue
    return found


def daemon_program(token: str, daemon: str, *, close_fds: bool = False, settle_s: float = 0.2,
                   done: str = "parent done") -> str:
    """A job that leaves a daemon behind: it forks, the child starts a session of its own and forks
    again, and the grandchild (with stdin, stdout and stderr closed when ``close_fds``) becomes
    ``python -c <daemon> <token>`` (``token`` in its command line, to find it by). The job itself
    prints ``done`` after ``settle_s`` s."""
    return (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        + ("        os.closerange(0, 3)\n" if close_fds else "")
        + f"        os.execv(sys.executable, [sys.executable, '-c', {daemon!r}, {token!r}])\n"
        "    os._exit(0)\n"
        f"time.sleep({settle_s})\n"
        f"print({done!r})\n"
    )


def wait_no_sandbox_processes(match: str = "", timeout_s: float = 15.0) -> dict[int, list[str]]:
    """Poll until no sandbox process whose cmdline contains `match` (any test run's), or without
    `match` no sandbox process of this test run, exists; returns what is left.

    Killed processes vanish asynchronously (the kernel reaps them after SIGKILL), so the check
    waits for the condition instead of looking once.
    """
    import time

    end = time.monotonic() + timeout_s
    while True:
        left = {u: [p for p in ps if match in p] for u, ps in sandbox_uids(own_only=not match).items()}
        left = {u: ps for u, ps in left.items() if ps}
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)
