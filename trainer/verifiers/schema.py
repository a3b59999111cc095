"""A small JSON Schema checker for stage params, with messages a form can show next to a field.

Only the keywords the stage types use are supported: type, enum, minimum, maximum,
exclusiveMinimum, minItems, items, properties, required, additionalProperties, format "regex".
It depends on nothing outside the standard library, so the control plane can validate verifier
configurations without importing any verifier dependency.

>>> schema = {"type": "object", "additionalProperties": False, "required": ["n"],
...           "properties": {"n": {"type": "number", "exclusiveMinimum": 0}}}
>>> check({"n": -1, "x": 1}, schema, "params")
[('params.n', 'must be greater than 0'), ('params.x', 'unknown parameter')]
>>> check({}, schema, "params")
[('params.n', 'required')]
"""
from __future__ import annotations

import re
from typing import Any

_TYPE_NAMES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, (list, tuple))
    if name == "null":
        return value is None
    raise ValueError(f"unsupported schema type {name!r}")


def _fmt(n: Any) -> str:
    return str(int(n)) if isinstance(n, float) and n.is_integer() else str(n)


def check(value: Any, schema: dict[str, Any], path: str) -> list[tuple[str, str]]:
    """Every violation of ``schema`` by ``value`` as ``(path, message)``, in a stable order."""
    errors: list[tuple[str, str]] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, n) for n in names):
            return [(path, "must be " + " or ".join(_TYPE_NAMES[n] for n in names))]
    if "enum" in schema and value not in schema["enum"]:
        return [(path, "must be one of: " + ", ".join("null" if v is None else str(v) for v in schema["enum"]))]
    if _is_type(value, "number"):
        if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
            errors.append((path, f"must be greater than {_fmt(schema['exclusiveMinimum'])}"))
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((path, f"must be at least {_fmt(schema['minimum'])}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((path, f"must be at most {_fmt(schema['maximum'])}"))
    if isinstance(value, str) and schema.get("format") == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            errors.append((path, f"is not a valid regular expression: {exc}"))
    if isinstance(value, str) and "pattern" in schema and not re.fullmatch(schema["pattern"], value):
        errors.append((path, f"must match {schema['pattern']}"))
    if isinstance(value, (list, tuple)):
        if len(value) < schema.get("minItems", 0):
            errors.append((path, f"must have at least {schema['minItems']} item(s)"))
        if "items" in schema:
            for i, item in enumerate(value):
                errors.extend(check(item, schema["items"], f"{path}[{i}]"))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append((f"{path}.{key}", "required"))
        extra = schema.get("additionalProperties", True)
        for key in sorted(value, key=str):
            if key in props:
                errors.extend(check(value[key], props[key], f"{path}.{key}"))
            elif extra is False:
                errors.append((f"{path}.{key}", "unknown parameter"))
            elif isinstance(extra, dict):
                errors.extend(check(value[key], extra, f"{path}.{key}"))
    return errors
