"""The one reader of request bodies: every JSON body of the API goes through :func:`read_json`.

A body is refused before it is parsed, and where possible before it is read:

- **Size** -- from ``Content-Length``, before a byte of the body is read: 413. The limit is
  ``TEMPER_API_MAX_BODY_BYTES``, or ``TEMPER_UPLOAD_MAX_BYTES`` for the upload endpoints
  (:func:`body_limit`). Under ASGI, :class:`BodyLimit` refuses the request before Django spools
  the body (Django's ASGI handler reads all of it before any view runs), and counts a body sent
  without a ``Content-Length`` (chunked) as it arrives; :class:`BodyLimitMiddleware` does the
  same check first thing in Django (WSGI, the test client).
- **Depth** -- 422 beyond ``TEMPER_API_MAX_JSON_DEPTH`` levels of arrays and objects, with the
  path where it was passed. ``json.loads`` recurses: its C scanner counts its own depth and stops
  near 1,000 levels with a RecursionError (a 422 too); the walk that measures the depth of what
  it returns is iterative.
- **Values that PostgreSQL or JSON cannot hold** -- ``NaN``, ``Infinity``, ``-Infinity`` and
  numbers that overflow to infinity (``1e999``); invalid UTF-8; lone surrogates (``"\\ud800"``:
  valid JSON, but no UTF-8 encoding exists, so saving one fails); NUL characters (``"\\u0000"``:
  PostgreSQL text and jsonb refuse them). Each is a 422 naming the field path
  (``config.rollout.temperature``, ``domains[0].slug``), in keys as in values.

Errors are :class:`~controlplane.common.errors.InvalidInput` (422, with field paths) or
:class:`BodyTooLarge` (413), so the API answers them in its usual ``{detail, errors}`` shape.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError

from controlplane.common.errors import FieldError, InvalidInput, ServiceError

UPLOAD_PATHS = ("/api/domains/upload",)
"""Endpoints whose body is an upload: their limit is ``TEMPER_UPLOAD_MAX_BYTES``."""

MAX_REPORTED = 20
"""At most this many field errors are listed for one body (a million NaNs make one short answer)."""


class BodyTooLarge(ServiceError):
    """The body is larger than the endpoint accepts (declared or counted); it was not parsed."""

    status = 413


@dataclass(frozen=True)
class Limit:
    """The most bytes a request body may have, and the setting that says so (named in the error)."""

    bytes: int
    setting: str

    def refusal(self, size: int | None = None) -> BodyTooLarge:
        size_text = f" ({size} bytes)" if size is not None else ""
        return BodyTooLarge(f"the request body{size_text} is larger than {_human(self.bytes)}, the limit of "
                            f"this endpoint ({self.setting}); nothing was saved")


def _human(n: int) -> str:
    mib = n / (1024 * 1024)
    return f"{mib:g} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def body_limit(path: str) -> Limit:
    """The body limit of the request to ``path`` (upload endpoints have their own)."""
    if path.rstrip("/").endswith(UPLOAD_PATHS):
        return Limit(settings.TEMPER_UPLOAD_MAX_BYTES, "TEMPER_UPLOAD_MAX_BYTES")
    return Limit(settings.TEMPER_API_MAX_BODY_BYTES, "TEMPER_API_MAX_BODY_BYTES")


class InvalidContentLength(ServiceError):
    """A ``Content-Length`` that is not a number of bytes (servers usually refuse these first)."""

    status = 400


def declared_length(value: str | bytes | None) -> int | None:
    """``Content-Length`` as an int; None when absent; InvalidContentLength when not a length."""
    if value is None or value in ("", b""):
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if not (text.strip().isascii() and text.strip().isdigit()):
        raise InvalidContentLength(f"Content-Length must be a number of bytes, got {text[:40]!r}")
    return int(text) if len(text.strip()) <= 18 else 10**18  # past any limit (int refuses 4,301 digits)


def check_length(request: HttpRequest) -> None:
    """Refuse a body whose declared length is over the limit, before ``request.body`` reads it."""
    length = declared_length(request.META.get("CONTENT_LENGTH"))
    limit = body_limit(request.path)
    if length is not None and length > limit.bytes:
        raise limit.refusal(length)


def read_json(request: HttpRequest) -> Any:
    """The request body as a JSON value, after every check above; InvalidInput or BodyTooLarge if not."""
    check_length(request)
    raw = request.body
    limit = body_limit(request.path)
    if len(raw) > limit.bytes:  # a WSGI body sent without Content-Length
        raise limit.refusal(len(raw))
    if not raw.strip():
        raise InvalidInput.one("", "the request body must be a JSON value")
    return loads(raw)


def read_json_object(request: HttpRequest) -> dict:
    data = read_json(request)
    if not isinstance(data, dict):
        raise InvalidInput.one("", "the request body must be a JSON object")
    return data


def read_upload_form(request: HttpRequest, *, file_field: str, json_fields: tuple[str, ...] = ()) -> tuple[dict, UploadedFile]:
    """A ``multipart/form-data`` upload: its text fields (``json_fields`` parsed as JSON under the
    rules above, each with its name as the path prefix) and its one file. Django's upload
    handlers write a file larger than ``FILE_UPLOAD_MAX_MEMORY_SIZE`` to a temporary file as it
    streams in, so the caller can read it a line at a time; the size was checked from
    Content-Length before (:class:`BodyLimitMiddleware`)."""
    check_length(request)
    try:
        fields, files = request.POST, request.FILES
    except (MultiPartParserError, SuspiciousOperation) as exc:  # malformed, too many fields or parts
        raise InvalidInput.one("", f"not a valid multipart/form-data body: {exc}") from None
    data: dict[str, Any] = {}
    errors: list[FieldError] = []
    for key in fields:
        value = fields[key]
        problem = string_problem(value) or string_problem(key)
        if len(fields.getlist(key)) > 1:  # Django keeps the last: the others would be dropped unsaid
            errors.append(FieldError(_safe_key(key), "given more than once"))
        elif problem:
            errors.append(FieldError(_safe_key(key), problem))
        elif key in json_fields:
            try:
                data[key] = loads(value, prefix=key)
            except InvalidInput as exc:
                errors.extend(exc.errors)
        else:
            data[key] = value
    upload = files.get(file_field)
    if upload is None:
        errors.append(FieldError(file_field, "required: the file, as a part of the form"))
    for key in files:
        if key != file_field:
            errors.append(FieldError(_safe_key(key), "unknown file (the upload is one file)"))
        elif len(files.getlist(key)) > 1:
            errors.append(FieldError(_safe_key(key), "more than one file (the upload is one file)"))
    if errors:
        raise InvalidInput(errors[:MAX_REPORTED])
    return data, upload


# --------------------------------------------------------------------------------- parsing
class _NonFinite:
    """Stands in for a number JSON cannot hold until the walk reports it with its path."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_DECODER = json.JSONDecoder(parse_constant=_NonFinite, parse_float=_float)
