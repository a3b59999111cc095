"""Temper's RL post-training library.

Usable without Django: ``python -m trainer run CONFIG.yaml`` runs a whole job.
Nothing in this package may import ``django``, ``controlplane`` or ``workers``.
"""

from trainer import pyast as _pyast

_pyast.install()  # ast.parse under one lock: CPython < 3.13 fails parses made in parallel threads
