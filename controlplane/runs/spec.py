"""A run's specification: one frozen value from the API body or the stored run to the trainer.

A run's settings used to travel as dicts, and the mapping from a run to the trainer's config was
written twice (once for a body the API checks against its team's ceilings, once for the stored run
a worker starts). :class:`RunSpec` is built only by :meth:`RunSpec.from_body` (a body that passed
the run schema) or :meth:`RunSpec.from_run` (a stored run and its domains), and
:meth:`RunSpec.trainer_config` is the one mapping: the run's ``config`` section, a run's defaults
(``RUN_DEFAULTS``), and every setting the run owns (``RUN_OWNED``) from its source.

>>> spec = RunSpec.from_body({"name": " r ", "base_model": "tiny", "domains": [{"slug": "add", "weight": 2}],
...                           "budget": {"steps": 7}, "config": {"rollout": {"n": 4}}})
>>> spec.value("staleness"), spec.value("budget.wall_s"), spec.name
(0, None, 'r')
>>> cfg = spec.trainer_config()
>>> cfg["rollout"], cfg["limits"], cfg["domains"]
({'n': 4, 'staleness': 0, 'autoscale': 'off'}, {'max_steps': 7, 'max_wall_s': 0.0}, {'add': 2.0})
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from controlplane.domains.policy import capped_shares
from controlplane.runs.cost import parse_amount
from controlplane.runs.schemas import MAX_MEMBER_PRIORITY, body_field, owned_fields
from trainer import run_fields
from trainer.config import has_path, put_path
from trainer.run_fields import RUN_DEFAULTS
from trainer.config_schema import config_setting

COLUMNS: dict[str, str] = {"staleness": "staleness", "budget.steps": "budget_steps", "budget.wall_s": "budget_seconds"}
"""The ``Run`` columns of the run fields that have one (the scheduler, the pages and the alerts
query them); every other run field that fills a trainer setting is kept in ``Run.owned``."""


def _amount(value: Any) -> Decimal | None:
    """A money field of a body that passed the run schema, as a Decimal (None stays None)."""
    return None if value is None else parse_amount(value, positive=True)


def _paths() -> dict[str, str]:
    """Each run-owned setting's path by its source (``budget.steps`` -> ``limits.max_steps``)."""
    return {o.source: o.path for o in run_fields.RUN_OWNED}


def owned_values(run) -> dict[str, Any]:
    """Each run field that fills a trainer setting (``owned_fields``) of a stored ``run``, by its
    source: from its column, else from ``Run.owned`` (None where the run predates it)."""
    return {source: getattr(run, COLUMNS[source]) if source in COLUMNS else (run.owned or {}).get(source)
            for source in owned_fields()}


@dataclass(frozen=True)
class RunSpec:
    """What a run asks for, typed and frozen (its ``config`` is kept as JSON text: read
    :attr:`config` for a copy)."""

    name: str
    base_model: str
    domains: tuple[tuple[str, float], ...]
    """``(slug, weight)`` in slug order (a stored run's domain rows are kept in that order, so a
    body and the run saved from it give the same spec and the trainer the same domain order)."""
    config_json: str
    owned: tuple[tuple[str, Any], ...]
    """``(source, value)`` of each run field that fills a trainer setting (``owned_fields``); None
    is the setting's default."""
    budget_tokens: int | None = None
    budget_cost: Decimal | None = None
    """The money budget (``budget.cost``), in TEMPER_CURRENCY."""
    priority: int = MAX_MEMBER_PRIORITY
    gpus: int = 0

    @classmethod
    def from_body(cls, data: dict[str, Any]) -> RunSpec:
        """The spec of a run body that passed ``run_schema_errors`` (a field left out takes its
        schema's default)."""
        return cls(name=(data.get("name") or "").strip(), base_model=(data.get("base_model") or "").strip(),
                   domains=tuple(sorted((d["slug"], float(d["weight"])) for d in data.get("domains") or [])),
                   config_json=json.dumps(data.get("config") or {}, sort_keys=True),
                   owned=tuple((source, body_field(data, source) if body_field(data, source) is not None else schema.get("default"))
                               for source, schema in owned_fields().items()),
                   budget_tokens=(data.get("budget") or {}).get("tokens"),
                   budget_cost=_amount((data.get("budget") or {}).get("cost")),
                   priority=data.get("priority", MAX_MEMBER_PRIORITY), gpus=data.get("gpus", 0))

    @classmethod
    def from_run(cls, run, domains) -> RunSpec:
        """The spec of a stored ``run`` with its ``domains`` (``RunDomain`` rows)."""
        return cls(name=run.name, base_model=run.base_model,
                   domains=tuple((rd.domain.slug, float(rd.weight)) for rd in domains),
                   config_json=json.dumps(run.config if isinstance(run.config, dict) else {}, sort_keys=True),
                   owned=tuple(owned_values(run).items()),
                   budget_tokens=run.budget_tokens, budget_cost=run.budget_cost, priority=run.priority, gpus=run.gpus)

    @property
    def config(self) -> dict[str, Any]:
        """The run's ``config`` section (a copy)."""
        return json.loads(self.config_json)

    def value(self, source: str) -> Any:
        """The run field ``source`` (``staleness``, ``budget.steps``) that fills a trainer setting."""
        return dict(self.owned)[source]

    def columns(self) -> dict[str, Any]:
        """The ``Run`` model's fields for this spec (the domains are rows of their own)."""
        return {"name": self.name, "base_model": self.base_model, "config": self.config,
                **{COLUMNS[source]: value for source, value in self.owned if source in COLUMNS},
                "owned": {source: value for source, value in self.owned if source not in COLUMNS},
                "budget_tokens": self.budget_tokens, "budget_cost": self.budget_cost, "priority": self.priority, "gpus": self.gpus}

    def body(self) -> dict[str, Any]:
        """The run fields that fill trainer settings as a run body has them (``budget.steps``
        inside ``budget``): what the API shows and a clone starts from."""
        out: dict[str, Any] = {}
        for source, value in self.owned:
            put_path(out, source, value)
        return out

    def trainer_config(self, *, run_id: int | None = None, storage: str | None = None,
                       caps: dict[str, float] | None = None) -> dict[str, Any]:
        """The trainer config this run asks for: its config section, a run's defaults for the
        settings it leaves out, and each setting the run owns from its source: the base model,
        the domains' weights (as shares capped by the domains' ``max_share`` quotas, when ``caps``
        is given), each run field (one left out, or null where its schema allows it, is the
        setting's default: ``budget.wall_s`` null is the trainer's 0, no limit), and, given the run's id and
        checkpoint ``storage``, the assigned ones (else they keep the trainer's defaults)."""
        cfg = copy.deepcopy(self.config)
        for path, value in RUN_DEFAULTS.items():
            if not has_path(cfg, path):
                put_path(cfg, path, value)
        weights = dict(self.domains)
        sources = {"base_model": self.base_model,
                   "domains": capped_shares(weights, caps) if caps is not None else weights or None,
                   "id": f"run-{run_id}" if run_id is not None else None, "storage": storage}
        paths = _paths()
        for source, value in self.owned:
            sources[source] = value if value is not None else config_setting(paths[source]).default
        for owned in run_fields.RUN_OWNED:
            if sources.get(owned.source) is not None:
                put_path(cfg, owned.path, copy.deepcopy(sources[owned.source]))
        return cfg
