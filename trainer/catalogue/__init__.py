"""The domain catalogue: every domain the trainer knows, by slug.

A domain is a task source plus a verifier (DESIGN.md). The modules of ``CATALOGUE_MODULES``
define them: every reasoning-gym generator (``rg-*``), HumanEval (``code-humaneval``), generated
math (``math-*``), document analysis over generated financial statements (``doc-*``), multi-step
tool use (``tool-*``), long annual reports read through tools (``filing-*``), software-engineering tasks in a
repository (``swe-*``), shell tasks in a bash session (``shell-*``), bugs injected into real PyPI packages (``swe-pkg-*``), function calling from the Berkeley Function Calling Leaderboard
(``bfcl-*``) and its multi-turn conversations over stateful simulators (``bfcl-multi-*``), 3D modelling checked by geometry (``cad-*``), text games
scored by the game (``game-*``) and the built-ins of :mod:`trainer.catalogue.builtin`. Importing this package is
cheap: :func:`all_domains` (or :func:`get`) loads the catalogue modules on first use. JSONL
uploads are parsed by :mod:`trainer.catalogue.jsonl` and registered by whoever runs them.
The control plane's ``domains sync`` turns these specs into Domain rows.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.catalogue.jsonl import UploadedSource
from trainer.outcomes import Verification
from trainer.tasks.base import Task, TaskSource
from trainer.verifiers.cascade import Cascade, compile_cascade
from trainer.verifiers.context import NO_CONTEXT, VerifyContext

CATALOGUE_MODULES: list[str] = [
    "trainer.catalogue.builtin",  # addition, reversal, parity
    "trainer.catalogue.reasoning_gym_domains",
    "trainer.catalogue.humaneval",
    "trainer.catalogue.math_gen",
    "trainer.catalogue.documents",
    "trainer.catalogue.tool_use",
    "trainer.catalogue.filings",
    "trainer.families.swe.catalogue",
    "trainer.catalogue.bfcl",
    "trainer.catalogue.cad",
    "trainer.catalogue.textgames",
    "trainer.catalogue.bfcl_multi",
    "trainer.families.shell.catalogue",
    "trainer.families.pkgs.catalogue",
]
"""The modules that define domains, in the catalogue's order; each registers its domains when
imported or in its ``register_all()``."""


@dataclass(frozen=True)
class DomainSpec:
    """Everything the trainer and the control plane need to know about one domain: as this code
    defines it (``version`` 0), or as a run pins a control-plane version of it (:func:`pinned`)."""

    slug: str
    """Unique, URL-safe name, e.g. ``builtin-addition`` or ``rg-basic_arithmetic``."""
    title: str
    """Human-readable name."""
    kind: str
    """One of: math, code, reasoning, document, tool_use, text, other."""
    family: str
    """Task-source family, e.g. ``builtin``, ``reasoning_gym``, ``humaneval``."""
    source: TaskSource
    """Draws tasks for this domain."""
    verifier_spec: dict[str, Any]
    """The domain's verifier, held once as data (``{"stages": [...]}``): the control plane stores
    it, and :meth:`cascade` compiles it (bound to a verify context) wherever it runs."""
    description: str = ""
    """What the domain asks of the model."""
    task_source_spec: dict[str, Any] = field(default_factory=dict)
    """The task source as data (family, generator name, level mapping)."""
    environment: Callable[[Task], Any] | None = None
    """Multi-turn domains: builds a ``trainer.environments.Environment`` per episode (None: single turn)."""
    version: int = 0
    """The control plane's version of the domain a run pinned (0: the domain as this code defines it)."""

    def __post_init__(self) -> None:
        self._compiled  # a spec that does not compile is refused where the domain is defined (CascadeError)

    @functools.cached_property
    def _compiled(self) -> Cascade:
        return compile_cascade(self.verifier_spec, NO_CONTEXT)

    def cascade(self, context: VerifyContext | None = None) -> Cascade:
        """The verifier compiled (once a spec) and bound to ``context``: the sandbox and judges its
        stages use (none: such a stage reports its infrastructure outcome, masked)."""
        return self._compiled if context is None else dataclasses.replace(self._compiled, context=context)

    def verify(self, completion: str, task: Task, *, context: VerifyContext | None = None, **run: Any) -> Verification:
        """Verify ``completion`` for ``task`` with the domain's cascade bound to ``context``
        (``run``: the cascade's ``isolation`` and ``pool``)."""
        return self.cascade(context)(completion, task, **run)

    @property
    def is_upload(self) -> bool:
        """True for a domain defined by uploaded tasks (JSONL: its tasks are its pin's)."""
        return self.task_source_spec.get("family") == UPLOAD_FAMILY


