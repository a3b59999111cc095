"""Model references: how a team names a model, turned into what a loader is given, or refused.

A run's ``base_model``, its ``config.model.reference_path`` and ``config.tokenizer.path``, and a
local judge's ``model`` are *references*, checked here in one place (by the web when they are
saved, and again by the worker before it loads anything):

- ``registry:<version>``: a model registry version of the same team, by id (``registry:18``, the
  ``v18`` of ``var/registry/v18``), name (``registry:tiny@12/40``, a base ``registry:tiny``) or
  alias (``registry:tiny:production``). Another team's version reads exactly like a missing one.
- ``base:<name>``: a base model a platform admin registered for every team (registry
  ``BaseModel``); its directory is the one registered, checked again (outside the server's storage,
  holding the files the loader needs) each time it is named. A team's registry version of such a
  base (``registry:<name>``) resolves through it.
- a directory under one of the allow-listed roots (``TEMPER_MODEL_DIRS``), checked *after*
  ``~`` is expanded and every symlink and ``..`` is resolved, so neither climbs out of a root.
  The server's own storage (checkpoints, registry copies, exports under ``TEMPER_VAR_DIR``) is
  never reachable as a raw path, even under an allowed root: a team reaches its checkpoints and
  versions by registry name, which checks the team.
- a hub id (``org/name`` or ``name``), passed on as it is, as before: unless a directory of that
  name exists where the loader would look (transformers loads a local directory before asking the
  hub), in which case it is a path and the rule above applies.

The registry app answers ``registry:`` and ``base:`` references through :data:`registry_version_wanted`
and :data:`base_model_wanted`
(connected in its AppConfig.ready), so this module and the apps that import it (runs, review)
never import the registry, which imports them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.dispatch import Signal

from controlplane.common.storage import store_dir

REGISTRY_PREFIX = "registry:"
BASE_PREFIX = "base:"
STORAGE_DIRS = ("checkpoints", "registry", "exports")
"""Folders of the store (``TEMPER_STORE``, else ``TEMPER_VAR_DIR``) holding teams' trained weights:
reached only by registry name."""

HUB_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?(?:/[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)?$")
"""What a hub id looks like: ``name`` or ``org/name``; no ``..``, no leading ``/``, ``.`` or ``~``."""

base_model_wanted = Signal()
"""Sent (``sender=None, name=...``) to resolve ``base:<name>``: a receiver returns the registered
base model's directory, else None."""

registry_version_wanted = Signal()
"""Sent (``sender=None, name=..., team_id=...``) to resolve ``registry:<name>``: a receiver
returns a :class:`RegistryHit` for that version when team ``team_id`` may use it, else None."""


@dataclass(frozen=True)
class RegistryHit:
    """Where a registry version's files are, as the registry answers for one team."""

    path: str
    stored: bool
    """The registry's own copy of the version or its checkpoint's directory, in the server's
    storage; False for a base model's version, whose path is the base's own directory or hub id
    (held to the same rules as that reference given directly)."""


class ModelRefused(Exception):
    """A reference that names no model this team may load; the message says why, in words that
    do not tell another team's objects from missing ones."""


@dataclass(frozen=True)
class ModelRef:
    """A reference as given, what it is, and what the loader is given for it."""

    ref: str
    kind: str
    """``registry``, ``base``, ``dir`` or ``hub``."""
    path: str
    """The real directory (symlinks resolved) for ``registry`` and ``dir``; the id for ``hub``."""


def model_dirs() -> list[Path]:
    """The allow-listed roots, each with its symlinks resolved."""
    return [Path(os.path.realpath(os.path.expanduser(str(d)))) for d in settings.TEMPER_MODEL_DIRS]


def storage_dirs() -> list[Path]:
    """The server's storage folders, in the shared store (``TEMPER_STORE``) and in
    ``TEMPER_VAR_DIR`` (where they were before a store was configured)."""
    roots = {Path(os.path.realpath(store_dir())), Path(os.path.realpath(settings.VAR_DIR))}
    return [root / name for root in sorted(roots) for name in STORAGE_DIRS]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def is_path_like(ref: str) -> bool:
    """Whether ``ref`` is a file system path rather than a hub id: anything not shaped like one,
    or shaped like one but naming a directory the loader would find first.

    >>> [is_path_like(r) for r in ("Qwen/Qwen2-0.5B", "gpt2", "/srv/m", "a/../b", "~/m", "a/b/c", "./m")]
    [False, False, True, True, True, True, True]
    """
    return not HUB_ID.fullmatch(ref) or ".." in ref or os.path.exists(ref)


