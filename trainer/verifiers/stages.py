"""The verifier stage types: every kind of stage by name (`STAGES`), with its params JSON Schema.

Functions are referenced as ``"module:function"`` strings and imported on first use, so importing
this module (and validating a cascade) imports no verifier dependency (sympy, math-verify,
reasoning-gym, jsonschema).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.outcomes import OUTCOME_VALUES
from trainer.verifiers.limits import limits_json_schema
from trainer.verifiers.schema import check

ANY: dict[str, Any] = {}
STRINGS = {"type": "array", "items": {"type": "string"}}
NON_NEG = {"type": "number", "minimum": 0}
NON_NEG_INT = {"type": "integer", "minimum": 0}
TOLERANCE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"abs": NON_NEG, "rel": NON_NEG},
}


def params_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed object schema for a stage's params."""
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": required or []}


@dataclass(frozen=True)
class StageType:
    """One kind of verifier stage."""

    name: str
    """Type name used in cascade specs, e.g. ``exact``."""
    function: str
    """``module:function`` of the pure verifier ``(completion, task, **params) -> Verification``."""
    params_schema: dict[str, Any]
    """JSON Schema of the params object."""
    description: str = ""
    """One line for forms and docs."""
    cost: int = 1
    """Cheapness rank: the cascade runs lower costs first (0 gates, 1 string checks, 2 symbolic,
    3 execution, 4 model judges); equal costs keep their order."""
    gate: bool = False
    """A gate only stops the cascade when it does not pass (format, length, extraction); a checker
    stops it on anything but fail or parse_error."""
    isolation: str = "process"
    """``process``: run in a worker process that is killed at the timeout; ``thread``: for stages
    that wait on an outside service with its own limits (sandbox, judge); the caller stops
    waiting at the timeout."""
    default_timeout_s: float = 5.0
    """Timeout when the spec gives none."""
    needs_context: bool = False
    """The function takes a ``context`` keyword (a :class:`~trainer.verifiers.context.VerifyContext`:
    sandbox, judges); such a stage runs in the caller's process (``thread`` isolation)."""
    _fn: list[Callable[..., Any]] = field(default_factory=list, repr=False, compare=False)

    @property
    def fn(self) -> Callable[..., Any]:
        """The stage function, imported on first use."""
        if not self._fn:
            module, attr = self.function.split(":")
            self._fn.append(getattr(importlib.import_module(module), attr))
        return self._fn[0]


STAGES: dict[str, StageType] = {}


def register_stage(stage: StageType) -> StageType:
    """Add a stage type (extensions register their own); a name is registered once."""
    if stage.name in STAGES and STAGES[stage.name] != stage:
        raise ValueError(f"stage type {stage.name!r} is registered twice")
    STAGES[stage.name] = stage
    return stage


_V = "trainer.verifiers."
for _stage in [
    StageType("extract", _V + "extract:extract_answer", params_schema({
        "methods": {"type": "array", "minItems": 1, "items": {"enum": ["boxed", "answer_tag", "final_line"]}},
        "tag": {"type": "string"},
    }), "Extract the one final answer (\\boxed{}, <answer> tag, else the final line); several different answers or a hedge fail; later stages see only it.", 0, True, default_timeout_s=2.0),
    StageType("format", _V + "format_length:format_check", params_schema({
        "required_tags": STRINGS, "single_tags": STRINGS, "pattern": {"type": "string", "format": "regex"}, "forbidden": STRINGS,
    }), "Required tags, a regex that must appear, forbidden text.", 0, True, default_timeout_s=2.0),
    StageType("length", _V + "format_length:length_check", params_schema({
        "min_chars": NON_NEG_INT, "max_chars": NON_NEG_INT, "min_words": NON_NEG_INT, "max_words": NON_NEG_INT, "max_lines": NON_NEG_INT,
    }), "Bounds on characters, words and lines.", 0, True, default_timeout_s=2.0),
    StageType("exact", _V + "exact:exact_match", params_schema({
        "expected": ANY, "case_sensitive": {"type": "boolean"}, "strip_punctuation": {"type": "boolean"},
    }), "Exact match after normalisation (case, whitespace, optionally punctuation).", 1, default_timeout_s=2.0),
    StageType("regex", _V + "regex:regex_match", params_schema({
        "pattern": {"type": "string", "format": "regex"}, "flags": {"type": "string", "pattern": "[imsx]*"},
        "mode": {"enum": ["fullmatch", "search"]},
    }), "A regular expression must fullmatch the answer (the task's answer as a literal by default); search only with the domain's own pattern, one distinct match.", 1, default_timeout_s=2.0),
    StageType("numeric", _V + "numeric:numeric_match", params_schema({
        "expected": ANY, "abs_tol": NON_NEG, "rel_tol": NON_NEG, "take": {"enum": ["whole", "last"]},
        "percent": {"enum": ["fraction", "points"]},
    }), "One finite number within absolute or relative tolerance.", 1, default_timeout_s=2.0),
    StageType("choice", _V + "choice:multiple_choice", params_schema({
        "expected": ANY, "choices": STRINGS,
    }), "Multiple choice by letter or option text.", 1, default_timeout_s=2.0),
    StageType("json_schema", _V + "json_checks:json_schema", params_schema({
        "schema": {"type": "object"}, "allow_empty": {"type": "boolean"},
    }), "The answer is one JSON value, valid against a JSON Schema and not empty.", 1, True, default_timeout_s=5.0),
    StageType("json_fields", _V + "json_checks:json_fields", params_schema({
        "expected": ANY, "fields": STRINGS, "tolerances": {"type": "object", "additionalProperties": TOLERANCE},
        "default_tolerance": TOLERANCE, "partial_credit": {"type": "boolean"}, "given": STRINGS,
    }), "JSON fields compared one by one, numbers with per-field tolerance; partial credit, none for fields the prompt gives.", 1, default_timeout_s=5.0),
    StageType("math", _V + "math_equiv:math_equivalence", params_schema({
        "expected": ANY, "float_rounding": NON_NEG_INT, "strict": {"type": "boolean"},
    }), "Symbolic equivalence with math-verify: one final answer, of the gold's kind, finite and evaluated.", 2, default_timeout_s=10.0),
    StageType("rg_score", _V + "rg_score:rg_score", params_schema({
        "dataset": {"type": "string"},
    }), "A reasoning-gym generator's own score_answer.", 2, default_timeout_s=10.0),
    StageType("environment", _V + "environment:environment_replay", params_schema({
        "env": {"type": "string"}, "max_steps": {"type": "integer", "minimum": 1},
    }), "Replay the tool calls in the completion through a tool-use environment; reward from the final state.", 2, default_timeout_s=10.0),
    StageType("code_tests", _V + "code:code_tests", params_schema({
        "tests": ANY, "entry_point": {"type": "string"}, "prompt": {"type": "string"}, "limits": limits_json_schema(),
        "backend": {"type": ["string", "null"]}, "partial_credit": {"type": "boolean"},
    }), "Unit tests run in the sandbox.", 3, isolation="thread", default_timeout_s=60.0, needs_context=True),
    StageType("judge", _V + "judge:judge_stage", params_schema({
        "judge": {"type": "string"}, "rubric": {"type": "string"}, "threshold": {"type": "number", "minimum": 0, "maximum": 1},
        "graded": {"type": "boolean"},
    }), "A model judge grades the completion against a rubric (HTTP endpoint, local model or embedding similarity).", 4, isolation="thread", default_timeout_s=120.0,
        needs_context=True),
]:
    register_stage(_stage)

