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

A field the prompt already gives (``given``) must be right for a pass but earns no partial credit:

>>> v = json_fields('{"company": "Acme"}', t, given=["company"])
>>> v.outcome.value, v.score
('fail', 0.0)

One JSON value per answer: duplicate keys, NaN or Infinity, several different JSON blocks fail;
``{}`` and ``[]`` never satisfy a schema unless ``allow_empty``:

>>> [json_fields(c, t).details["error"] for c in ['{"revenue": 1, "revenue": 1000.0}', '{"revenue": NaN}']]
['duplicate key revenue', 'NaN is not a JSON number']
>>> json_schema('{}', Task("d", "1", "q"), schema={"type": "object"}).details["error"]
'empty JSON value'
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.answers import hedge_reason
from trainer.verifiers.normalize import normalize_text, parse_number
from trainer.verifiers.numeric import within

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
MAX_TEXT_AROUND_JSON = 200
"""Unfenced JSON found between the first ``{`` and the last ``}``: the text around it is short
(a lead-in such as "Here is the object:"), not a long list of other candidates."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key}")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a JSON number")
    return value


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys (a hedge: which one counts?), NaN, Infinity and
    numbers too large for a float (``1e999``)."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite_float)


def parse_json_text(text: str) -> Any:
    """Parse the one JSON value in a completion: its fenced blocks (several must agree), else the
    whole text, else the span from the first ``{`` to the last ``}`` with at most
    ``MAX_TEXT_AROUND_JSON`` characters around it. ValueError says why not."""
    fenced = _FENCE.findall(text)
    candidates = fenced if fenced else [text]
    if not fenced:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            around = len(text) - (end + 1 - start)
            if around > MAX_TEXT_AROUND_JSON and _is_json(text[start : end + 1]):
                raise ValueError(f"{around} characters of text around the JSON value (at most {MAX_TEXT_AROUND_JSON})")
            candidates.append(text[start : end + 1])
    values, errors = [], []
    for candidate in candidates:
        try:
            values.append(loads_strict(candidate.strip()))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            errors.append(str(exc))
            continue
        if not fenced:
            break
    strict_errors = [e for e in errors if e.startswith("duplicate key") or e.endswith("is not a JSON number")]
    if strict_errors:
        raise ValueError(strict_errors[0])
    distinct = {json.dumps(v, sort_keys=True) for v in values}
    if len(distinct) > 1:
        raise ValueError(f"several different JSON values ({len(distinct)})")
    if not values:
        raise ValueError("no JSON value found")
    return values[0]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (dict, list, str)) and not value)


def json_schema(
    completion: str, task: Task, *, schema: dict[str, Any] | None = None, allow_empty: bool = False
) -> Verification:
    """Pass when the completion's one JSON value validates against ``schema`` (or
    ``task.meta['schema']``); an empty value (``{}``, ``[]``, ``""``, ``null``) fails unless
    ``allow_empty``: a schema without ``required`` would otherwise pay for saying nothing."""
    import jsonschema  # lazy: only this stage needs it

    schema = schema if schema is not None else task.meta.get("schema")
    try:
        value = parse_json_text(completion)
    except ValueError as exc:
        outcome = Outcome.PARSE_ERROR if str(exc) == "no JSON value found" else Outcome.FAIL
        return Verification.failed(outcome, error=str(exc), found=completion[:200])
    if _is_empty(value) and not allow_empty:
        return Verification.failed(error="empty JSON value", found=value)
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
        elif isinstance(obj, list) and part.isascii() and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return False, None
    return True, obj


def _leaves(obj: Any, prefix: str = "") -> list[str]:
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [prefix]


def _field_equal(found: Any, expected: Any, tol: dict[str, float]) -> bool:
    """One field: booleans exactly, numbers within tolerance (finite only), lists item by item,
    objects key by key, anything else as normalised text. A container never equals a scalar."""
    if isinstance(expected, bool) or isinstance(found, bool):
        return found is expected
    if isinstance(expected, dict) or isinstance(found, dict):
        return (isinstance(expected, dict) and isinstance(found, dict) and set(found) == set(expected)
                and all(_field_equal(found[k], expected[k], tol) for k in expected))
    if isinstance(expected, list) or isinstance(found, list):
        return (isinstance(expected, list) and isinstance(found, list) and len(found) == len(expected)
                and all(_field_equal(f, e, tol) for f, e in zip(found, expected)))
    if found is None or expected is None:
        return found is expected
    exp_num = expected if isinstance(expected, (int, float)) else None
    if isinstance(found, str) and hedge_reason(found, expected) is not None:
        return False
    if exp_num is not None or tol:
        try:
            e = float(expected) if exp_num is not None else parse_number(str(expected))
            f = float(found) if isinstance(found, (int, float)) else parse_number(str(found))
        except OverflowError:  # an integer too large for a float matches nothing
            return False
        if e is not None and f is not None:
            return within(f, e, tol.get("abs", 1e-9), tol.get("rel", 0.0))
        if exp_num is not None:
            return False
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
    given: list[str] | None = None,
) -> Verification:
    """Compare JSON fields (dot paths) with the expected object; numbers within per-field tolerance.

    All fields match -> pass. Otherwise, with ``partial_credit``, the score is the fraction of the
    fields *not* in ``given`` that match (partial when above 0), and only when every ``given``
    field (one the prompt already states, such as the year it asks about) matches: copying the
    question earns nothing. Without partial credit, or when nothing earned any -> fail.
    """
    expected = expected if expected is not None else task.answer
    if isinstance(expected, str):
        expected = loads_strict(expected)
    try:
        value = parse_json_text(completion)
    except ValueError as exc:
        outcome = Outcome.PARSE_ERROR if str(exc) == "no JSON value found" else Outcome.FAIL
        return Verification.failed(outcome, error=str(exc), found=completion[:200])
    paths = list(fields) if fields else [p for p in _leaves(expected) if p]
    if not paths:
        raise ValueError(f"expected answer {expected!r} has no fields to compare")
    tolerances = tolerances or {}
    given_paths = set(given or [])
    wrong: list[str] = []
    for path in paths:
        _, exp = _get(expected, path)
        present, got = _get(value, path)
        tol = tolerances.get(path, default_tolerance or {})
        if not present or not _field_equal(got, exp, tol):
            wrong.append(path)
    scored = [p for p in paths if p not in given_paths]
    score = (len(scored) - len([p for p in wrong if p in scored])) / len(scored) if scored else 0.0
    if any(p in given_paths for p in wrong):
        score = 0.0
    details = {"expected": expected, "found": value, "wrong": wrong}
    if not wrong:
        return Verification.passed(**details)
    if partial_credit and score > 0:
        return Verification(Outcome.PARTIAL, score, details)
    return Verification.failed(**details)
