"""The judge queue: verification batches of domains whose cascade has a judge stage, and shadow
re-scoring of proposed judge versions.

Workers resolve a judge stage's ``judge`` name to the judge's active version (read from the
database at the start of each batch, cached for a few seconds), and limit each judge's requests in flight across every worker with the
same Redis sorted-set slots the sandbox quota uses (a process-local semaphore without Redis).
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from django.conf import settings

from controlplane.review.models import Judge, JudgeConfig
from controlplane.review.services import judge_build, shadow_candidates, shadow_record
from trainer.tasks.base import Task
from trainer.verifiers import VerifyContext
from trainer.verifiers.judge import JudgeError, judge_stage
from workers.slots import LocalSlots, RedisSlots, SlotsBusy, domain_slot

log = logging.getLogger(__name__)

CACHE_S = 5.0
_cache: dict[str, tuple[float, object]] = {}
_cache_lock = threading.Lock()
_slots: list[object] = []


def resolve_judge(name: str):
    """The built judge for the active version of the judge named ``name`` (None if there is none),
    its requests in flight bounded across every worker (:func:`shared_limit`)."""
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(name)
        if hit and now - hit[0] < CACHE_S:
            return hit[1]
    judge = Judge.objects.select_related("active__judge").filter(slug=name).first()
    built = judge_build(judge.active, shared_limit) if judge is not None and judge.active is not None else None
    with _cache_lock:
        _cache[name] = (now, built)
    return built


def judge_slots():
    """Redis slots keyed per judge when REDIS_URL is set, else process-local ones."""
    if not _slots:
        if settings.REDIS_URL:
            import redis  # lazy: only with REDIS_URL; on the embedded default (no Redis) nothing pays its ~0.15 s import

            _slots.append(RedisSlots(redis.Redis.from_url(settings.REDIS_URL), prefix="temper:judge-slots:"))
        else:
            _slots.append(LocalSlots())
    return _slots[0]


@contextmanager
def shared_limit(name: str, limit: int, wait_s: float) -> Iterator[None]:
    """One of ``limit`` slots of judge ``name`` across all workers; JudgeError when busy too long."""
    try:
        with domain_slot(judge_slots(), name, limit, min(wait_s, settings.TEMPER_JUDGE_WAIT_S), lease_s=wait_s + 60.0):
            yield
    except SlotsBusy as exc:
        raise JudgeError(str(exc).replace("sandbox slots of domain", "slots of judge")) from None


def judges_for(spec: dict | None) -> dict:
    """The active version of every judge ``spec``'s stages name, by name (a judge that does not
    exist maps to None, so its stage reports judge_error)."""
    names = {str((stage.get("params") or {}).get("judge", "default"))
             for stage in (spec or {}).get("stages", []) if isinstance(stage, dict) and stage.get("type") == "judge"}
    return {name: resolve_judge(name) for name in sorted(names)}


def shadow_run(config_id: int) -> dict:
    """Score every labelled item of the judge's other versions with version ``config_id``."""
    config = JudgeConfig.objects.select_related("judge").get(pk=config_id)
    name = f"shadow:{config.judge.slug}:v{config.version}"
    context = VerifyContext.with_judges({name: judge_build(config, shared_limit)})
    counts = {"scored": 0, "errors": 0}
    for item in shadow_candidates(config).select_related("queue"):
        task = Task(item.queue.domain.slug, item.task_id or str(item.pk), item.prompt, answer=item.reference or None)
        verification = judge_stage(item.completion, task, judge=name, context=context).to_dict()
        shadow = shadow_record(config=config, item=item, verification=verification)
        counts["scored" if shadow.raw is not None else "errors"] += 1
    return counts
