"""Shared pieces of the REST API: JSON bodies, error responses, pagination."""
from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja import Field, Path, Schema
from ninja.pagination import LimitOffsetPagination

from controlplane.common.errors import FieldError, InvalidInput

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {"type": "object", "properties": {"path": {"type": "string"}, "message": {"type": "string"}}},
        },
    },
}


class FieldErrorOut(Schema):
    path: str
    message: str


class ErrorOut(Schema):
    detail: str
    errors: list[FieldErrorOut]


MAX_ID = 2**63 - 1
"""Largest id a database row can have (64-bit); larger path or query ids are refused as input."""

MAX_VERSION = 2**31 - 1
"""Largest version number (versions are 32-bit integer columns); larger ones are refused as input."""

VERSION = Path(..., ge=1, le=MAX_VERSION)
"""The ``{version}`` path parameter of a domain, judge or suite."""


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=`` with bounds, so absurd values are a 422, not a database overflow."""

    class Input(Schema):
        limit: int = Field(100, ge=1, le=1000)
        offset: int = Field(0, ge=0, le=1_000_000_000)


ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut}
"""The error responses every endpoint may give, documented in the OpenAPI schema."""


def json_body(request: HttpRequest) -> Any:
    """The request body parsed as JSON; InvalidInput when it is not JSON."""
    if not request.body:
        raise InvalidInput.one("", "the request body must be a JSON value")
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput.one("", f"the request body is not valid JSON: {exc}") from None


def json_object(request: HttpRequest) -> dict:
    data = json_body(request)
    if not isinstance(data, dict):
        raise InvalidInput.one("", "the request body must be a JSON object")
    return data


def body_doc(schema: dict) -> dict:
    """``openapi_extra`` documenting a JSON request body described by ``schema``."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_PYDANTIC_MESSAGES = {
    "missing": lambda ctx: "required",
    "extra_forbidden": lambda ctx: "unknown field",
    "int_type": lambda ctx: "must be an integer",
    "int_parsing": lambda ctx: "must be an integer",
    "float_type": lambda ctx: "must be a number",
    "float_parsing": lambda ctx: "must be a number",
    "string_type": lambda ctx: "must be a string",
    "bool_type": lambda ctx: "must be true or false",
    "bool_parsing": lambda ctx: "must be true or false",
    "greater_than": lambda ctx: f"must be greater than {ctx.get('gt')}",
    "greater_than_equal": lambda ctx: f"must be at least {ctx.get('ge')}",
    "less_than": lambda ctx: f"must be less than {ctx.get('lt')}",
    "less_than_equal": lambda ctx: f"must be at most {ctx.get('le')}",
    "string_too_short": lambda ctx: "must not be empty",
    "string_too_long": lambda ctx: f"must be at most {ctx.get('max_length')} characters",
}


def pydantic_errors(errors: list[dict]) -> list[FieldError]:
    """Ninja's validation errors as field errors (the location's first two parts name the source)."""
    out = []
    for error in errors:
        loc = [p for p in error.get("loc", ()) if p not in ("body", "query", "path", "payload", "header", "cookie")]
        path = ""
        for part in loc:
            path = f"{path}[{part}]" if isinstance(part, int) else (f"{path}.{part}" if path else str(part))
        make = _PYDANTIC_MESSAGES.get(error.get("type", ""))
        out.append(FieldError(path, make(error.get("ctx") or {}) if make else error.get("msg", "invalid")))
    return out


def error_payload(detail: str, errors: list[FieldError] | None = None) -> dict:
    return {"detail": detail, "errors": [e.as_dict() for e in errors or []]}
