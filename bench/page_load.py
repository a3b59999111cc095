"""The run page's time to its first chart with 300 steps while a run trains, and review's
next-item latency, in Chromium.

Production topology on one host (bench/_web.py): PostgreSQL, Redis as the channel layer, daphne.
A run with three domains has ``--steps`` steps committed through the driver's own write path
(metrics, and ``--samples`` trajectories a step). While the page is measured the run goes on
training: a writer commits a step every ``--interval`` seconds, and one torch training process
per core (a small transformer's forward, backward and optimiser step, one thread each) keeps the
CPUs as busy as the demo's trainer does.

- run page: time to first chart is ``window.TemperLive.firstDrawMs`` (navigation start to the
  first frame with a reward chart drawn with points: the server-drawn chart where the run has
  points; plotly's own is ``plotlyDrawMs``; docs/browser.md, "Measured"), in three cases: a fresh browser (empty cache) that opens the
  run's URL directly (``--cold`` times: it downloads and compiles plotly.js on the spot); a fresh
  browser that signs in, sees the runs list and clicks the run; the same browser coming back
  (``--loads`` times: plotly.js is then compiled from the browser's code cache).
- ``--bundle full`` serves the plotly package's full plotly.js (4.8 MB) instead of the basic bundle
  ``make install`` fetches (1.1 MB; controlplane/web/vendor.py): the baseline of the first visits.
- review: a reviewer labels ``--labels`` items of a judged queue with the keyboard; the page notes
  the time from each key to the next item shown (``window.TemperReview.shows``).

Each visit's breakdown (HTML, series request, plotly.js downloaded and evaluated, first paint,
plotly's chart) goes to stderr, and with ``--breakdown FILE`` to a JSON file.

    .venv/bin/python bench/page_load.py     # last line: JSON with run_page_* and review_next_* figures
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import threading

from _web import BREAKDOWN_JS, PLOTLY_DRAWN_JS, breakdown_line, chromium, daphne, login, percentile, setup_django, user_with_team

PASSWORD = "bench-password-1"


def burn(stop) -> None:
    """One core's worth of training: a small transformer layer learning a random regression."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
    x, y = torch.randn(8, 64, 256), torch.randn(8, 64, 256)
    while not stop.is_set():
        loss = torch.nn.functional.mse_loss(layer(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def make_run(user, team, steps: int, samples: int):
    from controlplane.accounts.principal import SYSTEM
    from controlplane.domains.services import domain_create
    from controlplane.runs import services as run_services
    from controlplane.runs.models import Run, RunDomain

    slugs = ["bench-addition", "bench-parity", "bench-reversal"]
    run = Run.objects.create(team=team, name="page-load", base_model="none", budget_steps=steps * 10, state="running",
                             driver="bench-writer", created_by=user)
    for slug in slugs:
        d = domain_create(actor=SYSTEM, data={"slug": slug, "title": slug, "kind": "math", "task_source": {"family": "bench"},
                                              "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}})
        RunDomain.objects.create(run=run, domain=d, domain_version=d.versions.get(), weight=1.0)
    rng = random.Random(0)

    def step(n: int) -> None:
        metrics = {f"reward/{s}": min(1.0, n / steps + rng.random() * 0.2) for s in slugs}
        metrics |= {f"pass_rate/{s}": min(1.0, n / steps) for s in slugs}
        metrics |= {"reward/mean": sum(metrics[f"reward/{s}"] for s in slugs) / 3, "perf/tokens_per_s": 900 + rng.random() * 200,
                    "perf/completions_per_s": 20 + rng.random(), "loss": rng.random(), "kl": rng.random() * 0.01}
        rows = []
        for i in range(samples):
            s = slugs[i % 3]
            reward = float(rng.random() < n / steps)
            rows.append({"domain": s, "task_id": f"{s}-{n}-{i}", "prompt": f"task {n}.{i}", "completion": f"answer {i}",
                         "reward": reward, "outcome": "pass" if reward else "fail", "details": {}})
        run_services.run_record_step(run=run, worker="bench-writer", step=n, metrics=metrics, samples=rows,
                                     verifier_versions={s: 1 for s in slugs})

    for n in range(1, steps + 1):
        step(n)
        if n % 50 == 0:
            print(f"committed step {n}/{steps}", file=sys.stderr, flush=True)
    return run, step


def make_queue(user, team, items: int):
    """A judged domain, its trajectories (the judge's score in their details) and a review queue."""
    from controlplane.accounts.principal import Principal
    from controlplane.domains.services import domain_create
    from controlplane.review import services as review_services
    from controlplane.review import queues as review_queues
    from controlplane.runs import services as run_services
    from controlplane.runs.models import Run, RunDomain

    actor = Principal.for_user(user)
    judge = review_services.judge_create(actor=actor, data={
        "team": team.slug, "slug": "sim", "title": "Similarity to the reference", "kind": "similarity",
        "score_format": "binary", "params": {"similarity_cut": 0.75}, "threshold": 0.3})
    d = domain_create(actor=actor, team=team, data={"slug": "bench-capitals", "title": "capitals", "kind": "text",
                                          "task_source": {"family": "bench"},
                                          "verifier": {"stages": [{"type": "judge", "params": {"judge": "sim", "threshold": 0.5},
                                                                   "timeout_s": 60}]}})
    run = Run.objects.create(team=team, name="judged", base_model="none", budget_steps=10, state="running",
                             driver="bench-writer", created_by=user)
    RunDomain.objects.create(run=run, domain=d, domain_version=d.versions.get(), weight=1.0)
    rng = random.Random(1)
    config = judge.active
    rows = []
    for i in range(items * 2):
        score = float(rng.random() < 0.5)
        rows.append({"domain": d.slug, "task_id": f"cap-{i}", "prompt": f"What is the capital of country {i}?",
                     "completion": f"City {i} is the capital.", "reward": score, "outcome": "pass" if score else "fail",
                     "details": {"judge_config_id": config.pk, "judge_score": score, "judge_reference": f"City {i}"}})
    run_services.run_record_step(run=run, worker="bench-writer", step=1, metrics={}, samples=rows,
                                 verifier_versions={d.slug: d.version})
    queue = review_queues.queue_create(actor=actor, team=team, send=False, data={
        "name": "bench", "domain": d.slug, "judge": "sim", "strategy": "uniform", "size": items})
    review_queues.queue_sample(queue.pk)  # drawn here, as the judge queue's worker would
    queue.refresh_from_db()
    return queue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--samples", type=int, default=12, help="trajectories recorded a step")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between the steps committed while measuring")
    parser.add_argument("--cold", type=int, default=3, help="fresh browsers per first-visit case (medians reported)")
    parser.add_argument("--loads", type=int, default=5, help="revisits of the run page in one browser")
    parser.add_argument("--labels", type=int, default=30)
    parser.add_argument("--trainers", type=int, default=os.cpu_count() or 2, help="torch training processes (load)")
    parser.add_argument("--bundle", choices=["basic", "full"], default="basic",
                        help="the plotly.js pages load (TEMPER_PLOTLY_BUNDLE): full is the baseline")
    parser.add_argument("--breakdown", help="write each visit's timings (bench/_web.py BREAKDOWN_JS) to this JSON file")
    args = parser.parse_args()

    os.environ["TEMPER_PLOTLY_BUNDLE"] = args.bundle  # before settings load, here and in daphne's environment
    env = setup_django("temper_bench_page_load") | {"TEMPER_PLOTLY_BUNDLE": args.bundle}
    from django.conf import settings
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the set-up's ORM calls run beside Playwright's loop
    user, team = user_with_team("bench", PASSWORD, role="admin")
    run, record_step = make_run(user, team, args.steps, args.samples)
    queue = make_queue(user, team, args.labels + 10)

    stop_training, stop_writer = mp.get_context("spawn").Event(), threading.Event()
    trainers = [mp.get_context("spawn").Process(target=burn, args=(stop_training,), daemon=True) for _ in range(args.trainers)]
    for p in trainers:
        p.start()

    def write() -> None:
        from django.db import connection

        n = args.steps
        while not stop_writer.wait(args.interval):
            n += 1
            record_step(n)
        connection.close()

    writer = threading.Thread(target=write, daemon=True)
    cold: list[float] = []
    via_list: list[float] = []
    warm: list[float] = []
    shows: list[float] = []
    breakdowns: list[dict] = []
    try:
        with daphne(env) as url, chromium() as browser:
            writer.start()
            def first_chart(page, how: str) -> float:
                page.wait_for_function("() => window.TemperLive && window.TemperLive.firstDrawMs !== undefined", timeout=60_000)
                ms = page.evaluate("window.TemperLive.firstDrawMs")
                page.wait_for_function(PLOTLY_DRAWN_JS, timeout=60_000)
                b = page.evaluate(BREAKDOWN_JS)
                breakdowns.append({"case": how, **b})
                print(f"run page, {how}: first chart at {ms:.0f} ms: {breakdown_line(b)}", file=sys.stderr)
                return ms

            for i in range(args.cold):  # a fresh browser (empty cache) that opens the run's URL directly
                page = login(browser, url, "bench", PASSWORD)
                page.goto(f"/runs/{run.id}/")
                cold.append(first_chart(page, f"fresh browser, URL opened directly ({i + 1})"))
                page.context.close()
            for i in range(args.cold):  # a fresh browser that signs in, sees the runs list and clicks the run
                page = login(browser, url, "bench", PASSWORD)
                page.wait_for_selector(f"tr[data-run='{run.id}']")
                page.click(f"tr[data-run='{run.id}'] a[href='/runs/{run.id}/']")
                via_list.append(first_chart(page, f"fresh browser, from the runs list ({i + 1})"))
                if i < args.cold - 1:
                    page.context.close()
            for i in range(args.loads):  # the same browser coming back
                page.goto(f"/runs/{run.id}/")
                warm.append(first_chart(page, f"revisit ({i + 1})"))

            page.goto(f"/review/queues/{queue.id}/")
            previous = None
            for i in range(args.labels):
                if previous is not None:
                    page.wait_for_function(f"() => document.querySelector('[data-testid=item-id]').textContent != '{previous}'")
                page.wait_for_selector("[data-testid=item]:not([hidden])")
                previous = page.text_content("[data-testid=item-id]")
                page.keyboard.press("p" if i % 3 else "f")
                page.wait_for_function(f"() => document.querySelector('[data-testid=stat-n]').textContent == '{i + 1}'")
            shows = page.evaluate("window.TemperReview.shows")
    finally:
        stop_writer.set()
        stop_training.set()
        for p in trainers:
            p.join(timeout=30)
        writer.join(timeout=30)

    result = {
        "steps": args.steps, "samples_per_step": args.samples, "trainers": args.trainers,
        "plotly_js": settings.TEMPER_PLOTLY_JS,
        "run_page_cold_direct_ms": round(percentile(cold, 0.5), 1),
        "run_page_cold_from_list_ms": round(percentile(via_list, 0.5), 1),
        "run_page_revisit_median_ms": round(percentile(warm, 0.5), 1),
        "run_page_revisit_max_ms": round(max(warm), 1) if warm else None,
        "goal_run_page_ms": 1000,
        "review_next_p50_ms": round(percentile(shows, 0.5), 1),
        "review_next_p95_ms": round(percentile(shows, 0.95), 1),
        "review_labels": len(shows),
        "goal_review_next_p95_ms": 300,
    }
    if args.breakdown:
        with open(args.breakdown, "w") as f:
            json.dump(breakdowns, f, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
