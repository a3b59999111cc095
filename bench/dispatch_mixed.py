"""Short verifications behind long ones: their p95 latency with verification lanes on and off.

A workload of mostly short (a trivial code test: milliseconds in the sandbox) and some long (a
test that sleeps 2 s) verifications arrives at a steady random rate and goes through real Celery
workers on Redis and the real sandbox (``temper.verify.batch`` / ``temper.verify.batch_long`` with
two uploaded code domains), with the same two worker processes either way:

* lanes off: every verification on one queue served by one worker with 2 processes (the layout
  before lanes: compose's worker-verify, Celery's default prefetch);
* lanes on: the lane each domain is in comes from ``workers.lanes.Lanes`` fed with the measured
  verification times (seeded by a short warm-up, then updated with every result), short ones on a
  1-process worker, long ones on a 1-process worker with prefetch 1 (compose's worker-verify-long).

Latency is from sending to the result being read. Last line: one JSON object with the short tasks'
p50/p95 latency each way and ``ratio_p95`` (lanes on / off; the goal is at most 0.2).

    REDIS_URL=redis://127.0.0.1:6379/7 .venv/bin/python bench/dispatch_mixed.py
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from _dispatch import celery_client, setup_django, verify_worker  # (puts the repository on sys.path)
from controlplane.web.supervisor import stop_processes

SHORT, LONG = "bench-short", "bench-long"
ITEM = "def f():\n    return 1\n"
TESTS = {SHORT: "assert f() == 1", LONG: "import time\ntime.sleep(2)\nassert f() == 1"}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=240)
    parser.add_argument("--long-share", type=float, default=0.1)
    parser.add_argument("--rate", type=float, default=4.0, help="verifications per second arriving")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    redis_url, env = setup_django("temper-mixed-")
    from controlplane.accounts.models import Team
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.services import domain_upload_jsonl
    from trainer.tasks.base import Task
    from workers.lanes import LONG as LONG_LANE
    from workers.lanes import Lanes
    from workers.verify import task_to_dict

    team = Team.objects.create(slug="bench", name="Bench")
    for slug in (SHORT, LONG):
        lines = "\n".join(json.dumps({"prompt": f"task {i}", "tests": TESTS[slug]}) for i in range(4))
        domain_upload_jsonl(actor=SYSTEM, team=team, jsonl=lines, data={
            "slug": slug, "title": slug, "kind": "code", "verifier": {"stages": [{"type": "code_tests", "timeout_s": 10.0}]}})
    items = {slug: [{"completion": ITEM, "task": task_to_dict(Task(slug, "1", "p", answer=[TESTS[slug]]))}] for slug in (SHORT, LONG)}
    app = celery_client(redis_url)
    tag = f"{os.getpid()}"

    def send(slug: str, queue: str, task: str):
        return app.send_task(task, args=(slug, 1, items[slug]), queue=queue)

    rng = random.Random(args.seed)
    n_long = round(args.tasks * args.long_share)
    workload = [LONG] * n_long + [SHORT] * (args.tasks - n_long)
    rng.shuffle(workload)  # exactly the share asked for, in a random order
    gaps = [rng.expovariate(args.rate) for _ in range(args.tasks)]

    def run(mode: str) -> dict:
        q_short, q_long = f"bench-{tag}-{mode}-short", f"bench-{tag}-{mode}-long"
        procs = ([verify_worker(env, q_short, 2)] if mode == "off"
                 else [verify_worker(env, q_short, 1), verify_worker(env, q_long, 1, prefetch=1)])
        try:
            for queue in ([q_short] if mode == "off" else [q_short, q_long]):  # ready when each answers
                send(SHORT, queue, "temper.verify.batch").get(timeout=180)
            lanes = Lanes(long_s=1.0)
            if mode == "on":  # a warm-up measures each domain, as a run's first steps (or its history) would
                for slug in (SHORT, LONG):
                    lanes.observe({slug: [send(slug, q_short, "temper.verify.batch").get(timeout=60)[0]["details"]["verify_s"]
                                          for _ in range(8)]})
            latencies: dict[str, list[float]] = {SHORT: [], LONG: []}
            routed = {"short": 0, "long": 0}
            lock = threading.Lock()

            def wait(slug: str, handle, t0: float) -> None:
                result = handle.get(timeout=900)[0]
                done = time.monotonic()
                with lock:
                    latencies[slug].append(done - t0)
                    if mode == "on":
                        lanes.observe({slug: [result["details"].get("verify_s", 0.0)]})

            t_start = time.monotonic()
            with ThreadPoolExecutor(max_workers=64) as pool:
                next_at = time.monotonic()
                for slug, gap in zip(workload, gaps):
                    next_at += gap
                    time.sleep(max(0.0, next_at - time.monotonic()))
                    long_lane = mode == "on" and lanes.lane(slug) == LONG_LANE
                    routed["long" if long_lane else "short"] += 1
                    t0 = time.monotonic()
                    handle = send(slug, q_long, "temper.verify.batch_long") if long_lane else send(slug, q_short, "temper.verify.batch")
                    pool.submit(wait, slug, handle, t0)
            wall = time.monotonic() - t_start
            short = latencies[SHORT]
            return {"short_p50_ms": round(pct(short, 0.5) * 1000, 1), "short_p95_ms": round(pct(short, 0.95) * 1000, 1),
                    "long_p50_ms": round(pct(latencies[LONG], 0.5) * 1000, 1) if latencies[LONG] else None,
                    "short": len(short), "long": len(latencies[LONG]), "routed": routed, "wall_s": round(wall, 1)}
        finally:
            stop_processes(procs)

    off = run("off")
    on = run("on")
    out = {"lanes_off": off, "lanes_on": on, "ratio_p95": round(on["short_p95_ms"] / off["short_p95_ms"], 3),
           "tasks": args.tasks, "long_share": args.long_share, "rate_per_s": args.rate, "worker_processes": 2,
           "goal_ratio_p95": 0.2}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
