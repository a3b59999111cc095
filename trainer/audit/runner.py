"""Run a domain's probes through its real verify path and say what the verifier got wrong.

:func:`audit_domain` samples tasks from the domain's own source (levels in turn, fixed seeds),
builds the probes of :mod:`trainer.audit.probes` and verifies them with ``verify_many`` (the
caller's real path: the cascade with the sandbox and judges a worker installs; by default the
cascade in this process). A false positive is a probe that must not pass (or must earn nothing)
and did, or came back as an infrastructure outcome; a false negative is a gold (or an equivalent
form of it) that did not pass. A constant answer whose pass rate beats the rate at which other
tasks' golds pass (a blind guess of the domain's own answers, and the label frequencies of a
categorical domain) is a false positive of class ``constant_bias``.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.audit.probes import (
    as_number,
    EXPECT_NO_PASS,
    EXPECT_PASS,
    AnswerFormat,
    Probe,
    answer_format,
    constant_probes,
    gold_text,
    normal,
    open_ended,
    text_probes,
)
from trainer.audit.pkg_probes import pkg_probes
from trainer.audit.structured import cad_probes, call_probes, code_probes, repo_probes, shell_probes, tool_probes
from trainer.catalogue.humaneval import broken_completion, reference_completion
from trainer.catalogue.math_gen import equivalent_forms
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task, TaskSource
from trainer.verifiers import compile_cascade
from trainer.verifiers.context import NO_CONTEXT, VerifyContext

AUDITOR_VERSION = "2026-12-04.1"
"""Changes whenever the probe set changes: audits of different versions are not comparable."""
EXAMPLES_PER_CLASS = 5
"""Failing examples kept per probe class."""
MAX_EXAMPLE_CHARS = 600
"""Characters of a completion kept in an example."""

VerifyMany = Callable[[list[tuple[str, Task]]], list[Verification]]


@dataclass
class ClassResult:
    """One probe class's tally."""

    probes: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"probes": self.probes, "false_positives": self.false_positives,
                "false_negatives": self.false_negatives, "examples": self.examples}


@dataclass
class AuditReport:
    """What the audit of one domain (version) found."""

    domain: str
    tasks: int = 0
    probes: int = 0
    false_positives: int = 0
    false_negatives_gold: int = 0
    false_negatives_equivalent: int = 0
    masked: int = 0
    """Probes that must earn nothing but came back as an infrastructure outcome (counted in FP)."""
    wall_s: float = 0.0
    classes: dict[str, ClassResult] = field(default_factory=dict)
    constant_bias: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    auditor_version: str = AUDITOR_VERSION

    @property
    def clean(self) -> bool:
        """No false positive: nothing a policy could game was found."""
        return self.false_positives == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain, "tasks": self.tasks, "probes": self.probes,
            "false_positives": self.false_positives, "false_negatives_gold": self.false_negatives_gold,
            "false_negatives_equivalent": self.false_negatives_equivalent, "masked": self.masked,
            "wall_s": round(self.wall_s, 3), "auditor_version": self.auditor_version,
            "classes": {name: c.to_dict() for name, c in sorted(self.classes.items())},
            "constant_bias": self.constant_bias, "skipped": self.skipped,
        }


def default_verify_many(verifier: dict[str, Any], workers: int = 4, context: VerifyContext | None = None) -> VerifyMany:
    """The cascade in this process (its stages under their own isolation, its sandbox and judges
    from ``context``), a few items at once."""
    cascade = compile_cascade(verifier, context or NO_CONTEXT)

    def one(item: tuple[str, Task]) -> Verification:
        try:
            return cascade(item[0], item[1])
        except Exception as exc:  # noqa: BLE001 - a crashing verifier is an outcome
            return Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": f"{type(exc).__name__}: {exc}"[:500]})

    def verify_many(items: list[tuple[str, Task]]) -> list[Verification]:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, items))

    return verify_many


