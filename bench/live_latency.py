"""From a metric point committed by a worker to that point drawn in the run page, in the browser.

A writer commits training steps through the run driver's own write path
(``run_services.run_record_step``: bulk insert, bucket roll-up, a wake-up to the run's channel group on
commit) every ``--interval`` seconds, as a fast run would. Chromium has the run page open; the
page notes, for every point, the wall clock when the chart that shows it was redrawn
(``window.TemperLive.drawn``). Latency = drawn - committed, over every reward point of every
domain. Runs on PostgreSQL, Redis (channel layer) and daphne, as in production.

    .venv/bin/python bench/live_latency.py            # last line: {"p50_ms", "p95_ms", "points", ...}

For comparison: Determined polls metrics every 2 s, Aim every 10 s, TensorBoard every 30 s.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

from _web import chromium, daphne, login, percentile, setup_django, user_with_team


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--domains", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between committed steps")
    args = parser.parse_args()

    env = setup_django("temper_bench_live")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the set-up's ORM calls run beside Playwright's loop
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.services import domain_create
    from controlplane.runs import services as run_services
    from controlplane.runs.models import Run, RunDomain

    user, team = user_with_team("bench", "bench-password-1")
    slugs = [f"bench-d{i}" for i in range(args.domains)]
    run = Run.objects.create(team=team, name="live-latency", base_model="none", budget_steps=args.steps + 10,
                             state="running", driver="bench-writer", created_by=user)
    for slug in slugs:
        d = domain_create(actor=SYSTEM, data={"slug": slug, "title": slug, "kind": "math", "task_source": {"family": "bench"},
                                              "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}})
        RunDomain.objects.create(run=run, domain=d, domain_version=d.versions.get(), weight=1.0)

    rng = random.Random(0)
    committed: dict[tuple[str, int], float] = {}
    with daphne(env) as url, chromium() as browser:
        page = login(browser, url, "bench", "bench-password-1")
        page.goto(f"/runs/{run.id}/")
        page.wait_for_function("() => window.TemperLive && window.TemperLive.ready")
        page.wait_for_selector("[data-testid=live-state][data-state=live]")
        # The writer is its own thread, as a worker is its own process: its wake-ups must not run
        # inside the event loop Playwright keeps in this thread.
        def write():
            from django.db import connection

            for step in range(1, args.steps + 1):
                metrics = {f"reward/{s}": rng.random() for s in slugs}
                metrics |= {f"pass_rate/{s}": rng.random() for s in slugs}
                metrics |= {"perf/tokens_per_s": 1000 + rng.random(), "stage/step_s": args.interval}
                run_services.run_record_step(run=run, worker="bench-writer", step=step, metrics=metrics, samples=[],
                                        verifier_versions={})
                now_ms = time.time() * 1000
                for s in slugs:
                    committed[(f"reward/{s}", step)] = now_ms
                print(f"\rcommitted step {step}/{args.steps}", end="", file=sys.stderr, flush=True)
                time.sleep(args.interval)
            connection.close()

        writer = threading.Thread(target=write)
        writer.start()
        while writer.is_alive():
            page.wait_for_timeout(200)  # keeps Playwright's loop turning while the writer runs
        print(file=sys.stderr)
        expected = len(committed)
        try:
            page.wait_for_function(
                f"() => window.TemperLive.drawn.filter((d) => d.key.startsWith('reward/')).length >= {expected}", timeout=30_000)
        except Exception:
            print("not every point was drawn within 30 s of the last commit; page state:",
                  page.evaluate("() => ({drawn: window.TemperLive.drawn.length, points: document.getElementById('chart-reward').dataset.points,"
                                " live: document.getElementById('live-state').dataset.state, flash: document.getElementById('flash').textContent})"),
                  file=sys.stderr)
        drawn = page.evaluate("() => window.TemperLive.drawn.filter((d) => d.key.startsWith('reward/'))")

    latencies = [d["t"] - committed[(d["key"], d["step"])] for d in drawn if (d["key"], d["step"]) in committed]
    result = {
        "p50_ms": round(percentile(latencies, 0.5), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "max_ms": round(max(latencies), 1),
        "points": len(latencies),
        "missing": expected - len({(d["key"], d["step"]) for d in drawn}),
        "interval_s": args.interval,
        "goal_p95_ms": 300,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
