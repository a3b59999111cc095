"""The suite's process environment, set before anything imports torch or the settings.

Loaded with ``-p tests.suite_env`` (pytest.ini), so it runs before pytest-django imports the
settings (which read REDIS_URL once) and before any test module imports torch. What it sets is
inherited by every process a test starts (Celery workers, the demo, daphne).

- One OpenMP thread per process (unless OMP_NUM_THREADS is set). The suite runs two pytest
  workers, and tests start Celery workers beside them, on a 2-core machine; torch's default of one
  thread per core makes every parallel region wait for a thread another process has descheduled
  (the test of the demo's judged run took 850 s beside the other pytest worker with torch's
  default, 53 s alone, and 41 s beside it with one thread). The demo's processes run with one thread too
  (controlplane/web/management/commands/demo.py).
- Each pytest-xdist worker (``make test`` runs ``pytest -n``) on a Redis database of its own. The
  workers already have databases of their own (pytest-django names them ``test_<name>_gw<n>``)
  and temporary directories of their own; without this they would share Redis, and a Celery
  worker one test starts would take the tasks another test's run sends to its queues, against the
  other worker's database. Worker ``gw<n>`` gets database ``base + n`` (modulo Redis's 16), where
  ``base`` is the one REDIS_URL names.
"""
from __future__ import annotations

import os
from urllib.parse import urlparse

REDIS_DATABASES = 16


def own_redis_url(url: str, worker: str) -> str:
    """``url`` with the database of xdist worker ``worker`` (``gw<n>``).

    >>> own_redis_url("redis://127.0.0.1:6379/0", "gw1")
    'redis://127.0.0.1:6379/1'
    >>> own_redis_url("redis://127.0.0.1:6379", "gw2")
    'redis://127.0.0.1:6379/2'
    >>> own_redis_url("redis://127.0.0.1:6379/15", "gw1")
    'redis://127.0.0.1:6379/0'
    """
    parsed = urlparse(url)
    base = int(parsed.path.strip("/") or 0)
    n = int(worker.removeprefix("gw"))
    return parsed._replace(path=f"/{(base + n) % REDIS_DATABASES}").geturl()


os.environ.setdefault("OMP_NUM_THREADS", "1")
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = own_redis_url(os.environ["REDIS_URL"], _worker)
