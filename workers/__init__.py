"""Temper workers: Celery app, tasks, run driver and the sandbox runtime."""
