"""What the verification dispatch benchmarks share (bench/dispatch.py, bench/dispatch_mixed.py):
Django on a throwaway SQLite database, Redis (REDIS_URL) as broker and result backend, a Celery
client that sends verification batches, and verify workers of their own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup_django(prefix: str) -> tuple[str, dict]:
    """Django on a fresh SQLite database in a new temporary directory (``prefix...``), or on
    ``BENCH_DATABASE_URL`` (an empty PostgreSQL database of yours), migrated; returns REDIS_URL
    and the environment for worker processes. Without REDIS_URL it prints the
    JSON error line and exits with status 2."""
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        print(json.dumps({"error": "set REDIS_URL=redis://127.0.0.1:6379/0"}))
        raise SystemExit(2)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    env = {**os.environ, "TEMPER_VAR_DIR": str(work / "var"), "DATABASE_URL": os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{work / 'db.sqlite3'}",
           "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return redis_url, env


def celery_client(redis_url: str):
    """A Celery app that only sends tasks by name and reads their results (JSON both ways)."""
    from celery import Celery

    app = Celery("bench", broker=redis_url, backend=redis_url)
    app.conf.update(result_expires=600, task_serializer="json", result_serializer="json")
    return app


def verify_worker(env: dict, queue: str, processes: int, *, prefetch: int | None = None) -> subprocess.Popen:
    """A Celery worker named after ``queue`` serving it with ``processes`` processes (prefetch
    multiplier ``prefetch``, Celery's default when None); its output is read and dropped, so a
    full pipe never blocks it."""
    cmd = [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue, "-c", str(processes),
           "--without-mingle", "--without-gossip", "-n", f"{queue}@%h", "-l", "warning"]
    if prefetch is not None:
        cmd += ["--prefetch-multiplier", str(prefetch)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc
