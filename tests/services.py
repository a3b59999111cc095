"""What the test suite needs from the machine, and how a missing service is reported.

Locally a test whose service is missing is skipped with the reason; with TEMPER_REQUIRE_SERVICES=1
(CI) it fails instead, so CI never passes by skipping.
"""
from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import pytest


def services_required() -> bool:
    return os.environ.get("TEMPER_REQUIRE_SERVICES", "") == "1"


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if services_required():
        pytest.fail(f"required service missing (TEMPER_REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason)


def port_open(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    from django.db import connection

    require(connection.vendor == "postgresql", "PostgreSQL: set DATABASE_URL=postgresql://... (the suite is on " + connection.vendor + ")")


def require_redis() -> str:
    url = os.environ.get("REDIS_URL", "")
    require(bool(url) and port_open(url, 6379), "Redis: set REDIS_URL=redis://127.0.0.1:6379/0 with a server running")
    return url