MAX_TIMEOUT_S = 600.0
STAGE_KEYS = ("type", "params", "timeout_s", "stop_on", "name")


def validate_cascade(spec: Any, path: str = "verifier") -> list[tuple[str, str]]:
    """Every problem with a cascade spec as ``(path, message)``; empty when it is valid.

    A spec is ``{"stages": [{"type", "params"?, "timeout_s"?, "stop_on"?, "name"?}, ...]}``.

    >>> validate_cascade({"stages": [{"type": "exact"}, {"type": "numeric", "timeout_s": 0}]})
    [('verifier.stages[1].timeout_s', 'must be greater than 0')]
    >>> validate_cascade({"stages": [{"type": "foo"}]})
    [('verifier.stages[0].type', "unknown stage type 'foo'")]
    >>> validate_cascade({"stages": [{"type": "numeric", "params": {"abs_tol": "x", "tol": 1}}]})
    [('verifier.stages[0].params.abs_tol', 'must be a number'), ('verifier.stages[0].params.tol', 'unknown parameter')]
    >>> validate_cascade([])
    [('verifier', 'must be an object with a list of stages')]
    """
    if not isinstance(spec, dict):
        return [(path, "must be an object with a list of stages")]
    errors: list[tuple[str, str]] = []
    for key in sorted(set(spec) - {"stages"}):
        errors.append((f"{path}.{key}", "unknown key"))
    stages = spec.get("stages")
    if not isinstance(stages, list) or not stages:
        return errors + [(f"{path}.stages", "must be a non-empty list")]
    for i, stage in enumerate(stages):
        where = f"{path}.stages[{i}]"
        if not isinstance(stage, dict):
            errors.append((where, "must be an object"))
            continue
        for key in sorted(set(stage) - set(STAGE_KEYS), key=str):
            errors.append((f"{where}.{key}", "unknown key"))
        kind = stage.get("type")
        if kind is None:
            errors.append((f"{where}.type", "required"))
        elif not isinstance(kind, str) or kind not in STAGES:
            errors.append((f"{where}.type", f"unknown stage type {kind!r}"))
        else:
            errors.extend(check(stage.get("params", {}), STAGES[kind].params_schema, f"{where}.params"))
        if "timeout_s" in stage:
            errors.extend(check(stage["timeout_s"], {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S}, f"{where}.timeout_s"))
        if "stop_on" in stage:
            errors.extend(check(stage["stop_on"], {"type": "array", "items": {"enum": list(OUTCOME_VALUES)}}, f"{where}.stop_on"))
        if "name" in stage:
            errors.extend(check(stage["name"], {"type": "string"}, f"{where}.name"))
    return errors


def cascade_json_schema() -> dict[str, Any]:
    """A JSON Schema for whole cascade specs, one branch per stage type (for forms and docs)."""
    branches = []
    for stage in STAGES.values():
        branches.append({
            "type": "object",
            "title": stage.name,
            "description": stage.description,
            "additionalProperties": False,
            "required": ["type"],
            "properties": {
                "type": {"const": stage.name},
                "params": stage.params_schema,
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S, "default": stage.default_timeout_s},
                "stop_on": {"type": "array", "items": {"enum": list(OUTCOME_VALUES)}},
                "name": {"type": "string"},
            },
        })
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Verifier cascade",
        "type": "object",
        "additionalProperties": False,
        "required": ["stages"],
        "properties": {"stages": {"type": "array", "minItems": 1, "items": {"oneOf": branches}}},
    }
