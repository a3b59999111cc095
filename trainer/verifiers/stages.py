"""The verifier stage types: every kind of stage by name (`STAGES`), with its params JSON Schema.

Functions are referenced as ``"module:function"`` strings and imported on first use, so importing
this module (and validating a cascade) imports no verifier dependency (sympy, math-verify,
reasoning-gym, jsonschema).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.lazy import imported
from trainer.outcomes import OUTCOME_VALUES
from trainer.verifiers.limits import limits_json_schema
from trainer.verifiers.schema import check

ANY: dict[str, Any] = {}
STRINGS = {"type": "array", "items": {"type": "string"}}
NON_NEG = {"type": "number", "minimum": 0}
COUNT = {"type": "integer", "minimum": 0, "maximum": 100_000_000}
"""A count a check compares with (characters, words, lines): bounded like every number here."""
SANDBOX_BACKENDS = ("bwrap", "bwrap-cold", "docker")
"""The sandbox backends a ``code_tests`` stage may name (the workers' sandbox runtime refuses any
other; null: the worker's default, ``TEMPER_SANDBOX_BACKEND``)."""
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
    check_params: Callable[[dict[str, Any], str], list[tuple[str, str]]] | str | None = field(default=None, compare=False)
    """Checks of param values a schema cannot state (a name among those registered, a JSON
    Schema that is one), run when the params match the schema: ``(params, path) -> errors``; a
    ``module:function`` string is imported on first use, as the stage function is."""
    _fn: list[Callable[..., Any]] = field(default_factory=list, repr=False, compare=False)

    @property
    def fn(self) -> Callable[..., Any]:
        """The stage function, imported on first use."""
        if not self._fn:
            self._fn.append(imported(self.function))
        return self._fn[0]

    def param_errors(self, params: dict[str, Any], where: str) -> list[tuple[str, str]]:
        """What :attr:`check_params` finds in ``params`` (valid against the schema) at ``where``."""
        if self.check_params is None:
            return []
        check = imported(self.check_params) if isinstance(self.check_params, str) else self.check_params
        return check(params, where)


STAGES: dict[str, StageType] = {}


def register_stage(stage: StageType) -> StageType:
    """Add a stage type (extensions register their own); a name is registered once."""
    if stage.name in STAGES and STAGES[stage.name] != stage:
        raise ValueError(f"stage type {stage.name!r} is registered twice")
    STAGES[stage.name] = stage
    return stage


def _rg_dataset_errors(params: dict[str, Any], where: str) -> list[tuple[str, str]]:
    name = params.get("dataset")
    if name is None:
        return []
    from reasoning_gym.factory import DATASETS  # lazy: seconds, paid only by a spec that names one

    if name not in DATASETS:
        return [(f"{where}.dataset", f"unknown reasoning-gym generator {name!r}")]
    return []


def _json_schema_errors(params: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """The stage's schema must be a JSON Schema (its metaschema) whose references stay inside it."""
    schema = params.get("schema")
    if schema is None:
        return []
    import jsonschema  # lazy: validating a cascade imports no verifier dependency unless it must

    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        return [(f"{where}.schema{at}", f"not a valid JSON Schema: {exc.message}")]
    errors = []
    stack: list[tuple[str, Any]] = [(f"{where}.schema", schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef", "$recursiveRef") and not (isinstance(value, str) and value.startswith("#")):
                    errors.append((f"{path}.{key}", "must refer inside the schema ('#...'): nothing is fetched"))
                stack.append((f"{path}.{key}", value))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
    return sorted(errors)


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
        "min_chars": COUNT, "max_chars": COUNT, "min_words": COUNT, "max_words": COUNT, "max_lines": COUNT,
    }), "Bounds on characters, words and lines.", 0, True, default_timeout_s=2.0),
    StageType("exact", _V + "exact:exact_match", params_schema({
        "expected": ANY, "case_sensitive": {"type": "boolean"}, "strip_punctuation": {"type": "boolean"},
        "literal": {"type": "boolean"},
    }), "Exact match after normalisation (case, whitespace, optionally punctuation); literal: character for character after stripping surrounding whitespace.", 1, default_timeout_s=2.0),
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
    }), "The answer is one JSON value, valid against a JSON Schema and not empty.", 1, True, default_timeout_s=5.0,
        check_params=_json_schema_errors),
    StageType("json_fields", _V + "json_checks:json_fields", params_schema({
        "expected": ANY, "fields": STRINGS, "tolerances": {"type": "object", "additionalProperties": TOLERANCE},
        "default_tolerance": TOLERANCE, "partial_credit": {"type": "boolean"}, "given": STRINGS,
    }), "JSON fields compared one by one, numbers with per-field tolerance; partial credit, none for fields the prompt gives.", 1, default_timeout_s=5.0),
    StageType("function_calls", _V + "function_calls:function_calls", params_schema({
        "category": {"enum": ["simple", "multiple", "parallel", "parallel_multiple", "irrelevance", "relevance", None]},
    }), "Function calls (a Python list of calls) checked by their syntax tree against the task's possible answers (BFCL's rules).", 1,
        default_timeout_s=5.0),
    StageType("math", _V + "math_equiv:math_equivalence", params_schema({
        "expected": ANY, "float_rounding": {"type": "integer", "minimum": 0, "maximum": 20}, "strict": {"type": "boolean"},
    }), "Symbolic equivalence with math-verify: one final answer, of the gold's kind, finite and evaluated.", 2, default_timeout_s=10.0),
    StageType("rg_score", _V + "rg_score:rg_score", params_schema({
        "dataset": {"type": "string"},
    }), "A reasoning-gym generator's own score_answer.", 2, default_timeout_s=10.0, check_params=_rg_dataset_errors),
    StageType("environment", "trainer.environments.replay:environment_replay", params_schema({
        "env": {"type": "string"}, "max_steps": {"type": "integer", "minimum": 1},
    }), "Replay the tool calls in the completion through a tool-use environment; reward from the final state.", 2, default_timeout_s=10.0,
        check_params="trainer.environments.replay:params_errors"),
    StageType("code_tests", _V + "code:code_tests", params_schema({
        "tests": ANY, "entry_point": {"type": "string"}, "prompt": {"type": "string"}, "limits": limits_json_schema(),
        "backend": {"enum": [*SANDBOX_BACKENDS, None]}, "partial_credit": {"type": "boolean"},
    }), "Unit tests run in the sandbox.", 3, isolation="thread", default_timeout_s=60.0, needs_context=True),
    StageType("repo_tests", "trainer.families.swe.verifier:repo_tests", params_schema({
        "limits": limits_json_schema(), "backend": {"enum": [*SANDBOX_BACKENDS, None]},
    }), "A repository task's hidden tests on the final tree (the completion's diff or tool calls applied), in the sandbox.", 3,
        isolation="thread", default_timeout_s=90.0, needs_context=True),
    StageType("shell_state", "trainer.families.shell.verifier:shell_state", params_schema({
        "limits": limits_json_schema(), "backend": {"enum": [*SANDBOX_BACKENDS, None]},
    }), "A shell task's final tree checked by trusted code (files compared; a check command rerun in a fresh sandbox).", 3,
        isolation="thread", default_timeout_s=60.0, needs_context=True),
    StageType("pkg_tests", "trainer.families.pkgs.verifier:pkg_tests", params_schema({
        "limits": limits_json_schema(), "backend": {"enum": [*SANDBOX_BACKENDS, None]},
    }), "A swe-pkg task's fail-to-pass and pass-to-pass tests on the package with only the completion's source changes (gated), in a fresh sandbox.", 3,
        isolation="thread", default_timeout_s=300.0, needs_context=True),
    StageType("cad_mesh", _V + "cad:cad_mesh", params_schema({
        "limits": limits_json_schema(), "backend": {"enum": [*SANDBOX_BACKENDS, None]},
    }), "A modelling script (manifold3d) run in the sandbox; its solid checked by geometry against the task's checks.", 3,
        isolation="thread", default_timeout_s=60.0, needs_context=True),
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
            params = stage.get("params", {})
            problems = check(params, STAGES[kind].params_schema, f"{where}.params")
            if not problems:
                problems = STAGES[kind].param_errors(params, f"{where}.params")
            errors.extend(problems)
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
