"""Temper's RL post-training library.

Usable without Django: ``python -m trainer run CONFIG.yaml`` runs a whole job.
Nothing in this package may import ``django``, ``controlplane`` or ``workers``.
"""
