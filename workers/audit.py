"""The verifier audit of one domain version, on the verify queue.

Thin: take the audit's id, load the version's snapshot, build the verify path the runs use
(cheap cascades in this process; cascades with sandbox or judge stages through
``workers.verify.verify_items``, which installs the sandbox executor and the judges, on a small
thread pool), hand it to ``trainer.audit.audit_domain``, and record the report through the domains
app's services. Whatever goes wrong is recorded as a failed audit with the reason, never lost.
Safe to run twice: a finished audit is left alone.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from django.db import connection

from controlplane.domains import services
from controlplane.domains.pins import domain_quotas, pinned
from trainer.audit import audit_domain
from trainer.catalogue import DomainSpec
from workers import verify

log = logging.getLogger(__name__)

CHUNK = 8
"""Probes per ``verify_items`` call."""
THREADS = 4
"""Concurrent ``verify_items`` calls (each holds at most one sandbox or judge call at a time)."""
PROGRESS_EVERY_S = 1.0
"""How often a running audit writes its progress (probes done of total)."""


def verify_path(pin: DomainSpec) -> Callable | None:
    """``verify_many(list[(completion, Task)]) -> list[Verification]`` for a pinned domain, or
    None when its cascade runs in this process (the trainer's own in-process cascade)."""
    spec = pin.verifier_spec
    if not verify.needs_worker(spec):
        return None

    def verify_many(items):
        # The domain's sandbox quota as it stands at this call, with or without Redis.
        limit = domain_quotas(slugs=[pin.slug])[pin.slug].max_concurrent_sandboxes
        threads = max(1, min(THREADS, limit or THREADS))

        def verify_chunk(chunk: list[dict]) -> list[dict]:
            try:
                return verify.verify_items(spec, chunk, max_concurrent_sandboxes=limit)
            finally:
                if threading.current_thread() is not threading.main_thread():
                    connection.close()  # judges are resolved from the database on the calling thread

        payload = [{"completion": completion, "task": verify.task_to_dict(task)} for completion, task in items]
        chunks = [payload[i:i + CHUNK] for i in range(0, len(payload), CHUNK)]
        if len(chunks) <= 1:
            results = [verify.verify_items(spec, chunk, max_concurrent_sandboxes=limit) for chunk in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(threads, len(chunks)), thread_name_prefix="audit") as pool:
                results = list(pool.map(verify_chunk, chunks))
        return [verify.verification_from_dict(d) for batch in results for d in batch]

    return verify_many


def run_audit(audit_id: int) -> str:
    """Run one audit to the end and record it; ``done``, ``failed`` or ``skipped`` (unknown or
    finished already)."""
    audit = services.verifier_audit_start(audit_id=audit_id)
    if audit is None:
        return "skipped"
    version = audit.domain_version
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or done >= total:
            last[0] = now
            services.verifier_audit_progress(audit=audit, done=done, total=total)

    try:
        pin = pinned(version)
        report = audit_domain(slug=pin.slug, verifier=pin.verifier_spec, source=pin.source, family=pin.family, verify_many=verify_path(pin), progress=progress)
        services.verifier_audit_record(audit=audit, report=report.to_dict())
    except Exception:  # noqa: BLE001 - a crashed audit is a failed audit with its reason (time limits included)
        error = traceback.format_exc()
        log.error("verifier audit %s of %s failed:\n%s", audit_id, version, error)
        services.verifier_audit_record(audit=audit, error=error)
    audit.refresh_from_db(fields=["status"])
    return audit.status
