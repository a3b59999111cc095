"""Verification jobs per second end to end through Celery and Redis, batched, trivial verifier.

Starts a real verify worker (prefork, 2 processes) on Redis, registers a domain whose cascade is a
single exact-match stage, then sends batches of verification jobs exactly as the run driver does
(``temper.verify.batch``, with the pinned spec's digest) and gathers the results. Reports the
CPU time per job of each part: the producer (this process), the broker (Redis) and the worker
(its main and pool processes and their verifier processes); ``BENCH_DATABASE_URL`` puts the
control plane on a PostgreSQL database instead of a throwaway SQLite file. Also measures the latency a batch gains by
going through the broker and a worker: the median over sequential batches of the round trip minus
the time the same batch takes to verify in process. Last line: one JSON object.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/dispatch.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _dispatch import celery_client, setup_django, verify_worker  # (puts the repository on sys.path)
from controlplane.web.supervisor import stop_processes


def cpu_seconds(worker_pid: int, app) -> dict[str, float]:
    """CPU seconds used so far by each part of the path: this process (the producer: sending and
    gathering), the broker (Redis's own ``used_cpu_user`` + ``used_cpu_sys``) and the worker (its
    main process and its pool processes)."""
    import psutil  # lazy: only the bench needs it

    own = os.times()
    info = app.connection_for_write().default_channel.client.info("cpu")
    proc = psutil.Process(worker_pid)
    worker = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            worker += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return {"producer": own.user + own.system, "broker": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            "worker": worker}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    redis_url, env = setup_django("temper-dispatch-")
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.services import domain_create

    spec = {"stages": [{"type": "exact", "timeout_s": 2.0}]}
    domain_create(actor=SYSTEM, data={"slug": "bench-trivial", "title": "Trivial", "kind": "math",
                                      "task_source": {"family": "bench"}, "verifier": spec})
    queue = f"verify-bench-{os.getpid()}"
    worker = verify_worker({**env, "CELERY_TASK_SOFT_TIME_LIMIT": "600"}, queue, args.concurrency, prefetch=4)
    try:
        app = celery_client(redis_url)
        items = [{"completion": str(i % 10), "task": {"domain": "bench-trivial", "id": str(i), "prompt": "x",
                                                      "answer": str(i % 10), "level": 0, "meta": {}}}
                 for i in range(args.batch_size)]

        from trainer.verifiers.cascade import spec_digest

        digest = spec_digest(spec)  # the driver sends the pinned spec's digest with each batch

        def send():
            return app.send_task("temper.verify.batch", args=("bench-trivial", 1, items, digest), queue=queue)

        send().get(timeout=120)  # warm-up: the worker is ready when it answers

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

        # Throughput: every batch in flight at once, gathered; CPU time of each part over it.
        cpu0 = cpu_seconds(worker.pid, app)
        t0 = time.perf_counter()
        handles = [send() for _ in range(args.batches)]
        passed = 0
        for handle in handles:
            passed += sum(r["outcome"] == "pass" for r in handle.get(timeout=600))
        elapsed = time.perf_counter() - t0
        jobs = args.batches * args.batch_size
        cpu1 = cpu_seconds(worker.pid, app)
        cpu_ms = {part: round((cpu1[part] - cpu0[part]) * 1000 / jobs, 4) for part in cpu0}
        out = {
            "jobs_per_s": round(jobs / elapsed, 1),
            "median_batch_latency_ms": round(statistics.median(added) * 1000, 2),
            "jobs": jobs, "passed": passed, "batch_size": args.batch_size, "worker_processes": args.concurrency,
            "wall_s": round(elapsed, 2), "cpu_ms_per_job": cpu_ms,
            "cpu_ms_per_job_total": round(sum(cpu_ms.values()), 4),
        }
        print(json.dumps(out))
        return 0 if passed == jobs else 1
    finally:
        stop_processes([worker])


if __name__ == "__main__":
    sys.exit(main())
