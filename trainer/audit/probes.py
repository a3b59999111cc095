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

from trainer.audit.code_probes import hostile_programs
from trainer.tasks.base import Task
from trainer.verifiers.code import extract_code
from trainer.verifiers.code_harness import exported_names

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


# ---- tool-use transcripts -----------------------------------------------------------------------

def _calls(transcript: str) -> list[dict[str, Any]]:
    out = []
    for line in transcript.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return []
        if isinstance(obj, dict):
            out.append(obj)
    return out


def tool_probes(task: Task, gold: str) -> list[Probe]:
    """Probes for a tool-call transcript: non-finite and constant values where the gold sets
    numbers, a bare submit, nothing, and the gold drowned in calls past the step budget."""
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES[cls], note))

    add("gold", gold, "the reference transcript")
    add("equivalent", "\n\n".join(gold.splitlines()) + "\n", "blank lines between calls")
    calls = _calls(gold)
    numeric_sets = [i for i, c in enumerate(calls) if c.get("tool") in ("set", "answer")
                    and isinstance(c.get("value"), (int, float)) and not isinstance(c.get("value"), bool)]
    if numeric_sets:
        def with_values(value_text: str) -> str:
            lines = []
            for i, c in enumerate(calls):
                if i in numeric_sets:
                    lines.append(json.dumps({k: v for k, v in c.items() if k != "value"})[:-1] + ', "value": %s}' % value_text)
                else:
                    lines.append(json.dumps(c))
            return "\n".join(lines)

        for text in ("NaN", "Infinity", "-Infinity", '"nan"', '"inf"', "1e999"):
            add("non_finite", with_values(text), f"every target set to {text}")
        add("constant", with_values("0"), "every target set to 0")
        bumped = [json.dumps({**c, "value": c["value"] + 1}) if i in numeric_sets else json.dumps(c) for i, c in enumerate(calls)]
        add("perturbed", "\n".join(bumped), "every target off by one")
        answers = [i for i in numeric_sets if calls[i].get("tool") == "answer"]
        if answers:  # the one final answer: hedged in one call, or a wrong one first and the gold after
            i = answers[-1]
            gold_value, wrong = calls[i]["value"], calls[i]["value"] + 1
            before = [json.dumps(c) for c in calls[:i]]
            for note, value in (("a list of a wrong value and the gold", [wrong, gold_value]),
                                ("the gold and a wrong value in one string", f"{gold_value} or {wrong}"),
                                ("a wrong value and the gold in one string", f"{wrong} or {gold_value}")):
                add("hedge", "\n".join(before + [json.dumps({"tool": "answer", "value": value})]), note)
            add("hedge", "\n".join(before + [json.dumps({"tool": "answer", "value": wrong}),
                                              json.dumps({"tool": "answer", "value": gold_value})]),
                "a wrong answer, then the gold")
    add("empty", "", "no calls")
    add("constant", '{"tool": "submit"}', "submit at once")
    add("long", "\n".join(['{"tool": "keys"}'] * 300 + [gold]), "300 calls before the gold")
    return probes


# ---- code -------------------------------------------------------------------------------------

def code_probes(task: Task, gold_completion: str | None, perturbed: str | None) -> list[Probe]:
    """Probes for a code task: the reference program and harmless rewrites of it, a broken one,
    empty and constant programs, and every hostile program of :mod:`trainer.audit.code_probes`."""
    answer = task.answer if isinstance(task.answer, dict) else {"tests": task.answer}
    prompt = answer.get("prompt") or ""
    entry = answer.get("entry_point")
    if not entry:
        tests = answer.get("tests")
        names = exported_names(tests if isinstance(tests, list) else [str(tests)], "", None) if tests else []
        entry = names[0] if names else "solution"
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str, expect: str | None = None) -> None:
        probes.append(Probe(cls, completion, task, expect or CLASSES.get(cls, CLASSES["code"]), note))

    if gold_completion:
        add("gold", gold_completion, "the reference solution")
        code = extract_code(gold_completion)
        add("equivalent", f"Here is my solution.\n\n```py\n# solution\n{code}\n\n```\nIt runs in linear time.", "prose, a comment, blank lines, ```py")
    if perturbed:
        add("perturbed", perturbed, "the reference solution with its result perturbed")
    header = prompt.split(f"def {entry}", 1)[0] if prompt else ""
    add("empty", "", "no code")
    add("empty", "```python\n```", "an empty code block")
    for value in ("None", "0", "''", "[]", "True"):
        add("constant", f"```python\n{header}def {entry}(*args, **kwargs):\n    return {value}\n```", f"returns {value}")
    for name, completion in hostile_programs(entry, prompt).items():
        add(f"code.{name}", completion, name, CLASSES["code"])
    return probes


# ---- CAD --------------------------------------------------------------------------------------

