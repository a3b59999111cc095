"""Hostile request bodies: every one is a 4xx with a clear message and field paths, nothing is
saved, and a body over the limit is refused from its Content-Length without being read."""
from __future__ import annotations

import asyncio
import json
import typing

import pytest
from django.test import Client
from pydantic import BaseModel

from controlplane.domains.models import Domain
from controlplane.runs.models import Run
from tests import factories

MiB = 1024 * 1024


class Unreadable:
    """A ``wsgi.input`` that fails the test if anything reads it: the body must be refused from
    its declared length alone."""

    def read(self, *args):
        raise AssertionError("the body was read")

    readline = read


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_raw(client: Client, path: str, body: bytes, **extra):
    return client.generic("POST", path, body, content_type="application/json", **extra)


def declared(client: Client, path: str, length: int, method: str = "POST"):
    """A request that says it carries ``length`` bytes and carries none that may be read."""
    return client.generic(method, path, b"x", content_type="application/json",
                          CONTENT_LENGTH=str(length), **{"wsgi.input": Unreadable()})


def errors_of(response) -> list[dict]:
    body = response.json()
    assert set(body) == {"detail", "errors"}, body
    return body["errors"]


# ----------------------------------------------------------------------------------- size
def test_a_body_over_the_limit_is_refused_from_its_content_length(world, settings):
    client = client_for(world.users["admin"])
    before = Run.objects.count()
    r = declared(client, "/api/runs", settings.TEMPER_API_MAX_BODY_BYTES + 1)
    assert r.status_code == 413
    assert "TEMPER_API_MAX_BODY_BYTES" in r.json()["detail"] and r.json()["errors"] == []
    assert Run.objects.count() == before
    # A Schema body too (ninja reads those before its parser runs: the middleware refuses first).
    assert declared(client, "/api/judges/j/threshold", 10 * MiB).status_code == 413
    # A real body one byte over a lowered limit.
    settings.TEMPER_API_MAX_BODY_BYTES = 1000
    body = json.dumps(factories.run_payload(["addition"], team="acme", name="x" * 1000)).encode()
    assert len(body) > 1000
    r = post_raw(client, "/api/runs", body)
    assert r.status_code == 413 and Run.objects.count() == before


def test_an_anonymous_200_mb_upload_is_refused_without_reading_it(db):
    r = declared(Client(), "/api/domains/upload", 200 * MiB)
    assert r.status_code in (401, 413)
    assert "detail" in r.json()


