"""Audit every domain of the trainer's catalogue through its real verify path.

    python bench/verifier_audit.py [--domains SLUG ...] [--tasks 12] [--chance-tasks 48] [--workers 2] [--out FILE]

Each domain's default cascade runs its probes (trainer/audit): cheap stages in this process's
verifier workers, code stages in the real sandbox (workers.sandbox), as a verify worker would.
Domains are audited by ``--workers`` processes at once (as that many verify workers would). A
progress bar counts domains; per-domain figures go to --out (JSON lines) and a line per domain
that has a false positive or a gold false negative is printed. Last line: JSON with domains,
probes, false_positives, false_negatives_gold, false_negatives_equivalent (and the same on the
math domains), masked, wall_s, workers and the five slowest domains. The goal: false_positives 0 and false_negatives_gold 0 on the
whole catalogue; false_negatives_equivalent 0 on the math domains.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

from trainer.audit import audit_catalogue_domain  # noqa: E402
from trainer.catalogue import all_domains  # noqa: E402


def _start_worker() -> None:
    """A worker process: generators quiet, its sandboxes closed when it exits."""
    import warnings
    from multiprocessing import util

    from workers.sandbox import close_runtimes

    warnings.simplefilter("ignore")
    util.Finalize(None, close_runtimes, exitpriority=10)


def _audit(slug: str, tasks: int, chance_tasks: int) -> dict:
    """One domain's report, through the real verify path of this process."""
    from trainer.verifiers import VerifyContext
    from workers.sandbox import execute

    return audit_catalogue_domain(slug, tasks=tasks, chance_tasks=chance_tasks, context=VerifyContext(execute=execute)).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", nargs="*", help="slugs (default: the whole catalogue)")
    ap.add_argument("--tasks", type=int, default=12, help="tasks per domain that get every probe")
    ap.add_argument("--chance-tasks", type=int, default=48, help="tasks per domain for constants and chance")
    ap.add_argument("--workers", type=int, default=2, help="processes auditing domains at once (as verify workers would)")
    ap.add_argument("--out", help="write each domain's report as a JSON line here")
    args = ap.parse_args()

    domains = all_domains()
    slugs = args.domains or sorted(domains)
    totals = {"domains": 0, "probes": 0, "false_positives": 0, "false_negatives_gold": 0,
              "false_negatives_equivalent": 0, "masked": 0}
    math = {"false_negatives_equivalent": 0, "false_negatives_gold": 0, "false_positives": 0, "domains": 0}
    slowest: list[tuple[float, str]] = []
    out = open(args.out, "w") if args.out else None
    started = time.perf_counter()
    problems = []
    with ProcessPoolExecutor(max(1, args.workers), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker) as pool:
        futures = [pool.submit(_audit, slug, args.tasks, args.chance_tasks) for slug in slugs]
        try:
            for future in tqdm(as_completed(futures), total=len(futures), desc="verifier audit", unit="domain"):
                d = future.result()
                slug = d["domain"]
                totals["domains"] += 1
                slowest.append((d["wall_s"], slug))
                for key in ("probes", "false_positives", "false_negatives_gold", "false_negatives_equivalent", "masked"):
                    totals[key] += d[key]
                if domains[slug].family == "math":
                    math["domains"] += 1
                    for key in ("false_negatives_equivalent", "false_negatives_gold", "false_positives"):
                        math[key] += d[key]
                if out is not None:
                    out.write(json.dumps(d) + "\n")
                    out.flush()
                if d["false_positives"] or d["false_negatives_gold"]:
                    bad = {name: (c["false_positives"], c["false_negatives"]) for name, c in d["classes"].items()
                           if c["false_positives"] or c["false_negatives"]}
                    problems.append(f"{slug}: FP {d['false_positives']} FN-gold {d['false_negatives_gold']} {bad}")
        finally:
            for future in futures:
                future.cancel()
            if out is not None:
                out.close()
    for line in problems:
        print(line)
    totals["wall_s"] = round(time.perf_counter() - started, 1)
    totals["workers"] = args.workers
    totals["slowest"] = [{"domain": slug, "wall_s": wall} for wall, slug in sorted(slowest, reverse=True)[:5]]
    totals["math"] = math
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
