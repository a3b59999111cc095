"""What the catalogue modules define their domains with: a task source that draws one seed per
task (:class:`SeededSource`) and the registration of a domain verified by a cascade
(:func:`define_domain`).

>>> import dataclasses, random
>>> @dataclasses.dataclass
... class Echo(SeededSource):
...     levels: int = 2
...     def generate(self, seed, level):
...         return f"repeat {seed}", str(seed), {}
>>> task = Echo("echo").sample(random.Random(0), 5)
>>> task.id == f"L1-{task.answer}", task.level
(True, 1)
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, ClassVar

from trainer.catalogue import DomainSpec, register
from trainer.tasks.base import Task, TaskSource


@dataclasses.dataclass
class SeededSource:
    """Base of the task sources whose task is a function of one 32-bit seed and the level: the
    seed is drawn from the caller's rng, the level clamped to ``[0, levels)``, and the task's id is
    ``L<level>-<seed>``. Subclasses add their fields (e.g. the family), then ``levels`` (how many
    levels, with a default; not declared here, which would put it before the subclass's fields),
    and define :meth:`generate`."""

    slug: str
    """Domain slug."""
    redraw: ClassVar[tuple[type[Exception], ...]] = ()
    """Errors of :meth:`generate` that mean "this seed cannot make a task": another seed is drawn."""

    def generate(self, seed: int, level: int) -> tuple[str, Any, dict[str, Any]]:
        """The task's prompt, answer and meta for this seed at this (clamped) level."""
        raise NotImplementedError

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        """One task: a seed from ``rng`` (another while :meth:`generate` raises one of ``redraw``)."""
        level = max(0, min(int(level), self.levels - 1))
        while True:
            seed = rng.getrandbits(32)
            try:
                prompt, answer, meta = self.generate(seed, level)
            except self.redraw:
                continue
            return Task(self.slug, f"L{level}-{seed}", prompt, answer, level, meta)


def define_domain(source: TaskSource, verifier_spec: dict[str, Any], **fields: Any) -> DomainSpec:
    """Register the domain ``source`` draws tasks for (its slug is the domain's), verified by the
    cascade that ``verifier_spec`` compiles to; ``fields`` are the rest of the :class:`DomainSpec`."""
    return register(DomainSpec(slug=source.slug, source=source, verifier_spec=verifier_spec, **fields))
