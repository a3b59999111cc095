"""A run with 200,000 points per series across 100 domains: first chart render, and 50 live clients.

1. Loads a run with ``--steps`` points of ``reward/<domain>`` for each of ``--domains`` domains
   (20 million rows by default, with their min/max/last buckets) into PostgreSQL with COPY. The
   data is kept in the database ``temper_bench_big`` and reused by later runs of this script.
2. Opens the run page in Chromium ``--loads`` times and reads, inside the page, the time from
   navigation start to the first drawn reward chart (``TemperLive.firstDrawMs``: the server-drawn
   chart's first frame) and to plotly's (``plotly_draws_ms``): first_render_ms is the median of
   the first. Each load's breakdown (bench/_web.py) goes to stderr. Goal: within 1 s.
3. Connects ``--clients`` websocket clients (each logged in, each from the live cursor) and
   commits ``--updates`` further steps through the driver's write path; every client must receive
   every point of every update, once. updates_missed counts (client, update) pairs not received.

    .venv/bin/python bench/big_series.py     # last line: {"first_render_ms", "clients", "updates_missed", ...}
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import time

import numpy as np

from _web import BREAKDOWN_JS, PLOTLY_DRAWN_JS, breakdown_line, chromium, daphne, login, session_cookie, setup_django, user_with_team



def load(run, slugs: list[str], steps: int) -> None:
    """COPY the points and their buckets (computed here with numpy, as rollup() would)."""
    from django.db import connection

    from controlplane.runs.series import WIDTHS

    t0 = time.time() - steps * 0.5
    rng = np.random.default_rng(0)
    step = np.arange(steps, dtype=np.int64)
    times = t0 + step * 0.5
    iso = [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}+00" for t in times]
    with connection.cursor() as cursor:
        raw = cursor.connection
        for n, slug in enumerate(slugs):
            key = f"reward/{slug}"
            values = np.clip(np.cumsum(rng.normal(0, 0.01, steps)) + 0.2 + 0.6 * step / steps, 0, 1)
            buf = io.StringIO()
            for s, v, t in zip(step.tolist(), values.tolist(), iso):
                buf.write(f"{run.id}\t{s}\t{slug}\t{key}\t{v!r}\t{t}\n")
            with raw.cursor().copy("COPY runs_metricpoint (run_id, step, domain, key, value, time) FROM STDIN") as copy:
                copy.write(buf.getvalue())
            buf = io.StringIO()
            as_list = values.tolist()
            for width in WIDTHS:
                starts = np.arange(0, steps, width)
                vmin = np.minimum.reduceat(values, starts)
                vmax = np.maximum.reduceat(values, starts)
                last_idx = np.minimum(starts + width, steps) - 1
                for b, lo, hi, li in zip((starts // width).tolist(), vmin.tolist(), vmax.tolist(), last_idx.tolist()):
                    buf.write(f"{run.id}\t{key}\t{width}\t{b}\t{lo!r}\t{hi!r}\t{as_list[li]!r}\t{li}\t{iso[li]}\n")
            with raw.cursor().copy("COPY runs_metricbucket (run_id, key, width, bucket, vmin, vmax, vlast, last_step, last_time) FROM STDIN") as copy:
                copy.write(buf.getvalue())
            raw.commit()
            print(f"\rloaded {n + 1}/{len(slugs)} series of {steps:,} points", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_metricpoint")
        cursor.execute("ANALYZE runs_metricbucket")


def prepare(args):
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.models import Domain
    from controlplane.domains.services import domain_create
    from controlplane.runs.models import MetricPoint, Run, RunDomain

    user, team = user_with_team("bench", "bench-password-1")
    slugs = [f"big-d{i:03d}" for i in range(args.domains)]
    name = f"big-series-{args.domains}x{args.steps}"
    run = Run.objects.filter(name=name).first()
    if run is not None and MetricPoint.objects.filter(run=run, key=f"reward/{slugs[-1]}").count() >= args.steps:
        # Reuse the loaded data; forget what an earlier run of phase 3 appended.
        MetricPoint.objects.filter(run=run, step__gte=args.steps).delete()
        from controlplane.runs import series

        series.rewind(run, args.steps - 1)
        Run.objects.filter(pk=run.pk).update(state="running", driver="bench-writer", current_step=args.steps - 1)
        run.refresh_from_db()
        return run, slugs
    Run.objects.filter(name=name).delete()
    run = Run.objects.create(team=team, name=name, base_model="none", budget_steps=args.steps * 2, state="running",
                             driver="bench-writer", created_by=user, current_step=args.steps - 1)
    for slug in slugs:
        d = Domain.objects.filter(slug=slug).first() or domain_create(actor=SYSTEM, data={
            "slug": slug, "title": slug, "kind": "math", "task_source": {"family": "bench"},
            "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}})
        RunDomain.objects.create(run=run, domain=d, domain_version=d.versions.get(version=d.version), weight=1.0)
    t = time.perf_counter()
    load(run, slugs, args.steps)
    print(f"loaded in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return run, slugs


async def clients_phase(url: str, cookie: str, run, slugs: list[str], args) -> dict:
    import websockets

    from controlplane.runs import services as run_services
    from controlplane.runs.series import series_cursor

    cursor = await asyncio.to_thread(series_cursor, run=run)
    first_step = args.steps
    expected = {(first_step + u, f"reward/{s}") for u in range(args.updates) for s in slugs}
    received = [dict() for _ in range(args.clients)]  # (step, key) -> times received
    ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run.id}/"
    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}

    async def client(i: int, done: asyncio.Event):
        async with websockets.connect(ws_url, additional_headers=headers, max_size=2**24) as ws:
            await ws.send(json.dumps({"cursor": cursor}))
            ready.add(i)
            while not done.is_set():
                try:
                    message = json.loads(await asyncio.wait_for(ws.recv(), timeout=0.5))
                except asyncio.TimeoutError:
                    continue
                if message["type"] == "metrics":
                    for _, step, _, key, _, _ in message["points"]:
                        received[i][(step, key)] = received[i].get((step, key), 0) + 1
                if all(k in received[i] for k in expected):
                    return

    ready: set[int] = set()
    done = asyncio.Event()
    tasks = [asyncio.create_task(client(i, done)) for i in range(args.clients)]
    while len(ready) < args.clients:
        await asyncio.sleep(0.05)

    def write():
        from django.db import connection

        rng = np.random.default_rng(1)
        for u in range(args.updates):
            metrics = {f"reward/{s}": float(v) for s, v in zip(slugs, rng.random(len(slugs)))}
            run_services.run_record_step(run=run, worker="bench-writer", step=first_step + u, metrics=metrics, samples=[],
                                    verifier_versions={})
            time.sleep(args.interval)
        connection.close()

    t = time.perf_counter()
    await asyncio.to_thread(write)
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    except asyncio.TimeoutError:
        done.set()
    elapsed = time.perf_counter() - t
    missed = sum(1 for r in received for u in range(args.updates)
                 if not all((first_step + u, f"reward/{s}") in r for s in slugs))
    duplicates = sum(n - 1 for r in received for n in r.values() if n > 1)
    return {"updates_missed": missed, "duplicates": duplicates, "clients_phase_s": round(elapsed, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=100)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()

    env = setup_django("temper_bench_big", fresh=False)
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # set-up ORM calls run beside Playwright's loop
    run, slugs = prepare(args)
    from controlplane.runs.series import series as read_series

    t = time.perf_counter()
    view = read_series(run=run, keys=[f"reward/{s}" for s in slugs])
    series_ms = (time.perf_counter() - t) * 1000
    with daphne(env) as url:
        renders, breakdowns = [], []
        with chromium() as browser:
            page = login(browser, url, "bench", "bench-password-1")
            for _ in range(args.loads):
                page.goto(f"/runs/{run.id}/")
                page.wait_for_function("() => window.TemperLive && window.TemperLive.firstDrawMs !== undefined", timeout=60_000)
                renders.append(page.evaluate("() => window.TemperLive.firstDrawMs"))
                page.wait_for_function(PLOTLY_DRAWN_JS, timeout=60_000)
                breakdowns.append(page.evaluate(BREAKDOWN_JS))
                print(f"load {len(renders)}: {breakdown_line(breakdowns[-1])}", file=sys.stderr)
                points = int(page.get_attribute("#chart-reward", "data-points"))
        from django.contrib.auth import get_user_model

        cookie = session_cookie(get_user_model().objects.get(username="bench"))
        live = asyncio.run(clients_phase(url, cookie, run, slugs, args))
    result = {
        "first_render_ms": round(statistics.median(renders), 1),
        "renders_ms": [round(r, 1) for r in renders],
        "plotly_draws_ms": [b["plotly_draw"] for b in breakdowns],
        "points_per_series": args.steps, "domains": args.domains,
        "drawn_points_reward_chart": points, "bucket_width": view["width"], "series_query_ms": round(series_ms, 1),
        "clients": args.clients, "updates": args.updates, **live,
        "goal_first_render_ms": 1000,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
