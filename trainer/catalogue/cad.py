"""3D modelling with geometry checks (``cad-*`` domains): a modelling script in manifold3d, run in
the sandbox, its solid checked by trusted code (:mod:`trainer.tasks.cad`,
:mod:`trainer.verifiers.cad`).

>>> import random
>>> task = CadSource("cad-fit", "fit").sample(random.Random(2), 0)
>>> task.meta["kind"], "manifold3d" in task.prompt
('peg', True)
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.tasks.base import Task
from trainer.tasks.cad import FAMILIES, LEVELS, cad_task, prompt

FAMILY = "cad"
VERIFIER_SPEC = {"stages": [{"type": "cad_mesh", "timeout_s": 60.0}]}
TITLES = {
    "part": ("CAD: a part from a dimensioned description", "A plate with a hole pattern, a tube or an L-bracket from its dimensions"),
    "modify": ("CAD: modify a given part", "Change a given part's script: add a hole, change the thickness, widen the holes"),
    "fit": ("CAD: a part that fits", "A peg for a hole within a clearance range, or a cover over a block with a clearance and a wall"),
}


@dataclasses.dataclass
class CadSource(SeededSource):
    """Task source for one family of modelling tasks."""

    family: str
    levels: int = LEVELS

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        """The part's prompt, its reference script (a fenced block) and the checks."""
        spec = cad_task(self.family, random.Random(seed), level)
        return prompt(spec), f"```python\n{spec.reference}```", {"checks": spec.checks, "kind": spec.kind, "seed": seed}


def wrong_completion(task: Task) -> str:
    """A script that runs and makes a solid, but not the right one: the reference with its first
    dimension 10 % larger."""
    code = task.answer
    number = re.search(r"(?<![\w.])(\d+\.\d+)", code.split("\n", 3)[-1])
    if number is None:
        return code.replace("result = ", "result = m3d.Manifold.cube([1, 1, 1]) + ", 1)
    start, end = number.span()
    offset = len(code) - len(code.split("\n", 3)[-1])
    return code[:offset + start] + str(round(float(number.group(1)) * 1.1 + 1, 3)) + code[offset + end:]


def register_all() -> list[DomainSpec]:
    specs = []
    for family in FAMILIES:
        title, description = TITLES[family]
        specs.append(define_domain(
            CadSource(f"cad-{family}", family), VERIFIER_SPEC, title=title, kind="code", family=FAMILY,
            description=(f"{description}: a manifold3d script run in the sandbox; the solid is checked by geometry "
                         "(closed and manifold, volume, bounding box, genus, points inside and outside)."),
            task_source_spec={"family": FAMILY, "cad_family": family, "levels": LEVELS},
        ))
    return specs
