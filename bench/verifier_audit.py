"""Audit every domain of the trainer's catalogue through its real verify path.

    python bench/verifier_audit.py [--domains SLUG ...] [--tasks 12] [--chance-tasks 48] [--out FILE]

Each domain's default cascade runs its probes (trainer/audit): cheap stages in this process's
verifier workers, code stages in the real sandbox (workers.sandbox), as a verify worker would.
A progress bar counts domains; per-domain figures go to --out (JSON lines) and a line per domain
that has a false positive or a gold false negative is printed. Last line: JSON with domains,
probes, false_positives, false_negatives_gold, false_negatives_equivalent (and the same on the
math domains), masked, wall_s. The goal: false_positives 0 and false_negatives_gold 0 on the
whole catalogue; false_negatives_equivalent 0 on the math domains.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

from trainer.audit import audit_catalogue_domain  # noqa: E402
from trainer.catalogue import all_domains  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", nargs="*", help="slugs (default: the whole catalogue)")
    ap.add_argument("--tasks", type=int, default=12, help="tasks per domain that get every probe")
    ap.add_argument("--chance-tasks", type=int, default=48, help="tasks per domain for constants and chance")
    ap.add_argument("--out", help="write each domain's report as a JSON line here")
    args = ap.parse_args()

    from trainer.verifiers import VerifyContext
    from workers.sandbox import close_runtimes, execute

    context = VerifyContext(execute=execute)
    domains = all_domains()
    slugs = args.domains or sorted(domains)
    totals = {"domains": 0, "probes": 0, "false_positives": 0, "false_negatives_gold": 0,
              "false_negatives_equivalent": 0, "masked": 0}
    math = {"false_negatives_equivalent": 0, "false_negatives_gold": 0, "false_positives": 0, "domains": 0}
    out = open(args.out, "w") if args.out else None
    started = time.perf_counter()
    problems = []
    try:
        for slug in tqdm(slugs, desc="verifier audit", unit="domain"):
            report = audit_catalogue_domain(slug, tasks=args.tasks, chance_tasks=args.chance_tasks, context=context)
            d = report.to_dict()
            totals["domains"] += 1
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
        close_runtimes()
        if out is not None:
            out.close()
    for line in problems:
        print(line)
    totals["wall_s"] = round(time.perf_counter() - started, 1)
    totals["math"] = math
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
