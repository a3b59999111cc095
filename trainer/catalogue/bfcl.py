"""Function calling from the Berkeley Function Calling Leaderboard (``bfcl-*`` domains).

The questions, function docs and possible answers are the ``bfcl-eval`` package's data (installed
without its dependencies: ``requirements/nodeps.txt``), read from its files; answers are checked by
Temper's own AST checker (:mod:`trainer.verifiers.function_calls`), whose verdicts agree with
BFCL's checker on the reference answers and on wrong ones (``tests/verifiers/test_bfcl.py``).

| domain | BFCL categories | the task |
|---|---|---|
| ``bfcl-simple`` | simple_python | one call of the one function offered |
| ``bfcl-multiple`` | multiple | one call, to the right one of 2-4 functions |
| ``bfcl-parallel`` | parallel | several calls of one function, any order |
| ``bfcl-parallel-multiple`` | parallel_multiple | several calls of several functions, any order |
| ``bfcl-live-simple``, ``bfcl-live-multiple``, ``bfcl-live-parallel`` | the user-contributed ``live_*`` sets | as above, on real users' requests |
| ``bfcl-relevance`` | irrelevance, live_irrelevance; live_relevance, simple_python | half the draws need no call (none of the functions fits: any call fails), half need one (any well-formed call of an offered function) |

>>> import random
>>> task = BfclSource("bfcl-parallel", ("parallel",)).sample(random.Random(0))
>>> task.meta["category"], task.prompt.startswith("You can call these functions")
('parallel', True)
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any

from trainer.catalogue import DomainSpec, register
from trainer.tasks.bfcl_data import data_dir
from trainer.tasks.base import Task
from trainer.outcomes import Outcome
from trainer.verifiers.function_calls import function_calls, reference_calls

FAMILY = "bfcl"
VERIFIER_SPEC = {"stages": [{"type": "function_calls", "timeout_s": 5.0}]}
NO_CALL = "None of these functions fits this request, so I call none of them."
CATEGORY_OF = {"simple_python": "simple", "live_simple": "simple", "multiple": "multiple", "live_multiple": "multiple",
               "parallel": "parallel", "live_parallel": "parallel", "parallel_multiple": "parallel_multiple",
               "live_parallel_multiple": "parallel_multiple", "irrelevance": "irrelevance",
               "live_irrelevance": "irrelevance", "live_relevance": "relevance"}
"""BFCL's file category -> the checker's category."""
DOMAINS = {
    "bfcl-simple": ("Function calling: one function (BFCL simple)", ("simple_python",)),
    "bfcl-multiple": ("Function calling: pick the function (BFCL multiple)", ("multiple",)),
    "bfcl-parallel": ("Function calling: parallel calls (BFCL parallel)", ("parallel",)),
    "bfcl-parallel-multiple": ("Function calling: parallel calls of several functions (BFCL)", ("parallel_multiple",)),
    "bfcl-live-simple": ("Function calling: real requests, one function (BFCL live)", ("live_simple",)),
    "bfcl-live-multiple": ("Function calling: real requests, pick the function (BFCL live)", ("live_multiple",)),
    "bfcl-live-parallel": ("Function calling: real requests, parallel calls (BFCL live)", ("live_parallel", "live_parallel_multiple")),
    "bfcl-relevance": ("Function calling: call only when a function fits (BFCL relevance)", ("irrelevance", "live_irrelevance", "live_relevance", "simple_python")),
}


@functools.cache
def rows(file_category: str) -> list[dict[str, Any]]:
    """One BFCL category's entries, each with its ``ground_truth`` where the package has one; an
    entry whose possible answers contradict its own function docs (a required parameter the
    answer leaves out, one the function does not declare: BFCL's checker fails its reference
    too) is left out (:func:`usable`)."""
    folder = data_dir()
    entries = [json.loads(line) for line in (folder / f"BFCL_v4_{file_category}.json").read_text().splitlines() if line.strip()]
    answers_file = folder / "possible_answer" / f"BFCL_v4_{file_category}.json"
    if answers_file.exists():
        truth = {row["id"]: row["ground_truth"] for row in map(json.loads, answers_file.read_text().splitlines()) if row}
        for entry in entries:
            entry["ground_truth"] = truth[entry["id"]]
    return [e for e in entries if usable(e, CATEGORY_OF[file_category])]


def usable(entry: dict[str, Any], category: str) -> bool:
    """True when the entry's reference calls pass the checker (always, for entries without answers)."""
    if "ground_truth" not in entry:
        return True
    task = Task("", entry["id"], "", entry["ground_truth"], 0, {"functions": entry["function"], "category": category})
    return function_calls(reference_calls(entry["ground_truth"], entry["function"]), task).outcome is Outcome.PASS


