"""Verifiers: pure stage functions ``(completion, task, **params) -> Verification``, one file per
family, and the cascade that runs them cheapest first with timeouts enforced from outside.

Importing this package imports only the standard library and ``trainer.outcomes`` /
``trainer.tasks``: stage dependencies (sympy, math-verify, reasoning-gym, jsonschema) load when a
stage first runs, so the control plane can validate configurations cheaply.

Public API:
    STAGES                                   stage type name -> StageType (fn, params_schema, ...)
    validate_cascade(spec, path="verifier")  -> list[(path, message)]
    cascade_json_schema()                    -> JSON Schema of a cascade spec
    run_cascade(spec, completion, task)      -> Verification
    compile_cascade(spec)                    -> Cascade (callable, reusable); CascadeError if invalid
    set_sandbox_executor(fn)                 inject the sandbox's execute (code_tests stage)
    set_judge(name, judge)                   install a judge (judge stage)
"""
from __future__ import annotations

from typing import Any

from trainer.verifiers.stages import STAGES, StageType, cascade_json_schema, register_stage, validate_cascade

__all__ = [
    "STAGES",
    "StageType",
    "Cascade",
    "CascadeError",
    "cascade_json_schema",
    "compile_cascade",
    "register_stage",
    "run_cascade",
    "set_judge",
    "set_sandbox_executor",
    "validate_cascade",
]

_LAZY = {
    "Cascade": "trainer.verifiers.cascade",
    "CascadeError": "trainer.verifiers.cascade",
    "compile_cascade": "trainer.verifiers.cascade",
    "run_cascade": "trainer.verifiers.cascade",
    "set_sandbox_executor": "trainer.verifiers.code",
    "get_sandbox_executor": "trainer.verifiers.code",
    "set_judge": "trainer.verifiers.judge",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainer.verifiers' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
