"""Verifications per second, per domain family and per verifier stage family, on this machine.

Tasks are drawn first (not timed); then reference and wrong completions are verified through each
domain's cascade with its real isolation (worker processes with outside-enforced timeouts).
Stage families are also measured inline (no isolation) side by side, to show what the isolation
costs. HumanEval runs through the real sandbox (``workers.sandbox``), handed to its cascade in a
VerifyContext as a verify worker does.

Usage: python bench/verify_throughput.py [--seconds 3] [--tasks 40]
The last line is one JSON object with keys domains_registered, per_family, per_stage, ...
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.families.references import reference_completion, wrong_completion  # noqa: E402
from trainer.catalogue import all_domains  # noqa: E402
from trainer.tasks.base import Task  # noqa: E402
from trainer.verifiers.cascade import compile_cascade  # noqa: E402
from trainer.verifiers.context import NO_CONTEXT, VerifyContext  # noqa: E402
from workers.sandbox import execute  # noqa: E402


def timed(pairs, verify, seconds: float) -> tuple[float, int]:
    """Verifications per second over the pairs (cycled) for about ``seconds``."""
    done, start = 0, time.perf_counter()
    while True:
        for fn, completion, task in pairs:
            verify(fn, completion, task)
            done += 1
        if time.perf_counter() - start >= seconds:
            break
    return done / (time.perf_counter() - start), done


def stage_cases() -> dict[str, tuple[dict, list[tuple[str, Task]]]]:
    t_num = Task("bench", "n", "q", answer="1234.5")
    t_json = Task("bench", "j", "q", answer={"revenue": 1000, "net": 120.5, "name": "Acme"})
    t_math = Task("bench", "m", "q", answer="\\frac{1}{2}")
    return {
        "exact": ({"stages": [{"type": "exact"}]}, [("1234.5", t_num), ("1234", t_num)]),
        "regex": ({"stages": [{"type": "regex", "params": {"pattern": r"\d+\.\d"}}]}, [("x 1234.5", t_num), ("none", t_num)]),
        "numeric": ({"stages": [{"type": "numeric", "params": {"rel_tol": 0.001}}]}, [("1,234.6", t_num), ("99", t_num)]),
        "extract+exact": ({"stages": [{"type": "extract"}, {"type": "exact"}]}, [("so <answer>1234.5</answer>", t_num), ("\\boxed{3}", t_num)]),
        "json_fields": ({"stages": [{"type": "json_fields", "params": {"default_tolerance": {"rel": 0.01}}}]},
                        [('{"revenue": 1001, "net": 120.5, "name": "acme"}', t_json), ('{"revenue": 5}', t_json)]),
        "math": ({"stages": [{"type": "extract", "params": {"methods": ["boxed"]}}, {"type": "math"}]},
                 [("\\boxed{2/4}", t_math), ("\\boxed{0.3}", t_math)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--tasks", type=int, default=40, help="tasks drawn per domain family")
    args = parser.parse_args()

    domains = all_domains()
    print(f"domains registered: {len(domains)}")
    context = VerifyContext(execute=execute)

    by_family = defaultdict(list)
    for spec in domains.values():
        by_family[spec.family].append(spec)
    rng = random.Random(0)
    per_family: dict[str, float] = {}
    outcomes: dict[str, dict[str, int]] = {}
    for family, specs in sorted(by_family.items()):
        pairs = []
        for i in range(args.tasks):
            spec = specs[i % len(specs)]
            task = spec.source.sample(rng, 0)
            completion = reference_completion(spec, task) if i % 2 == 0 else wrong_completion(spec, task)
            pairs.append((spec.cascade(context), completion, task))
        for fn, completion, task in pairs[:4]:
            fn(completion, task)  # warm the worker processes and imports
        counts: dict[str, int] = defaultdict(int)

        def verify(fn, completion, task):
            counts[fn(completion, task).outcome.value] += 1

        rate, n = timed(pairs, verify, args.seconds)
        name = family
        per_family[name] = round(rate, 1)
        outcomes[name] = dict(counts)
        print(f"family {name:28s} {rate:9.1f} verifications/s  ({n} runs, {len(specs)} domains) {dict(counts)}")

    per_stage: dict[str, float] = {}
    per_stage_inline: dict[str, float] = {}
    for name, (spec, cases) in stage_cases().items():
        cascade = compile_cascade(spec, NO_CONTEXT)
        pairs = [(cascade, c, t) for c, t in cases]
        cascade(cases[0][0], cases[0][1])
        isolated, _ = timed(pairs, lambda fn, c, t: fn(c, t), args.seconds / 2)
        inline, _ = timed(pairs, lambda fn, c, t: fn(c, t, isolation="inline"), args.seconds / 2)
        per_stage[name], per_stage_inline[name] = round(isolated, 1), round(inline, 1)
        print(f"stage  {name:28s} {isolated:9.1f}/s isolated  {inline:9.1f}/s inline  (isolation costs {1e3 / isolated - 1e3 / inline:6.2f} ms each)")

    print(json.dumps({
        "domains_registered": len(domains),
        "per_family": per_family,
        "per_stage": per_stage,
        "per_stage_inline": per_stage_inline,
        "outcomes": outcomes,
    }))


if __name__ == "__main__":
    main()
