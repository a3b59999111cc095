"""JSON Schema validation with errors that name the field path and the reason.

>>> schema = {"type": "object", "properties": {"stages": {"type": "array", "items": {
...     "type": "object", "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0}}}}}}
>>> [str(e) for e in schema_errors({"stages": [{"timeout_s": 1}, {"timeout_s": 0}]}, schema, "verifier")]
['verifier.stages[1].timeout_s: must be greater than 0']
"""
from __future__ import annotations

from typing import Any, Iterable

import jsonschema

from controlplane.common.errors import FieldError, InvalidInput, join_path

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


def _message(error: jsonschema.ValidationError) -> tuple[list[Any], str]:
    """The extra path parts and the reason for one jsonschema error."""
    v, arg = error.validator, error.validator_value
    extra: list[Any] = []
    if v == "type":
        types = [arg] if isinstance(arg, str) else list(arg)
        return extra, "must be " + " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    if v == "exclusiveMinimum":
        return extra, f"must be greater than {_fmt(arg)}"
    if v == "minimum":
        return extra, f"must be at least {_fmt(arg)}"
    if v == "exclusiveMaximum":
        return extra, f"must be less than {_fmt(arg)}"
    if v == "maximum":
        return extra, f"must be at most {_fmt(arg)}"
    if v == "enum":
        return extra, "must be one of: " + ", ".join(str(a) for a in arg)
    if v == "const":
        return extra, f"must be {arg!r}"
    if v == "minLength":
        return extra, "must not be empty" if arg == 1 else f"must be at least {arg} characters"
    if v == "maxLength":
        return extra, f"must be at most {arg} characters"
    if v == "pattern":
        return extra, f"must match {arg}"
    if v == "minItems":
        return extra, "must not be empty" if arg == 1 else f"must have at least {arg} items"
    if v == "maxItems":
        return extra, f"must have at most {arg} items"
    if v == "uniqueItems":
        return extra, "must not repeat items"
    if v == "minProperties":
        return extra, "must not be empty"
    return extra, error.message


def schema_errors(instance: Any, schema: dict, prefix: str = "") -> list[FieldError]:
    """Every rule ``instance`` breaks in ``schema``, as field errors sorted by path."""
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_cls(schema)
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
        extra, message = _message(error)
        errors.append(FieldError(_path(prefix, [*error.absolute_path, *[e for e in extra if e != ""]]), message))
    unique = {(e.path, e.message): e for e in errors}
    return sorted(unique.values(), key=lambda e: (e.path, e.message))


def validate(instance: Any, schema: dict, prefix: str = "") -> None:
    """Raise :class:`InvalidInput` listing every rule ``instance`` breaks."""
    errors = schema_errors(instance, schema, prefix)
    if errors:
        raise InvalidInput(errors)
