"""Verifications per second, per domain family and per verifier stage family, on this machine.

Tasks are drawn first (not timed); then reference and wrong completions are verified through each
domain's cascade with its real isolation (worker processes with outside-enforced timeouts).
Stage families are also measured inline (no isolation) side by side, to show what the isolation
costs. HumanEval runs through the real sandbox (``workers.sandbox``), handed to its cascade in a
VerifyContext as a verify worker does.

Usage: python bench/verify_throughput.py [--seconds 3] [--tasks 40]
The last line is one JSON object with keys domains_registered, per_family, per_stage, ...

``--groups G`` instead measures the verify worker's path (``workers.verify.verify_items``) on
``--tasks`` HumanEval tasks x G completions (reference and wrong alternated): one item at a time
(the path before groups) beside a batch whose task groups are verified together, their sandboxes
in one allocation; repeats alternated, items/s of each and whether every verdict agreed.
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


def groups_bench(n_tasks: int, size: int, repeats: int) -> None:
    """Items/s of verify_items one item at a time and with task groups, side by side."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django  # lazy: only the --groups mode verifies through the worker's path (Django settings)

    django.setup()
    from workers.verify import task_to_dict, verify_items  # lazy: needs the settings above

    spec = all_domains()["code-humaneval"]
    rng = random.Random(0)
    items = []
    for _ in range(n_tasks):
        task = spec.source.sample(rng, 0)
        items += [{"completion": reference_completion(spec, task) if g % 2 == 0 else wrong_completion(spec, task),
                   "task": task_to_dict(task)} for g in range(size)]
    cascade = spec.verifier_spec
    verify_items(cascade, items[:size])  # start the pool
    variants = {"one_at_a_time": lambda: [verify_items(cascade, [item])[0] for item in items],
                "grouped": lambda: verify_items(cascade, items)}
    rates: dict[str, list[float]] = defaultdict(list)
    results: dict[str, list] = {}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            results[name] = [(r["outcome"], r["score"]) for r in run()]
            rates[name].append(len(items) / (time.perf_counter() - start))
    best = {name: round(max(r), 1) for name, r in rates.items()}
    median = {name: round(sorted(r)[len(r) // 2], 1) for name, r in rates.items()}
    for name, r in rates.items():
        print(f"{name:14s} {best[name]:7.1f} items/s best, {median[name]:7.1f} median of {repeats} ({', '.join(f'{x:.1f}' for x in r)})")
    print(json.dumps({"tasks": n_tasks, "group": size, "items_per_s": best, "median_items_per_s": median,
                      "ratio": round(best["grouped"] / best["one_at_a_time"], 2),
                      "median_ratio": round(median["grouped"] / median["one_at_a_time"], 2),
                      "same_verdicts": results["grouped"] == results["one_at_a_time"],
                      "outcomes": dict(sorted({o: [r[0] for r in results["grouped"]].count(o) for o, _ in results["grouped"]}.items()))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--tasks", type=int, default=40, help="tasks drawn per domain family")
    parser.add_argument("--groups", type=int, default=0, help="G: measure grouped vs one-at-a-time verification instead")
    parser.add_argument("--repeats", type=int, default=3, help="alternated repeats of each variant (--groups)")
    args = parser.parse_args()
    if args.groups:
        groups_bench(args.tasks, args.groups, args.repeats)
        return

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
