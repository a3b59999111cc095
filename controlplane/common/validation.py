"""JSON Schema validation with errors that name the field path and the reason.

>>> schema = {"type": "object", "properties": {"stages": {"type": "array", "items": {
...     "type": "object", "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0}}}}}}
>>> [str(e) for e in schema_errors({"stages": [{"timeout_s": 1}, {"timeout_s": 0}]}, schema, "verifier")]
['verifier.stages[1].timeout_s: must be greater than 0']
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable

import jsonschema

from controlplane.common.errors import FieldError, InvalidInput, join_path

MAX_ROW_ID = 2**63 - 1
"""The largest id a row has (64-bit keys); a larger one names nothing."""


def is_row_id(text: str) -> bool:
    """``text`` is a row id: ASCII digits only (``str.isdigit`` is also true of ``²``, ``①`` and
    ``١``), from 1 to :data:`MAX_ROW_ID` (a larger one overflows the database's integer, and
    ``int`` refuses 4,301 digits).

    >>> is_row_id("12"), is_row_id("²"), is_row_id("١٢"), is_row_id(""), is_row_id("0"), is_row_id("9" * 19)
    (True, False, False, False, False, False)
    """
    return text.isascii() and text.isdigit() and len(text) <= 19 and 0 < int(text) <= MAX_ROW_ID


SLUG_SCHEMA = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]*$", "maxLength": 100}
"""A slug as an input (domains, judges, eval suites): lower case, what their ``SlugField(max_length=100)`` holds."""
TEAM_SCHEMA = {"type": "string", "minLength": 1}
"""A team named in an input (a run, a domain, a judge, a token): its slug, which the service looks
up among the actor's teams (an unknown one is refused there)."""

_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "object": "an object",
    "array": "a list",
    "boolean": "true or false",
    "null": "null",
}


def _path(prefix: str, parts: Iterable[Any]) -> str:
    out = prefix
    for part in parts:
        out = join_path(out, f"[{part}]" if isinstance(part, int) else str(part))
    return out


def _fmt(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


_REASONS: dict[str, Callable[[Any], str]] = {
    "type": lambda arg: "must be " + " or ".join(_TYPE_WORDS.get(t, t) for t in ([arg] if isinstance(arg, str) else arg)),
    "exclusiveMinimum": lambda arg: f"must be greater than {_fmt(arg)}",
    "minimum": lambda arg: f"must be at least {_fmt(arg)}",
    "exclusiveMaximum": lambda arg: f"must be less than {_fmt(arg)}",
    "maximum": lambda arg: f"must be at most {_fmt(arg)}",
    "enum": lambda arg: "must be one of: " + ", ".join(str(a) for a in arg),
    "const": lambda arg: f"must be {arg!r}",
    "minLength": lambda arg: "must not be empty" if arg == 1 else f"must be at least {arg} characters",
    "maxLength": lambda arg: f"must be at most {arg} characters",
    "pattern": lambda arg: f"must match {arg}",
    "minItems": lambda arg: "must not be empty" if arg == 1 else f"must have at least {arg} items",
    "maxItems": lambda arg: f"must have at most {arg} items",
    "uniqueItems": lambda arg: "must not repeat items",
    "minProperties": lambda arg: "must not be empty",
}
"""The reason for a broken rule, in words, by jsonschema keyword, from the rule's value."""


def _reason(error: jsonschema.ValidationError) -> str:
    """Why ``error``'s value breaks its rule (jsonschema's own message for the other keywords)."""
    reason = _REASONS.get(error.validator)
    return reason(error.validator_value) if reason else error.message


def _is_integer(checker: Any, value: Any) -> bool:
    """JSON Schema calls ``1.0`` and ``-1e308`` integers; the code behind an ``integer`` field
    expects a Python int (a float reached a lookup as a version reference: 500)."""
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _ecma(pattern: str) -> re.Pattern:
    """``pattern`` with JSON Schema's (ECMA-262's) meaning of a final ``$``: the end of the string.
    Python's ``$`` also matches before a final newline, so ``^[a-z]+$`` let ``"x\\n"`` through (an
    export directory whose name ends in a newline, a slug with one).

    >>> bool(_ecma("^[a-z]+$").search("x\\n")), bool(_ecma("^[a-z]+$").search("x"))
    (False, True)
    """
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Any:
    """jsonschema's ``pattern`` keyword, matched as :func:`_ecma` reads it."""
    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _strict(validator_cls: type) -> type:
    """``validator_cls`` whose ``integer`` is :func:`_is_integer` and whose ``pattern`` is
    :func:`_pattern` (one class per draft, made once)."""
    return jsonschema.validators.extend(validator_cls, validators={"pattern": _pattern},
                                        type_checker=validator_cls.TYPE_CHECKER.redefine("integer", _is_integer))


def schema_errors(instance: Any, schema: dict, prefix: str = "") -> list[FieldError]:
    """Every rule ``instance`` breaks in ``schema``, as field errors sorted by path.

    >>> [str(e) for e in schema_errors({"n": 2.0}, {"properties": {"n": {"type": "integer"}}})]
    ['n: must be an integer']
    """
    validator = _strict(jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator))(schema)
    errors = []
    for error in validator.iter_errors(instance):
        if error.validator in ("required", "additionalProperties") and isinstance(error.instance, dict):
            # One error per missing or unknown field, each at its own path.
            if error.validator == "required":
                names, message = [n for n in error.validator_value if n not in error.instance], "required"
            else:
                allowed = set(error.schema.get("properties", {}))
                names, message = sorted(k for k in error.instance if k not in allowed), "unknown field"
            errors += [FieldError(_path(prefix, [*error.absolute_path, name]), message) for name in names]
            continue
        errors.append(FieldError(_path(prefix, error.absolute_path), _reason(error)))
    unique = {(e.path, e.message): e for e in errors}
    return sorted(unique.values(), key=lambda e: (e.path, e.message))


def validate(instance: Any, schema: dict, prefix: str = "") -> None:
    """Raise :class:`InvalidInput` listing every rule ``instance`` breaks."""
    errors = schema_errors(instance, schema, prefix)
    if errors:
        raise InvalidInput(errors)