def render(entry: dict[str, Any], *, may_abstain: bool) -> str:
    """The prompt: the functions' docs, the conversation, and the answer format."""
    lines = ["You can call these functions (each with a JSON schema of its parameters):",
             json.dumps(entry["function"], indent=1), ""]
    for message in entry["question"][0]:
        lines.append(f"{message['role'].capitalize()}: {message['content']}")
    lines += ["", "Reply with only the function calls, as one Python list: [func_name(param=value, ...), ...]. "
                  "Name every parameter; values are literals."]
    if may_abstain:
        lines.append("If none of the functions fits the request, call nothing and say so in one sentence.")
    return "\n".join(lines)


@dataclasses.dataclass
class BfclSource:
    """Task source over one or more BFCL categories (each draw picks a category, then an entry)."""

    slug: str
    categories: tuple[str, ...]
    levels: int = 1

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        relevance = self.slug == "bfcl-relevance"
        if relevance:  # half the draws need no call, half need one
            pool = ("irrelevance", "live_irrelevance") if rng.random() < 0.5 else ("live_relevance", "simple_python")
            file_category = rng.choice(pool)
        else:
            sizes = [len(rows(c)) for c in self.categories]
            file_category = rng.choices(self.categories, weights=sizes)[0]
        entry = rng.choice(rows(file_category))
        category = CATEGORY_OF[file_category]
        if relevance and category != "irrelevance":
            category = "relevance"
        meta = {"functions": entry["function"], "category": category, "bfcl_id": entry["id"]}
        return Task(self.slug, entry["id"], render(entry, may_abstain=relevance), entry.get("ground_truth"), 0, meta)


def reference_completion(task: Task) -> str:
    """A completion the checker must pass: the expected calls, or no call."""
    if task.meta["category"] == "irrelevance":
        return NO_CALL
    if task.answer:
        return reference_calls(task.answer, task.meta["functions"])
    # relevance without possible answers: a call of the first function that fits its docs
    function = task.meta["functions"][0]
    placeholder = {"string": "x", "integer": 1, "float": 1.0, "boolean": True, "array": [], "tuple": [], "dict": {}, "any": "x"}
    properties = (function.get("parameters") or {}).get("properties") or {}
    args = [f"{p}={placeholder.get(properties.get(p, {}).get('type', 'any'), 'x')!r}"
            for p in (function.get("parameters") or {}).get("required") or []]
    return f"[{function['name']}({', '.join(args)})]"


def wrong_completion(task: Task) -> str:
    """A well-formed completion the checker must fail: a call where none fits, no call where one
    is needed, or the expected calls with one value changed."""
    category = task.meta["category"]
    if category == "irrelevance":
        return f"[{task.meta['functions'][0]['name']}()]"
    if category == "relevance":
        return NO_CALL
    return reference_calls(perturbed_answer(task.answer), task.meta["functions"])


def perturbed_answer(answer: list[dict]) -> list[dict]:
    """The possible answers with the first call's first required-looking value changed (a number
    plus one, a string with a letter added, a boolean flipped; an optional one made required with
    a wrong value when the call has no other)."""
    out = json.loads(json.dumps(answer))
    (name, params), = out[0].items()
    for param, values in params.items():
        first = values[0] if values else ""
        if first == "":
            continue
        if isinstance(first, bool):
            params[param] = [not first]
        elif isinstance(first, (int, float)):
            params[param] = [first + 1]
        elif isinstance(first, str):
            params[param] = [first + "zq"]
        elif isinstance(first, list):
            params[param] = [first + ["zq"]]
        elif isinstance(first, dict):
            params[param] = [{**first, "zq_extra": ["zq"]}]
        return out
    out[0] = {name + "_zq": params}
    return out


def register_all() -> list[DomainSpec]:
    specs = []
    for slug, (title, categories) in DOMAINS.items():
        size = sum(len(rows(c)) for c in categories)
        specs.append(register(DomainSpec(
            slug=slug, title=title, kind="tool_use", family=FAMILY,
            source=BfclSource(slug, categories),
            description=(f"{size} questions of the Berkeley Function Calling Leaderboard ({', '.join(categories)}): "
                         "answer with the calls as a Python list; checked by their syntax tree against the possible answers."),
            verifier_spec=VERIFIER_SPEC,
            task_source_spec={"family": FAMILY, "categories": list(categories), "package": "bfcl-eval==2026.3.23"},
        )))
    return specs
