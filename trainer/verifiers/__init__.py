"""Verifiers: pure stage functions ``(completion, task, **params) -> Verification``, one file per
family, and the cascade that runs them cheapest first with timeouts enforced from outside.

Importing this package imports only the standard library and ``trainer.outcomes`` /
``trainer.tasks``: stage dependencies (sympy, math-verify, reasoning-gym, jsonschema) load when a
stage first runs, so the control plane can validate configurations cheaply.

Public API:
    STAGES                                   stage type name -> StageType (fn, params_schema, ...)
    validate_cascade(spec, path="verifier")  -> list[(path, message)]
    cascade_json_schema()                    -> JSON Schema of a cascade spec
    run_cascade(spec, completion, task, context=None) -> Verification
    compile_cascade(spec, context)           -> Cascade (callable, reusable); CascadeError if invalid
    VerifyContext(execute=, judges=, sandbox_slot=)   the sandbox and judges a cascade's
                                             code_tests and judge stages use (handed in, never global)
    Limits                                   a sandbox job's resource limits (code_tests params.limits)
"""
from __future__ import annotations

import importlib
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
    "validate_cascade",
    "VerifyContext",
    "NO_CONTEXT",
    "Limits",
]

_LAZY = {
    "Cascade": "trainer.verifiers.cascade",
    "CascadeError": "trainer.verifiers.cascade",
    "compile_cascade": "trainer.verifiers.cascade",
    "run_cascade": "trainer.verifiers.cascade",
    "VerifyContext": "trainer.verifiers.context",
    "NO_CONTEXT": "trainer.verifiers.context",
    "Limits": "trainer.verifiers.limits",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainer.verifiers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
