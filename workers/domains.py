"""What the run driver and the evaluation worker share: the trainer learning a run's uploaded
domains as they were pinned, and the name this worker goes by."""
from __future__ import annotations

import socket

from celery import current_task

from controlplane.domains.pins import PinnedDomain
from trainer import catalogue
from trainer.catalogue.jsonl import UploadedSource
from trainer.tasks.base import Task


def register_data_domains(pins: list[PinnedDomain]) -> None:
    """Domains defined by data (JSONL uploads) join the trainer's catalogue, as pinned."""

    for pin in pins:
        if not pin.is_upload:
            continue
        tasks = [Task(**t) for t in pin.task_source.get("tasks", [])]
        catalogue.register(catalogue.DomainSpec(
            slug=pin.slug, title=pin.title, kind=pin.kind, family="jsonl",
            source=UploadedSource(pin.slug, tasks), verifier_spec=pin.verifier, task_source_spec={"family": "jsonl"},
        ), replace=True, data=True)


def worker_name() -> str:
    """The Celery worker's hostname when running as a task, else ``local@<host>``."""
    request = getattr(current_task, "request", None)
    return getattr(request, "hostname", None) or f"local@{socket.gethostname()}"
