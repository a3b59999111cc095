"""Fuzz the REST API against its own OpenAPI document: schemathesis, then hostile bodies.

Boots the site on a throwaway database (embedded SQLite, or a fresh database created next to
DATABASE_URL's PostgreSQL one and dropped afterwards), seeds a team with a token, a domain
catalogue and runs, then:

1. schemathesis sends at least --examples generated requests per operation;
2. the hostile pass sends what generators rarely make, to every operation: bodies nested 1,000
   and 100,000 deep, one byte over the body limit (real bytes; the server runs with small limits,
   1 MiB and 8 MiB for uploads, so this is cheap), a 200 MB Content-Length with almost nothing
   behind it, NaN / Infinity / 1e999 in every number, a lone surrogate, a NUL and path-like
   strings ("/etc/ssl", "../../../../tmp", "var/registry/v1/model") in every string field of
   every body, in every string query and path parameter, invalid UTF-8, and JSONL uploads whose
   lines carry the same.

Any 4xx is a fine answer to a hostile request (path-like model references are refused as 422
or 404). What counts: server errors (5xx) and schema violations (a status the operation does not
document, or a body that does not match the documented schema). Last line: one JSON object.

    .venv/bin/python bench/api_fuzz.py --examples 100
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]

SEED = r"""
from controlplane.accounts.models import Membership, Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import token_create
from controlplane.runs.services import run_create, run_start
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("domains", "sync", "--no-progress", verbosity=0)
User = get_user_model()
user = User.objects.create_user("fuzz", password="fuzz-pass-1", is_staff=True, is_superuser=True)
team = Team.objects.create(slug="fuzz", name="Fuzz")
Membership.objects.create(user=user, team=team, role="admin")
actor = Principal.for_user(user)
# Tokens the fuzzer may revoke without losing its own (created last, with the highest id).
for i in range(50):
    token_create(actor=actor, team=team, name=f"spare-{i}")
for i in range(3):
    run = run_create(actor=actor, data={"team": "fuzz", "name": f"run {i}", "base_model": "tiny",
        "domains": [{"slug": "builtin-addition", "weight": 1}], "budget": {"steps": 10}})
    if i:
        run_start(actor=actor, run=run)
_, secret = token_create(actor=Principal.for_user(user), team=team, name="fuzzer", role="admin")
print("TOKEN", secret)
print("RUN", run.id)
"""

BODY_LIMIT = 1024 * 1024
UPLOAD_LIMIT = 8 * 1024 * 1024
"""The fuzzed server's body limits (TEMPER_API_MAX_BODY_BYTES, TEMPER_UPLOAD_MAX_BYTES): small, so
that a body one byte over them is cheap to send for real."""

PATH_LIKE = ["/etc/ssl", "../../../../tmp", "var/registry/v1/model", "controlplane/../../../../tmp"]
HOSTILE_STRINGS = [*PATH_LIKE, "a\x00b", "a\ud800b", "\udfff", "x" * 5000]
HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "123456789012345678901234567890", "-1e308"]
RUN = {"team": "fuzz", "name": "hostile run", "base_model": "tiny", "domains": [{"slug": "builtin-addition", "weight": 1}],
       "budget": {"steps": 10}, "config": {"rollout": {"prompts_per_step": 2, "n": 2, "max_new_tokens": 8}}}
KNOWN_GOOD = {
    ("POST", "/api/runs/validate"): RUN,
    ("POST", "/api/runs"): RUN,
    ("POST", "/api/tokens"): {"team": "fuzz", "name": "hostile", "role": "viewer", "expires_in_days": 1},
    ("PUT", "/api/teams/{slug}/quota"): {"max_gpus": 3},
    ("POST", "/api/runs/{run_id}/priority"): {"priority": 5},
    ("POST", "/api/runs/{run_id}/weights"): {"weights": {"builtin-addition": 1.0}},
}
"""Bodies the server accepts, for the operations where the schema's own example would be refused
early: each hostile value then goes in alone, so it reaches the code past validation."""
MAX_LEAVES = 150
"""Per operation, at most this many leaves of the example body are mutated (the run body has more)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="generated examples per operation (>= 100 for the goal)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hostile-only", action="store_true", help="skip schemathesis (the hostile pass alone)")
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn",
                        help="the ASGI server (compose serves with uvicorn; the one-process demo with daphne, which "
                             "takes in a whole body before the application sees the request)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="temper-fuzz-"))
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_SETTINGS_MODULE", "REDIS_URL")}
    env["TEMPER_VAR_DIR"] = str(work / "var")
    env["TEMPER_API_MAX_BODY_BYTES"] = str(BODY_LIMIT)
    env["TEMPER_UPLOAD_MAX_BYTES"] = str(UPLOAD_LIMIT)
    throwaway = throwaway_database(env.get("DATABASE_URL", ""))
    if throwaway:
        env["DATABASE_URL"] = throwaway
    try:
        return fuzz(args, work, env)
    finally:
        if throwaway:
            drop_database(throwaway)


