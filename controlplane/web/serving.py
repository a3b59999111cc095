"""How the web tier is served: one ASGI server process, or several sharing one listening socket.

Under ASGI, Django runs each request's sync code (every page and API endpoint here) in a thread of
its own (asgiref's ThreadSensitiveContext), and those threads share one interpreter lock: one
process never uses more than one core, however many clients wait. 20 concurrent API clients saw
p95 2.3 s on one daphne process. Daphne has no multi-process mode; uvicorn's ``--workers N``
starts N processes on one socket and restarts any that dies. Every process reads the same
settings, so they share the database and, with ``REDIS_URL``, the channel layer (a websocket on
one process is woken by a write made through another). Without Redis (the embedded default) each
process has its own in-memory layer and its live consumers tail the database once a second, as
they already do for the workers' writes.

``manage.py demo --web-processes N`` and ``bench/api_load.py`` build their server command here;
``docker-compose.yml``'s web service writes the same uvicorn command out.
"""
from __future__ import annotations

import os
import sys

APPLICATION = "controlplane.asgi:application"
PROCESSES_ENV = "TEMPER_WEB_PROCESSES"
WS_MAX_BYTES = 65536
MAX_PROCESSES = 64
"""More web processes than this is a typo, not a deployment (each holds its own database connections)."""


def web_processes(value: str | int | None = None) -> int:
    """The number of web processes: ``value`` (``--web-processes``), else ``$TEMPER_WEB_PROCESSES``, else 1.

    >>> web_processes("3")
    3
    >>> web_processes("0")
    Traceback (most recent call last):
    ...
    ValueError: --web-processes: must be an integer from 1 to 64, got '0'
    """
    source, raw = ("--web-processes", value) if value is not None else (PROCESSES_ENV, os.environ.get(PROCESSES_ENV) or "1")
    try:
        n = int(raw)
    except (TypeError, ValueError):
        n = 0
    if not 1 <= n <= MAX_PROCESSES:
        raise ValueError(f"{source}: must be an integer from 1 to {MAX_PROCESSES}, got {raw!r}")
    return n


def web_command(*, host: str, port: int, processes: int = 1, server: str = "", python: str = sys.executable) -> list[str]:
    """The command line that serves the site on ``host:port`` from ``processes`` processes.

    ``server`` is ``uvicorn`` (any number; the default) or ``daphne`` (one process). uvicorn is
    the default for one process too: it refuses a body whose Content-Length is over the limit
    before reading it (the ASGI guard in ``controlplane/asgi.py`` answers 413 at the first
    message), where daphne takes in a whole request body before the application sees it (a
    200 MB anonymous upload grew a daphne process from 115 to 319 MB, and a uvicorn one not at all).

    >>> web_command(host="0.0.0.0", port=8000, processes=3, python="python")[:9]
    ['python', '-m', 'uvicorn', 'controlplane.asgi:application', '--host', '0.0.0.0', '--port', '8000', '--workers']
    >>> web_command(host="127.0.0.1", port=8000, processes=2, server="daphne")
    Traceback (most recent call last):
    ...
    ValueError: daphne serves from one process; several web processes need uvicorn
    """
    server = server or "uvicorn"
    if server == "daphne":
        if processes != 1:
            raise ValueError("daphne serves from one process; several web processes need uvicorn")
        return [python, "-m", "daphne", "-b", host, "-p", str(port), APPLICATION]
    if server != "uvicorn":
        raise ValueError(f"server: must be daphne or uvicorn, got {server!r}")
    # The channels router answers no "lifespan" scope (nothing to start or stop): off, rather than
    # a warning at every start. No access log, as daphne has none by default. A websocket message
    # is a client's cursor (controlplane/live/consumers.py refuses one over 1 KiB): frames over
    # 64 KiB close the socket in the server, instead of uvicorn's default 16 MiB being buffered.
    return [python, "-m", "uvicorn", APPLICATION, "--host", host, "--port", str(port), "--workers", str(processes),
            "--lifespan", "off", "--no-access-log", "--ws-max-size", str(WS_MAX_BYTES)]
