"""Health checks of the compose services (docker-compose.yml ``healthcheck:``); exit 0 when healthy.

    python deploy/healthcheck.py web                 # GET /healthz answers 200
    python deploy/healthcheck.py worker verify       # the worker verify@<this host> answers a ping
    python deploy/healthcheck.py beat                # beat wrote its schedule file lately

Cheap enough for a 30 s interval: it imports neither Django nor the project's Celery app (a
worker ping is a broadcast on the broker that only the named worker answers).
"""
from __future__ import annotations

import glob
import os
import socket
import sys
import time
import urllib.request

BEAT_STALE_S = 600
"""Beat writes its schedule file at least every 3 minutes (Celery's sync_every) while it runs."""


def web(port: int = 8000) -> bool:
    # The Host header must be one Django accepts: the first of ALLOWED_HOSTS ('.example.com' -> 'example.com').
    host = os.environ.get("ALLOWED_HOSTS", "localhost").split(",")[0].strip().lstrip(".")
    if host in ("", "*"):
        host = "localhost"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"Host": host})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status == 200


def worker(name: str) -> bool:
    from celery import Celery

    app = Celery(broker=os.environ["REDIS_URL"])
    node = f"{name}@{socket.gethostname()}"
    try:
        return bool(app.control.ping(destination=[node], timeout=5.0))
    finally:
        app.close()


def beat() -> bool:
    var = os.environ.get("TEMPER_VAR_DIR", "/var/lib/temper")
    # shelve may add a suffix (.db, .dat) depending on the dbm module
    files = glob.glob(os.path.join(var, "celerybeat-schedule*"))
    return any(time.time() - os.path.getmtime(f) < BEAT_STALE_S for f in files)


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["web"]:
            ok = web(int(argv[1]) if len(argv) > 1 else 8000)
        elif argv[:1] == ["worker"] and len(argv) == 2:
            ok = worker(argv[1])
        elif argv == ["beat"]:
            ok = beat()
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Exception as e:  # noqa: BLE001 - any failure is "unhealthy", said in one line
        print(f"unhealthy: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not ok:
        print("unhealthy", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
