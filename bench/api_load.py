"""Concurrent clients on the web tier: latency percentiles, errors and requests/s per web process count.

Builds a site like the demo's in a fresh PostgreSQL database (the synced catalogue, a run of
``--steps`` steps on three domains with the demo's metric keys, 16 sampled trajectories a step,
checkpoint and eval events, a second short run), then for each count in ``--processes`` starts
the web server with that many processes (``controlplane.web.serving``: uvicorn, unless
``--server daphne`` says otherwise for one process), each lending its requests one of ``--db-pool``
PostgreSQL connections (TEMPER_DB_POOL_SIZE, as compose's web; 0: a connection per request), and lets ``--clients`` clients send requests for
``--seconds`` seconds, each waiting for its answer before sending the next. Half the clients are
browsers (a session: the home and run pages, then what the run page fetches: the series of its
charts, the trajectories of a step), half are scripts with a bearer token (runs list, run detail,
events, metrics after a cursor, explain, the domains list). Nothing else writes meanwhile: the
demo idle. Goal: p95 under 500 ms and no errors at 20 clients.

    .venv/bin/python bench/api_load.py                          # 1 process, then 2
    .venv/bin/python bench/api_load.py --processes 3 --seconds 30
    .venv/bin/python bench/api_load.py --url http://127.0.0.1:8000 --token tmp_... --session KEY --run 1

Prints a table per process count (per endpoint: requests, p50, p95, errors), the ratios between
the counts, and as its last line one JSON object.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from _web import free_port, percentile, serving, session_cookie, setup_django, user_with_team

GOAL_P95_MS = 500.0
DOMAINS = ("builtin-addition", "builtin-reversal", "builtin-parity")
OUTCOMES = ("pass", "fail", "parse_error", "timeout")
RUN_KEYS = ["perf/tokens_per_s", "perf/completions_per_s", "perf/verifications_per_s", "stage/generate_s",
            "stage/verify_s", "stage/update_s", "stage/sync_s", "stage/step_s", "policy/kl", "mismatch/kl",
            "policy/entropy", "perf/generator_idle_frac", "response/length"]
"""The run-wide keys the run page's charts fetch (frontend/static/js/run_detail.js, RUN_KEYS)."""


@dataclass
class Target:
    url: str
    token: str
    session: str
    run_id: int
    steps: int
    domains: list[str]


# ----------------------------------------------------------------------------- the site
MAIN_RUN = "demo: tiny model on the built-in domains"


