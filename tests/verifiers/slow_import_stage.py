"""A stage function whose module is slow to import and whose warm-up is slow, as a large verifier
library is on a loaded machine (tests/verifiers/test_timeouts.py): each longer than the stage's
own timeout there."""
from __future__ import annotations

import time

from trainer.outcomes import Verification
from trainer.tasks.base import Task

IMPORT_S = 1.5
time.sleep(IMPORT_S)  # the import's cost, not a wait for anything


def passes(completion: str, task: Task) -> Verification:
    return Verification.passed(answer=completion)


def _warm_up() -> None:
    time.sleep(IMPORT_S)  # a first call's cost (a parser's tables built), not a wait for anything


passes.warm_up = _warm_up
