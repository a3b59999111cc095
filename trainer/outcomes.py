"""What a verification says about one completion.

Every verifier returns a :class:`Verification`; its ``outcome`` is one of :class:`Outcome`.
Infrastructure outcomes (the sandbox or the judge failed, not the model) are never a reward of
0: they are masked out of advantages and loss, retried where safe, and counted per domain.

>>> Verification.passed().reward
1.0
>>> Verification(Outcome.SANDBOX_ERROR).is_infrastructure
True
>>> Verification(Outcome.SANDBOX_ERROR).reward is None
True
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    PARTIAL = "partial"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    RUNTIME_ERROR = "runtime_error"
    PARSE_ERROR = "parse_error"
    SANDBOX_ERROR = "sandbox_error"
    JUDGE_ERROR = "judge_error"


INFRASTRUCTURE_OUTCOMES = frozenset({Outcome.SANDBOX_ERROR, Outcome.JUDGE_ERROR})
OUTCOME_VALUES = tuple(o.value for o in Outcome)


@dataclass(frozen=True)
class Verification:
    """The result of verifying one completion against one task."""

    outcome: Outcome
    score: float = 0.0
    """Reward in [0, 1]; 1 for pass, the partial credit for partial, 0 for model failures."""
    details: dict[str, Any] = field(default_factory=dict)
    """Expected, found, stage name, timings in seconds, error text."""

    @classmethod
    def passed(cls, **details: Any) -> "Verification":
        return cls(Outcome.PASS, 1.0, details)

    @classmethod
    def failed(cls, outcome: Outcome = Outcome.FAIL, **details: Any) -> "Verification":
        return cls(outcome, 0.0, details)

    @property
    def is_infrastructure(self) -> bool:
        return self.outcome in INFRASTRUCTURE_OUTCOMES

    @property
    def reward(self) -> float | None:
        """The scalar reward, or None when the outcome must be masked out."""
        return None if self.is_infrastructure else float(self.score)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "score": self.score, "details": self.details}