"""One decoder (``json.loads`` with hooks builds a new one per call: a JSONL upload has 100,000 lines)."""


def loads(raw: bytes | str, *, max_depth: int | None = None, prefix: str = "", syntax_errors: bool = False) -> Any:
    """Parse one JSON document under the rules above; InvalidInput (paths under ``prefix``) if any breaks.

    >>> loads(b'{"a": [1, 2.5, "x"]}')
    {'a': [1, 2.5, 'x']}
    >>> loads('{"share": NaN, "x": [1e999]}')
    Traceback (most recent call last):
    ...
    controlplane.common.errors.InvalidInput: share: NaN is not a number JSON can hold (use a finite number); x[0]: 1e999 is not a number JSON can hold (use a finite number)
    >>> loads('{"name": "a\\\\ud800b"}')
    Traceback (most recent call last):
    ...
    controlplane.common.errors.InvalidInput: name: contains a lone surrogate (\\ud800), which is not valid Unicode
    """
    limit = settings.TEMPER_API_MAX_JSON_DEPTH if max_depth is None else max_depth
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput.one(prefix, f"the body is not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 4]!r})") from None
    else:
        text = raw
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        # The C scanner counts its own recursion and stops near the interpreter's limit (1,000)
        # with this exception, long before the stack is at risk; deeper than that is too deep.
        raise InvalidInput.one(prefix, _too_deep(limit)) from None
    except json.JSONDecodeError as exc:
        if syntax_errors:
            raise
        raise InvalidInput.one(prefix, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise InvalidInput.one(prefix, f"not valid JSON: {exc}") from None
    errors = value_errors(value, prefix, max_depth=limit)
    if errors:
        raise InvalidInput(errors)
    return value


def _too_deep(limit: int) -> str:
    return f"arrays and objects nested more than {limit} levels deep (TEMPER_API_MAX_JSON_DEPTH)"


def value_errors(value: Any, prefix: str = "", *, max_depth: int) -> list[FieldError]:
    """Every non-finite number, every string (value or key) with a NUL or a lone surrogate, and
    the first array or object nested deeper than ``max_depth`` in ``value`` (a parsed JSON
    document), each with its path. Iterative, so any depth is safe to walk; a path is spelled out
    only for an error (a body of a million empty lists is walked, not a million paths built)."""
    errors: list[FieldError] = []

    def refuse(where: tuple | None, message: str) -> None:
        errors.append(FieldError(_path(prefix, where), message))

    def scalar(child: Any, where: tuple) -> None:
        if child.__class__ is str:
            if _BAD_CHAR.search(child):
                refuse(where, string_problem(child))
        elif child.__class__ is _NonFinite:
            refuse(where, f"{child.text} is not a number JSON can hold (use a finite number)")

    if not isinstance(value, (dict, list)):
        scalar(value, None)
        return errors
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack and len(errors) < MAX_REPORTED:
        item, depth, where = stack.pop()
        if depth > max_depth:
            return [FieldError(_path(prefix, where), _too_deep(max_depth))]
        children = item.items() if item.__class__ is dict else enumerate(item)
        nested = []
        for key, child in children:
            if key.__class__ is str and _BAD_CHAR.search(key):
                refuse((where, key), f"the key {string_problem(key)}")
            if child.__class__ is dict or child.__class__ is list:
                nested.append((child, depth + 1, (where, key)))
            else:
                scalar(child, (where, key))
        stack.extend(reversed(nested))
    return errors[:MAX_REPORTED]


def _path(prefix: str, where: tuple | None) -> str:
    """``where`` (a chain of ``(parent, key or index)``) as a field path: ``a.b[2].c``."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(key)
    path = prefix
    for key in reversed(keys):
        if isinstance(key, int):
            path = f"{path}[{key}]"
        else:
            path = f"{path}.{_safe_key(key)}" if path else _safe_key(key)
    return path


def string_problem(text: str) -> str | None:
    """Why PostgreSQL could not store ``text`` (a NUL, a lone surrogate), or None."""
    found = _BAD_CHAR.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "contains a NUL character (\\u0000), which text fields cannot hold"
    return f"contains a lone surrogate (\\u{ord(char):04x}), which is not valid Unicode"


def storable(value: Any) -> Any:
    """``value`` with every NUL and lone surrogate in its strings (keys too) replaced by U+FFFD:
    for text that is a record of what a program or a model wrote (a completion, a check's
    output), kept rather than refused.

    >>> storable({"out\\x00": ["a\\x00b", "\\udcff", 1.5]})
    {'out\ufffd': ['a\ufffdb', '\ufffd', 1.5]}
    """
    if isinstance(value, str):
        return _BAD_CHAR.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def _safe_key(key: str) -> str:
    """A key fit to appear in a path of the error response (its bad characters escaped)."""
    return _BAD_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", key)


def line_loads(max_depth: int | None = None) -> Callable[[str], Any]:
    """A ``loads`` for one line of a JSONL upload: the same rules, ValueError carrying the field
    errors (a syntax error is json's own, which the JSONL parser words with its column)."""

    def parse(line: str) -> Any:
        try:
            return loads(line, max_depth=max_depth, syntax_errors=True)
        except InvalidInput as exc:
            raise LineRefused([(e.path, e.message) for e in exc.errors]) from None

    return parse


class LineRefused(ValueError):
    """One JSONL line broke a body rule; ``field_errors`` lists ``(field, message)``."""

    def __init__(self, field_errors: list[tuple[str, str]]) -> None:
        self.field_errors = field_errors
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in field_errors))