def sample_tasks(source: TaskSource, n: int, *, seed: int = 0, max_level: int = 3, at_least: int = 0,
                 budget_s: float | None = None) -> tuple[list[Task], list[str]]:
    """``n`` tasks, levels 0..min(levels-1, max_level) in turn, each from its own fixed seed;
    distinct ids only. Past ``at_least`` tasks, drawing stops once ``budget_s`` seconds are spent
    (some generators take seconds per task). Returns the tasks and the errors of failed draws."""
    levels = max(1, min(int(getattr(source, "levels", 1) or 1), max_level + 1))
    tasks: list[Task] = []
    errors: list[str] = []
    seen: set[str] = set()
    attempt = 0
    started = time.perf_counter()
    while len(tasks) < n and attempt < 3 * n:
        if budget_s is not None and len(tasks) >= at_least and time.perf_counter() - started > budget_s:
            break
        level = attempt % levels
        try:
            task = source.sample(random.Random(seed * 1_000_003 + attempt), level)
        except Exception as exc:  # noqa: BLE001 - a generator failing is reported, not fatal
            errors.append(f"draw {attempt} at level {level}: {type(exc).__name__}: {exc}"[:300])
            task = None
        attempt += 1
        if task is not None and task.id not in seen:
            seen.add(task.id)
            tasks.append(task)
    return tasks, errors


def _equivalents(family: str, task: Task, gold: str, fmt: AnswerFormat) -> list[str]:
    """Answer texts equivalent to the gold that a sound verifier of this family must accept."""
    out: list[str] = []
    if family == "math":
        out += [f for f in equivalent_forms(task) if f != gold]
    if family in ("math", "documents"):
        value = as_number(gold)
        if value is not None:
            if value.is_integer() and abs(value) >= 1000 and "." not in gold:
                out.append(f"{int(value):,}")
            if value.is_integer() and "." not in gold:
                out.append(f"{int(value)}.0")
            elif "." in gold:
                out.append(gold + "0")
    if fmt.structured and isinstance(task.answer, dict):
        items = list(task.answer.items())
        out.append(json.dumps(dict(reversed(items))))
        out.append(json.dumps(task.answer, indent=2))
    return out


def _code_gold(family: str, task: Task) -> tuple[str | None, str | None]:
    """The reference program of a code task and a broken variant of it (None when unknown)."""
    answer = task.answer if isinstance(task.answer, dict) else {}
    if "canonical_solution" in answer and "prompt" in answer and answer.get("entry_point"):
        return reference_completion(task), broken_completion(task)
    solution = answer.get("answer") or answer.get("solution")
    if isinstance(solution, str) and "def " in solution:
        return f"```python\n{solution}\n```", None
    return None, None


def plan_probes(*, family: str, verifier: dict[str, Any], tasks: list[Task], chance_tasks: list[Task],
                wrong_filter: Callable[[Task, list[str]], list[str]] | None = None,
                ) -> tuple[list[Probe], list[tuple[str, Task, str]], list[str]]:
    """(probes, chance items (completion, task, constant-or-'shuffled'), skipped notes) for a
    sample. ``wrong_filter`` picks, for an open-ended task, the candidate wrong answers the
    verifier refuses on their own (see :func:`trainer.audit.probes.text_probes`)."""
    fmt = answer_format(verifier)
    if fmt.kind in ("code", "repo", "calls", "cad", "tool", "shell", "pkg"):
        probes, skipped = _structured_probes(family, fmt, tasks)
        return probes, [], skipped
    golds = [gold_text(t, fmt) for t in chance_tasks]
    labels = _labels(golds)
    probes: list[Probe] = []
    skipped: list[str] = []
    for i, task in enumerate(tasks):
        gold = golds[i]
        if gold is None:
            skipped.append(f"{task.id}: no reference answer")
            continue
        others = [g for j, g in enumerate(golds) if j != i and g is not None]
        options = task.meta.get("choices") or task.meta.get("options")
        probes += text_probes(task, fmt, gold, others[i:] + others[:i],
                              options=[str(o) for o in options] if isinstance(options, (list, tuple)) else None,
                              equivalents=_equivalents(family, task, gold, fmt), labels=labels, wrong_filter=wrong_filter)
    if any(open_ended(t) for t in tasks):
        skipped.append("open-ended tasks (the gold is one valid answer among many): no perturbed probes; their "
                       "wrong answers are those the verifier refuses on their own")
    return probes, _chance_items(chance_tasks, fmt, golds, labels), skipped


