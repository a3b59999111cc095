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
>>> verify_exact("11", task).details["expected"]
'12'
"""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable

from trainer.outcomes import Outcome, Verification
from trainer.catalogue import DomainSpec, register
from trainer.tasks.base import Task

EXACT_MATCH_SPEC = {"stages": [{"type": "exact", "params": {}, "timeout_s": 1.0}]}


def verify_exact(completion: str, task: Task) -> Verification:
    """Pass when the completion, stripped of surrounding whitespace, equals the answer."""
    found = completion.strip()
    expected = str(task.answer)
    if found == expected:
        return Verification.passed(expected=expected, found=found)
    return Verification.failed(Outcome.FAIL, expected=expected, found=found)


@dataclass(frozen=True)
class AdditionSource:
    """Single-digit addition ``a+b=`` -> ``a+b``; one level, 100 distinct problems."""

    slug: str = "builtin-addition"
    levels: int = 1

    def make(self, a: int, b: int) -> Task:
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

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        length = 2 + min(max(level, 0), self.levels - 1)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        return Task(domain=self.slug, id=text, prompt=f"{self.op}({text})=", answer=self.solve(text), level=level)


ADDITION = AdditionSource()
REVERSAL = StringSource("builtin-reversal", 3, "rev", string.ascii_lowercase, _reversed)
"""Reverse a lowercase word ``rev(abc)=`` -> ``cba``; level L uses 2 + L letters (2-4)."""
PARITY = StringSource("builtin-parity", 5, "par", "01", _parity)
"""Parity of a bit string ``par(0110)=`` -> ``0`` (even count of ones); level L: 2 + L bits."""
SORTING = StringSource("builtin-sorting", 3, "sort", string.ascii_lowercase, _sorted)
"""Sort lowercase letters ``sort(dba)=`` -> ``abd``; level L uses 2 + L letters (2-4)."""

for _source, _title, _kind, _desc in [
    (ADDITION, "Single-digit addition", "math", "Add two digits: '3+4=' -> '7'."),
    (REVERSAL, "Letter reversal", "text", "Reverse 2-4 lowercase letters: 'rev(abc)=' -> 'cba'."),
    (PARITY, "Bit-string parity", "reasoning", "Parity of a bit string: 'par(0110)=' -> '0'."),
    (SORTING, "Letter sorting", "reasoning", "Sort 2-4 lowercase letters: 'sort(dba)=' -> 'abd'."),
]:
    register(DomainSpec(
        slug=_source.slug, title=_title, kind=_kind, family="builtin", source=_source,
        verify=verify_exact, description=_desc, verifier_spec=EXACT_MATCH_SPEC,
        task_source_spec={"family": "builtin", "generator": _source.slug.removeprefix("builtin-"),
                          "levels": _source.levels}))