def test_upload_over_its_limit_is_413_and_under_it_passes_djangos_default(world, settings):
    admin = client_for(world.users["admin"])
    assert declared(admin, "/api/domains/upload", settings.TEMPER_UPLOAD_MAX_BYTES + 1).status_code == 413
    # 4 MB: over Django's default 2.5 MB request limit (a 500 before), under the app's 50 MiB.
    lines = [json.dumps({"prompt": f"{i}+{i}=" + " " * 200, "answer": str(2 * i)}) for i in range(18_000)]
    jsonl = "\n".join(lines)
    body = json.dumps({"team": "acme", "slug": "big", "title": "Big", "kind": "math", "jsonl": jsonl,
                       "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}}).encode()
    assert 4 * MiB < len(body) < settings.TEMPER_UPLOAD_MAX_BYTES
    r = post_raw(admin, "/api/domains/upload", body)
    assert r.status_code == 201, r.content[:500]
    assert len(Domain.objects.get(slug="big").task_source["tasks"]) == 18_000
    # The same body over a lowered upload limit: 413, naming the setting; nothing saved.
    settings.TEMPER_UPLOAD_MAX_BYTES = 1 * MiB
    r = post_raw(admin, "/api/domains/upload", body.replace(b'"big"', b'"big2"'))
    assert r.status_code == 413 and "TEMPER_UPLOAD_MAX_BYTES" in r.json()["detail"]
    assert not Domain.objects.filter(slug="big2").exists()


# ---------------------------------------------------------------------------------- depth
def test_deep_nesting_is_422_with_the_path(world):
    client = client_for(world.users["member"])
    payload = factories.run_payload(["addition"], team="acme")
    payload["config"] = json.loads("[" * 100 + "]" * 100)
    r = post_raw(client, "/api/runs", json.dumps(payload).encode())
    assert r.status_code == 422
    [error] = errors_of(r)
    assert error["path"].startswith("config[0][0]") and "nested more than 64 levels" in error["message"]
    # 1,000 and 100,000 levels: json's own recursion limit is reached before the walk; still a 422.
    for depth in (1000, 100_000):
        body = b'{"name": ' + b"[" * depth + b"]" * depth + b"}"
        r = post_raw(client, "/api/runs", body)
        assert r.status_code == 422 and "nested more than" in errors_of(r)[0]["message"]
    assert not Run.objects.exists()


# ---------------------------------------------------------------------------- non-finite
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_naming_the_path(world, literal):
    client = client_for(world.users["member"])
    body = json.dumps(factories.run_payload(["addition"], team="acme")).replace('"weight": 1.0', f'"weight": {literal}')
    for path in ("/api/runs/validate", "/api/runs"):
        r = post_raw(client, path, body.encode())
        assert r.status_code == 422, r.content
        assert errors_of(r) == [{"path": "domains[0].weight", "message": f"{literal} is not a number JSON can hold (use a finite number)"}]
    assert not Run.objects.exists()


def test_schema_bodies_follow_the_same_rules(world):
    """Ninja parses these itself (``payload: ThresholdIn``): 422 with the path, not its 400."""
    client = client_for(world.users["admin"])
    r = post_raw(client, "/api/judges/nope/threshold", b'{"threshold": NaN}')
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "threshold"
    r = post_raw(client, "/api/judges/nope/threshold", b'{"threshold": 0.5, "x": "\\u0000"}')
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "x"
    r = post_raw(client, "/api/domains/addition/audit/override", b'{"reason": "\\udfff"}')
    assert r.status_code == 422 and errors_of(r) == [
        {"path": "reason", "message": "contains a lone surrogate (\\udfff), which is not valid Unicode"}]


# -------------------------------------------------------------------------------- strings
@pytest.mark.parametrize("escape, words", [("\\ud800", "lone surrogate (\\ud800)"), ("\\u0000", "NUL character")])
def test_a_run_name_postgresql_cannot_hold_is_422_and_nothing_is_saved(world, escape, words):
    client = client_for(world.users["member"])
    body = json.dumps(factories.run_payload(["addition"], team="acme", name="run ESC")).replace("ESC", escape)
    r = post_raw(client, "/api/runs", body.encode())
    assert r.status_code == 422
    [error] = errors_of(r)
    assert error["path"] == "name" and words in error["message"]
    assert not Run.objects.exists()


def test_bad_keys_are_named_with_their_bad_characters_escaped(world):
    client = client_for(world.users["member"])
    r = post_raw(client, "/api/runs", b'{"config": {"a\\u0000b": 1}}')
    assert r.status_code == 422
    assert errors_of(r) == [{"path": "config.a\\u0000b", "message": "the key contains a NUL character (\\u0000), which text fields cannot hold"}]


@pytest.mark.parametrize("raw", [b'{"name": "\xff"}', b'{"name": "\xed\xa0\x80"}', b"\xef\xbb\xbf{}"])
def test_invalid_utf8_is_422(world, raw):
    r = post_raw(client_for(world.users["member"]), "/api/runs", raw)
    message = errors_of(r)[0]["message"]
    assert r.status_code == 422 and ("not valid UTF-8" in message or "not valid JSON" in message)
    assert not Run.objects.exists()


def test_jsonl_lines_follow_the_same_rules(world):
    """A line's own escapes decode to what the outer body could not carry: checked per line."""
    admin = client_for(world.users["admin"])
    jsonl = '{"prompt": "a", "answer": "1"}\n{"prompt": "b\\ud800", "answer": "2"}\n{"prompt": "c", "answer": NaN}\n'
    body = json.dumps({"team": "acme", "slug": "bad", "title": "Bad", "kind": "math", "jsonl": jsonl,
                       "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}})
    r = post_raw(admin, "/api/domains/upload", body.encode())
    assert r.status_code == 422
    assert [e["path"] for e in errors_of(r)] == ["jsonl.lines[2].prompt", "jsonl.lines[3].answer"]
    assert not Domain.objects.filter(slug="bad").exists()


def test_query_values_with_nul_are_422(world):
    r = client_for(world.users["member"]).get("/api/domains?q=a%00b")
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "q"


def test_empty_and_non_object_bodies(world):
    client = client_for(world.users["member"])
    assert errors_of(post_raw(client, "/api/runs", b""))[0]["message"] == "the request body must be a JSON value"
    r = client.generic("POST", "/api/tokens", b"[1]", content_type="application/json")
    assert r.status_code == 422 and errors_of(r)[0]["message"] == "the request body must be a JSON object"


# ----------------------------------------------------------------------------------- ASGI
async def _asgi(scope_extra: dict, chunks: list[bytes] | None = None, path: str = "/api/runs") -> tuple[dict, bytes, int]:
    """Drive the production ASGI application; returns (response start, body, body messages read)."""
    from controlplane.asgi import application

    scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": path, "raw_path": path.encode(),
             "root_path": "", "scheme": "http", "query_string": b"", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")], **scope_extra}
    pending = list(chunks or [])
    reads = 0
    sent: list[dict] = []

    async def receive():
        nonlocal reads
        if not pending:
            await asyncio.sleep(3600)  # a client that sends nothing more
        reads += 1
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    await asyncio.wait_for(application(scope, receive, send), timeout=30)
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:]), reads


async def test_asgi_refuses_a_declared_200_mb_body_before_receiving_it():
    start, body, reads = await _asgi({"headers": [(b"host", b"testserver"), (b"content-length", str(200 * MiB).encode())]},
                                     path="/api/domains/upload")
    assert start["status"] == 413 and reads == 0
    assert "TEMPER_UPLOAD_MAX_BYTES" in json.loads(body)["detail"]


async def test_asgi_counts_a_body_without_content_length(settings):
    settings.TEMPER_API_MAX_BODY_BYTES = 1000
    start, body, reads = await _asgi({}, chunks=[b"[" + b" " * 600, b" " * 600, b" " * 600 + b"]"])
    assert start["status"] == 413 and reads == 2  # stopped at the chunk that passed the limit
    assert json.loads(body)["errors"] == []


async def test_asgi_answers_404_for_a_nul_in_the_path():
    start, _, _ = await _asgi({"method": "GET", "path": "/api/domains/a\x00b"})
    assert start["status"] == 404


# -------------------------------------------------------------------------------- OpenAPI
def _models(annotation, seen: set) -> None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _models(field.annotation, seen)
        return
    for arg in typing.get_args(annotation):
        _models(arg, seen)


def test_every_schema_name_in_the_openapi_document_is_one_schema():
    """Two schemas with one name are merged into one component, and the endpoint that returns
    the other violates its own document (``/domains/{slug}/versions`` did, with VersionOut)."""
    from controlplane.api import api

    seen: set = set()
    for router_prefix, router in api._routers:
        for path_view in router.path_operations.values():
            for operation in path_view.operations:
                for model in operation.response_models.values():
                    if model is not None:
                        _models(model, seen)
                for model in operation.models:
                    _models(model, seen)
    names: dict[str, list] = {}
    for model in seen:
        if model.__module__.startswith(("controlplane", "trainer")):  # not ninja's wrappers of each operation
            names.setdefault(model.__name__, []).append(f"{model.__module__}.{model.__qualname__}")
    duplicates = {name: where for name, where in names.items() if len(where) > 1}
    assert not duplicates
    assert len(names) > 20  # the walk found the API's schemas
    schema = api.get_openapi_schema()
    assert 413 in schema["paths"]["/api/runs"]["post"]["responses"]


def test_pages_refuse_a_nul_in_the_query_or_the_path(world):
    """The pages' search boxes reach database queries too (a NUL there made psycopg raise: 500)."""
    client = client_for(world.users["member"])
    r = client.get("/domains/?q=a%00b")
    assert r.status_code == 400 and b"NUL" in r.content
    assert client.get("/registry/compare/?suite=a%00b").status_code == 400
    assert client.get("/api/domains/a%00b").status_code == 404
    assert client.get("/domains/?q=ab").status_code == 200


def test_the_readers_docstring_examples():
    import doctest

    from controlplane.common import body

    result = doctest.testmod(body, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0


# ------------------------------------------------------------------------- multipart upload
def _form(jsonl: bytes, **fields):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return {"team": "acme", "slug": "filed", "title": "Filed", "kind": "math",
            "verifier": json.dumps({"stages": [{"type": "exact", "timeout_s": 1.0}]}),
            "jsonl": SimpleUploadedFile("tasks.jsonl", jsonl, content_type="application/x-ndjson"), **fields}


def test_a_multipart_upload_is_streamed_to_a_temporary_file_and_read_by_line(world, settings, monkeypatch):
    from django.core.files.uploadedfile import TemporaryUploadedFile

    from trainer.catalogue import jsonl as jsonl_module

    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024  # past this the part goes to a temporary file
    seen = []
    real = jsonl_module.parse_jsonl

    def spy(data, **kw):
        seen.append(type(data))
        return real(data, **kw)

    monkeypatch.setattr("controlplane.domains.services.parse_jsonl", spy)
    lines = b"\n".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}).encode() for i in range(5000))
    assert len(lines) > 64 * 1024
    r = client_for(world.users["admin"]).post("/api/domains/upload", _form(lines))
    assert r.status_code == 201, r.content[:500]
    assert seen == [TemporaryUploadedFile]  # the file itself, never its bytes
    assert len(Domain.objects.get(slug="filed").task_source["tasks"]) == 5000


