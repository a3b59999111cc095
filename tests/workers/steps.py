"""A hook at the driver's step boundary, for in-process driver tests."""
from __future__ import annotations

import contextlib

from controlplane.runs import services as run_services


@contextlib.contextmanager
def after_each_step(hook):
    """Within the block, ``hook(**kw)`` runs each time the driver has recorded a step (``kw`` are
    ``run_record_step``'s arguments: ``run``, ``step``, ...), as a user acting between steps would."""
    original = run_services.run_record_step

    def record_then_hook(**kw):
        out = original(**kw)
        hook(**kw)
        return out

    run_services.run_record_step = record_then_hook
    try:
        yield
    finally:
        run_services.run_record_step = original