def throwaway_database(url: str) -> str | None:
    """A fresh PostgreSQL database beside ``url``'s (the fuzzer's rows never mix with anyone's,
    and a second run does not collide with the first); None for SQLite or no URL."""
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    import psycopg  # only with PostgreSQL

    parsed = urllib.parse.urlsplit(url)
    name = f"{parsed.path.lstrip('/') or 'temper'}_fuzz_{secrets.token_hex(4)}"
    with psycopg.connect(urllib.parse.urlunsplit(parsed._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urllib.parse.urlunsplit(parsed._replace(path=f"/{name}"))


def drop_database(url: str) -> None:
    import psycopg  # only with PostgreSQL

    parsed = urllib.parse.urlsplit(url)
    with psycopg.connect(urllib.parse.urlunsplit(parsed._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}" WITH (FORCE)')


def fuzz(args: argparse.Namespace, work: Path, env: dict) -> int:
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    seeded = subprocess.run([py, "manage.py", "shell", "-c", SEED], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    token = re.search(r"TOKEN (\S+)", seeded.stdout).group(1)
    run_id = int(re.search(r"RUN (\d+)", seeded.stdout).group(1))

    port = free_port()
    command = {
        "daphne": [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
        "uvicorn": [py, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                    "--lifespan", "off", "--no-access-log"],
    }[args.server]
    server = subprocess.Popen(command,
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in server.stdout:
        if b"Listening on TCP address" in raw or b"Uvicorn running on" in raw:
            break
    else:
        print(json.dumps({"error": f"{args.server} did not start"}))
        return 1
    # Keep reading the access log: a full pipe would block the server.
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    # Revoking tokens goes last, on its own: revoking the fuzzer's own token midway would turn
    # every later request into a 401 and hide the rest of the API from the fuzzer.
    passes = [["--exclude-operation-id", "controlplane_accounts_api_token_revoke"],
              ["--include-operation-id", "controlplane_accounts_api_token_revoke"]]
    totals = {"generated": 0, "passed": 0, "failed": 0, "operations": 0}
    outputs, codes = [], []
    try:
        for i, selection in enumerate([] if args.hostile_only else passes):
            cmd = [
                py, "-m", "schemathesis.cli", "run", f"{base}/api/openapi.json", *selection,
                "-H", f"Authorization: Bearer {token}",
                "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
                "--max-examples", str(args.examples), "--seed", str(args.seed),
                "--continue-on-failure", "--suppress-health-check", "all",
                "--report", "ndjson", "--report-ndjson-path", str(work / f"report-{i}.ndjson"),
            ]
            st = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            outputs.append(st.stdout)
            codes.append(st.returncode)
            tested = re.search(r"Tested: (\d+)", st.stdout)
            cases = re.search(r"(\d+) generated, (\d+) passed(?:, (\d+) failed)?", st.stdout)
            totals["operations"] += int(tested.group(1)) if tested else 0
            if cases:
                totals["generated"] += int(cases.group(1))
                totals["passed"] += int(cases.group(2))
                totals["failed"] += int(cases.group(3) or 0)
        hostile = Hostile("127.0.0.1", port, token, run_id=run_id, pid=server.pid, early_refusal=args.server == "uvicorn")
        hostile.run()
    finally:
        server.terminate()
        server.wait(timeout=30)
    wall = time.monotonic() - started
    for out in outputs:
        print("\n".join(out.strip().splitlines()[-30:]))
    for line in hostile.failures[:40]:
        print("hostile:", line)
    server_errors = sum(len(re.findall(r"Server error", out)) for out in outputs)
    violations = sum(len(re.findall(r"Response violates schema|Undocumented Content-Type", out)) for out in outputs)
    result = {
        "operations": totals["operations"],
        "examples_per_operation": args.examples,
        "test_cases": totals["generated"],
        "passed": totals["passed"],
        "failed": totals["failed"],
        "schemathesis_server_errors": server_errors,
        "schemathesis_schema_violations": violations,
        "schemathesis_exit": max(codes) if codes else None,
        "hostile_requests": hostile.sent,
        "hostile_server_errors": hostile.server_errors,
        "hostile_schema_violations": hostile.violations,
        "hostile_statuses": dict(sorted(hostile.statuses.items())),
        "server": args.server,
        "late_refusals": hostile.late_refusals,
        **hostile.figures,
        "server_errors": server_errors + hostile.server_errors,
        "schema_violations": violations + hostile.violations,
        "wall_s": round(wall, 1),
    }
    print(json.dumps(result))
    ok = ((args.hostile_only or codes and max(codes) == 0) and result["server_errors"] == 0 and result["schema_violations"] == 0
          and result["late_refusals"] == 0)
    return 0 if ok else 1


# ------------------------------------------------------------------------------ hostile pass
class Hostile:
    """Sends the hostile requests and checks every answer against the OpenAPI document."""

    def __init__(self, host: str, port: int, token: str, *, run_id: int, pid: int, early_refusal: bool) -> None:
        self.host, self.port, self.token, self.run_id, self.pid = host, port, token, run_id, pid
        self.early_refusal = early_refusal
        """Whether the server hands a request over before its body arrives (uvicorn does, daphne
        does not): then a declared 200 MB must be answered before it is sent, or it is a failure."""
        self.sent = self.server_errors = self.violations = self.late_refusals = 0
        self.statuses: dict[str, int] = {}
        self.failures: list[str] = []
        self.figures: dict[str, Any] = {}
        self.doc: dict = {}

    # -- plumbing
    def request(self, method: str, path: str, body: bytes | None = None, *, auth: bool = True,
                headers: dict | None = None) -> tuple[int, str, bytes]:
        """One request on its own connection. Raw, because a server may answer a body over the
        limit (413) and close before the body is all sent: the answer is read after the send fails."""
        head = {"Host": f"{self.host}:{self.port}", "Content-Type": "application/json", "Connection": "close",
                **(headers or {})}
        if auth:
            head["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            head["Content-Length"] = str(len(body))
        raw = f"{method} {path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in head.items()) + b"\r\n"
        with socket.create_connection((self.host, self.port), timeout=120) as sock:
            try:
                sock.sendall(raw + (body or b""))
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered before the body was all sent: read the answer
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except ConnectionResetError:
                pass
        response = b"".join(chunks)
        header, _, payload = response.partition(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1]) if lines[0].startswith("HTTP/") else 0
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if "chunked" in fields.get("transfer-encoding", ""):
            payload = dechunk(payload)
        return status, fields.get("content-type", ""), payload

    def send(self, op: dict, method: str, path: str, body: bytes | None = None, what: str = "", **kw) -> int:
        status, content_type, payload = self.request(method, path, body, **kw)
        self.sent += 1
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        where = f"{method} {path[:120]} [{what}]"
        if status >= 500 or status == 0:
            self.server_errors += 1
            self.failures.append(f"{where}: server error {status or '(no answer)'}: {payload[:300]!r}")
            return status
        problem = self.violation(op, status, content_type, payload)
        if problem:
            self.violations += 1
            self.failures.append(f"{where}: {problem}")
        return status

    def violation(self, op: dict, status: int, content_type: str, payload: bytes) -> str | None:
        """Why the answer breaks the operation's documented responses, or None."""
        import jsonschema  # a test dependency, as schemathesis is

        spec = op["responses"].get(str(status)) or op["responses"].get("default")
        if spec is None:
            return f"status {status} is not documented ({sorted(op['responses'])}): {payload[:200]!r}"
        schema = (spec.get("content") or {}).get("application/json", {}).get("schema")
        if schema is None:
            return None
        if not content_type.startswith("application/json"):
            return f"status {status}: Content-Type {content_type!r}, documented application/json"
        try:
            value = json.loads(payload)
        except ValueError:
            return f"status {status}: not JSON: {payload[:200]!r}"
        validator = jsonschema.Draft202012Validator({**schema, "components": self.doc.get("components", {})})
        error = next(iter(validator.iter_errors(value)), None)
        if error is not None:
            return f"status {status}: violates the schema at {list(error.absolute_path)}: {error.message[:200]}"
        return None

    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    # -- what to send
    def run(self) -> None:
        status, _, payload = self.request("GET", "/api/openapi.json")
        assert status == 200, status
        self.doc = json.loads(payload)
        for path, ops in self.doc["paths"].items():
            for method, op in ops.items():
                if method.upper() == "DELETE":
                    continue  # revoking tokens would leave the fuzzer without one; nothing to send there
                self.operation(method.upper(), path, op)
        self.uploads()

    def url(self, template: str, op: dict, override: tuple[str, str] | None = None, query: dict | None = None) -> str:
        values = {}
        for param in op.get("parameters", []):
            if param["in"] != "path":
                continue
            name = param["name"]
            if param.get("schema", {}).get("type") == "integer":
                values[name] = str(self.run_id if name == "run_id" else 1)
            elif name == "name":
                values[name] = "production"
            elif template.startswith("/api/teams/"):
                values[name] = "fuzz"
            else:
                values[name] = "builtin-addition"
        if override:
            values[override[0]] = override[1]
        path = template
        for name, value in values.items():
            path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return path

    def operation(self, method: str, template: str, op: dict) -> None:
        params = op.get("parameters", [])
        # Every string path and query parameter: NUL, a lone surrogate (sent as its UTF-8 bytes'
        # percent escapes would not decode; the text form is what a client could type) and paths.
        for param in params:
            if param.get("schema", {}).get("type") not in (None, "string") or param["in"] not in ("path", "query"):
                continue
            for value in [*PATH_LIKE, "a\x00b", "%00"]:
                if param["in"] == "path":
                    self.send(op, method, self.url(template, op, override=(param["name"], value)), self.minimal_body(op),
                              what=f"path {param['name']}={value!r}")
                else:
                    self.send(op, method, self.url(template, op, query={param["name"]: value}), self.minimal_body(op),
                              what=f"query {param['name']}={value!r}")
        body_schema = ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")
        if body_schema is None:
            return
        url = self.url(template, op)
        example = copy.deepcopy(KNOWN_GOOD.get((method, template))) or self.example(body_schema)
        if (method, template) in KNOWN_GOOD:  # the base body itself must pass, or the mutations test little
            status = self.send(op, method, url, json.dumps(example).encode(), what="known-good body")
            self.figures.setdefault("known_good_statuses", {})[f"{method} {template}"] = status
        for what, raw in self.whole_bodies(example):
            self.send(op, method, url, raw, what=what)
        for n, (where, raw) in enumerate(self.leaf_mutations(example)):
            if n >= MAX_LEAVES * (len(HOSTILE_STRINGS) + len(HOSTILE_NUMBERS)):
                break
            self.send(op, method, url, raw, what=where)
        self.declared_huge(op, method, url)

    def minimal_body(self, op: dict) -> bytes | None:
        schema = ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")
        return None if schema is None else json.dumps(self.example(schema)).encode()

    def whole_bodies(self, example: Any) -> Iterator[tuple[str, bytes]]:
        yield "nested 1,000 deep", b'{"x": ' + b"[" * 1000 + b"]" * 1000 + b"}"
        yield "nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000
        yield "objects nested 1,000 deep", b'{"a": ' * 1000 + b"1" + b"}" * 1000
        yield "one byte over the limit", b'{"x": "' + b"a" * (BODY_LIMIT - 8) + b'"}'
        yield "invalid UTF-8", b'{"name": "\xff\xfe"}'
        yield "encoded surrogate", b'{"name": "\xed\xa0\x80"}'
        yield "byte order mark", b"\xef\xbb\xbf" + json.dumps(example).encode()
        yield "empty", b""
        yield "not an object", b"[1, 2]"
        yield "null", b"null"
        yield "huge integer", b'{"x": ' + b"9" * 5000 + b"}"
        yield "NUL key", json.dumps({**example, "k\x00": 1} if isinstance(example, dict) else {"k\x00": 1}).encode()

    def leaf_mutations(self, example: Any) -> Iterator[tuple[str, bytes]]:
        """The example with one string leaf made hostile, or one number made non-finite."""
        for path, leaf in leaves(example):
            if isinstance(leaf, str):
                for value in HOSTILE_STRINGS:
                    yield f"{path}={value!r}", json.dumps(set_at(example, path, value)).encode()
            elif isinstance(leaf, (int, float)) and not isinstance(leaf, bool):
                marker = "__fuzz_number__"
                text = json.dumps(set_at(example, path, marker))
                for literal in HOSTILE_NUMBERS:
                    yield f"{path}={literal}", text.replace(f'"{marker}"', literal).encode()

    def declared_huge(self, op: dict, method: str, url: str, *, always: bool = False) -> None:
        """A 200 MB Content-Length with 64 KiB behind it, anonymous: the answer must come from the
        declared length (413 or 401), before the body is sent. A server that takes in whole bodies
        first (daphne) answers nothing before the rest arrives: there this is a figure, not a failure."""
        if self.figures.get("declared_200mb_probes", 0) >= 3 and not always:
            return
        self.figures["declared_200mb_probes"] = self.figures.get("declared_200mb_probes", 0) + 1
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            sock.sendall(f"{method} {url} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {200 * 1024 * 1024}\r\n\r\n".encode() + b"[" * 65536)
            sock.settimeout(3)
            try:
                first = sock.recv(200)
            except (socket.timeout, ConnectionError):
                first = b""
        status = first.split(b" ", 2)[1].decode() if first.startswith(b"HTTP/") else "no answer within 3 s"
        self.figures.setdefault("declared_200mb_answers", []).append(f"{method} {url}: {status}")
        if status.isdigit() and int(status) >= 500:
            self.server_errors += 1
            self.failures.append(f"{method} {url} [declared 200 MB]: server error {status}")
        elif self.early_refusal and status not in ("401", "413"):
            self.late_refusals += 1
            self.failures.append(f"{method} {url} [declared 200 MB]: {status}, not a 413 or 401 before the body")

    def uploads(self) -> None:
        """JSONL uploads: a body one byte over the upload limit (with the server's memory before
        and after), and lines carrying NaN, NUL, lone surrogates, deep nesting and paths."""
        op = self.doc["paths"]["/api/domains/upload"]["post"]
        self.declared_huge(op, "POST", "/api/domains/upload", always=True)
        base = {"team": "fuzz", "title": "Fuzz", "kind": "math", "verifier": {"stages": [{"type": "exact", "timeout_s": 1.0}]}}
        filler = json.dumps({"prompt": "p", "answer": "1"})
        lines = UPLOAD_LIMIT // (len(filler) + 1) + 1
        body = json.dumps({**base, "slug": "fuzz-big", "jsonl": "\n".join([filler] * lines)}).encode()
        before = self.rss_kib()
        status = self.send(op, "POST", "/api/domains/upload", body, what=f"upload of {len(body)} bytes, over the limit")
        after = self.rss_kib()
        self.figures["oversize_upload"] = {"bytes": len(body), "status": status, "server_rss_kib_before": before,
                                           "server_rss_kib_after": after}
        hostile_lines = [
            '{"prompt": "a\\ud800", "answer": "1"}', '{"prompt": "a\\u0000", "answer": "1"}',
            '{"prompt": "a", "answer": NaN}', '{"prompt": "a", "answer": 1e999}',
            '{"prompt": "a", "answer": "1", "metadata": ' + "[" * 1000 + "]" * 1000 + "}",
            *(json.dumps({"prompt": p, "answer": p, "metadata": {"path": p}}) for p in PATH_LIKE),
        ]
        for n, line in enumerate(hostile_lines):
            body = json.dumps({**base, "slug": f"fuzz-lines-{n}", "jsonl": filler + "\n" + line}).encode()
            self.send(op, "POST", "/api/domains/upload", body, what=f"JSONL line {line[:60]!r}")

    def example(self, schema: dict, depth: int = 0) -> Any:
        """A small value of ``schema`` (every property, so that every string field is reached)."""
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return self.example(self.doc["components"]["schemas"][name], depth)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
                return self.example(options[0], depth)
        if "allOf" in schema:
            merged: dict = {}
            for part in schema["allOf"]:
                merged.update(self.example(part, depth) or {})
            return merged
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        if "default" in schema and depth > 0:
            return copy.deepcopy(schema["default"])
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or "properties" in schema:
            if depth > 6:
                return {}
            return {k: self.example(v, depth + 1) for k, v in schema.get("properties", {}).items()}
        if kind == "array":
            item = schema.get("items")
            return [self.example(item, depth + 1)] * max(1, schema.get("minItems", 1)) if item else []
        if kind == "string":
            return "x" * max(1, schema.get("minLength", 1))
        if kind == "integer":
            return max(1, int(schema.get("minimum", 1)))
        if kind == "number":
            return float(schema.get("minimum", 1) or 1)
        if kind == "boolean":
            return False
        return None


def dechunk(data: bytes) -> bytes:
    out = []
    while data:
        size, _, rest = data.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out.append(rest[:n])
        data = rest[n + 2:]
    return b"".join(out)


def leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from leaves(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from leaves(child, (*path, i))
    else:
        yield path, value


def set_at(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    out = copy.copy(value)
    out[path[0]] = set_at(value[path[0]], path[1:], new)
    return out


if __name__ == "__main__":
    sys.exit(main())
