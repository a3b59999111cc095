"""Multi-turn tool-use environments (see :mod:`trainer.environments.base` for the interface)."""
from __future__ import annotations

from typing import Callable

from trainer.environments.base import Environment, StepResult, parse_action, split_actions
from trainer.environments.calculator_kv import CalculatorKVEnv
from trainer.environments.filesystem import FileSystemEnv

ENVIRONMENTS: dict[str, Callable[[], Environment]] = {
    CalculatorKVEnv.name: CalculatorKVEnv,
    FileSystemEnv.name: FileSystemEnv,
}


def make_environment(name: str) -> Environment:
    """A fresh environment by name; KeyError lists the known names."""
    try:
        return ENVIRONMENTS[name]()
    except KeyError:
        raise KeyError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}") from None


__all__ = ["ENVIRONMENTS", "Environment", "StepResult", "make_environment", "parse_action", "split_actions"]
