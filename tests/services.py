"""What the test suite needs from the machine, and how a missing service is reported.

Locally a test whose service is missing is skipped with the reason; with TEMPER_REQUIRE_SERVICES=1
(CI) it fails instead, so CI never passes by skipping.
"""
from __future__ import annotations

import contextlib
import os
import socket
from urllib.parse import urlparse

import pytest

from controlplane.web.supervisor import stop_processes


def services_required() -> bool:
    return os.environ.get("TEMPER_REQUIRE_SERVICES", "") == "1"


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if services_required():
        pytest.fail(f"required service missing (TEMPER_REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason)


def port_open(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def require_java() -> None:
    """Java for the text games' engine (TextWorldExpress)."""
    import shutil

    require(shutil.which("java") is not None, "Java for the text games: apt-get install default-jre-headless")


def require_sandbox_libs() -> None:
    """The packages sandboxed CAD scripts import (numpy, manifold3d) and bubblewrap to run them."""
    from workers.sandbox import bwrap
    from workers.sandbox.libs import installed

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the sandbox")
    require(installed(), "the sandbox's packages: python -m workers.sandbox.libs install (requirements/sandbox.txt)")


def require_postgres() -> None:
    from django.db import connection

    require(connection.vendor == "postgresql", "PostgreSQL: set DATABASE_URL=postgresql://... (the suite is on " + connection.vendor + ")")


def require_redis() -> str:
    url = os.environ.get("REDIS_URL", "")
    require(bool(url) and port_open(url, 6379), "Redis: set REDIS_URL=redis://127.0.0.1:6379/0 with a server running")
    return url


def worker_env(db_settings: dict, redis_url: str, **extra: str) -> dict:
    """The environment of a worker process pointed at the test database and Redis."""
    db = db_settings
    return {**os.environ, "REDIS_URL": redis_url, **extra,
            "DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}


def start_celery_worker(env: dict, name: str, queues: str, *, concurrency: int = 1, log_path=None, on_line=None,
                        pool: str | None = None, app: str = "workers.celery"):
    """A real Celery worker, returned once it says it is ready (``start_celery_process``)."""
    import sys

    cmd = [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", queues, "-c", str(concurrency),
           "-n", f"{name}-{os.getpid()}@%h", "--without-mingle", "--without-gossip", "-l", "info"]
    if pool:
        cmd += ["--pool", pool]
    return start_celery_process(cmd, env, name, log_path=log_path, on_line=on_line)


def start_celery_process(cmd: list[str], env: dict, name: str, *, log_path=None, on_line=None):
    """A Celery worker started from its command line, returned once it says it is ready. Its
    output keeps being read (to ``log_path`` if given, each line passed to ``on_line``) so a full
    pipe never blocks it. It runs in its own session so a test can SIGKILL the worker and its pool
    children together."""
    import subprocess
    import threading
    from pathlib import Path

    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    lines = []
    for raw in proc.stdout:
        lines.append(raw.decode(errors="replace"))
        if " ready." in lines[-1]:
            break
    else:
        raise AssertionError(f"celery worker {name} exited: " + "".join(lines)[-3000:])
    log = open(log_path, "wb") if log_path else None

    def pump():
        for line in proc.stdout:
            if log:
                log.write(line)
                log.flush()
            if on_line:
                on_line(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc


@contextlib.contextmanager
def celery_workers(tmp_path, workers: dict[str, str], *, prefix: str = "", concurrency: int = 1, **env: str):
    """Real Celery workers on the test database and Redis, one per ``name: queues`` item, with
    ``TEMPER_VAR_DIR`` and each worker's log (``<name>.log``) under ``tmp_path``; the block gets
    ``tmp_path`` and the workers are stopped when it ends. Needs PostgreSQL (the caller checks
    first) and Redis."""
    from django.db import connection

    env = worker_env(connection.settings_dict, require_redis(), TEMPER_VAR_DIR=str(tmp_path / "var"), **env)
    procs = [start_celery_worker(env, f"{prefix}{name}", queues, concurrency=concurrency, log_path=tmp_path / f"{name}.log")
             for name, queues in workers.items()]
    try:
        yield tmp_path
    finally:
        stop_processes(procs)


@contextlib.contextmanager
def celery_worker(env: dict, name: str, queues: str, **kw):
    """A real Celery worker (``start_celery_worker``) for the block; stopped when it ends."""
    proc = start_celery_worker(env, name, queues, **kw)
    try:
        yield proc
    finally:
        stop_processes([proc])


def wait_for(predicate, timeout: float, what: str, *, logs=(), every: float = 0.5):
    """Poll a condition the system under test makes true (a run reaching a state) every ``every``
    s; its value.

    The poll period is not a stand-in for synchronisation: the test waits for the state itself,
    with ``timeout`` only as a bound that says what never happened. The failure then shows the
    end of each of ``logs`` (the workers' log files)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    tails = "".join(f"\n{path.name}:\n{path.read_text()[-4000:]}" for path in logs)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{tails}")
