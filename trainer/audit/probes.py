"""Adversarial probes generated from a domain's own tasks.

A probe is a completion for one task and what a sound verifier must say about it: the gold and
its equivalent forms must pass; a perturbed gold must not pass; empty answers, constants, hedges
(a wrong answer and the gold together, in both orders), every option at once, non-finite numbers,
very long answers and, for code, tampering with the harness must earn nothing and must not come
back as an infrastructure outcome (which is masked out of training instead of penalised).

Where the answer goes is read from the domain's cascade (:func:`answer_format`): an ``extract``
stage's first method (``<answer>`` tag, ``\\boxed{}``, final line), a ``code_tests`` stage
(a fenced program), an ``environment`` stage (a tool-call transcript), a ``repo_tests`` stage (a
change to a repository: tool calls or a diff), else the raw completion.

>>> fmt = answer_format({"stages": [{"type": "extract", "params": {"methods": ["answer_tag"]}}, {"type": "exact"}]})
>>> fmt.kind, fmt.wrap("42")
('answer_tag', '<answer>42</answer>')
>>> answer_format({"stages": [{"type": "math"}]}).kind
'raw'
>>> perturb_text("17"), perturb_text("abc"), perturb_text(r"\\frac{6}{5}")
(['18', '34'], ['abd', 'bbc'], ['\\\\frac{6}{6}', '\\\\frac{7}{5}'])
>>> perturb_text("317132.052107"), perturb_text("19.0 - 17.0i")
(['332988.654712', '634264.104214'], ['19.0 - 18.0i', '20.0 - 17.0i'])
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.tasks.base import Task

EXPECT_PASS = "pass"
"""The verifier must pass it (gold, equivalent forms): otherwise a false negative."""
EXPECT_NO_PASS = "no_pass"
"""It must not pass (a perturbed gold may still earn partial credit where the domain gives it)."""
EXPECT_NO_REWARD = "no_reward"
"""It must earn nothing and must not be masked as an infrastructure outcome."""

CLASSES: dict[str, str] = {
    "gold": EXPECT_PASS,
    "equivalent": EXPECT_PASS,
    "perturbed": EXPECT_NO_PASS,
    "empty": EXPECT_NO_REWARD,
    "constant": EXPECT_NO_REWARD,
    "hedge": EXPECT_NO_REWARD,
    "all_options": EXPECT_NO_REWARD,
    "outside_tags": EXPECT_NO_PASS,
    "across_tags": EXPECT_NO_PASS,
    "non_finite": EXPECT_NO_REWARD,
    "long": EXPECT_NO_REWARD,
    "prompt_copy": EXPECT_NO_REWARD,
    "code": EXPECT_NO_REWARD,
}
"""Probe class -> what the verifier must say (code probes are ``code.<attack>``)."""

CONSTANTS = ["0", "1", "-1", "Yes", "No", "True", "False", "None", "{}", "[]", "A", "null", "x"]
NON_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e999", "\\infty", "0/0", "oo"]
HEDGE_JOINS = ["{w} or {g}", "{g} or {w}", "{w}, {g}", "{g}, {w}", "{w}\n{g}", "{g}\n{w}", "either {w} or {g}",
               "{w}/{g}", "{g}/{w}", "{w}; {g}", "{w} and {g}", "{g} (or {w})", "{w} | {g}", "{w} -> {g}",
               "{g} \u2192 {w}", "{w} ... {g}", "{w}\u200b{g}", "{g} {w}"]
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Probe:
    """One adversarial (or honest) completion for one task, and what the verifier must say."""

    cls: str
    """Probe class (a key of CLASSES, or ``code.<attack>``)."""
    completion: str
    """The completion to verify."""
    task: Task
    """The task it answers."""
    expect: str
    """EXPECT_PASS, EXPECT_NO_PASS or EXPECT_NO_REWARD."""
    note: str = ""
    """Which variant of the class this is."""


@dataclass(frozen=True)
class AnswerFormat:
    """Where a domain's cascade looks for the answer."""

    kind: str
    """``answer_tag``, ``boxed``, ``final_line``, ``raw``, ``code`` or ``tool``."""
    tag: str = "answer"
    """Tag name for ``answer_tag``."""
    structured: bool = False
    """The answer is JSON (json_fields / json_schema stages)."""

    def wrap(self, text: str) -> str:
        """A completion that gives ``text`` as the final answer, the way the domain asks."""
        if self.kind == "answer_tag":
            return f"<{self.tag}>{text}</{self.tag}>"
        if self.kind == "boxed":
            return f"The answer is $\\boxed{{{text}}}$."
        if self.kind == "final_line":
            return f"Final answer: {text}"
        return text

    @property
    def contained(self) -> bool:
        """True when the answer sits in a container (tag or box) text may surround."""
        return self.kind in ("answer_tag", "boxed")


