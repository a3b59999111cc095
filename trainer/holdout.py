"""Held-out evaluation tasks: a fixed share of each domain's tasks that training never draws.

A task is held out at fraction ``f`` when the hash of ``<domain>/<task id>`` (or of its group,
:func:`holdout_key`) falls below ``f``;
the rule needs no list of tasks, works for procedural domains of any size, and a task held out
at ``f`` is held out at every larger fraction. Training excludes ``sampler.holdout_fraction``
(the control plane sets :data:`HOLDOUT_FRACTION`); evaluation draws only from the held-out share.

This module does not import torch (the sampler and the control plane use it).

>>> from trainer.catalogue.builtin import ADDITION
>>> held = heldout_tasks(ADDITION, "builtin-addition", 4, seed=7)
>>> [t.id for t in held] == [t.id for t in heldout_tasks(ADDITION, "builtin-addition", 4, seed=7)]
True
>>> all(is_heldout(t, HOLDOUT_FRACTION) for t in held), len({t.id for t in held})
(True, 4)
"""
from __future__ import annotations

import hashlib
import random

from trainer.tasks.base import Task, TaskSource

HOLDOUT_FRACTION = 0.1
"""Share of every domain's tasks reserved for evaluation on the platform."""
MAX_DRAWS_PER_TASK = 400
"""Draws tried per wanted held-out task before a small domain gives what it has."""


def holdout_score(domain: str, task_id: str) -> float:
    """A number in [0, 1) fixed by the domain and task id.

    >>> 0 <= holdout_score("builtin-addition", "3+4") < 1
    True
    """
    digest = hashlib.sha256(f"{domain}/{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def holdout_key(task: Task) -> str:
    """What decides whether ``task`` is held out: ``meta["holdout_group"]`` where a domain's tasks
    come in groups that share their answer up to a symmetry of the input (the orders of one set of
    letters to sort), so that a whole group is held out or trained on and no
    held-out task is a training task's input rearranged; else the task's id.

    >>> from trainer.tasks.base import Task
    >>> holdout_key(Task("builtin-sorting", "dba", "sort(dba)=", "abd", meta={"holdout_group": "abd"}))
    'abd'
    """
    return str(task.meta.get("holdout_group", task.id))


def is_heldout(task: Task, fraction: float) -> bool:
    """Whether ``task`` belongs to its domain's held-out share ``fraction``."""
    return fraction > 0 and holdout_score(task.domain, holdout_key(task)) < fraction


def heldout_tasks(source: TaskSource, domain: str, n: int, *, seed: int, level: int = 0,
                  fraction: float = HOLDOUT_FRACTION) -> list[Task]:
    """Up to ``n`` distinct held-out tasks of a domain, the same for the same seed.

    Sources that can list every task (``all_tasks``) are filtered; others are drawn from with
    a ``random.Random(seed)`` until ``n`` distinct held-out tasks are found (a small domain may
    have fewer).
    """
    rng = random.Random(seed)
    lister = getattr(source, "all_tasks", None)
    if lister is not None:
        pool = [t for t in lister(level) if is_heldout(t, fraction)]
        pool.sort(key=lambda t: str(t.id))
        rng.shuffle(pool)
        return pool[:n]
    found: dict[str, Task] = {}
    for _ in range(n * MAX_DRAWS_PER_TASK):
        task = source.sample(rng, level)
        if is_heldout(task, fraction) and str(task.id) not in found:
            found[str(task.id)] = task
            if len(found) == n:
                break
    return list(found.values())
