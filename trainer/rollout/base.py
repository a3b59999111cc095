"""The one interface every rollout engine implements."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one model turn."""

    max_new_tokens: int = 64
    """Tokens generated at most."""
    temperature: float = 1.0
    """Softmax temperature (0 = greedy); returned logprobs are of the tempered distribution."""
    top_p: float = 1.0
    """Nucleus mass kept before sampling."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation of a sequence ends after any of these (the eos token is always one)."""
    ignore_eos: bool = False
    """Sample every sequence to ``max_new_tokens``, past any stop token (benchmarks: the same work
    in every setting compared, as vLLM's ``ignore_eos``); never for training."""


@dataclass
class Generation:
    """One sampled completion of one prompt."""

    token_ids: list[int]
    """Generated tokens, including the stop token when one was produced."""
    logprobs: list[float]
    """Behaviour-policy logprob of each generated token (same length as ``token_ids``)."""
    text: str
    """Decoded completion without special tokens."""
    finished: bool
    """True when a stop token ended it; False when ``max_new_tokens`` cut it (truncated)."""
    meta: dict = field(default_factory=dict)
    """Engine-specific extras."""


class RolloutEngine(Protocol):
    """Generates completions; after each policy update :meth:`sync_weights` makes it current."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One completion per prompt (repeat a prompt n times for a group of n)."""
        ...

    def sync_weights(self, model) -> float:
        """Load the policy's current weights in place; returns seconds spent."""
        ...

    def state_dict(self) -> dict:
        """RNG state, so a resumed job samples exactly what an uninterrupted one would."""
        ...

    def load_state_dict(self, state: dict) -> None:
        ...