def _refused_path(ref: str) -> ModelRefused:
    roots = ", ".join(str(r) for r in model_dirs()) or "none configured"
    return ModelRefused(f"model directory {ref!r} not found under the allowed model directories ({roots}); "
                        f"a registry version is named {REGISTRY_PREFIX}<id or name>")


def confine_path(ref: str) -> Path:
    """The real directory ``ref`` names, when it lies under an allowed root and outside the
    server's storage; else :class:`ModelRefused` (the same words whether or not it exists)."""
    real = Path(os.path.realpath(os.path.expanduser(ref)))
    if any(_inside(real, s) for s in storage_dirs()) or not any(_inside(real, r) for r in model_dirs()):
        raise _refused_path(ref)
    return real


def resolve_model(ref: str, *, team_id: int | None, needs: str = "config.json") -> ModelRef:
    """What ``ref`` names for team ``team_id``, or :class:`ModelRefused`.

    ``needs`` is the file a directory must hold (``config.json`` for a model; empty for a
    tokenizer directory, which only has to be a directory).
    """
    ref = ref.strip()
    if not ref:
        raise ModelRefused("must name a model (an empty string leaves an optional one unset)")
    if not _nameable(ref):
        raise ModelRefused("not a model name or path: it holds a NUL or a character no file name can hold")
    if ref.startswith(BASE_PREFIX):
        name = ref[len(BASE_PREFIX):].strip()
        paths = [path for _, path in base_model_wanted.send(sender=None, name=name) if path]
        if not name or not paths:
            raise ModelRefused(f"base model {name!r} not found (GET /api/registry/base-models lists them)")
        real = Path(os.path.realpath(paths[0]))
        if any(_inside(real, s) for s in storage_dirs()):
            raise ModelRefused(f"base model {name!r} points into the server's storage; a platform admin must register it again")
        _check_files(ref, real, needs)
        return ModelRef(ref, "base", str(real))
    if ref.startswith(REGISTRY_PREFIX):
        name = ref[len(REGISTRY_PREFIX):].strip()
        hits = [hit for _, hit in registry_version_wanted.send(sender=None, name=name, team_id=team_id) if hit]
        if not name or not hits:
            raise ModelRefused(f"model version {name!r} not found")
        hit = hits[0]
        if hit.path.startswith(BASE_PREFIX):  # the team's version of a registered base model
            return ModelRef(ref, "registry", resolve_model(hit.path, team_id=team_id, needs=needs).path)
        real = Path(os.path.realpath(hit.path))
        if not hit.stored or not any(_inside(real, s) for s in storage_dirs()):
            if not is_path_like(hit.path):
                return ModelRef(ref, "registry", hit.path)
            real = confine_path(hit.path)
        _check_files(ref, real, needs)
        return ModelRef(ref, "registry", str(real))
    if not is_path_like(ref):
        return ModelRef(ref, "hub", ref)
    real = confine_path(ref)
    _check_files(ref, real, needs)
    return ModelRef(ref, "dir", str(real))


def _nameable(ref: str) -> bool:
    r"""Whether the file system can be asked about ``ref`` at all: no NUL, and text that UTF-8 can
    encode (no lone surrogate), as every name stored with a run must be.

    >>> _nameable("/srv/m"), _nameable("/srv/m\x00"), _nameable("\ud800")
    (True, False, False)
    """
    try:
        ref.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in ref


def _check_files(ref: str, real: Path, needs: str) -> None:
    if needs and not (real / needs).is_file():
        raise ModelRefused(f"no model at {ref} (expected a directory with {needs})")
    if not needs and not real.is_dir():
        raise ModelRefused(f"no directory at {ref}")


CONFIG_REFS = (("model.reference_path", "config.json"), ("tokenizer.path", ""))
"""The settings of a run's trainer config that name a model or tokenizer directory, with the file
each needs (the base model is the run's own ``base_model`` field)."""


def config_refs(config: object) -> list[tuple[str, str, str]]:
    """``(dotted path, reference, needs)`` for each model reference set in a trainer config dict
    (an empty string is unset; a blank one is a reference, refused: the trainer would load it)."""
    out = []
    for path, needs in CONFIG_REFS:
        value: object = config
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            out.append((path, value, needs))
    return out
