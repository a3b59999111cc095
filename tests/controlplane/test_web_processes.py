"""Several web processes on one port (controlplane/web/serving.py): each serves pages, the API and
the live websocket, and a write made anywhere reaches a socket held by either process (through
the Redis channel layer they share). Also the command lines the demo and compose use."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from controlplane.web.serving import web_command, web_processes
from tests import factories
from tests.services import require_postgres, require_redis, stop_processes, worker_env

ROOT = Path(__file__).resolve().parents[2]


def test_process_count_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv("TEMPER_WEB_PROCESSES", raising=False)
    assert web_processes() == 1
    monkeypatch.setenv("TEMPER_WEB_PROCESSES", "3")
    assert web_processes() == 3 and web_processes("2") == 2
    for bad in ("0", "-1", "two", "65"):
        with pytest.raises(ValueError, match="must be an integer from 1 to 64"):
            web_processes(bad)
    monkeypatch.setenv("TEMPER_WEB_PROCESSES", "lots")
    with pytest.raises(ValueError, match="TEMPER_WEB_PROCESSES: .*got 'lots'"):
        web_processes()


def test_uvicorn_serves_one_or_several_processes_and_daphne_only_one():
    """uvicorn by default, one process too: it refuses an oversized declared body before reading
    it, where daphne takes the whole body into memory first (docs/controlplane.md)."""
    one = web_command(host="127.0.0.1", port=8000, processes=1, python="py")
    assert one[:4] == ["py", "-m", "uvicorn", "controlplane.asgi:application"] and one[one.index("--workers") + 1] == "1"
    daphne = web_command(host="127.0.0.1", port=8000, processes=1, server="daphne", python="py")
    assert daphne == ["py", "-m", "daphne", "-b", "127.0.0.1", "-p", "8000", "controlplane.asgi:application"]
    three = web_command(host="0.0.0.0", port=9000, processes=3, python="py")
    assert three[:4] == ["py", "-m", "uvicorn", "controlplane.asgi:application"]
    assert three[three.index("--workers") + 1] == "3" and three[three.index("--port") + 1] == "9000"
    with pytest.raises(ValueError, match="daphne serves from one process"):
        web_command(host="127.0.0.1", port=8000, processes=2, server="daphne")


def test_demo_refuses_a_bad_process_count_before_doing_anything():
    # No database here: a command that got as far as migrating would fail on that instead.
    with pytest.raises(CommandError, match="--web-processes: must be an integer from 1 to 64, got '0'"):
        call_command("demo", "--web-processes", "0")


def _database_settings(**env: str) -> subprocess.CompletedProcess:
    """What a process started with ``env`` makes of its default database (settings are read once,
    at import, so each case is a process of its own)."""
    script = ("import django, json; django.setup(); from django.conf import settings; "
              "d = settings.DATABASES['default']; print(json.dumps({'options': d.get('OPTIONS', {}), "
              "'checks': d.get('CONN_HEALTH_CHECKS'), 'age': d.get('CONN_MAX_AGE')}))")
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **env})


def _options(**env: str) -> dict:
    result = _database_settings(**env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_database_pool_is_asked_for_by_the_environment():
    pg = "postgresql://u@127.0.0.1:5432/x"
    pooled = _options(DATABASE_URL=pg, TEMPER_DB_POOL_SIZE="6")
    assert pooled == {"options": {"pool": {"min_size": 1, "max_size": 6, "timeout": 10}}, "checks": True, "age": 0}
    assert "pool" not in _options(DATABASE_URL=pg, TEMPER_DB_POOL_SIZE="0")["options"]
    assert "pool" not in _options(DATABASE_URL=pg)["options"]
    # SQLite (the embedded default) has no pool to ask for.
    assert "pool" not in _options(DATABASE_URL="sqlite:///x.sqlite3", TEMPER_DB_POOL_SIZE="6")["options"]
    refused = _database_settings(DATABASE_URL=pg, TEMPER_DB_POOL_SIZE="many")
    assert refused.returncode != 0
    assert "TEMPER_DB_POOL_SIZE: must be 0 (no pool) or a positive integer, got 'many'" in refused.stderr


# ----------------------------------------------------------------------------- two real processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == pid and b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
                out.append(int(entry))
    return sorted(out)


@contextmanager
def _only(worker: int, workers: list[int]):
    """Every other worker stopped (SIGSTOP), so ``worker`` alone accepts the connections made
    meanwhile: they share one listening socket, and a stopped process cannot call accept().
    Kept well under uvicorn's 5 s health check, which would replace a worker stopped longer."""
    others = [w for w in workers if w != worker]
    for w in others:
        os.kill(w, signal.SIGSTOP)
    try:
        yield
    finally:
        for w in others:
            os.kill(w, signal.SIGCONT)


