"""The store: where run checkpoints (``checkpoints/run-<id>/step-<n>``), registry versions
(``registry/``) and exports (``exports/``) live.

``TEMPER_STORE`` names a directory that every host's workers and web processes read and write at
the same absolute path (an NFS, CephFS or Lustre mount, or a bind mount of one): a run checkpointed
by a driver on one host resumes on another, and a registry version made on one is evaluated or
exported on another. Unset, the store is ``TEMPER_VAR_DIR`` (everything on one host).
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings


def store_dir() -> Path:
    """The store's root: ``TEMPER_STORE``, else ``TEMPER_VAR_DIR``."""
    return Path(settings.TEMPER_STORE or settings.VAR_DIR)
