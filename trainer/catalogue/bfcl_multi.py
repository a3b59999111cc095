"""BFCL's multi-turn conversations over stateful API simulators (``bfcl-multi-*`` domains), played in
:mod:`trainer.environments.bfcl_multi`: ``base``, ``miss_func`` (a function the user's request
needs is withheld until a later turn: the model must not improvise), ``miss_param`` (a request
lacks a parameter: the model must ask) and ``long_context`` (the simulators hold long files and
lists). A task's answer is the reference calls, one ``calls`` line and one ``reply`` line a turn,
which the ``environment`` stage replays (single-turn rollouts, SFT, the audit).

>>> import random
>>> task = BfclMultiSource("bfcl-multi-base", "base").sample(random.Random(0))
>>> task.meta["environment"], task.prompt.startswith("You can call these functions")
('bfcl_multi', True)
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any

from trainer.catalogue import DomainSpec, register
from trainer.environments import make_environment
from trainer.environments.bfcl_multi import MAX_STEPS, UNBOUNDED
from trainer.tasks.base import Task
from trainer.tasks.bfcl_data import docs_for, entries, entry_of

FAMILY = "bfcl_multi"
CATEGORIES = {"base": "the requests as asked", "miss_func": "a needed function withheld until a later turn",
              "miss_param": "a request that lacks a parameter", "long_context": "long files and lists in the simulators"}
VERIFIER_SPEC = {"stages": [{"type": "environment", "params": {"max_steps": MAX_STEPS}, "timeout_s": 60.0}]}
REPLY = json.dumps({"tool": "reply", "text": "Done."})


def prompt(entry: dict[str, Any]) -> str:
    first = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in entry["question"][0])
    return ("You can call these functions (each with a JSON schema of its parameters):\n"
            + json.dumps(docs_for(entry)) + "\n\n" + first + "\n\n"
            "Each turn, either make calls, as one Python list such as [cd(folder='document'), ls()], and see their "
            "results, or reply in words when you are done with the user's request (or need something from the user): "
            "the user then speaks again. Use only the functions offered; do not make up values the user did not give.")


def reference_transcript(truth: list[list[str]]) -> str:
    lines = []
    for calls in truth:
        if calls:
            lines.append(json.dumps({"tool": "calls", "calls": "[" + ", ".join(calls) + "]"}))
        lines.append(REPLY)
    return "\n".join(lines)


@dataclasses.dataclass
class BfclMultiSource:
    """Task source over one multi-turn category (entries whose simulators are bounded)."""

    slug: str
    category: str
    levels: int = 1

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        ids = sorted(i for i, (e, _) in entries(self.category).items() if not set(e["involved_classes"]) & UNBOUNDED)
        entry, truth = entry_of(self.category, rng.choice(ids))
        meta = {"environment": "bfcl_multi", "category": self.category, "bfcl_id": entry["id"], "max_steps": MAX_STEPS,
                "turns": len(truth)}
        return Task(self.slug, entry["id"], prompt(entry), reference_transcript(truth), 0, meta)


def wrong_transcript(task: Task) -> str:
    """The reference without its last turn's calls: the last request is left undone."""
    lines = task.answer.splitlines()
    last_calls = max(i for i, line in enumerate(lines) if '"calls"' in line)
    return "\n".join(lines[:last_calls] + lines[last_calls + 1:])


def _new_environment(task: Task):
    return make_environment("bfcl_multi")


def register_all() -> list[DomainSpec]:
    specs = []
    for category, what in CATEGORIES.items():
        slug = "bfcl-multi-" + category.replace("_", "-")
        specs.append(register(DomainSpec(
            slug=slug, title=f"Function calling over turns: {what} (BFCL multi-turn)", kind="tool_use", family=FAMILY,
            source=BfclMultiSource(slug, category),
            description=("BFCL's multi-turn conversations over its stateful simulators (file system, trading, travel, vehicle, "
                         f"messaging, posting, tickets): {what}. Verdict: the simulators' state and the calls' results "
                         "against the reference calls', turn by turn."),
            verifier_spec=VERIFIER_SPEC,
            task_source_spec={"family": FAMILY, "category": category, "multi_turn": True, "environment": "bfcl_multi",
                              "package": "bfcl-eval==2026.3.23"},
            environment=functools.partial(_new_environment),
        )))
    return specs
