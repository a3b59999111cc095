"""Multi-turn environments (see :mod:`trainer.environments.base` for the interface).

A domain becomes multi-turn by setting ``DomainSpec.environment`` to a function that builds one
environment per episode. The tool-use environments are made by name (:func:`make_environment`);
:class:`RetryEnv` wraps any single-turn verifier.
"""
from __future__ import annotations

from trainer.environments.base import (Environment, StepResult, ToolEnvironment, parse_action,
                                       split_actions)
from trainer.environments.retry import RetryEnv
from trainer.lazy import imported

ENVIRONMENTS: dict[str, str] = {
    "calculator_kv": "trainer.environments.calculator_kv:CalculatorKVEnv",
    "filesystem": "trainer.environments.filesystem:FileSystemEnv",
    "filing": "trainer.environments.filing:FilingEnv",
    "repo": "trainer.families.swe.environment:RepoEnv",
    "textgame": "trainer.environments.textgame:TextGameEnv",
    "bfcl_multi": "trainer.environments.bfcl_multi:BfclMultiEnv",
    "shell": "trainer.environments.shell:ShellEnv",
}
"""The tool-use environments by name, each as ``module:Class`` imported when one is made (so that
a family package's environment is named here without this package importing the family)."""


def environment_class(name: str) -> type[ToolEnvironment]:
    """The environment class registered as ``name``; KeyError lists the known names."""
    if not isinstance(name, str) or name not in ENVIRONMENTS:
        raise KeyError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}")
    return imported(ENVIRONMENTS[name])


def make_environment(name: str) -> ToolEnvironment:
    """A fresh tool-use environment by name; KeyError lists the known names."""
    return environment_class(name)()


__all__ = ["ENVIRONMENTS", "Environment", "environment_class", "RetryEnv", "StepResult", "ToolEnvironment", "make_environment",
           "parse_action", "split_actions"]