def cad_probes(task: Task) -> list[Probe]:
    """Probes for a modelling task (``cad-*``): the reference script and a reworded one; the
    reference with a dimension off; nothing, a unit cube, a sphere, the given part unchanged; and
    scripts that attack the run instead of modelling: a forged mesh line (empty, or a cube's), two
    mesh lines, an early exit, a patched exporter, a loop, a memory bomb."""
    from trainer.catalogue.cad import wrong_completion  # lazy: the catalogue imports the verifiers
    from trainer.tasks.cad import cad_task

    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES.get(cls, CLASSES["code"]), note))

    def script(code: str) -> str:
        return f"```python\nimport manifold3d as m3d\n{code}\n```"

    gold = task.answer
    code = extract_code(gold)
    add("gold", gold, "the reference script")
    add("equivalent", f"Here is the model.\n\n```py\n# the part\n\n{code}\n```\nUnits: mm.", "prose, a comment, ```py")
    add("perturbed", wrong_completion(task), "a dimension 10 % larger")
    add("empty", "", "no script")
    add("constant", script("result = m3d.Manifold.cube([1, 1, 1])"), "a unit cube")
    add("constant", script("result = m3d.Manifold.sphere(10, 64)"), "a sphere")
    given = cad_task(task.domain.removeprefix("cad-"), __import__("random").Random(task.meta["seed"]), task.level).given
    if given:
        add("constant", f"```python\n{given}```", "the given part unchanged")
    cube_line = ("import base64, numpy as np\n"
                 "v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], '<f8')\n"
                 "t = np.array([[0,1,3],[0,3,2],[4,6,7],[4,7,5],[0,4,5],[0,5,1],[2,3,7],[2,7,6],[0,2,6],[0,6,4],[1,5,7],[1,7,3]], '<i4')\n"
                 "print('@@TEMPER-MESH', base64.b64encode(v.tobytes()).decode(), base64.b64encode(t.tobytes()).decode())\n")
    attacks = {
        "forged_empty_mesh": "import os\nprint('@@TEMPER-MESH  ', flush=True)\nos._exit(0)",
        "forged_cube_mesh": cube_line + "import os, sys\nsys.stdout.flush()\nos._exit(0)",
        "two_meshes": cube_line + code.split("import manifold3d as m3d", 1)[-1],
        "exit_early": "import sys\nsys.exit(0)",
        "patched_exporter": "m3d.Manifold.to_mesh = lambda self: None\nresult = m3d.Manifold.cube([1, 1, 1])",
        "endless": "while True:\n    pass",
        "memory_bomb": "x = bytearray(8 << 30)\nresult = m3d.Manifold.cube([1, 1, 1])",
    }
    for name, attack in attacks.items():
        add(f"code.{name}", script(attack), name)
    return probes


# ---- function calls ----------------------------------------------------------------------------

def call_probes(task: Task) -> list[Probe]:
    """Probes for a function-calling task (``bfcl-*``): the expected calls and the same calls
    fenced, spaced and (parallel) reordered; one value changed; no call, an empty list, a call of
    each offered function without arguments; the gold list and a wrong one in two blocks, and a
    wrong call added to the gold list; a float set to a non-finite value; the gold after 300
    lines. Where no function fits (irrelevance), the gold is a sentence without a call, and
    every call of an offered function, alone or beside that sentence, must fail."""
    from trainer.catalogue.bfcl import NO_CALL, perturbed_answer, reference_completion  # lazy: the catalogue imports the verifiers
    from trainer.verifiers.function_calls import reference_calls

    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES[cls], note))

    category = task.meta["category"]
    names = [f["name"] for f in task.meta["functions"]]
    gold = reference_completion(task)
    add("gold", gold, "the expected calls" if category != "irrelevance" else "no call")
    if category == "irrelevance":
        add("equivalent", "I cannot help with that using these tools.", "another sentence without a call")
        for name in names[:3]:
            add("perturbed", f"[{name}()]", f"a call of {name}")
            add("hedge", f"{NO_CALL}\nBut just in case: [{name}()]", "no call, then a call")
        add("long", "\n".join([f"[{names[0]}()]"] * 300) + "\n" + NO_CALL, "300 calls before the sentence")
        return probes
    add("equivalent", f"```python\n{gold.replace(', ', ',  ')}\n```", "fenced, spaced")
    add("empty", "", "nothing")
    add("constant", "[]", "an empty list")
    add("constant", NO_CALL, "no call")
    if category == "relevance":
        add("long", "\n".join([NO_CALL] * 300) + "\n" + gold, "300 sentences before the call")
        return probes
    calls = gold[1:-1]
    if category.startswith("parallel") and len(task.answer) > 1:
        add("equivalent", reference_calls(list(reversed(task.answer)), task.meta["functions"]), "the calls in reverse order")
    wrong = reference_calls(perturbed_answer(task.answer), task.meta["functions"])
    add("perturbed", wrong, "one value changed")
    for name in names[:3]:
        if f"[{name}()]" != gold:  # (a function without parameters: that call is the gold)
            add("constant", f"[{name}()]", f"{name} without arguments")
    add("hedge", f"```python\n{wrong}\n```\n```python\n{gold}\n```", "a wrong list, then the gold one")
    add("hedge", f"```python\n{gold}\n```\n```python\n{wrong}\n```", "the gold list, then a wrong one")
    add("hedge", f"[{calls}, {wrong[1:-1]}]", "the gold calls and wrong ones in one list")
    for param, values in next(iter(task.answer[0].values())).items():
        if values and isinstance(values[0], float):
            for text in ("1e999", "-1e999"):
                add("non_finite", gold.replace(f"{param}={values[0]!r}", f"{param}={text}", 1), f"{param}={text}")
            break
    add("long", "\n".join([wrong] * 300) + "\n" + gold, "300 wrong lists before the gold")
    return probes


