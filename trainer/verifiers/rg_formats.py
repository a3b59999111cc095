"""Strict answer formats for reasoning-gym scorers that read less than the whole answer
(overrides in :mod:`trainer.verifiers.rg_score`): the gold's words and nothing after them, a grid of
numbers with the gold's shape and nothing around it.

>>> entry = {"answer": "1 0 1\\n0 1 0"}
>>> grid_shape("1 0 1\\n0 1 0"), grid_shape("1 0 1 9\\n0 1 0 9"), grid_shape("Grid:\\n1 0 1\\n0 1 0")
([3, 3], [4, 4], None)
>>> same_words("Paris is big", {"answer": "paris is big"}, None), same_words("Paris is big zzz", {"answer": "paris is big"}, None)
(1.0, 0.0)
"""
from __future__ import annotations

import re
from typing import Any, Callable

_GRID_LINE = re.compile(r"[-+]?\d+(?:[ \t]+[-+]?\d+)*")


def grid_shape(text: str) -> list[int] | None:
    """Numbers per line of a grid written as whitespace-separated integers, or None when the text
    holds anything else (words, punctuation, brackets)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines or not all(_GRID_LINE.fullmatch(line) for line in lines):
        return None
    return [len(line.split()) for line in lines]


def strict_grid(upstream: Callable[[str, dict[str, Any], Any], float]) -> Callable[[str, dict[str, Any], Any], float]:
    """``upstream`` behind the gold's grid shape: only integers, as many lines and as many numbers
    on each line as the gold has (upstream skips what it cannot read and reads no further)."""
    def score(answer: str, entry: dict[str, Any], dataset: Any) -> float:
        shape = grid_shape(answer)
        if shape is None or shape != grid_shape(str(entry["answer"])):
            return 0.0
        return float(upstream(answer, entry, dataset))
    return score


def upstream_score(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The generator's own ``score_answer``."""
    return float(dataset.score_answer(answer, entry))


def same_words(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer's words are the gold's, in order, case aside, and no more."""
    return float(answer.strip().lower().split() == str(entry["answer"]).strip().lower().split())


def exact_text(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer is the gold's text exactly (surrounding whitespace aside)."""
    return float(answer.strip() == str(entry["answer"]).strip())


def same_word(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer is the word (spaces and case aside); upstream pays 0.1 per letter in
    place up to 1, so ten right letters of a longer word passed."""
    return float(answer.replace(" ", "").strip().casefold() == str(entry["answer"]).strip().casefold())
