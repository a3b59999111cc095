"""A team's ceilings on its runs' settings and sizes, below the trainer's own bounds.

Every numeric setting of :class:`~trainer.config.TrainerConfig` has a global bound (``_num(...,
le=...)``) and every product of settings one of :data:`~trainer.config.SIZES`; a team's quota may
name any of them with a lower ceiling (``TeamQuota.ceilings``). :func:`ceiling_map_errors` checks
such a map when it is set, :func:`ceiling_errors` a config against it when a run is validated and
again when a worker starts it (controlplane/runs/ceilings.py).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from trainer.config import TrainerConfig, bound_errors, number_text
from trainer.sizes import SIZES


UNBOUNDED_AT_ZERO = frozenset({"limits.max_wall_s", "optimizer.max_grad_norm"})
"""Settings whose 0 means no bound at all ("no limit", "no clipping"): under a team's ceiling, 0
is above it. Otherwise a run escapes a wall-time ceiling by leaving its ``budget.wall_s`` out."""


def numeric_settings() -> dict[str, dict[str, float]]:
    """Every int or float setting of :class:`TrainerConfig` by dotted path, with its bounds."""
    out: dict[str, dict[str, float]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
            elif hints[f.name] in (int, float):
                out[f"{prefix}{f.name}"] = dict(f.metadata.get("bounds", {}))
    walk(TrainerConfig, "")
    return out


def _get_path(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def ceiling_map_errors(ceilings: Any, prefix: str = "ceilings") -> list[tuple[str, str]]:
    """What is wrong with a map of ceilings ``{setting path or size name: ceiling}``: each key a
    numeric setting (:func:`numeric_settings`) or a :data:`SIZES` name, each value a number that
    the setting itself allows (a ceiling is never above the global bound).

    >>> ceiling_map_errors({"rollout.n": 64, "tokens_per_step": 1e6})
    []
    >>> ceiling_map_errors({"rollout.n": 4096, "rollout.engine": 1, "rollout.top_p": float("nan")})
    [('ceilings.rollout.n', 'must be at most 1024'), ('ceilings.rollout.engine', 'not a numeric setting or a size (e.g. rollout.n, sequences_per_step)'), ('ceilings.rollout.top_p', 'must be a finite number')]
    """
    if not isinstance(ceilings, dict):
        return [(prefix, "must be an object of setting path to ceiling")]
    settings = numeric_settings()
    sizes = {s.name: s for s in SIZES}
    errors: list[tuple[str, str]] = []
    for key, value in ceilings.items():
        path = f"{prefix}.{key}"
        if key not in settings and key not in sizes:
            errors.append((path, "not a numeric setting or a size (e.g. rollout.n, sequences_per_step)"))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append((path, "must be a number"))
        elif key in sizes:
            errors.extend((path, msg) for msg in bound_errors(value, {"ge": 1, "le": sizes[key].bound}))
        else:
            errors.extend((path, msg) for msg in bound_errors(value, settings[key]))
    return errors


def ceiling_errors(cfg: TrainerConfig, ceilings: dict[str, float], whose: str) -> list[tuple[str, str]]:
    """Every setting or size of ``cfg`` above its ceiling in ``ceilings`` (a map that
    :func:`ceiling_map_errors` accepts), as ``(path, message)``; ``whose`` names the ceilings'
    owner in the message (``"team acme (team ceiling)"``).

    >>> from trainer.config import load_config
    >>> cfg = load_config({"rollout": {"n": 64, "prompts_per_step": 16}})
    >>> ceiling_errors(cfg, {"rollout.n": 32, "sequences_per_step": 512}, "team acme (team ceiling)")
    [('rollout.n', 'is 64; at most 32 for team acme (team ceiling)'), ('rollout.prompts_per_step', 'times rollout.n is 1024 sequences per step; at most 512 for team acme (team ceiling)')]
    """
    sizes = {s.name: s for s in SIZES}
    errors: list[tuple[str, str]] = []
    # In the order the settings are declared, then the sizes; a key of no setting (one removed
    # since the ceiling was set) bounds nothing.
    order = [k for k in numeric_settings() if k in ceilings] + [k for k in sizes if k in ceilings]
    for key in order:
        ceiling = ceilings[key]
        if key in sizes:
            value, how = sizes[key].value(cfg)
            if value > ceiling:
                errors.append((sizes[key].path, f"{how} is {value} {key.replace('_', ' ')}; at most {number_text(ceiling)} for {whose}"))
        else:
            value = _get_path(cfg, key)
            if key in UNBOUNDED_AT_ZERO and value == 0:
                errors.append((key, f"is 0 (no limit); at most {number_text(ceiling)} for {whose}"))
            elif value > ceiling:
                errors.append((key, f"is {number_text(value)}; at most {number_text(ceiling)} for {whose}"))
    return errors
