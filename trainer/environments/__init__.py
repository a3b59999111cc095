"""Multi-turn environments (see :mod:`trainer.environments.base` for the interface).

A domain becomes multi-turn by setting ``DomainSpec.environment`` to a function that builds one
environment per episode. The tool-use environments are made by name (:func:`make_environment`);
:class:`RetryEnv` wraps any single-turn verifier.
"""
from __future__ import annotations

from typing import Callable

from trainer.environments.base import (Environment, StepResult, ToolEnvironment, parse_action,
                                       split_actions)
from trainer.environments.bfcl_multi import BfclMultiEnv
from trainer.environments.calculator_kv import CalculatorKVEnv
from trainer.environments.filesystem import FileSystemEnv
from trainer.environments.filing import FilingEnv
from trainer.environments.repo import RepoEnv
from trainer.environments.retry import RetryEnv
from trainer.environments.textgame import TextGameEnv

ENVIRONMENTS: dict[str, Callable[[], ToolEnvironment]] = {
    CalculatorKVEnv.name: CalculatorKVEnv,
    FileSystemEnv.name: FileSystemEnv,
    FilingEnv.name: FilingEnv,
    RepoEnv.name: RepoEnv,
    TextGameEnv.name: TextGameEnv,
    BfclMultiEnv.name: BfclMultiEnv,
}


def make_environment(name: str) -> ToolEnvironment:
    """A fresh tool-use environment by name; KeyError lists the known names."""
    try:
        return ENVIRONMENTS[name]()
    except KeyError:
        raise KeyError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}") from None


__all__ = ["ENVIRONMENTS", "Environment", "RetryEnv", "StepResult", "ToolEnvironment", "make_environment",
           "parse_action", "split_actions"]
