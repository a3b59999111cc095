"""Survey of the reasoning-gym domains' verifiers against answers a policy could game them with.

For every ``rg-*`` domain, tasks are drawn across levels with fixed seeds and adversarial
completions are verified through the domain's real cascade (``spec.verify(completion, task)``,
worker processes by default). Probe classes:

``gold``        the task's reference answer (must pass; a failure is a false negative)
``equivalent``  the gold lower-/upper-cased, with a trailing period, with collapsed spaces: counted
                only where the upstream ``score_answer`` gives it 1.0 (it must keep passing)
``hedge``       wrong (W) and gold (G) together, in both orders: "W or G", "W, G", "W\\nG", two
                ``<answer>`` tags, "either W or G", "W/G", "W and G"; W is another task's gold or
                the gold perturbed, and W alone fails
``partial``     a prefix or subset of the gold (half of its items, all but the last, the first
                item, a numeric truncation off by more than 1%)
``perturbed``   the gold with its first or last number (else letter) changed
``constant``    "", 0, 1, -1, Yes, No, True, False, None, {}, [], A, 1*2*3*4 and the three most common
                golds of a separate sample (when they repeat): a false positive when its mean
                reward is above chance, the mean reward of another task's gold on a task ("shuffled
                gold"), by more than three standard errors and one hit
``options``     every answer the domain gave in the sample at once (domains with at most 12)
``nonfinite``   nan, inf, 1e999, ... and the gold with its first number made non-finite
``long``        many candidates at once: every sampled gold, -50..1000, W repeated then G, G repeated

Every probe but gold, equivalent and constant is a false positive when its reward is above 0 (it
passes when its reward is 1): a wrong answer earns nothing, format credit included.

Usage: python bench/rg_scorers.py [--tasks-per-level 4] [--levels 3] [--chance-tasks 200]
       [--domains rg-coin_flip,rg-gsm_symbolic] [--isolation process|inline] [--examples 3]
The last line printed is one JSON object: ``domains``, ``tasks``, ``probes``, ``false_positives``
(reward above 0), ``false_positive_passes`` (reward 1) and ``domains_with_false_positives`` per
probe class, ``gold_failures``,
``equivalent_false_negatives``, ``constant_over_chance`` (domain: constants), ``wall_s``.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.tasks.reasoning_gym import get_dataset  # noqa: E402
from trainer.catalogue import DomainSpec, all_domains  # noqa: E402
from trainer.tasks.base import Task  # noqa: E402

CONSTANTS = ("", "0", "1", "-1", "Yes", "No", "True", "False", "None", "{}", "[]", "A", "1*2*3*4")
NONFINITE = ("nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999")
HEDGES = {
    "or": "{a} or {b}",
    "comma": "{a}, {b}",
    "newline": "{a}\n{b}",
    "either": "either {a} or {b}",
    "slash": "{a}/{b}",
    "and": "{a} and {b}",
}
CLASSES = ("hedge", "partial", "perturbed", "constant", "options", "nonfinite", "long")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
ITEM_SPLIT = re.compile(r"(\s*,\s*|\s*\n\s*|\s+)")


def tagged(text: str) -> str:
    return f"<answer>{text}</answer>"


def seeded(*parts: Any) -> random.Random:
    return random.Random(zlib.crc32(":".join(map(str, parts)).encode()))


def levels_for(spec: DomainSpec, count: int) -> list[int]:
    """Up to ``count`` levels spread from 0 to the top (capped at level 4: the top levels of some
    generators take seconds per task)."""
    top = min(spec.source.levels - 1, 4)
    if count <= 1 or top == 0:
        return [0]
    return sorted({round(i * top / (count - 1)) for i in range(count)})


def perturbations(gold: str) -> list[str]:
    """The gold with its first and its last number changed (else its first and last letter)."""
    out = []
    numbers = list(NUMBER.finditer(gold))
    if numbers:
        for m in (numbers[0], numbers[-1]):
            text = m.group(0)
            whole, dot, frac = text.partition(".")
            changed = str(int(whole) + 1) + dot + frac if whole not in ("", "-") else text + "1"
            out.append(gold[: m.start()] + changed + gold[m.end():])
    else:
        letters = [i for i, ch in enumerate(gold) if ch.isalpha()]
        for i in letters[:1] + letters[-1:]:
            ch = gold[i]
            alphabet = sorted({c for c in gold if c.isalpha() and c.lower() != ch.lower()}) or ["q" if ch.lower() != "q" else "z"]
            out.append(gold[:i] + alphabet[0] + gold[i + 1:])
    if not out:
        out.append(gold + "1")
    return list(dict.fromkeys(p for p in out if p.strip() != gold.strip()))


def partials(gold: str) -> list[str]:
    """Prefixes and subsets of the gold that are not the gold's value."""
    out = []
    pieces = ITEM_SPLIT.split(gold.strip())  # item, sep, item, sep, ...
    items = pieces[0::2]
    if len(items) >= 2:
        def join(lo: int, hi: int) -> str:
            return "".join(pieces[2 * lo: 2 * hi - 1])
        out += [join(0, len(items) // 2), join(0, len(items) - 1), join(1, len(items)), items[0], items[-1]]
    elif len(gold.strip(" .")) >= 4 and not NUMBER.fullmatch(gold.strip()):
        core = gold.strip(" .")
        out += [core[: len(core) // 2], core[:-1]]
    if re.fullmatch(r"-?\d+\.\d+", gold.strip()):
        value = float(gold)
        whole, frac = gold.strip().split(".")
        for cut in (whole, f"{whole}.{frac[:1]}", f"{whole}.{frac[:2]}"):
            if abs(float(cut) - value) > 0.01 * abs(value) + 1e-12:
                out.append(cut)
    unitless = re.sub(r"(?<=\d)[\sA-Za-z°%]+$", "", gold.strip())  # "10" for "10 days" is not partial
    return list(dict.fromkeys(p for p in out if p.strip(" .") and p.strip(" .") not in (gold.strip(" ."), unitless)))


def equivalents(gold: str) -> list[str]:
    forms = [gold.lower(), gold.upper(), gold + ".", " ".join(gold.split()), f"  {gold}  "]
    return list(dict.fromkeys(f for f in forms if f != gold))


def upstream_score(task: Task, answer: str) -> float:
    """The generator's own ``score_answer`` on the stripped answer (what the tag extraction gives)."""
    meta = task.meta
    try:
        return float(get_dataset(meta["rg_dataset"], int(meta["rg_level"])).score_answer(answer.strip(), meta["rg_entry"]))
    except Exception:  # noqa: BLE001
        return 0.0


class Survey:
    """Runs the probes for one domain and keeps counts and examples."""

    def __init__(self, spec: DomainSpec, isolation: str | None, examples: int) -> None:
        self.spec, self.isolation, self.examples = spec, isolation, examples
        self.counts: dict[str, dict[str, Any]] = {c: {"probes": 0, "false_positives": 0, "passes": 0, "examples": []} for c in CLASSES}
        self.gold = {"probes": 0, "failures": 0, "examples": []}
        self.equivalent = {"probes": 0, "false_negatives": 0, "examples": []}
        self.verifications = 0

    def reward(self, completion: str, task: Task) -> float:
        self.verifications += 1
        verification = self.spec.verify(completion, task, isolation=self.isolation)
        reward = verification.reward
        return 0.0 if reward is None else float(reward)

    def probe(self, cls: str, completion: str, task: Task) -> float:
        reward = self.reward(completion, task)
        entry = self.counts[cls]
        entry["probes"] += 1
        if reward > 0:
            entry["false_positives"] += 1
            entry["passes"] += reward >= 1.0
            if len(entry["examples"]) < self.examples or (reward >= 1.0 and entry["passes"] == 1):
                entry["examples"].append({"task": task.id, "gold": str(task.answer)[:120], "completion": completion[:200], "reward": round(reward, 4)})
        return reward

    def run(self, tasks: list[Task], chance_tasks: list[Task], modes: list[str]) -> dict[str, Any]:
        golds = [str(t.answer) for t in tasks]
        for i, task in enumerate(tasks):
            gold = golds[i]
            self.gold["probes"] += 1
            if self.reward(tagged(gold), task) < 1.0:
                self.gold["failures"] += 1
                if len(self.gold["examples"]) < self.examples:
                    self.gold["examples"].append({"task": task.id, "gold": gold[:200]})
                continue
            for form in equivalents(gold):
                if upstream_score(task, form) >= 1.0:
                    self.equivalent["probes"] += 1
                    if self.reward(tagged(form), task) < 1.0:
                        self.equivalent["false_negatives"] += 1
                        if len(self.equivalent["examples"]) < self.examples:
                            self.equivalent["examples"].append({"task": task.id, "form": form[:200]})
            wrongs = []
            for j in range(1, len(tasks)):
                other = golds[(i + j) % len(tasks)]
                if other.strip() != gold.strip() and self.reward(tagged(other), task) < 1.0:
                    wrongs.append(other)
                    break
            for p in perturbations(gold):
                if self.probe("perturbed", tagged(p), task) < 1.0 and len(wrongs) < 2:
                    wrongs.append(p)
            for w in wrongs:
                for a, b in ((w, gold), (gold, w)):
                    for form in HEDGES.values():
                        self.probe("hedge", tagged(form.format(a=a, b=b)), task)
                    self.probe("hedge", tagged(a) + "\n" + tagged(b), task)
            for p in partials(gold):
                self.probe("partial", tagged(p), task)
            for value in NONFINITE:
                self.probe("nonfinite", tagged(value), task)
            m = NUMBER.search(gold)
            if m:
                for value in ("nan", "inf"):
                    self.probe("nonfinite", tagged(gold[: m.start()] + value + gold[m.end():]), task)
            distinct = list(dict.fromkeys(golds))
            w = wrongs[0] if wrongs else "0"
            for text in ("\n".join(distinct), " ".join(str(k) for k in range(-50, 1001)), ", ".join([w] * 30 + [gold]), " ".join([gold] * 30)):
                self.probe("long", tagged(text), task)

        options = sorted({str(t.answer) for t in chance_tasks})
        if 1 < len(options) <= 12:
            for task in tasks:
                for sep in (", ", " or ", "\n", " "):
                    self.probe("options", tagged(sep.join(options)), task)

        constants = self.constants(chance_tasks, modes)
        return {
            "tasks": len(tasks),
            "gold": self.gold,
            "equivalent": self.equivalent,
            "classes": self.counts,
            "constants": constants,
            "verifications": self.verifications,
        }

    def constants(self, tasks: list[Task], modes: list[str]) -> dict[str, Any]:
        n = len(tasks)
        shuffled = []
        for i, task in enumerate(tasks):
            for j in range(1, min(n, 6)):
                other = tasks[(i + j) % n]
                shuffled.append(self.reward(tagged(str(other.answer)), task))
        chance = sum(shuffled) / max(1, len(shuffled))
        p = max(chance, 1 / n)
        tolerance = 3 * math.sqrt(p * (1 - p) / n) + 1 / n  # sampling noise, and one hit more
        rates = {}
        over = []
        entry = self.counts["constant"]
        for c in dict.fromkeys(CONSTANTS + tuple(modes)):
            rate = sum(self.reward(tagged(c), t) for t in tasks) / n
            rates[c] = round(rate, 4)
            entry["probes"] += 1
            if rate > chance + tolerance:
                over.append(c)
                entry["false_positives"] += 1
                if len(entry["examples"]) < self.examples:
                    entry["examples"].append({"constant": c, "rate": round(rate, 4), "chance": round(chance, 4)})
        return {"n": n, "chance": round(chance, 4), "tolerance": round(tolerance, 4), "rates": rates, "over_chance": over}


def common_golds(tasks: list[Task]) -> list[str]:
    """The three most common golds of a sample that repeat (drawn apart from the tasks they are
    scored on, so that picking the most common does not favour them)."""
    golds = [str(t.answer) for t in tasks]
    return [g for g in sorted(set(golds), key=lambda g: (-golds.count(g), g))[:3] if golds.count(g) > 1]


def draw(spec: DomainSpec, levels: list[int], per_level: int, salt: str) -> list[Task]:
    tasks = []
    for level in levels:
        rng = seeded(spec.slug, level, salt)
        tasks += [spec.source.sample(rng, level) for _ in range(per_level)]
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks-per-level", type=int, default=4, help="tasks per level for the per-task probes")
    parser.add_argument("--levels", type=int, default=3, help="levels per domain, spread from 0 to the top (at most 4)")
    parser.add_argument("--chance-tasks", type=int, default=200, help="tasks for the constants and the shuffled-gold chance")
    parser.add_argument("--domains", default="", help="comma-separated slugs (default: every rg- domain)")
    parser.add_argument("--skip", default="", help="comma-separated slugs to leave out")
    parser.add_argument("--isolation", choices=["process", "inline"], default="process")
    parser.add_argument("--examples", type=int, default=3, help="examples kept per domain and class")
    parser.add_argument("--out", default="", help="also write the per-domain report to this JSON file")
    args = parser.parse_args()

    started = time.perf_counter()
    domains = {slug: spec for slug, spec in all_domains().items() if spec.family == "reasoning_gym"}
    if args.domains:
        domains = {slug: domains[slug] for slug in args.domains.split(",")}
    for slug in filter(None, args.skip.split(",")):
        domains.pop(slug, None)
    isolation = None if args.isolation == "process" else "inline"
    report: dict[str, Any] = {}
    totals = {c: 0 for c in CLASSES}
    passes = {c: 0 for c in CLASSES}
    probes = {c: 0 for c in CLASSES}
    affected = {c: 0 for c in CLASSES}
    gold_failures = equivalent_fn = tasks_total = verifications = 0
    over_chance: dict[str, list[str]] = {}
    for slug, spec in sorted(domains.items()):
        t0 = time.perf_counter()
        levels = levels_for(spec, args.levels)
        tasks = draw(spec, levels, args.tasks_per_level, "probe")
        per = max(1, args.chance_tasks // len(levels))
        chance_tasks = draw(spec, levels, per, "chance")
        mode_tasks = draw(spec, levels, max(1, per // 2), "modes")
        result = Survey(spec, isolation, args.examples).run(tasks, chance_tasks, common_golds(mode_tasks))
        result["levels"] = levels
        result["seconds"] = round(time.perf_counter() - t0, 2)
        report[slug] = result
        tasks_total += result["tasks"]
        verifications += result["verifications"]
        gold_failures += result["gold"]["failures"]
        equivalent_fn += result["equivalent"]["false_negatives"]
        flagged = []
        for c in CLASSES:
            fp = result["classes"][c]["false_positives"]
            totals[c] += fp
            passes[c] += result["classes"][c]["passes"]
            probes[c] += result["classes"][c]["probes"]
            if fp:
                affected[c] += 1
                flagged.append(f"{c}={fp}/{result['classes'][c]['passes']}")
        if result["constants"]["over_chance"]:
            over_chance[slug] = result["constants"]["over_chance"]
        status = " ".join(flagged) or "clean"
        print(f"{slug:32s} {result['seconds']:7.1f}s gold_fail={result['gold']['failures']} eq_fn={result['equivalent']['false_negatives']} "
              f"chance={result['constants']['chance']:.3f} {status}", flush=True)
        for c in CLASSES:
            for ex in result["classes"][c]["examples"][:1]:
                print(f"    {c}: {json.dumps(ex, ensure_ascii=False)[:240]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(json.dumps({
        "domains": len(report),
        "tasks": tasks_total,
        "probes": {**probes, "verifications": verifications},
        "false_positives": totals,
        "false_positive_passes": passes,
        "domains_with_false_positives": affected,
        "gold_failures": gold_failures,
        "equivalent_false_negatives": equivalent_fn,
        "constant_over_chance": over_chance,
        "wall_s": round(time.perf_counter() - started, 1),
    }))


if __name__ == "__main__":
    main()