def _structured_probes(family: str, fmt, tasks: list[Task]) -> tuple[list[Probe], list[str]]:
    """(probes, skipped notes) of a domain whose answers are programs, repositories, calls, CAD
    solids or tool transcripts: each kind's own probes; no chance items (a constant cannot be one)."""
    probes: list[Probe] = []
    skipped: list[str] = []
    for task in tasks:
        if fmt.kind == "code":
            gold, broken = _code_gold(family, task)
            if gold is None:
                skipped.append(f"{task.id}: no reference solution; only hostile and constant programs were run")
            probes += code_probes(task, gold, broken)
        elif fmt.kind == "repo":
            probes += repo_probes(task)
        elif fmt.kind == "shell":
            probes += shell_probes(task)
        elif fmt.kind == "pkg":
            probes += pkg_probes(task)
        elif fmt.kind == "calls":
            probes += call_probes(task)
        elif fmt.kind == "cad":
            probes += cad_probes(task)
        elif (gold := gold_text(task, fmt)) is None:  # tool
            skipped.append(f"{task.id}: no reference transcript")
        else:
            probes += tool_probes(task, gold)
    return probes, skipped


def _labels(golds: list[str | None]) -> list[str] | None:
    """A classification domain's labels (2 to 8 golds, each at least twice, in a sample of 16 or
    more), each in the form first seen; None for any other domain."""
    counts = Counter(normal(g) for g in golds if g is not None)
    if not (len(golds) >= 16 and 2 <= len(counts) <= 8 and min(counts.values()) >= 2):
        return None
    first_form: dict[str, str] = {}
    for g in golds:
        if g is not None:
            first_form.setdefault(normal(g), g)
    return [first_form[k] for k in sorted(first_form)]


def _chance_items(chance_tasks: list[Task], fmt, golds: list[str | None], labels: list[str] | None) -> list[tuple[str, Task, str]]:
    """What a policy that ignores the task would answer, each as (completion, task, note): the
    constants (the labels, and the sample's most common golds), and another task's gold."""
    chance: list[tuple[str, Task, str]] = []
    n = len(chance_tasks)
    first_seen: dict[str, str] = {}
    for g in golds:
        if g is not None:
            first_seen.setdefault(normal(g), g)
    # The domain's most common golds become constants too; they are picked from the first half of
    # the sample and scored on the second, since scored on the tasks that made them common they
    # would beat chance by construction.
    half = n // 2
    picked = Counter(normal(g) for g in golds[:half] if g is not None)
    common = [first_seen[k] for k, count in picked.most_common(2) if count >= 2 and len(first_seen[k]) <= 200]
    by_level: dict[int, list[int]] = {}
    for i, task in enumerate(chance_tasks):
        by_level.setdefault(task.level, []).append(i)
    for i, task in enumerate(chance_tasks):
        extra = list(labels or []) + (common if i >= half else [])
        for probe in constant_probes(task, fmt, golds[i], extra):
            chance.append((probe.completion, task, probe.note))
        # Another task's gold at the same level: what a guess that knows only the level earns.
        peers = by_level[task.level] if len(by_level[task.level]) > 1 else list(range(n))
        other = golds[peers[(peers.index(i) + 1) % len(peers)]] if n > 1 else None
        if other is not None:
            chance.append((fmt.wrap(other), task, "shuffled"))
    return chance

def _judge(probe: Probe, v: Verification) -> str | None:
    """'fn', 'fp' or None (right) for one probe's verification."""
    if probe.expect == EXPECT_PASS:
        return None if v.outcome is Outcome.PASS else "fn"
    if v.is_infrastructure:
        return "fp"
    if probe.expect == EXPECT_NO_PASS:
        return "fp" if v.outcome is Outcome.PASS else None
    return "fp" if v.score > 0 else None


