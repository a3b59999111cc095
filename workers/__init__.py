"""Celery workers, the run driver and the sandbox runtime. The Celery app is ``workers.celery``."""