def prepare(steps: int, reuse: bool) -> Target:
    """The demo's data in the bench database (kept from an earlier run with ``reuse``): returns
    what the clients need to ask for it."""
    from django.core.management import call_command

    from controlplane.accounts.principal import Principal
    from controlplane.accounts.services import token_create
    from controlplane.domains.models import Domain
    from controlplane.runs import services as run_services
    from controlplane.runs.models import Run, RunDomain

    user, team = user_with_team("bench", "bench-password-1", role="admin")
    existing = Run.objects.filter(team=team, name=MAIN_RUN).first() if reuse else None
    if existing is not None:
        _, token = token_create(actor=Principal.for_user(user), team=team, name="api-load", role="admin")
        return Target(url="", token=token, session=session_cookie(user), run_id=existing.id, steps=existing.current_step,
                      domains=list(DOMAINS))
    print("syncing the catalogue ...", file=sys.stderr, flush=True)
    call_command("domains", "sync", "--no-progress", verbosity=0)
    _purge_audits()
    rng = random.Random(0)

    def make_run(name: str, slugs: list[str], n_steps: int) -> Run:
        run = Run.objects.create(team=team, name=name, base_model="var/models/tiny-demo", budget_steps=steps,
                                 state="running", driver="bench-writer", created_by=user, current_step=0)
        for slug in slugs:
            d = Domain.objects.get(slug=slug)
            RunDomain.objects.create(run=run, domain=d, domain_version=d.versions.get(version=d.version), weight=1.0)
        for step in range(1, n_steps + 1):
            metrics = {"reward/mean": rng.random(), "loss/policy": rng.random()}
            for slug in slugs:
                metrics |= {f"reward/{slug}": rng.random(), f"pass_rate/{slug}": rng.random(),
                            f"verify/{slug}/p50_s": rng.random() / 100, f"verify/{slug}/p99_s": rng.random() / 10}
                metrics |= {f"outcome/{slug}/{o}": float(rng.randrange(40)) for o in OUTCOMES}
                if step % 20 == 0:
                    metrics[f"eval/reward/{slug}"] = rng.random()
            metrics |= {k: rng.random() for k in RUN_KEYS}
            samples = [{"domain": slugs[i % len(slugs)], "task_id": f"t{step}-{i}", "prompt": f"{step} + {i} = ",
                        "completion": str(step + i), "reward": float(rng.random() < 0.5), "outcome": rng.choice(OUTCOMES),
                        "details": {"gold": str(step + i)}, "tokens": 4} for i in range(16)]
            run_services.run_record_step(run=run, worker="bench-writer", step=step, metrics=metrics, samples=samples,
                                         verifier_versions={})
            if step % 20 == 0:
                run_services.run_event_record(run=run, kind="checkpoint", message=f"checkpoint at step {step}",
                                              data={"step": step})
                run_services.run_event_record(run=run, kind="eval", message=f"evaluated step {step}", data={"step": step})
            if step % 50 == 0:
                print(f"\r{name}: step {step}/{n_steps}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        return run

    main_run = make_run(MAIN_RUN, list(DOMAINS), steps)
    make_run("demo: judged capitals (for review)", [DOMAINS[0]], 20)
    Run.objects.filter(driver="bench-writer").update(driver="", state="paused")  # idle: nothing writes
    _, token = token_create(actor=Principal.for_user(user), team=team, name="api-load", role="admin")
    return Target(url="", token=token, session=session_cookie(user), run_id=main_run.id, steps=steps, domains=list(DOMAINS))


def _purge_audits() -> None:
    """The sync asks a worker to audit every new domain version; no worker runs here, so the
    requests are dropped from the broker rather than left for a later worker on this Redis db."""
    from controlplane import dispatch

    with dispatch.producer().connection_for_write() as conn:
        conn.default_channel.queue_purge("audit")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its descendants (Linux /proc):
    the server's cost per request, which a busy machine does not inflate as it does latency."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += [c for c, pp in parent.items() if pp == p]
    return total


@contextmanager
def web_server(env: dict, processes: int, server: str):
    """The site served by ``processes`` processes (the command ``manage.py demo`` runs); yields its URL."""
    from controlplane.web.serving import web_command

    port = free_port()
    log = Path(env["TEMPER_VAR_DIR"]) / f"web-{processes}.log"
    cmd = web_command(host="127.0.0.1", port=port, processes=processes, server=server)
    with serving(cmd, env, port, log, "the web server") as (url, proc):
        # Every process imports Django and opens its first connection on its first request: a few
        # requests each before the clock starts, so the first second measures no start-up.
        for _ in range(4 * processes):
            urllib.request.urlopen(url + "/healthz", timeout=30).read()
        yield url, proc.pid


# ----------------------------------------------------------------------------- the clients
def browser_requests(t: Target, rng: random.Random) -> list[tuple[str, str]]:
    """One visit of a browser: the home page, the run page and what its script fetches, a step's trajectories."""
    run = f"/api/runs/{t.run_id}"
    q = lambda keys: "key=" + urllib.parse.quote(",".join(keys))  # noqa: E731
    return [
        ("page /", "/"),
        ("page /runs/<id>/", f"/runs/{t.run_id}/"),
        ("series reward", f"{run}/series?{q([f'reward/{d}' for d in t.domains])}"),
        ("series pass_rate", f"{run}/series?{q([f'pass_rate/{d}' for d in t.domains])}"),
        ("series eval", f"{run}/series?{q([f'eval/reward/{d}' for d in t.domains])}"),
        ("series outcomes", f"{run}/series?{q([f'outcome/{t.domains[0]}/{o}' for o in OUTCOMES])}"),
        ("series run keys", f"{run}/series?{q(RUN_KEYS)}"),
        ("trajectories", f"{run}/trajectories?step={rng.randint(1, t.steps)}&limit=100"),
    ]


def script_requests(t: Target, rng: random.Random) -> list[tuple[str, str]]:
    """What a script or the CLI asks: lists, a run, its events, its metrics after a cursor."""
    run = f"/api/runs/{t.run_id}"
    return [
        ("runs list", "/api/runs"),
        ("run detail", run),
        ("events", f"{run}/events"),
        ("metrics", f"{run}/metrics?after={rng.randrange(0, 1000) * 10}&limit=1000"),
        ("explain", f"{run}/explain"),
        ("domains list", "/api/domains"),
        ("keys", f"{run}/keys"),
    ]


@dataclass
class Sample:
    name: str
    ms: float
    status: int


def client(target: Target, browser: bool, seed: int, until: float, samples: list[Sample], failures: dict[str, int]) -> None:
    """One client on one keep-alive connection: a request, its whole answer, the next request."""
    rng = random.Random(seed)
    parsed = urllib.parse.urlsplit(target.url)
    headers = {"Cookie": f"sessionid={target.session}"} if browser else {"Authorization": f"Bearer {target.token}"}
    conn = None
    while time.monotonic() < until:
        for name, path in (browser_requests if browser else script_requests)(target, rng):
            if time.monotonic() >= until:
                break
            conn = conn or http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
            t0 = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                status = 0
                key = f"{name}: {type(exc).__name__}"
                failures[key] = failures.get(key, 0) + 1
                conn.close()
                conn = None
            samples.append(Sample(name, (time.perf_counter() - t0) * 1000, status))
    if conn is not None:
        conn.close()


def load(target: Target, clients: int, seconds: float) -> dict:
    until = time.monotonic() + seconds
    samples: list[Sample] = []
    failures: dict[str, int] = {}
    threads = [threading.Thread(target=client, args=(target, i % 2 == 0, i, until, samples, failures), daemon=True)
               for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    ms = [s.ms for s in samples]
    errors = [s for s in samples if not 200 <= s.status < 400]
    per_endpoint = {}
    for name in dict.fromkeys(s.name for s in samples):
        mine = [s for s in samples if s.name == name]
        per_endpoint[name] = {"requests": len(mine), "p50_ms": round(percentile([s.ms for s in mine], 0.5), 1),
                              "p95_ms": round(percentile([s.ms for s in mine], 0.95), 1),
                              "errors": sum(1 for s in mine if not 200 <= s.status < 400)}
    statuses: dict[str, int] = {}
    for s in errors:
        statuses[str(s.status)] = statuses.get(str(s.status), 0) + 1
    return {
        "requests": len(samples), "requests_per_s": round(len(samples) / elapsed, 1),
        "p50_ms": round(percentile(ms, 0.5), 1), "p95_ms": round(percentile(ms, 0.95), 1),
        "p99_ms": round(percentile(ms, 0.99), 1), "max_ms": round(max(ms), 1) if ms else None,
        "errors": len(errors), "error_statuses": statuses, "failures": failures, "endpoints": per_endpoint,
    }


def report(label: str, r: dict) -> None:
    cpu = f"; server CPU {r['server_cpu_ms_per_request']} ms a request" if "server_cpu_ms_per_request" in r else ""
    print(f"\n{label}: {r['requests']} requests, {r['requests_per_s']}/s; p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, "
          f"p99 {r['p99_ms']} ms; errors {r['errors']}{' ' + json.dumps(r['error_statuses']) if r['errors'] else ''}{cpu}")
    print(f"  {'endpoint':<20} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'errors':>6}")
    for name, e in sorted(r["endpoints"].items(), key=lambda kv: -kv[1]["p95_ms"]):
        print(f"  {name:<20} {e['requests']:>8} {e['p50_ms']:>8} {e['p95_ms']:>8} {e['errors']:>6}")
    for k, n in r["failures"].items():
        print(f"  failed: {k} x{n}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--processes", default="1,2", help="web process counts to measure in turn, comma-separated")
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="",
                        help="default: daphne for one process (as served until now), uvicorn for several")
    parser.add_argument("--db-pool", type=int, default=10,
                        help="TEMPER_DB_POOL_SIZE of the server (compose's web: 10); 0 opens a connection per request")
    parser.add_argument("--steps", type=int, default=300, help="steps of the demo run built for the bench")
    parser.add_argument("--reuse", action="store_true", help="keep the bench database of an earlier run, if any")
    parser.add_argument("--url", help="measure a running server instead (with --token, --session and --run)")
    parser.add_argument("--token", help="a bearer token of a team that can read --run")
    parser.add_argument("--session", help="a session key of a user who can read --run (the sessionid cookie)")
    parser.add_argument("--run", type=int, help="the run to read")
    parser.add_argument("--domains", default=",".join(DOMAINS), help="the run's domains, with --url")
    args = parser.parse_args()

    results: dict[str, dict] = {}
    if args.url:
        missing = [n for n in ("token", "session", "run") if not getattr(args, n)]
        if missing:
            parser.error(f"--url needs {', '.join('--' + n for n in missing)}")
        target = Target(url=args.url.rstrip("/"), token=args.token, session=args.session, run_id=args.run,
                        steps=args.steps, domains=args.domains.split(","))
        results["given"] = load(target, args.clients, args.seconds)
        report(f"{args.url}, {args.clients} clients for {args.seconds:g} s", results["given"])
    else:
        counts = [int(n) for n in args.processes.split(",") if n]
        env = setup_django("temper_bench_api_load", fresh=not args.reuse) | {"TEMPER_DB_POOL_SIZE": str(args.db_pool)}
        target = prepare(args.steps, args.reuse)
        for n in counts:
            with web_server(env, n, args.server) as (url, pid):
                target.url = url
                print(f"{n} process(es): {args.clients} clients for {args.seconds:g} s ...", file=sys.stderr, flush=True)
                cpu0 = tree_cpu_s(pid)
                results[str(n)] = load(target, args.clients, args.seconds)
                results[str(n)]["server_cpu_ms_per_request"] = round((tree_cpu_s(pid) - cpu0) * 1000 / max(1, results[str(n)]["requests"]), 2)
            server = args.server or ("daphne" if n == 1 else "uvicorn")
            report(f"{n} web process(es) ({server}, database pool {args.db_pool or 'off'}), {args.clients} clients for "
                   f"{args.seconds:g} s", results[str(n)])
        if len(counts) > 1:
            base = results[str(counts[0])]
            for n in counts[1:]:
                r = results[str(n)]
                print(f"\n{n} processes vs {counts[0]}: requests/s x{r['requests_per_s'] / base['requests_per_s']:.2f}, "
                      f"p95 x{r['p95_ms'] / base['p95_ms']:.2f}, p50 x{r['p50_ms'] / base['p50_ms']:.2f}")
    for label, r in results.items():
        print(f"{label}: p95 / goal {GOAL_P95_MS:g} ms = {r['p95_ms'] / GOAL_P95_MS:.2f}; errors {r['errors']}")
    summary = {label: {k: r[k] for k in ("requests_per_s", "p50_ms", "p95_ms", "p99_ms", "errors", "server_cpu_ms_per_request") if k in r} |
               {"endpoints_p95_ms": {n: e["p95_ms"] for n, e in r["endpoints"].items()}} for label, r in results.items()}
    print(json.dumps({"clients": args.clients, "seconds": args.seconds, "db_pool": None if args.url else args.db_pool,
                      "goal_p95_ms": GOAL_P95_MS, "by_processes": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