# ------------------------------------------------------------------------- request guards
class BodyLimitMiddleware:
    """Django middleware, early in the list: the same refusals as :class:`BodyLimit` for a
    request served without it (WSGI, the test client), and NULs kept out of database queries.

    - A declared body over the limit: 413, unread. Nothing before this reads the body, and after
      it nothing reads one over the limit (ninja reads a Schema body before its parser runs, and
      the CSRF check reads a form's).
    - A NUL in the path: 404 (no object is named with one).
    - A NUL in a query value of a page (a search box): 400. The API's query values are checked by
      its parser instead, which names the parameter in a 422.
    """

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        try:
            check_length(request)
        except ServiceError as exc:
            return _django_response(request.path, exc.status, str(exc))
        if "\x00" in request.path:
            return _django_response(request.path, 404, "not found: a path cannot contain a NUL character")
        if "/api/" not in request.path and "%00" in request.META.get("QUERY_STRING", ""):
            bad = sorted({_safe_key(key) for key, values in request.GET.lists() if any("\x00" in v for v in values + [key])})
            if bad:
                return _django_response(request.path, 400, f"{', '.join(bad)}: a query value cannot contain a NUL character")
        return self.get_response(request)


def _django_response(path: str, status: int, detail: str):
    body, content_type = _payload(path, detail)
    return HttpResponse(body, status=status, content_type=content_type.decode())


