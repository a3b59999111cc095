"""reasoning-gym scoring: the generator's own ``score_answer`` (imported lazily).

The task carries the generator name, level and the original entry in ``task.meta``
(see :mod:`trainer.catalogue.reasoning_gym_domains`). Scores map to outcomes: 1 is pass, 0 is
fail, anything between is partial with that score; an answer that makes ``score_answer`` raise
is a parse_error.
"""
from __future__ import annotations

from trainer.outcomes import Verification
from trainer.tasks.base import Task


def rg_score(completion: str, task: Task, *, dataset: str | None = None) -> Verification:
    """Stage ``rg_score``: score the (extracted) answer with reasoning-gym."""
    from trainer.catalogue.reasoning_gym_domains import score

    return score(completion.strip(), task, dataset)
