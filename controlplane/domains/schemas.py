"""JSON Schemas for everything a domain stores, checked before anything is saved."""
from __future__ import annotations

from typing import Any

from controlplane.common.errors import FieldError
from controlplane.common.validation import SLUG_SCHEMA, schema_errors
from controlplane.domains.models import KIND_VALUES
from trainer.catalogue import UPLOAD_FAMILY
from trainer.verifiers import validate_cascade

STAGE_SCHEMA = {
    "type": "object",
    "required": ["type"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "params": {"type": "object"},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
        "name": {"type": "string"},
    },
}

MAX_STAGES = 16
"""Stages of one verifier cascade: each is run (and may start a sandbox or call a judge) per sample."""
MAX_STAGE_TESTS = 1000
"""Unit tests a ``code_tests`` stage's ``params.tests`` may list: each one runs in the sandbox."""
MAX_ENV_STEPS = 1000
"""Tool calls an ``environment`` stage's ``params.max_steps`` may replay per completion."""

VERIFIER_SCHEMA = {
    "type": "object",
    "required": ["stages"],
    "additionalProperties": False,
    "properties": {
        "stages": {"type": "array", "minItems": 1, "maxItems": MAX_STAGES, "items": STAGE_SCHEMA},
        "stop_on": {"type": "string", "enum": ["decisive", "never"]},
    },
}

QUOTA_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_concurrent_sandboxes": {"type": "integer", "minimum": 0, "maximum": 100000},
        "max_share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "task_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
        "priority": {"type": "integer", "minimum": 1, "maximum": 99},
    },
}

TASK_SOURCE_SCHEMA = {
    "type": "object",
    "required": ["family"],
    "properties": {"family": {"type": "string", "pattern": r"^[a-z0-9_]+$", "maxLength": 64}},
}

def task_source_errors(source: Any) -> list[FieldError]:
    """A task source given in a domain body (create or change): never an upload's. An uploaded
    domain's tasks come only through ``POST /api/domains/upload``, which checks every line; tasks
    written into ``task_source`` skipped those checks (a task without a prompt, a level of 2**70)
    and failed on the worker."""
    if not isinstance(source, dict):
        return []
    errors = []
    if source.get("family") == UPLOAD_FAMILY:
        errors.append(FieldError("task_source.family", f"{UPLOAD_FAMILY!r} domains are made by uploading their tasks "
                                                       "(POST /api/domains/upload; every line is checked)"))
    if "tasks" in source:
        errors.append(FieldError("task_source.tasks", "tasks are uploaded (POST /api/domains/upload), never written "
                                                      "into task_source"))
    return errors

DOMAIN_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "slug": SLUG_SCHEMA,
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "kind": {"type": "string", "enum": KIND_VALUES},
        "family": {"type": "string", "maxLength": 64},
        "description": {"type": "string"},
        "task_source": TASK_SOURCE_SCHEMA,
        "verifier": VERIFIER_SCHEMA,
        "is_active": {"type": "boolean"},
        **QUOTA_SCHEMA["properties"],
    },
}


def verifier_errors(spec: Any, prefix: str = "verifier") -> list[FieldError]:
    """Shape errors, then the trainer's own checks of stage types and their params."""
    errors = schema_errors(spec, VERIFIER_SCHEMA, prefix)
    if errors:
        return errors
    errors = [FieldError(path.replace("verifier", prefix, 1), msg) for path, msg in validate_cascade(spec)]
    return errors or _stage_size_errors(spec, prefix)


def _stage_size_errors(spec: dict, prefix: str) -> list[FieldError]:
    """The sizes a verify worker would run that the stage types leave open: the number of unit
    tests of a ``code_tests`` stage and the steps an ``environment`` stage replays (the sandbox's
    own limits, ``params.limits``, are bounded by ``trainer.verifiers.limits.Limits``)."""
    errors = []
    for i, stage in enumerate(spec["stages"]):
        params = stage.get("params") or {}
        where = f"{prefix}.stages[{i}].params"
        tests = params.get("tests")
        if stage["type"] == "code_tests" and isinstance(tests, list) and len(tests) > MAX_STAGE_TESTS:
            errors.append(FieldError(f"{where}.tests", f"lists {len(tests)} tests; at most {MAX_STAGE_TESTS} are allowed"))
        steps = params.get("max_steps")
        if stage["type"] == "environment" and isinstance(steps, int) and steps > MAX_ENV_STEPS:
            errors.append(FieldError(f"{where}.max_steps", f"must be at most {MAX_ENV_STEPS}"))
    return errors


def judge_stage_refs(spec: Any, prefix: str = "verifier") -> list[tuple[str, str]]:
    """``(field path, judge name)`` of each judge stage of a verifier cascade (a stage that names
    none uses the judge ``default``).

    >>> judge_stage_refs({"stages": [{"type": "exact"}, {"type": "judge", "params": {"judge": "sim"}}, {"type": "judge"}]})
    [('verifier.stages[1].params.judge', 'sim'), ('verifier.stages[2].params.judge', 'default')]
    """
    stages = spec.get("stages") if isinstance(spec, dict) else None
    return [(f"{prefix}.stages[{i}].params.judge", str((stage.get("params") or {}).get("judge", "default")))
            for i, stage in enumerate(stages if isinstance(stages, list) else [])
            if isinstance(stage, dict) and stage.get("type") == "judge"]


def domain_errors(data: dict, *, creating: bool) -> list[FieldError]:
    schema = dict(DOMAIN_SCHEMA)
    if creating:
        schema["required"] = ["slug", "title", "kind", "task_source", "verifier"]
    errors = schema_errors(data, schema)
    if isinstance(data, dict) and isinstance(data.get("verifier"), dict) and not any(e.path.startswith("verifier") for e in errors):
        errors += verifier_errors(data["verifier"])
    return errors


_COUNT = {"type": "integer", "minimum": 0}
AUDIT_REPORT_SCHEMA = {
    "type": "object",
    "required": ["domain", "tasks", "probes", "false_positives", "false_negatives_gold", "false_negatives_equivalent",
                 "masked", "wall_s", "auditor_version", "classes", "constant_bias"],
    "properties": {
        "domain": {"type": "string"},
        "tasks": _COUNT, "probes": _COUNT, "false_positives": _COUNT, "false_negatives_gold": _COUNT,
        "false_negatives_equivalent": _COUNT, "masked": _COUNT,
        "wall_s": {"type": "number", "minimum": 0},
        "auditor_version": {"type": "string", "minLength": 1, "maxLength": 64},
        "classes": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["probes", "false_positives", "false_negatives", "examples"],
                "properties": {
                    "probes": _COUNT, "false_positives": _COUNT, "false_negatives": _COUNT,
                    "examples": {"type": "array", "items": {"type": "object", "required": ["task_id", "completion", "outcome"]}},
                },
            },
        },
        "constant_bias": {
            "type": "array",
            "items": {"type": "object", "required": ["constant", "rate", "chance", "flagged"],
                      "properties": {"constant": {"type": "string"}, "rate": {"type": "number"},
                                     "chance": {"type": "number"}, "flagged": {"type": "boolean"}}},
        },
    },
}
"""The shape of ``trainer.audit.AuditReport.to_dict()``, checked before a report is recorded."""


def audit_report_errors(report: Any) -> list[FieldError]:
    """Shape errors of an audit report (paths under ``report.``)."""
    return schema_errors(report, AUDIT_REPORT_SCHEMA, "report")
