"""The embedded default boots with nothing installed: SQLite, no broker server, in-memory layer."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    opener = urllib.request.build_opener(urllib.request.HTTPRedirectHandler())
    with opener.open(url, timeout=10) as r:
        return r.status, r.geturl(), r.read()


@pytest.mark.slow
def test_embedded_default_boots_and_serves(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env["TEMPER_VAR_DIR"] = str(tmp_path / "var")
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    assert (tmp_path / "var" / "temper.sqlite3").exists()
    assert (tmp_path / "var" / "secret_key").read_text().strip()
    port = _free_port()
    server = subprocess.Popen([py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = []
        for line in server.stdout:  # daphne says when it listens; no polling
            seen.append(line.decode(errors="replace"))
            if "Listening on TCP address" in seen[-1]:
                break
        else:
            raise AssertionError("daphne exited: " + "".join(seen)[-2000:])
        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()  # never let the pipe fill
        status, final, body = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and final.endswith("/login/?next=/") and b"Sign in" in body
        status, _, body = _get(f"http://127.0.0.1:{port}/api/openapi.json")
        assert status == 200 and b'"/api/runs"' in body
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_secret_key_required_without_debug(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env.update(DEBUG="0", TEMPER_VAR_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "SECRET_KEY: required when DEBUG is off" in r.stderr