def _get(url: str, headers: dict, timeout: float = 4) -> tuple[int, bytes]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
        return r.status, r.read()


def _session(user) -> str:
    """A signed-in session of ``user`` in the database the server reads."""
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _metrics_with(ws, key: str, deadline: float) -> dict:
    """The first ``metrics`` message on ``ws`` that carries a point of ``key``."""
    while time.monotonic() < deadline:
        message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message.get("type") == "metrics" and any(p[3] == key for p in message["points"]):
            return message
    raise AssertionError(f"no point of {key} arrived")


@pytest.mark.slow
@pytest.mark.services
def test_two_processes_each_serve_pages_api_and_live_sockets(transactional_db, tmp_path):
    from websockets.sync.client import connect

    from controlplane.runs import services as run_services

    require_postgres()
    redis_url = require_redis()
    team = factories.team("procs")
    user = factories.member(team, "admin", "procs-admin")
    run = factories.run(team, by=user, domains=[factories.domain("procs-addition")], state="running", driver="test-writer")
    _, secret = factories.token(user, team, "viewer")
    cookie = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={_session(user)}"}
    bearer = {"Authorization": f"Bearer {secret}"}

    port = _free_port()
    # As compose's web: each process lends its requests pooled connections (TEMPER_DB_POOL_SIZE).
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"), DEBUG="1",
                     SECRET_KEY=settings.SECRET_KEY, ALLOWED_HOSTS="127.0.0.1,localhost", TEMPER_DB_POOL_SIZE="4")
    log = tmp_path / "web.log"
    server = subprocess.Popen(web_command(host="127.0.0.1", port=port, processes=2), cwd=ROOT, env=env,
                              stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    sockets, opened = [], ExitStack()
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, log.read_text()[-3000:]
            workers = _children(server.pid)
            try:
                if len(workers) == 2 and _get(url + "/healthz", {}, timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the web server did not start:\n" + log.read_text()[-3000:]
            time.sleep(0.2)
        # Both workers have imported the site before either is paused (a first request is slow).
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda _: _get(f"{url}/api/runs/{run.id}", bearer, timeout=60)[0], range(64)))
        assert statuses == [200] * 64

        # Each process alone: a page, an API read and a live socket on a connection only it accepted.
        for worker in workers:
            with _only(worker, workers):
                status, body = _get(f"{url}/runs/{run.id}/", cookie)
                assert status == 200 and b'id="page-data"' in body, worker
                status, body = _get(f"{url}/api/runs/{run.id}", bearer)
                assert status == 200 and json.loads(body)["id"] == run.id, worker
                ws = opened.enter_context(connect(f"ws://127.0.0.1:{port}/ws/runs/{run.id}/",
                                                  additional_headers={**cookie, "Origin": url}, open_timeout=4))
                sockets.append(ws)
                ws.send(json.dumps({"cursor": 0, "event_cursor": 0}))
            assert server.poll() is None and _children(server.pid) == workers  # none was replaced meanwhile

        # A step written here (as a worker writes it) reaches the sockets of both processes.
        run_services.run_record_step(run=run, worker="test-writer", step=1, metrics={"reward/procs-addition": 0.75},
                                     samples=[], verifier_versions={})
        deadline = time.monotonic() + 30
        for ws in sockets:
            message = _metrics_with(ws, "reward/procs-addition", deadline)
            point = next(p for p in message["points"] if p[3] == "reward/procs-addition")
            assert (point[1], point[4]) == (1, 0.75)
    finally:
        opened.close()
        stop_processes([server], timeout=30, then_kill="process")  # it alone: its workers must end with it
    assert not any(Path(f"/proc/{w}").exists() and b"spawn_main" in Path(f"/proc/{w}/cmdline").read_bytes()
                   for w in workers), "a worker outlived the server"

