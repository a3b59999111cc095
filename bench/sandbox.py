"""Per-execution overhead of each sandbox backend against the same program run bare.

    python bench/sandbox.py [--n 100]

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="executions per variant")
    args = ap.parse_args()
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
