"""The task and task-source interfaces shared by the sampler, verifiers and the control plane."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Task:
    """One prompt with what a verifier needs to check a completion of it."""

    domain: str
    """Slug of the domain the task belongs to."""
    id: str
    """Stable id within the domain (the same seed and level give the same id)."""
    prompt: str
    """Text given to the policy."""
    answer: Any = None
    """Reference answer (or tests) the verifier compares against; never shown to the policy."""
    level: int = 0
    """Difficulty level the task was drawn at."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Anything else the verifier or environment needs."""


class TaskSource(Protocol):
    """Draws tasks for one domain. Implementations are deterministic given the rng."""

    slug: str
    levels: int

    def sample(self, rng: random.Random, level: int = 0) -> Task: ...