def test_multipart_upload_errors_name_their_field(world):
    admin = client_for(world.users["admin"])
    r = admin.post("/api/domains/upload", _form(b'{"prompt": "a", "answer": "1"}\n\xff\n'))
    assert r.status_code == 422 and errors_of(r) == [{"path": "jsonl.lines[2]", "message": "not valid UTF-8"}]
    r = admin.post("/api/domains/upload", _form(b'{"prompt": "a", "answer": NaN}\n', verifier='{"stages": [], "x": NaN}'))
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "verifier.x"
    r = admin.post("/api/domains/upload", _form(b"", title="a\x00b"))
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "title"
    form = _form(b"")
    del form["jsonl"]
    r = admin.post("/api/domains/upload", form)
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "jsonl"
    r = admin.generic("POST", "/api/domains/upload", b"--x\r\nbroken", content_type="multipart/form-data; boundary=x")
    assert r.status_code == 422
    assert not Domain.objects.filter(slug="filed").exists()


def test_a_field_or_file_given_twice_in_a_form_is_refused(world):
    """Django keeps the last of repeated parts: an upload with two files imported one and dropped
    the other without a word."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    admin = client_for(world.users["admin"])
    good = b'{"prompt": "a", "answer": "1"}\n'
    form = _form(good)
    form["jsonl"] = [form["jsonl"], SimpleUploadedFile("more.jsonl", good, content_type="application/x-ndjson")]
    r = admin.post("/api/domains/upload", form)
    assert r.status_code == 422 and errors_of(r) == [{"path": "jsonl", "message": "more than one file (the upload is one file)"}]
    r = admin.post("/api/domains/upload", _form(good, title=["A", "B"]))
    assert r.status_code == 422 and errors_of(r) == [{"path": "title", "message": "given more than once"}]
    assert not Domain.objects.filter(slug="filed").exists()


@pytest.mark.parametrize("path,body", [
    ("/api/judges/{judge}/threshold", {"threshold": "0.5"}),
    ("/api/judges/{judge}/threshold", {"threshold": True}),
    ("/api/judges/{judge}/threshold", {"threshold": 0.5, "x": 1}),
])
def test_schema_bodies_take_their_types_strictly_and_no_unknown_field(world, path, body):
    from controlplane.review.models import Judge, JudgeConfig

    judge = Judge.objects.create(team=world.team, slug="strict", title="J")
    judge.active = JudgeConfig.objects.create(judge=judge, version=1, kind="similarity", score_format="binary")
    judge.save()
    r = post_raw(client_for(world.users["admin"]), path.format(judge="strict"), json.dumps(body).encode())
    assert r.status_code == 422, r.content
    assert Judge.objects.get(slug="strict").threshold == judge.threshold  # unchanged


def test_an_integral_float_is_not_an_integer(world):
    """JSON Schema counts -1e308 as an integer; the version lookup behind this field got a float (500)."""
    r = post_raw(client_for(world.users["admin"]), "/api/registry/aliases/production", b'{"version": -1e308}')
    assert r.status_code == 422 and errors_of(r)[0]["path"] == "version"