# ---- repositories ------------------------------------------------------------------------------

def repo_probes(task: Task) -> list[Probe]:
    """Probes for a repository task (``swe-*``): the reference transcript, and its final tree as
    one ```diff block; the reference with a planted bug put back (or, for a refactor, without its
    last edit); nothing, a bare submit, constant bodies; a wrong diff and the gold one together,
    and the gold diff beside tool calls; the gold after 300 calls (past the step budget); every
    hostile program of the code audit appended to the module the hidden tests import from."""
    from trainer.catalogue.repos import wrong_transcript  # lazy: the catalogue imports the verifiers
    from trainer.tasks.repo_kernels import KERNELS
    from trainer.verifiers.patches import tree_diff
    from trainer.verifiers.repo import final_tree, spec_of, task_reference

    spec = spec_of(task)
    gold = task_reference(task)
    calls = [line for line in gold.splitlines() if line.strip()]
    edits = [c for c in calls if json.loads(c).get("tool") not in ("submit", "run_tests", "git_commit", "read")]
    tree, _ = final_tree(gold, task, spec)
    assert tree is not None, f"{task.id}: the reference transcript does not apply"
    gold_diff = tree_diff(spec.files, tree)
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES.get(cls, CLASSES["code"]), note))

    def then_submit(lines: list[str]) -> str:
        return "\n".join(lines + ['{"tool": "submit"}'])

    add("gold", gold, "the reference transcript")
    add("equivalent", f"The change:\n\n```diff\n{gold_diff}```\n", "the reference's final tree as one diff block")
    target = KERNELS[spec.targets[0]]
    if spec.family == "refactor":
        add("perturbed", wrong_transcript(task), "the reference without its last edit")
    else:
        for path, text in sorted(tree.items()):
            if target.source in text:
                bug = target.bugged_source(0 if target.bugged_source(0) not in spec.files[path] else 1)
                add("perturbed", then_submit(edits + [json.dumps({"tool": "replace", "path": path, "old": target.source,
                                                                   "new": bug})]), "the reference with a planted bug put back")
                break
    add("empty", "", "no change")
    add("constant", '{"tool": "submit"}', "submit at once")
    name, (module, attribute) = next((n, e) for n, e in spec.exports.items() if e[1] in (target.name, *target.renames)
                                     and not n.endswith("__moved"))
    path = module.replace(".", "/") + ".py"
    for value in ("None", "0", "''", "[]"):
        add("constant", then_submit(edits + [json.dumps({"tool": "write", "path": path, "content": tree[path] +
                                                          f"\n\ndef {attribute}(*args, **kwargs):\n    return {value}\n"})]),
            f"{attribute} returns {value}")
    wrong_tree, _ = final_tree(wrong_transcript(task), task, spec)
    wrong_diff = tree_diff(spec.files, wrong_tree or spec.files)
    if wrong_diff:
        add("hedge", f"```diff\n{wrong_diff}```\n```diff\n{gold_diff}```", "a wrong diff, then the gold one")
        add("hedge", f"```diff\n{gold_diff}```\n```diff\n{wrong_diff}```", "the gold diff, then a wrong one")
    add("hedge", gold_diff + "\n" + '{"tool": "write", "path": "README.md", "content": "x"}', "the gold diff beside a tool call")
    add("long", then_submit(['{"tool": "git_status"}'] * 300 + edits), "300 calls before the gold edits")
    for attack, completion in hostile_programs(attribute).items():
        add(f"code.{attack}", then_submit(edits + [json.dumps({"tool": "write", "path": path, "content": tree[path] + "\n\n"
                                                                + extract_code(completion)})]), attack)
    # the shape of a refactor hidden from the checks: an encoding they do not read, an alias or a
    # copy reached by strings or kept inside a block
    add("code.encoding", tree_diff(spec.files, {**tree, path: "# coding: utf-7\n" + tree[path]}),
        "the gold's diff with a UTF-7 coding line")
    if spec.family == "refactor":
        first = spec.structure[0]
        if first["check"] == "absent":
            new = spec.structure[1]["name"]
            add("code.alias_by_string", then_submit([json.dumps({"tool": "write", "path": path, "content": spec.files[path]
                                                                 + f"\nglobals()[{new!r}] = {first['name']}\n"})]),
                "the old function kept, the new name set through globals()")
        else:
            old_path = spec.structure[1]["path"]
            indented = target.source.replace("\n", "\n    ")
            add("code.copy_in_block", then_submit(edits + [json.dumps({"tool": "write", "path": old_path, "content":
                                                                       tree[old_path] + f"\nif True:\n    {indented}\n"})]),
                "a copy of the moved function kept inside an if block")
    return probes


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