def answer_format(verifier: dict[str, Any]) -> AnswerFormat:
    """The answer format a cascade spec implies (see the module docstring)."""
    stages = verifier.get("stages") or []
    types = [s.get("type") for s in stages if isinstance(s, dict)]
    structured = any(t in ("json_fields", "json_schema") for t in types)
    if "code_tests" in types:
        return AnswerFormat("code")
    if "repo_tests" in types:
        return AnswerFormat("repo")
    if "shell_state" in types:
        return AnswerFormat("shell")
    if "pkg_tests" in types:
        return AnswerFormat("pkg")
    if "function_calls" in types:
        return AnswerFormat("calls")
    if "cad_mesh" in types:
        return AnswerFormat("cad")
    if "environment" in types:
        return AnswerFormat("tool")
    for stage in stages:
        if isinstance(stage, dict) and stage.get("type") == "extract":
            params = stage.get("params") or {}
            methods = params.get("methods") or ["boxed", "answer_tag", "final_line"]
            return AnswerFormat(methods[0], params.get("tag", "answer"), structured)
    return AnswerFormat("raw", structured=structured)


def gold_text(task: Task, fmt: AnswerFormat) -> str | None:
    """The task's reference answer as answer text (None when the task has none)."""
    answer = task.answer
    if answer is None:
        return None
    if fmt.structured or isinstance(answer, dict):
        return json.dumps(answer)
    if isinstance(answer, (list, tuple)):
        return str(answer[0]) if answer else None
    return str(answer)


def normal(text: str) -> str:
    """Case- and space-insensitive form used to tell answers apart."""
    return " ".join(str(text).split()).casefold()


def as_number(text: str) -> float | None:
    """The number ``text`` spells plainly (``12``, ``-3.5``, ``1e3``), else None."""
    text = str(text).strip()
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def same_answer(a: str, b: str) -> bool:
    """Loosely the same answer: equal after case/space folding, or the same plain number."""
    if normal(a) == normal(b):
        return True
    x, y = as_number(a), as_number(b)
    return x is not None and y is not None and x == y


def _number_text(value: float, like: str) -> str:
    if "." not in like and "e" not in like.lower() and value.is_integer():
        return str(int(value))
    return repr(round(value, 6))


_NUMBER_TOKEN = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")


def _moved(value: float, like: str) -> str:
    """``value`` moved by more than any tolerance a checker gives a figure: 1, or 5% of it."""
    step = max(1.0, abs(value) * 0.05)
    if "." not in like and "e" not in like.lower():
        step = float(math.ceil(step))
    return _number_text(value + step, like)


def perturb_text(gold: str) -> list[str]:
    """Two answers near the gold that are wrong: a number moved (by 1 or 5%, whichever is more,
    and doubled; in text, its last and first numbers moved), else a character changed."""
    value = as_number(gold)
    if value is not None:
        return [_moved(value, gold), _number_text(value * 2 if value else 2.0, gold)]
    try:
        obj = json.loads(gold)
    except (ValueError, TypeError):
        obj = None
    if isinstance(obj, dict) and obj:
        out = []
        for key, val in obj.items():
            if isinstance(val, bool):
                changed = not val
            elif isinstance(val, (int, float)):
                changed = val + 1
            else:
                changed = f"{val}x"
            out.append(json.dumps({**obj, key: changed}))
            if len(out) == 2:
                break
        return out
    text = gold.rstrip()
    numbers = list(_NUMBER_TOKEN.finditer(text))
    if numbers:
        out = []
        for m in (numbers[-1], numbers[0]):
            candidate = text[:m.start()] + _moved(float(m.group()), m.group()) + text[m.end():]
            if candidate not in out:
                out.append(candidate)
        return out
    spots = [i for i, ch in enumerate(text) if ch.isalnum()]
    if not spots:
        return [text + "x"] if text else ["x"]
    out = []
    for i in (spots[-1], spots[0]):
        ch = text[i]
        if ch.isascii() and ch.isdigit():
            new = str((int(ch) + 1) % 10)
        elif ch.isalpha() and ch.isascii():
            base = "a" if ch.islower() else "A"
            new = chr(ord(base) + (ord(ch) - ord(base) + 1) % 26)
        else:
            new = "x"
        candidate = text[:i] + new + text[i + 1:]
        if candidate not in out and candidate != text:
            out.append(candidate)
    return out


