"""JSON answers: JSON Schema validation, and field-by-field comparison with per-field tolerance.

>>> from trainer.tasks.base import Task
>>> schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
>>> json_schema('```json\\n{"total": 3}\\n```', Task("d", "1", "q"), schema=schema).outcome.value
'pass'
>>> json_schema('{"total": "x"}', Task("d", "1", "q"), schema=schema).details["error"]
"total: 'x' is not of type 'number'"
>>> json_schema('{total: 3}', Task("d", "1", "q"), schema=schema).outcome.value
'parse_error'
>>> t = Task("d", "1", "q", answer={"revenue": 1000.0, "company": "Acme", "q": {"margin": 0.25}})
>>> json_fields('{"revenue": 1004, "company": "acme", "q": {"margin": 0.25}}', t,
...             tolerances={"revenue": {"rel": 0.01}}).outcome.value
'pass'
>>> v = json_fields('{"revenue": 1100, "company": "Acme", "q": {"margin": 0.25}}', t)
>>> v.outcome.value, round(v.score, 3), v.details["wrong"]
('partial', 0.667, ['revenue'])
"""
from __future__ import annotations

import json
import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.normalize import normalize_text, parse_number
from trainer.verifiers.numeric import within

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_json_text(text: str) -> Any:
    """Parse JSON from a completion: a fenced block if there is one, else the outermost braces."""
    fenced = _FENCE.findall(text)
    candidates = [fenced[-1]] if fenced else []
    candidates.append(text)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate.strip())
        except (json.JSONDecodeError, ValueError):
            continue
    raise ValueError("no JSON value found")


def json_schema(completion: str, task: Task, *, schema: dict[str, Any] | None = None) -> Verification:
    """Pass when the completion's JSON validates against ``schema`` (or ``task.meta['schema']``)."""
    import jsonschema  # lazy: only this stage needs it

    schema = schema if schema is not None else task.meta.get("schema")
    try:
        value = parse_json_text(completion)
    except ValueError as exc:
        return Verification.failed(Outcome.PARSE_ERROR, error=str(exc), found=completion[:200])
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if not errors:
        return Verification.passed(extracted=json.dumps(value), found=value)
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path) or "(root)"
    return Verification.failed(error=f"{where}: {first.message}", errors=len(errors), found=value)


def _get(obj: Any, path: str) -> tuple[bool, Any]:
    for part in path.split(".") if path else []:
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return False, None
    return True, obj


def _leaves(obj: Any, prefix: str = "") -> list[str]:
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [prefix]


def _field_equal(found: Any, expected: Any, tol: dict[str, float]) -> bool:
    if isinstance(expected, bool) or isinstance(found, bool):
        return found == expected
    exp_num = expected if isinstance(expected, (int, float)) else None
    if exp_num is not None or tol:
        e = float(expected) if exp_num is not None else parse_number(str(expected))
        f = float(found) if isinstance(found, (int, float)) else parse_number(str(found))
        if e is not None and f is not None:
            return within(f, e, tol.get("abs", 1e-9), tol.get("rel", 0.0))
        if exp_num is not None:
            return False
    if isinstance(expected, list) and isinstance(found, list):
        return len(found) == len(expected) and all(_field_equal(f, e, tol) for f, e in zip(found, expected))
    return normalize_text(str(found)) == normalize_text(str(expected))


def json_fields(
    completion: str,
    task: Task,
    *,
    expected: dict[str, Any] | None = None,
    fields: list[str] | None = None,
    tolerances: dict[str, dict[str, float]] | None = None,
    default_tolerance: dict[str, float] | None = None,
    partial_credit: bool = True,
) -> Verification:
    """Compare JSON fields (dot paths) with the expected object; numbers within per-field tolerance.

    Score is the fraction of fields that match; all match -> pass, some -> partial (when
    ``partial_credit``), none -> fail.
    """
    expected = expected if expected is not None else task.answer
    if isinstance(expected, str):
        expected = json.loads(expected)
    try:
        value = parse_json_text(completion)
    except ValueError as exc:
        return Verification.failed(Outcome.PARSE_ERROR, error=str(exc), found=completion[:200])
    paths = list(fields) if fields else _leaves(expected)
    tolerances = tolerances or {}
    wrong: list[str] = []
    for path in paths:
        _, exp = _get(expected, path)
        present, got = _get(value, path)
        tol = tolerances.get(path, default_tolerance or {})
        if not present or not _field_equal(got, exp, tol):
            wrong.append(path)
    score = (len(paths) - len(wrong)) / len(paths) if paths else 0.0
    details = {"expected": expected, "found": value, "wrong": wrong}
    if not wrong:
        return Verification.passed(**details)
    if partial_credit and score > 0:
        return Verification(Outcome.PARTIAL, score, details)
    return Verification.failed(**details)