def _payload(path: str, detail: str) -> tuple[bytes, bytes]:
    """The refusal's body: the API's error shape under /api/, plain text elsewhere."""
    if "/api/" in path:
        return json.dumps({"detail": detail, "errors": []}).encode(), b"application/json"
    return detail.encode(), b"text/plain; charset=utf-8"


# ------------------------------------------------------------------------------ ASGI guard
class BodyLimit:
    """ASGI middleware: refuse an HTTP request whose body is over its limit before the body is
    read. Django's ASGI handler reads the whole body (to a temporary file past
    ``FILE_UPLOAD_MAX_MEMORY_SIZE``) before any middleware or view runs, so a 200 MB body would
    be taken in for an anonymous request that is then refused. A declared ``Content-Length`` over
    the limit is answered 413 at once, without receiving; a body without one (chunked) is counted
    as it arrives and refused once it passes the limit. A NUL in the path (``%00``) is answered
    404: no object is named with one, and it must not reach a database query."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if "\x00" in path:
            await _respond(send, path, 404, "not found: a path cannot contain a NUL character")
            return
        limit = body_limit(path)
        headers = dict(scope.get("headers") or [])
        try:
            length = declared_length(headers.get(b"content-length"))
        except InvalidContentLength as exc:
            await _respond(send, path, 400, str(exc))
            return
        if length is not None and length > limit.bytes:
            await _respond(send, path, 413, str(limit.refusal(length)))
            return

        received = 0
        over = False
        started = False

        async def counted_receive() -> dict:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.bytes:
                    over = True
                    return {"type": "http.disconnect"}  # Django stops reading and answers nothing
            return message

        async def tracked_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, tracked_send)
        if over and not started:
            await _respond(send, path, 413, str(limit.refusal()))


async def _respond(send: Callable, path: str, status: int, detail: str) -> None:
    body, content_type = _payload(path, detail)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