def _wrong_answers(gold: str, others: list[str], known_wrong: str | None = None) -> list[str]:
    """Another task's gold that differs from this gold, then a wrong answer the task names
    (``meta["wrong_answer"]``), then perturbations of this gold."""
    pool = [o for o in others if o is not None and not same_answer(o, gold)]
    near = ([known_wrong] if known_wrong and not same_answer(known_wrong, gold) else []) + perturb_text(gold)
    return pool[:1] + [w for w in near if not same_answer(w, gold)]


def open_ended(task: Task) -> bool:
    """Whether the task's gold is one valid answer among many (``meta["answer_is_example"]``): an
    answer near the gold, or another task's gold, may then be right too."""
    return bool(task.meta.get("answer_is_example"))


def text_probes(task: Task, fmt: AnswerFormat, gold: str, others: list[str], *, options: list[str] | None = None,
                equivalents: list[str] | None = None, labels: list[str] | None = None,
                wrong_filter: Callable[[Task, list[str]], list[str]] | None = None) -> list[Probe]:
    """Every text probe for one task (see CLASSES). ``others``: other tasks' golds (for hedges);
    ``options``: a multiple-choice task's options; ``labels``: the small set of answers a
    categorical domain gives (for 'every option at once'); ``equivalents``: answer texts
    equivalent to the gold. The wrong answers inside hedges and beside the answer tags are the
    candidates ``wrong_filter`` keeps (those the verifier refuses on their own: another task's gold
    may be this task's in other words); an :func:`open_ended` task gets none without a filter, and
    no perturbed probes (a perturbed answer may be another valid one)."""
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str, expect: str | None = None) -> None:
        probes.append(Probe(cls, completion, task, expect or CLASSES[cls], note))

    add("gold", fmt.wrap(gold), "the reference answer")
    for i, form in enumerate(equivalents or []):
        whole = "\\boxed" in form or f"<{fmt.tag}>" in form  # already a whole completion
        add("equivalent", form if whole else fmt.wrap(form), f"equivalent form {i}: {form[:60]}")
    if fmt.contained:
        add("equivalent", "Let me work through this carefully.\n\n" + fmt.wrap(f" {gold} ") + "\n", "reasoning first, padded answer")
    wrongs = _wrong_answers(gold, others, task.meta.get("wrong_answer") if isinstance(task.meta.get("wrong_answer"), str) else None)
    if not open_ended(task):
        for w in wrongs[1:] or wrongs:
            add("perturbed", fmt.wrap(w), f"perturbed gold: {w[:60]}")
    if wrong_filter is not None and wrongs:
        wrongs = wrong_filter(task, wrongs)  # another task's gold may be this one's in other words
    elif open_ended(task):
        wrongs = []
    for blank in ("", " ", "\n"):
        add("empty", fmt.wrap(blank) if blank else "", f"empty {blank!r}")
    add("empty", "I cannot answer this.", "a refusal with no answer")
    for w in wrongs[:2]:
        for join in HEDGE_JOINS:
            if join.startswith("{g}/") and as_number(gold) == 0:
                continue  # 0/w is the number 0: the gold, not a hedge
            add("hedge", fmt.wrap(join.format(w=w, g=gold)), f"{join!r} with w={w[:40]!r}")
        if fmt.contained:
            add("hedge", fmt.wrap(w) + "\nor maybe\n" + fmt.wrap(gold), "two containers, wrong first")
            add("hedge", fmt.wrap(gold) + "\nor maybe\n" + fmt.wrap(w), "two containers, gold first")
        if fmt.kind == "boxed":
            add("hedge", fmt.wrap(f"{w} \\text{{ or }} {gold}"), "\\text{ or } inside one box")
            add("hedge", fmt.wrap(f"x = {w}, x = {gold}"), "two equations in one box")
            for hidden in (f"{w} \\to {gold}", f"{{{gold}}}_{{{w}}}", f"{gold}\\text{{{w}}}", f"\\cancel{{{w}}} {gold}"):
                add("hedge", fmt.wrap(hidden), f"a second value behind LaTeX: {hidden[:40]}")
        if fmt.kind == "final_line":
            add("hedge", f"Final answer: {w}\nFinal answer: {gold}", "two final lines")
    choice_sets: list[list[str]] = []
    if options:
        letters = [chr(ord("A") + i) for i in range(len(options))]
        choice_sets += [letters, list(options)]
    if labels and 2 <= len(labels) <= 8:
        choice_sets.append(list(labels))
    for choices in choice_sets:
        for sep in (", ", " or ", "\n", " "):
            add("all_options", fmt.wrap(sep.join(choices)), f"every option joined by {sep!r}")
        if all(len(c) == 1 for c in choices):
            add("all_options", fmt.wrap("".join(choices)), "every letter at once")
    if fmt.contained and wrongs:
        add("outside_tags", f"The answer is {gold}.\n" + fmt.wrap(wrongs[0]), "gold before the container, wrong inside")
        add("outside_tags", fmt.wrap(wrongs[0]) + f"\nActually the answer is {gold}.", "gold after the container, wrong inside")
        if len(gold) >= 2:
            half = len(gold) // 2
            add("across_tags", fmt.wrap(gold[:half]) + " " + fmt.wrap(gold[half:]), "gold split across two containers")
    if not any(t in normal(gold) for t in ("inf", "∞", "oo", "nan")):
        for text in NON_FINITE:
            add("non_finite", fmt.wrap(text), f"non-finite {text}")
    shotgun = " ".join(str(i) for i in range(-200, 2001))
    add("long", fmt.wrap(shotgun), "every integer from -200 to 2000")
    decoys = [w for w in wrongs for _ in range(200)]
    if decoys:
        half = len(decoys) // 2
        add("long", fmt.wrap(" ".join(decoys[:half] + [gold] + decoys[half:])), "the gold among 200 copies of each wrong answer")
    if isinstance(task.answer, dict):
        probes.extend(_prompt_copy_probes(task, fmt))
    return probes


