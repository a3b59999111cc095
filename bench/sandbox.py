"""Per-execution overhead of each sandbox backend against the same program run bare.

    python bench/sandbox.py [--n 100]
    python bench/sandbox.py --burst [--rounds 4 --repeats 2]

`--burst`: the fixed warm pool (two per domain, never shrunk, no creation budget: Temper before
issue 44) and the elastic one (two per domain when idle, sized to busy + waiting, creations behind
a 20/s budget shared round-robin by domain; idle sandboxes above that removed after 30 s, the
default, or after 1 s: `elastic_idle1s`) side by side on the same rounds:
8 jobs at once in one domain, a group of 4 in one allocation in another, 4 jobs one after another
in a third, then 2 s idle. Prints per variant the waits for a sandbox (p50, p99, ms) per domain,
creations per second, and the sandboxes held after each idle gap.

Runs `python3 -c pass`-like program (a file main.py with `pass`) bare (subprocess, no isolation),
through a warm pooled bwrap sandbox (what `execute` uses by default), through a cold bwrap
sandbox (fresh namespaces per job, `bwrap-cold`) and through a warm Docker container,
interleaved round-robin so machine load hits all alike. Overhead = backend time - bare time at
the same percentile. For both pooled backends the reset of the last sandbox (kill, wipe, ready)
is waited for off the clock, as it overlaps the next job when a domain has two warm sandboxes;
so is the removal of the last cold sandbox (it runs in the background, after the verdict), so
that it does not land on the next variant's clock.
Right after each warm bwrap job a second one runs with no pause (`bwrap-b2b`): it gets the
domain's other warm sandbox while the first one's reset runs beside it, as in a busy domain.
Last line: JSON with bare_p50_ms, bwrap_overhead_p50_ms, bwrap_overhead_p95_ms (warm pooled
bwrap), bwrap_cold_overhead_p50_ms, bwrap_cold_overhead_p95_ms, bwrap_b2b_overhead_p50_ms,
bwrap_b2b_overhead_p95_ms, docker_overhead_p50_ms,
docker_overhead_p95_ms (null where a backend is unavailable).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.sandbox import Limits, PoolConfig, close_runtimes, execute, get_runtime  # noqa: E402

PROGRAM = "pass\n"
PYTHON = "/usr/bin/python3"  # the interpreter both sandboxes run (Debian's), bare too


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


BURST_VARIANTS = {
    # Before issue 44: two warm per domain, never shrunk, every creation started at once.
    "fixed": dict(warm_per_domain=2, idle_s=1e9, create_rate=1e6, create_burst=1_000_000),
    # Elastic, as configured by default: two warm per domain, sized to busy + waiting, an idle
    # sandbox above that removed after 30 s, creations behind a budget of 20/s (8 at once)
    # shared round-robin by the domains.
    "elastic": dict(warm_per_domain=2, idle_s=30.0, create_rate=20.0, create_burst=8),
    # The same with a 1 s idle time: the pool gives its burst sandboxes back in every gap.
    "elastic_idle1s": dict(warm_per_domain=2, idle_s=1.0, create_rate=20.0, create_burst=8),
}


def burst_round(pool, burst: int, group: int, limits) -> dict[str, list[float]]:
    """One round: ``burst`` jobs at once in domain burst, a group of ``group`` in one allocation
    (domain group) and 4 jobs one after another in domain steady, all three at the same time.
    The waits for a sandbox, per domain."""
    from concurrent.futures import ThreadPoolExecutor

    job = ({"main.py": PROGRAM}, ["python3", "main.py"])
    waits: dict[str, list[float]] = {"burst": [], "group": [], "steady": []}

    def steady() -> list:
        return [pool.execute(*job, limits, domain="steady") for _ in range(4)]

    with ThreadPoolExecutor(max_workers=burst + 2) as ex:
        bursts = [ex.submit(pool.execute, *job, limits, domain="burst") for _ in range(burst)]
        grouped = ex.submit(pool.execute_group, [job] * group, limits, domain="group")
        steady_f = ex.submit(steady)
        for name, verdicts in (("burst", [f.result() for f in bursts]), ("group", grouped.result()),
                               ("steady", steady_f.result())):
            assert all(v.status == "ok" for v in verdicts), [v.error for v in verdicts if v.status != "ok"]
            waits[name] += [v.wait_s * 1000 for v in verdicts]
    return waits


def burst_case(rounds: int, burst: int, group: int, gap_s: float, repeats: int) -> dict:
    """The fixed pool and the elastic one side by side on the same rounds (each variant's
    backend alone on the machine while it runs, the variants alternated ``repeats`` times): the
    waits for a sandbox (p50, p99, ms) per domain, creations per second of the whole case, and
    the sandboxes still held after each idle gap (what the elastic pool gives back)."""
    from workers.sandbox import SandboxPool
    from workers.sandbox.bwrap_pool import WarmBwrapBackend

    limits = Limits(cpu_s=5, wall_s=10)
    out: dict[str, dict] = {}
    for _ in range(repeats):
        for name, knobs in BURST_VARIANTS.items():
            config = PoolConfig(global_limit=burst + group + 2, domain_limit=max(burst, group), **knobs)
            pool = SandboxPool(WarmBwrapBackend(config), config)
            for domain in ("burst", "group", "steady"):
                pool.backend.warm(domain, limits)
            started0, t0 = pool.backend.started, time.perf_counter()
            acc = out.setdefault(name, {"waits": {}, "created": 0, "seconds": 0.0, "held_after_gap": []})
            for _round in range(rounds):
                for domain, ws in burst_round(pool, burst, group, limits).items():
                    acc["waits"].setdefault(domain, []).extend(ws)
                time.sleep(gap_s)  # idle: the elastic pool's shrink thread gives sandboxes back
                acc["held_after_gap"].append(len(pool.backend.sandboxes()))
            acc["created"] += pool.backend.started - started0
            acc["seconds"] += time.perf_counter() - t0
            pool.close()
    result = {}
    for name, acc in out.items():
        row = {f"{d}_wait_{tag}_ms": round(pct(ws, q), 2) for d, ws in acc["waits"].items()
               for q, tag in ((0.5, "p50"), (0.99, "p99"))}
        row["creations_per_s"] = round(acc["created"] / acc["seconds"], 2)
        row["held_after_gap_mean"] = round(statistics.fmean(acc["held_after_gap"]), 2)
        result[name] = row
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="executions per variant")
    ap.add_argument("--burst", action="store_true",
                    help="instead: the fixed and the elastic warm pool side by side under bursts (bwrap)")
    ap.add_argument("--rounds", type=int, default=4, help="--burst: rounds per variant and repeat")
    ap.add_argument("--repeats", type=int, default=2, help="--burst: times each variant runs, alternated")
    args = ap.parse_args()
    if args.burst:
        result = burst_case(args.rounds, burst=8, group=4, gap_s=2.0, repeats=args.repeats)
        for name, row in result.items():
            print(f"{name:8s} " + " ".join(f"{k}={v}" for k, v in row.items()))
        print(json.dumps(result))
        return
    limits = Limits(cpu_s=5, wall_s=10)
    workdir = Path(tempfile.mkdtemp(prefix="temper-bench-"))
    (workdir / "main.py").write_text(PROGRAM)

    def bare() -> None:
        subprocess.run([PYTHON, "main.py"], cwd=workdir, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)

    variants = {"bare": bare}
    errors: dict[str, str] = {}
    pooled = ("bwrap", "docker")
    for name in ("bwrap", "bwrap-cold", "docker"):
        try:
            get_runtime(name, PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=2))
            if name in pooled:
                get_runtime(name).backend.warm("bench", limits)
            v = execute({"main.py": PROGRAM}, ["python3", "main.py"], limits, backend=name, domain="bench")
            if v.status != "ok":
                raise RuntimeError(f"{v.status}: {v.error}")
        except Exception as e:  # engine down, bwrap missing: report null for that backend
            errors[name] = str(e)
            continue

        def run(name=name) -> None:
            v = execute({"main.py": PROGRAM}, ["python3", "main.py"], limits, backend=name, domain="bench")
            assert v.status == "ok", v

        variants[name] = run
        if name == "bwrap":  # right after the warm job, no pause: its reset overlaps this one
            variants["bwrap-b2b"] = run
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.n):
        for name, fn in variants.items():
            if name in pooled:  # (not before bwrap-b2b)
                get_runtime(name).backend.wait_idle(30)  # reset of the last sandbox off the clock
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1000)
            if name == "bwrap-cold":  # its sandbox is removed after the verdict: not on the next clock
                get_runtime(name).backend.wait_idle(30)
    close_runtimes()
    out: dict[str, float | None] = {"bare_p50_ms": round(pct(times["bare"], 0.5), 2)}
    for name in ("bwrap", "bwrap-cold", "bwrap-b2b", "docker"):
        for q, tag in ((0.5, "p50"), (0.95, "p95")):
            key = f"{name.replace('-', '_')}_overhead_{tag}_ms"
            out[key] = round(pct(times[name], q) - pct(times["bare"], q), 2) if name in times else None
    for name, xs in times.items():
        print(f"{name:10s} n={len(xs)} p50={pct(xs, 0.5):.1f} ms p95={pct(xs, 0.95):.1f} ms "
              f"mean={statistics.fmean(xs):.1f} ms")
    for name, err in errors.items():
        print(f"{name}: unavailable ({err})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