def _example(probe: Probe, v: Verification) -> dict[str, Any]:
    text = probe.completion
    if len(text) > MAX_EXAMPLE_CHARS:
        text = text[: MAX_EXAMPLE_CHARS // 2] + f" ...[{len(text) - MAX_EXAMPLE_CHARS} chars]... " + text[-MAX_EXAMPLE_CHARS // 2:]
    error = v.details.get("error") or v.details.get("stage_outcome") or ""
    return {"task_id": probe.task.id, "completion": text, "outcome": v.outcome.value, "score": round(float(v.score), 4),
            "expect": probe.expect, "note": probe.note, "error": str(error)[:300]}


def chance_rate(golds: list[str | None], shuffled: float, levels: list[int] | None = None) -> float:
    """What guessing earns without reading the task: for a categorical domain (at most 8 labels,
    each seen twice), a uniform guess over its labels (1/k); otherwise the rate at which another
    task's gold at the same level is right (label frequencies squared within each level, weighted
    by the level's share, and the verifier's own shuffled-gold rate).

    >>> chance_rate(["a", "b", "c", "d"], 0.0), round(chance_rate(["a", "a", "b", "b", "c", "d"], 0.0, [0, 0, 0, 0, 1, 1]), 3)
    (0.0, 0.222)
    """
    counts = Counter(normal(g) for g in golds if g is not None)
    n = sum(counts.values())
    if n == 0:
        return shuffled
    if n >= 16 and 2 <= len(counts) <= 8 and min(counts.values()) >= 2:
        return 1.0 / len(counts)
    groups: dict[int, Counter[str]] = {}
    for g, level in zip(golds, levels or [0] * len(golds)):
        if g is not None:
            groups.setdefault(level, Counter())[normal(g)] += 1
    weighted = total = 0
    for group in groups.values():
        size = sum(group.values())
        if size >= 2:  # another task of the level: pairs without replacement
            weighted += sum(c * (c - 1) for c in group.values()) / (size - 1)
            total += size
    return max(shuffled, weighted / total if total else 0.0)


def constant_bias(chance: list[tuple[str, Task, str]], results: list[Verification], golds: list[str | None] | None = None,
                  levels: list[int] | None = None) -> list[dict[str, Any]]:
    """Each constant's mean reward over the chance sample against what guessing earns
    (:func:`chance_rate`); flagged when it beats that by more than sampling noise (3 sigma)."""
    by_note: dict[str, list[float]] = {}
    shuffled: list[float] = []
    for (completion, task, note), v in zip(chance, results):
        score = float(v.score) if v.reward is not None else 0.0
        if note == "shuffled":
            shuffled.append(score)
            continue
        constant = note.removeprefix("constant ").removesuffix(" (legit)").removesuffix(" (open)")
        by_note.setdefault(constant, []).append(score)
    n_tasks = max((len(s) for s in by_note.values()), default=0)
    if n_tasks == 0:
        return []
    blind = sum(shuffled) / len(shuffled) if shuffled else 0.0
    chance = chance_rate(golds or [], blind, levels)
    out = []
    for constant, scores in sorted(by_note.items()):
        rate = sum(scores) / len(scores)
        sigma = math.sqrt(max(chance * (1 - chance), 1.0 / len(scores)) / len(scores))
        flagged = len(scores) >= 8 and rate * len(scores) >= 3 and rate > chance + max(0.05, 3 * sigma)
        out.append({"constant": constant, "rate": round(rate, 4), "chance": round(chance, 4), "tasks": len(scores),
                    "flagged": bool(flagged)})
    return out


def audit_domain(
    *,
    slug: str,
    verifier: dict[str, Any],
    source: TaskSource,
    family: str = "",
    verify_many: VerifyMany | None = None,
    tasks: int = 12,
    chance_tasks: int = 48,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    chunk: int = 64,
    sample_budget_s: float = 20.0,
    context: VerifyContext | None = None,
) -> AuditReport:
    """Audit one domain: probes from ``tasks`` sampled tasks, constants over up to
    ``chance_tasks`` (as many as ``sample_budget_s`` seconds of drawing give, past ``tasks``)."""
    started = time.perf_counter()
    report = AuditReport(domain=slug)
    verify_many = verify_many or default_verify_many(verifier, context=context)
    sample, errors = sample_tasks(source, max(tasks, chance_tasks), seed=seed, at_least=tasks, budget_s=sample_budget_s)
    report.skipped += errors[:10]
    fmt = answer_format(verifier)

    def refused_alone(task: Task, candidates: list[str]) -> list[str]:
        results = verify_many([(fmt.wrap(w), task) for w in candidates])
        return [w for w, v in zip(candidates, results) if not v.is_infrastructure and v.score <= 0]

    probes, chance, skipped = plan_probes(family=family, verifier=verifier, tasks=sample[:tasks], chance_tasks=sample,
                                          wrong_filter=refused_alone)
    report.skipped += skipped
    report.tasks = len(sample[:tasks])
    items = [(p.completion, p.task) for p in probes] + [(c, t) for c, t, _ in chance]
    results: list[Verification] = []
    for start in range(0, len(items), chunk):
        results += verify_many(items[start:start + chunk])
        if progress is not None:
            progress(len(results), len(items))
    probe_results, chance_results = results[: len(probes)], results[len(probes):]
    _score_probes(report, probes, probe_results)
    _score_constants(report, chance, chance_results, _same_to_the_verifier(chance, chance_results, sample, fmt, verify_many))
    _score_constant_bias(report, constant_bias(chance, chance_results, [gold_text(t, fmt) for t in sample], [t.level for t in sample]))
    report.wall_s = time.perf_counter() - started
    return report


def _score_probes(report: AuditReport, probes: list[Probe], results: list[Verification]) -> None:
    """Count each probe's verdict in its class and the report: a false positive (and whether an
    infrastructure outcome masked it), a false negative on a gold or an equivalent answer."""
    for probe, v in zip(probes, results):
        cls = report.classes.setdefault(probe.cls, ClassResult())
        cls.probes += 1
        report.probes += 1
        verdict = _judge(probe, v)
        if verdict is None:
            continue
        if verdict == "fp":
            cls.false_positives += 1
            report.false_positives += 1
            report.masked += int(v.is_infrastructure)
        else:
            cls.false_negatives += 1
            if probe.cls == "gold":
                report.false_negatives_gold += 1
            else:
                report.false_negatives_equivalent += 1
        if len(cls.examples) < EXAMPLES_PER_CLASS:
            cls.examples.append(_example(probe, v))


def _score_constants(report: AuditReport, chance: list[tuple[str, Task, str]], results: list[Verification],
                     same: set[int]) -> None:
    """The constant answers: one that earns a reward (or an infrastructure outcome, which would
    mask it) is a false positive, unless it is a legitimate answer or the same to the verifier as
    the task's gold (``same``)."""
    constants = ClassResult()
    for k, ((completion, task, note), v) in enumerate(zip(chance, results)):
        if note == "shuffled":
            continue
        constants.probes += 1
        report.probes += 1
        if not note.endswith(("(legit)", "(open)")) and k not in same and (v.is_infrastructure or v.score > 0):
            constants.false_positives += 1
            report.false_positives += 1
            report.masked += int(v.is_infrastructure)
            if len(constants.examples) < EXAMPLES_PER_CLASS:
                constants.examples.append(_example(Probe("constant", completion, task, "no_reward", note), v))
    if constants.probes:
        report.classes["constant"] = _merge(report.classes.get("constant"), constants)


def _score_constant_bias(report: AuditReport, bias_rows: list[dict[str, Any]]) -> None:
    """A constant that beats a blind guess of the domain's answers is a false positive of its own class."""
    report.constant_bias = bias_rows
    flagged = [c for c in bias_rows if c["flagged"]]
    if not bias_rows:
        return
    bias = ClassResult(probes=len(bias_rows), false_positives=len(flagged))
    bias.examples = [{"task_id": "", "completion": c["constant"], "outcome": "pass", "score": c["rate"],
                      "expect": "at most chance", "note": f"constant {c['constant']!r} scores {c['rate']:.2f} "
                      f"where a blind guess of the domain's answers scores {c['chance']:.2f}", "error": ""}
                     for c in flagged[:EXAMPLES_PER_CLASS]]
    report.classes["constant_bias"] = bias
    report.probes += bias.probes
    report.false_positives += len(flagged)


def _same_to_the_verifier(chance: list[tuple[str, Task, str]], results: list[Verification], sample: list[Task],
                          fmt: AnswerFormat, verify_many: VerifyMany) -> set[int]:
    """Indexes of the chance items where a constant that is another task's gold passed and is the
    same answer as this task's gold to the verifier: each passes on the other's task (``(Q ∧ P)``
    and ``(P ∧ Q)``, ``0.5`` and ``1/2``). A text comparison cannot see that; a verifier that
    accepts a wrong answer on one task does not also accept this gold on the other."""
    owner: dict[str, Task] = {}
    for task in sample:
        gold = gold_text(task, fmt)
        if gold is not None:
            owner.setdefault(normal(gold), task)
    asks: list[tuple[int, str, Task]] = []
    for k, ((_, task, note), v) in enumerate(zip(chance, results)):
        constant = note.removeprefix("constant ")
        other = owner.get(normal(constant))
        gold = gold_text(task, fmt)
        if note.startswith("constant ") and not note.endswith((" (legit)", " (open)")) and other is not None and other is not task \
                and gold is not None and v.outcome is Outcome.PASS:
            asks.append((k, gold, other))
    if not asks:
        return set()
    back = verify_many([(fmt.wrap(gold), other) for _, gold, other in asks])
    return {k for (k, _, _), v in zip(asks, back) if v.outcome is Outcome.PASS}


def _merge(a: ClassResult | None, b: ClassResult) -> ClassResult:
    if a is None:
        return b
    return ClassResult(a.probes + b.probes, a.false_positives + b.false_positives, a.false_negatives + b.false_negatives,
                       (a.examples + b.examples)[:EXAMPLES_PER_CLASS])