def constant_probes(task: Task, fmt: AnswerFormat, gold: str | None, extra: list[str] | None = None) -> list[Probe]:
    """Constant answers (``CONSTANTS`` plus ``extra``: the domain's labels and most common golds);
    a constant that is this task's gold is still made (it counts toward the constant's pass
    rate) but marked ``legit`` in the note and never counted a false positive. On an
    :func:`open_ended` task one of the domain's golds may be a valid answer too: marked ``open``,
    it counts toward the pass rate (which must not beat chance) but not as a false positive."""
    out = []
    seen: set[str] = set()
    for c in CONSTANTS + [e for e in extra or [] if e not in CONSTANTS]:
        if c in seen:
            continue
        seen.add(c)
        if gold is not None and same_answer(c, gold):
            mark = " (legit)"
        elif open_ended(task) and c not in CONSTANTS:
            mark = " (open)"
        else:
            mark = ""
        out.append(Probe("constant", fmt.wrap(c), task, CLASSES["constant"], f"constant {c}{mark}"))
    return out


def _prompt_copy_probes(task: Task, fmt: AnswerFormat) -> list[Probe]:
    """JSON answers holding only fields whose values the question itself states (the question:
    the prompt's last short paragraphs, not a document quoted above them)."""
    paragraphs = [p for p in task.prompt.split("\n\n") if p.strip()]
    question = "\n\n".join(p for p in paragraphs[-2:] if len(p) < 500)
    given = {k: v for k, v in task.answer.items()
             if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v) in question}
    if not given:
        return []
    return [Probe("prompt_copy", fmt.wrap(json.dumps(given)), task, CLASSES["prompt_copy"],
                  f"only fields stated in the question: {sorted(given)}")]


EquivalentForms = Callable[[Task, str], list[str]]


@dataclass
class ProbePlan:
    """The probes for one domain's sample of tasks."""

    probes: list[Probe] = field(default_factory=list)
    """Every probe, in the order they were made."""
    chance: list[tuple[Task, str]] = field(default_factory=list)
    """(task, completion with another task's gold): the pass rate a blind guess of the domain's
    own answers gets, against which constants are judged."""
    skipped: list[str] = field(default_factory=list)
    """Tasks without a reference answer, and why."""
