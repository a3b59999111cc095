"""Verification jobs per second end to end through Celery and Redis, batched, trivial verifier.

Starts a real verify worker (prefork, 2 processes) on Redis, registers a domain whose cascade is a
single exact-match stage, then sends batches of verification jobs exactly as the run driver does
(``temper.verify.batch``) and gathers the results. Also measures the latency a batch gains by
going through the broker and a worker: the median over sequential batches of the round trip minus
the time the same batch takes to verify in process. Last line: one JSON object.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/dispatch.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        print(json.dumps({"error": "set REDIS_URL=redis://127.0.0.1:6379/0"}))
        return 2

    work = Path(tempfile.mkdtemp(prefix="temper-dispatch-"))
    env = {**os.environ, "TEMPER_VAR_DIR": str(work / "var"), "DATABASE_URL": f"sqlite:///{work / 'db.sqlite3'}",
           "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.services import domain_create

    spec = {"stages": [{"type": "exact", "timeout_s": 2.0}]}
    domain_create(actor=SYSTEM, data={"slug": "bench-trivial", "title": "Trivial", "kind": "math",
                                      "task_source": {"family": "bench"}, "verifier": spec})
    queue = f"verify-bench-{os.getpid()}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue, "-c", str(args.concurrency),
         "--prefetch-multiplier", "4", "--without-mingle", "--without-gossip", "-n", f"bench-{os.getpid()}@%h", "-l", "warning"],
        cwd=ROOT, env={**env, "CELERY_TASK_SOFT_TIME_LIMIT": "600"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        from celery import Celery

        app = Celery("bench", broker=redis_url, backend=redis_url)
        app.conf.update(result_expires=600, task_serializer="json", result_serializer="json")
        items = [{"completion": str(i % 10), "task": {"domain": "bench-trivial", "id": str(i), "prompt": "x",
                                                      "answer": str(i % 10), "level": 0, "meta": {}}}
                 for i in range(args.batch_size)]

        def send():
            return app.send_task("temper.verify.batch", args=("bench-trivial", 1, items), queue=queue)

        # Warm up: the worker is ready when it answers.
        threading.Thread(target=lambda: [None for _ in worker.stdout], daemon=True).start()
        send().get(timeout=120)

        # Latency added per batch: round trip minus verifying the same batch in process.
        from workers.verify import verify_items

        added = []
        for _ in range(args.latency_samples):
            t0 = time.perf_counter()
            verify_items(spec, items)
            local = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = send().get(timeout=120)
            remote = time.perf_counter() - t0
            assert len(result) == len(items) and all(r["outcome"] == "pass" for r in result)
            added.append(remote - local)

        # Throughput: every batch in flight at once, gathered.
        t0 = time.perf_counter()
        handles = [send() for _ in range(args.batches)]
        passed = 0
        for handle in handles:
            passed += sum(r["outcome"] == "pass" for r in handle.get(timeout=600))
        elapsed = time.perf_counter() - t0
        jobs = args.batches * args.batch_size
        out = {
            "jobs_per_s": round(jobs / elapsed, 1),
            "median_batch_latency_ms": round(statistics.median(added) * 1000, 2),
            "jobs": jobs, "passed": passed, "batch_size": args.batch_size, "worker_processes": args.concurrency,
            "wall_s": round(elapsed, 2),
        }
        print(json.dumps(out))
        return 0 if passed == jobs else 1
    finally:
        worker.terminate()
        worker.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
