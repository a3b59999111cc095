"""What the run driver and the evaluation worker share: the trainer learning a run's uploaded
domains as they were pinned, and the name this worker goes by."""
from __future__ import annotations

import socket

from celery import current_task

from trainer import catalogue
from trainer.catalogue import DomainSpec


def register_data_domains(pins: list[DomainSpec]) -> None:
    """Domains defined by data (JSONL uploads) join the trainer's catalogue, as pinned."""
    for pin in pins:
        if pin.is_upload:
            catalogue.register(pin, replace=True, data=True)


def worker_name() -> str:
    """The Celery worker's hostname when running as a task, else ``local@<host>``."""
    request = getattr(current_task, "request", None)
    return getattr(request, "hostname", None) or f"local@{socket.gethostname()}"