UPLOAD_FAMILY = "jsonl"
"""The family of domains defined by uploaded tasks."""


def pinned(slug: str, version: int, snapshot: dict[str, Any]) -> DomainSpec:
    """The domain as a control-plane version pins it (``snapshot``: the version's title, kind,
    family, verifier and task source): an upload's tasks are the snapshot's, a code domain's task
    source and environment are this catalogue's. ValueError names the slug when there is neither;
    a verifier that does not compile is a CascadeError."""
    missing = [k for k in ("title", "kind", "verifier") if k not in snapshot]
    if missing:
        raise ValueError(f"domain {slug!r}: the pinned version has no {', '.join(missing)}")
    task_source = snapshot.get("task_source") or {}
    environment = None
    coded = code_domains().get(slug)
    if task_source.get("family") == UPLOAD_FAMILY:
        if coded is not None:
            raise ValueError(f"domain {slug!r}: an upload may not take the slug of a domain the code defines")
        source: TaskSource = UploadedSource(slug, _uploaded_tasks(slug, task_source.get("tasks")))
    elif coded is None:
        raise ValueError(f"domain {slug!r}: no task source (not in the trainer's catalogue and not an upload)")
    else:
        source, environment = coded.source, coded.environment
    return DomainSpec(slug=slug, title=snapshot["title"], kind=snapshot["kind"], source=source,
                      family=snapshot.get("family") or task_source.get("family", ""),
                      verifier_spec=snapshot["verifier"], description=snapshot.get("description", ""),
                      task_source_spec=task_source, environment=environment, version=version)


def _uploaded_tasks(slug: str, rows: Any) -> list[Task]:
    """An upload's tasks as its pin holds them; ValueError names the first that is not one."""
    if not rows:
        raise ValueError(f"domain {slug!r}: the upload holds no tasks")
    tasks = []
    for i, row in enumerate(rows):
        try:
            tasks.append(Task(**row))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"domain {slug!r}: uploaded task {i} is not a task ({exc})") from None
    return tasks


_DOMAINS: dict[str, DomainSpec] = {}
_DATA_DEFINED: set[str] = set()
"""Slugs of the domains a process registered from data (uploads a run pins), not from code."""
_loaded = False
_loading = False
_load_lock = threading.RLock()


def register(spec: DomainSpec, *, replace: bool = False, data: bool = False) -> DomainSpec:
    """Add a domain; registering the same slug twice with a different spec is an error unless
    ``replace`` (domains defined by data, such as uploads, are re-registered when they change).
    ``data`` marks a domain defined by data: it is in :func:`all_domains`, not in
    :func:`code_domains`."""
    existing = _DOMAINS.get(spec.slug)
    if existing is not None and existing is not spec and not replace:
        raise ValueError(f"domain {spec.slug!r} is registered twice")
    if data and existing is not None and spec.slug not in _DATA_DEFINED:
        raise ValueError(f"domain {spec.slug!r} is defined by the code: data may not replace it")
    _DOMAINS[spec.slug] = spec
    if data:
        _DATA_DEFINED.add(spec.slug)
    else:
        _DATA_DEFINED.discard(spec.slug)
    return spec


def unregister(slug: str) -> None:
    """Forget a domain (tests and data-defined domains); unknown slugs are ignored."""
    _DOMAINS.pop(slug, None)
    _DATA_DEFINED.discard(slug)


def _load_catalogue() -> None:
    global _loaded, _loading
    with _load_lock:
        if _loaded or _loading:  # (a catalogue module asking while it loads sees what is there)
            return
        _loading = True
        try:
            _load_modules()
            _loaded = True
        finally:
            _loading = False


def _load_modules() -> None:
    for name in CATALOGUE_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register_all"):
            module.register_all()


def all_domains() -> dict[str, DomainSpec]:
    """Every registered domain, by slug."""
    _load_catalogue()
    return dict(_DOMAINS)


def code_domains() -> dict[str, DomainSpec]:
    """The domains this code base defines (what ``manage.py domains sync`` stores), without the
    ones this process registered from data: an upload a run pinned is the database's already."""
    return {slug: spec for slug, spec in all_domains().items() if slug not in _DATA_DEFINED}


def get(slug: str) -> DomainSpec:
    """The domain with this slug; KeyError names the slug when there is none."""
    domains = all_domains()
    try:
        return domains[slug]
    except KeyError:
        raise KeyError(f"unknown domain {slug!r}") from None
