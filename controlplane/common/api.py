"""Shared pieces of the REST API: JSON bodies, error responses, pagination."""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.datastructures import MultiValueDict
from ninja import Field, Path, Schema
from ninja.pagination import LimitOffsetPagination
from ninja.parser import Parser
from pydantic import ConfigDict

from controlplane.common.body import read_json, read_json_object, string_problem
from controlplane.common.errors import FieldError, InvalidInput
from controlplane.common.validation import validate

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


class BodyIn(Schema):
    """Base of a request body read as a schema: strict types (``"0.5"`` is not a number, ``true``
    not 1) and no unknown field, as the API's JSON Schema bodies (``additionalProperties: false``)."""

    model_config = ConfigDict(strict=True, extra="forbid")


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


ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
"""The error responses every endpoint may give, documented in the OpenAPI schema (413: a body
over the limit, which any request may send)."""


def json_body(request: HttpRequest) -> Any:
    """The request body as a JSON value, through the API's one body reader
    (:func:`controlplane.common.body.read_json`: size, depth, NaN, Unicode)."""
    return read_json(request)


def json_object(request: HttpRequest) -> dict:
    """:func:`json_body` that must be an object."""
    return read_json_object(request)


def json_object_valid(request: HttpRequest, schema: dict) -> dict:
    """:func:`json_object` that must follow the JSON Schema ``schema``, so the documented body is
    the accepted one (every rule it breaks refused at once, a 422 naming the field)."""
    data = json_object(request)
    validate(data, schema)
    return data


class BodyParser(Parser):
    """Ninja's parser for Schema bodies and query strings, so they follow the same rules as
    :func:`json_body`. Ninja wraps any error of ``parse_body`` in an HttpError(400) (with the
    error as its cause); the API's handler answers the cause instead (controlplane.api)."""

    def parse_body(self, request: HttpRequest) -> Any:
        return read_json(request)

    def parse_querydict(self, data: MultiValueDict, list_fields: list[str], request: HttpRequest) -> dict:
        """Query and form values with a NUL are refused (422 naming the parameter): they would
        reach a database query, which cannot hold one."""
        errors = [FieldError(key, problem) for key in data.keys() for value in data.getlist(key)
                  if isinstance(value, str) and (problem := string_problem(value))]
        if errors:
            raise InvalidInput(errors)
        return super().parse_querydict(data, list_fields, request)


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
