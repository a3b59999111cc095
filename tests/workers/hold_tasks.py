"""A task for tests that need a worker's processes busy: it holds its process until a file
appears (the test's signal), as a run's driver holds one while it trains. Loaded into a worker
with ``--include tests.workers.hold_tasks``."""
from __future__ import annotations

import time
from pathlib import Path

from celery import shared_task

HOLD_TASK = "temper.test.hold"
HOLD_MAX_S = 600.0
"""A held process is let go after this long even if the test never signals (a crashed test)."""


@shared_task(name=HOLD_TASK, acks_late=False, soft_time_limit=HOLD_MAX_S + 30, time_limit=HOLD_MAX_S + 60)
def hold(folder: str, ident: str) -> str:
    """Write ``<ident>.started`` under ``folder``, then wait until ``release`` is there."""
    folder_path = Path(folder)
    (folder_path / f"{ident}.started").touch()
    deadline = time.monotonic() + HOLD_MAX_S
    while not (folder_path / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return ident
