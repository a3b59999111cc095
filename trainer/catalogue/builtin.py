"""Built-in procedural domains a tiny model can learn: addition, reversal, parity, sorting.

Each has a task source (deterministic given the rng), an exact-match verifier and a slug in the
catalogue (``builtin-addition``, ``builtin-reversal``, ``builtin-parity``, ``builtin-sorting``).
The demo trains addition, reversal and sorting; parity trains, but a tiny model does not
generalise it to held-out strings (docs/trainer.md).

>>> import random
>>> task = ADDITION.sample(random.Random(0))
>>> task.prompt, task.answer
('6+6=', '12')
>>> verify_exact(" 12", task).outcome.value
'pass'
>>> verify_exact("11", task).details["expected"], verify_exact("ＡＢ", SORTING.sample(random.Random(1))).outcome.value
(['12'], 'fail')
"""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable

from trainer.catalogue import DomainSpec, register
from trainer.outcomes import Verification
from trainer.tasks.base import Task
from trainer.verifiers.exact import exact_match

EXACT_MATCH_SPEC = {"stages": [{"type": "exact", "params": {"literal": True}, "timeout_s": 1.0}]}
"""The platform's verifier of the built-in domains: the same literal match as :func:`verify_exact`
(before 2026-12-05 its ``exact`` stage case-folded and applied Unicode compatibility forms, so a
completion the trainer failed in process could pass on the platform: "ABD" for ``sort(dba)=``)."""


def verify_exact(completion: str, task: Task) -> Verification:
    """Pass when the completion, stripped of surrounding whitespace, is the answer character for
    character (an empty one is a parse error)."""
    return exact_match(completion, task, literal=True)


@dataclass(frozen=True)
class AdditionSource:
    """Single-digit addition ``a+b=`` -> ``a+b``; one level, 100 distinct problems."""

    slug: str = "builtin-addition"
    levels: int = 1

    def make(self, a: int, b: int) -> Task:
        # Held out one order at a time: a held-out a+b may have b+a in training, so addition's
        # held-out gain includes learning that order does not matter. Held out together (a
        # holdout_group of the unordered pair), the tiny model does not generalise to the 12 unseen
        # pairs at all: single-digit sums are facts it memorises (docs/trainer.md).
        return Task(domain=self.slug, id=f"{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b))

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        return self.make(rng.randrange(10), rng.randrange(10))

    def all_tasks(self, level: int = 0) -> list[Task]:
        """Every problem, in a fixed order (for greedy evaluation)."""
        return [self.make(a, b) for a in range(10) for b in range(10)]


def _reversed(word: str) -> str:
    return word[::-1]


def _sorted(word: str) -> str:
    return "".join(sorted(word))


def _parity(bits: str) -> str:
    return str(bits.count("1") % 2)


@dataclass(frozen=True)
class StringSource:
    """``<op>(s)=`` -> ``solve(s)`` for a random string ``s`` of 2 + L symbols of ``alphabet`` at level L."""

    slug: str
    levels: int
    op: str
    alphabet: str
    solve: Callable[[str], str]

    group_by_letters: bool = False
    """Hold out every order of one multiset of symbols together (sorting: each order has the same
    answer, so a held-out order would otherwise be a trained order rearranged)."""

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        length = 2 + min(max(level, 0), self.levels - 1)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        meta = {"holdout_group": "".join(sorted(text))} if self.group_by_letters else {}
        return Task(domain=self.slug, id=text, prompt=f"{self.op}({text})=", answer=self.solve(text), level=level,
                    meta=meta)


ADDITION = AdditionSource()
REVERSAL = StringSource("builtin-reversal", 3, "rev", string.ascii_lowercase, _reversed)
"""Reverse a lowercase word ``rev(abc)=`` -> ``cba``; level L uses 2 + L letters (2-4)."""
PARITY = StringSource("builtin-parity", 5, "par", "01", _parity)
"""Parity of a bit string ``par(0110)=`` -> ``0`` (even count of ones); level L: 2 + L bits."""
SORTING = StringSource("builtin-sorting", 3, "sort", string.ascii_lowercase, _sorted, group_by_letters=True)
"""Sort lowercase letters ``sort(dba)=`` -> ``abd``; level L uses 2 + L letters (2-4)."""

for _source, _title, _kind, _desc in [
    (ADDITION, "Single-digit addition", "math", "Add two digits: '3+4=' -> '7'."),
    (REVERSAL, "Letter reversal", "text", "Reverse 2-4 lowercase letters: 'rev(abc)=' -> 'cba'."),
    (PARITY, "Bit-string parity", "reasoning", "Parity of a bit string: 'par(0110)=' -> '0'."),
    (SORTING, "Letter sorting", "reasoning", "Sort 2-4 lowercase letters: 'sort(dba)=' -> 'abd'."),
]:
    register(DomainSpec(
        slug=_source.slug, title=_title, kind=_kind, family="builtin", source=_source,
        description=_desc, verifier_spec=EXACT_MATCH_SPEC,
        task_source_spec={"family": "builtin", "generator": _source.slug.removeprefix("builtin-"),
                          "levels": _source.levels}))
