"""What the pages show, assembled from the apps' selectors (reads only; writes go through the API)."""
from __future__ import annotations

import json
import math
import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Exists, ExpressionWrapper, F, FloatField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Greatest
from django.utils import timezone

from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.domains import selectors as domain_selectors
from controlplane.domains.models import DomainKind, DomainVersion
from controlplane.domains.selectors import domain_list
from controlplane.registry.models import BaseModel
from controlplane.runs.cost import amount_text
from controlplane.runs.models import MetricPoint, Run, RunState, RunTag
from controlplane.runs.schemas import owned_fields, run_config_schema
from controlplane.runs.spec import RunSpec, owned_values
from trainer import run_fields
from controlplane.scheduling.models import ResourcePool, TeamQuota, WorkerHeartbeat
from controlplane.scheduling.selectors import lanes_view, scheduler_status
from controlplane.scheduling.services import DEFAULT_CPU_SLOTS
from trainer.run_fields import RUN_DEFAULTS
from trainer.config_schema import config_settings
from trainer.outcomes import OUTCOME_VALUES

OUTCOME_ORDER = list(OUTCOME_VALUES)
DOMAIN_KINDS = [(k.value, k.label) for k in DomainKind]

DOMAIN_COLUMNS = ("kind", "family", "owner", "version", "priority", "sandboxes", "max_share")
"""The domains page's optional columns: each is shown only where its values differ among the rows."""


def _domain_value(d, column: str):
    return {"kind": d.kind, "family": d.family, "owner": d.team_id, "version": d.version, "priority": d.priority,
            "sandboxes": d.max_concurrent_sandboxes, "max_share": d.max_share}[column]


def domain_value_text(d, column: str) -> str:
    """A column's value as the page writes it."""
    if column == "owner":
        return f"team {d.team.slug}" if d.team_id else "catalogue"
    if column == "version":
        return f"v{d.version}"
    return str(_domain_value(d, column) or "none")


def varying_domain_columns(domains) -> list[str]:
    """The optional columns whose values are not the same in every row (all of them for one row
    or none, so a lone domain still shows what it is).

    >>> from types import SimpleNamespace as D
    >>> rows = [D(kind="math", family="", team_id=None, version=1, priority=50, max_concurrent_sandboxes=4, max_share=1.0),
    ...         D(kind="code", family="", team_id=None, version=2, priority=50, max_concurrent_sandboxes=4, max_share=1.0)]
    >>> varying_domain_columns(rows)
    ['kind', 'version']
    """
    if len(domains) < 2:
        return list(DOMAIN_COLUMNS)
    return [c for c in DOMAIN_COLUMNS if len({_domain_value(d, c) for d in domains}) > 1]
FORM_FIRST = ("algorithm", "rollout")
"""Trainer config sections the run form shows first (and open); the others follow in the order the
trainer declares them."""


def run_form_fields() -> list[dict[str, Any]]:
    """The run form's fields that fill trainer settings, one per run field (``staleness``,
    ``budget.steps``), from the trainer's run-owned list: each field's name, label, the setting it
    fills, its group (``budget`` for ``budget.steps``; "" for a field of the run itself) and its
    JSON Schema (default, bounds, help). The form renders each in its group's row.

    >>> [(f["name"], f["label"], f["group"], f["kind"]) for f in run_form_fields()]
    [('staleness', 'Staleness', '', 'integer'), ('autoscale', 'Autoscale', '', 'enum'), ('budget.steps', 'Budget: steps', 'budget', 'integer'), ('budget.wall_s', 'Budget: wall seconds', 'budget', 'number')]
    """
    paths = {o.source: o.path for o in run_fields.RUN_OWNED}
    out = []
    for name, schema in owned_fields().items():
        group, _, leaf = name.rpartition(".")
        words = leaf.removesuffix("_s").replace("_", " ") + (" seconds" if leaf.endswith("_s") else "")
        label = f"{group.replace('_', ' ').capitalize()}: {words}" if group else words[:1].upper() + words[1:]
        types = set(schema["type"]) if isinstance(schema.get("type"), list) else {schema.get("type")}
        kind = ("enum" if "enum" in schema else "boolean" if "boolean" in types
                else "integer" if "integer" in types else "number" if "number" in types else "string")
        out.append({"name": name, "label": label, "group": group, "setting": paths[name], "kind": kind,
                    "testid": name.replace(".", "-").replace("_", "-"), "schema": schema,
                    "enum_json": json.dumps(schema.get("enum", []))})
    return out


def run_field_values(run: Run) -> list[tuple[str, Any]]:
    """``(label, value)`` of each run field of ``run`` that fills a trainer setting (a run page's
    summary line); a null value reads "no limit"."""
    values = owned_values(run)
    return [(f["label"].lower(), "no limit" if values.get(f["name"]) is None else values[f["name"]]) for f in run_form_fields()]


def run_form_groups(fields: list[dict[str, Any]]) -> list[str]:
    """The groups of :func:`run_form_fields` with a row of their own after the run's and the
    budget's rows, in their order."""
    return [g for g in dict.fromkeys(f["group"] for f in fields) if g not in ("", "budget")]


RUN_SORTS: dict[str, tuple[str, list[Any]]] = {
    "-created": ("newest first", ["-created_at", "-id"]),
    "created": ("oldest first", ["created_at", "id"]),
    "name": ("name", ["name", "-id"]),
    "-reward": ("latest reward, highest first", [F("latest_reward").desc(nulls_last=True), "-id"]),
    "reward": ("latest reward, lowest first", [F("latest_reward").asc(nulls_last=True), "-id"]),
    "-progress": ("progress, furthest first", [F("progress").desc(), "-id"]),
    "-priority": ("priority, highest first", ["-priority", "-id"]),
}
"""How the runs list can be sorted: query value -> (label, ordering)."""


def runs_for_list(runs: QuerySet[Run], *, q: str = "", sort: str = "-created", limit: int = 100) -> list[Run]:
    """The runs list: searched by name, base model, tag or ``#id`` / id, sorted by ``RUN_SORTS[sort]``,
    each with ``latest_reward``."""
    if q:
        ident = q.lstrip("#")
        match = Q(name__icontains=q) | Q(base_model__icontains=q) | Exists(RunTag.objects.filter(run=OuterRef("pk"), name=q.lower()))
        if ident.isdigit() and len(ident) < 12:
            match |= Q(pk=int(ident))
        runs = runs.filter(match)
    latest = MetricPoint.objects.filter(run=OuterRef("pk"), key="reward/mean").order_by("-step").values("value")[:1]
    runs = runs.annotate(latest_reward=Subquery(latest),
                         progress=ExpressionWrapper(F("current_step") * 1.0 / Greatest(F("budget_steps"), 1), output_field=FloatField()))
    return list(runs.order_by(*RUN_SORTS[sort][1])[:limit])


SPARK_STEPS = 40
"""The last this many steps of a run draw its sparklines on the runs list."""

SPARK_COLORS = ("#3b5bdb", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad", "#f08c00")


def spark_points(values: list[float], *, lo: float | None = None, hi: float | None = None,
                 width: float = 60.0, height: float = 16.0) -> str:
    """An SVG polyline's ``points`` for ``values`` (lowest at the bottom; ``lo``/``hi`` fix the range).

    >>> spark_points([0.0, 0.5, 1.0], lo=0.0, hi=1.0)
    '0.0,15.0 30.0,8.0 60.0,1.0'
    """
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = (hi - lo) or 1.0
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{i * step:.1f},{(height - 1) - (v - lo) / span * (height - 2):.1f}" for i, v in enumerate(values))


def attach_sparks(runs: list[Run]) -> None:
    """Give each run of the runs list its sparklines: each domain's reward over its last
    ``SPARK_STEPS`` steps (0..1), the seconds a step took, and, while it runs, an estimate of the
    time left (the steps left at the median of its recent steps' seconds). One query for them all."""
    if not runs:
        return
    window = Q()
    for run in runs:
        window |= Q(run_id=run.id, step__gt=run.current_step - SPARK_STEPS)
    rows = (MetricPoint.objects.filter(window).filter(Q(key__startswith="reward/") | Q(key="stage/step_s"))
            .exclude(key="reward/mean").order_by("run_id", "step").values_list("run_id", "key", "value"))
    series: dict[int, dict[str, list[float]]] = {}
    for run_id, key, value in rows:
        if math.isfinite(value):
            series.setdefault(run_id, {}).setdefault(key, []).append(value)
    for run in runs:
        mine = series.get(run.id, {})
        rewards = sorted((k.removeprefix("reward/"), v) for k, v in mine.items() if k.startswith("reward/"))
        run.sparks = [{"domain": d, "points": spark_points(v, lo=0.0, hi=1.0), "last": v[-1],
                       "color": SPARK_COLORS[i % len(SPARK_COLORS)]} for i, (d, v) in enumerate(rewards)]
        seconds = mine.get("stage/step_s", [])
        run.step_spark = spark_points(seconds, lo=0.0)
        run.step_s = statistics.median(seconds[-20:]) if seconds else None
        left = max(run.budget_steps - run.current_step, 0)
        run.eta_s = left * run.step_s if run.step_s is not None and run.state == RunState.RUNNING else None


def run_as_form_data(run: Run) -> dict[str, Any]:
    """A run as the body of ``POST /api/runs`` that would create its twin (for "clone from run")."""
    return {
        "name": f"{run.name} (clone)", "base_model": run.base_model,
        # the weights and priority it was created with, not those changed mid-run (a paused
        # domain's 0 among them)
        "domains": [{"slug": rd.domain.slug, "weight": rd.weight if rd.initial_weight is None else rd.initial_weight}
                    for rd in run.run_domains.select_related("domain")],
        "config": run.config or {},
        "priority": run.priority if run.initial_priority is None else run.initial_priority, "gpus": run.gpus,
        **_merged({"budget": {"tokens": run.budget_tokens, "cost": amount_text(run.budget_cost)}},
                  RunSpec.from_run(run, []).body()),
        "clone_from": run.id,
    }


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s values, nested objects merged.

    >>> _merged({"budget": {"tokens": None}}, {"staleness": 1, "budget": {"steps": 9}})
    {'budget': {'tokens': None, 'steps': 9}, 'staleness': 1}
    """
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def domain_catalogue(actor: Principal) -> list[dict[str, Any]]:
    """The run form's domains, each with its current version's audit (the form marks versions a
    run may not pin, and pending audits, before anything is submitted)."""
    domains = domain_selectors.with_audit_summary(
        domain_list(actor=actor).filter(is_active=True).select_related("team")
        .only("slug", "title", "kind", "family", "version", "team__slug"))
    out = []
    for d in domains:
        audit = domain_selectors.domain_audit_summary(d)
        out.append({"slug": d.slug, "title": d.title, "kind": d.kind, "family": d.family, "team": d.team.slug if d.team_id else "",
                    "audit": {"version": d.version, "state": audit.state, "label": audit.label, "blocks": audit.blocks,
                              "false_positives": audit.false_positives, "classes": audit.classes}})
    return out


EXPECT_TEXT = {"pass": "must pass", "no_pass": "must not pass", "no_reward": "must earn nothing"}
"""How the page words a probe's expectation (the auditor's ``expect`` values)."""


def audit_view(*, domain, version: DomainVersion | None) -> dict[str, Any]:
    """The domain page's audit card: the summary, the audit that decides it (its report's probe
    classes with their failing examples, the constant-answer check), a newer open audit's
    progress, and whether the page should watch for a result."""
    if version is None:
        return {"summary": domain_selectors.AuditSummary(version=domain.version, state="none"), "audit": None, "open": None,
                "classes": [], "constant_bias": [], "watch": False}
    summary = domain_selectors.audit_summary(version=version)
    decisive = domain_selectors.audit_decisive(version=version)
    latest = domain_selectors.audit_latest(version=version)
    shown = decisive or latest
    open_ = latest if latest is not None and not latest.is_finished else None
    report = (shown.report or {}) if shown is not None else {}
    classes = []
    for name, row in sorted((report.get("classes") or {}).items()):
        examples = [{**ex, "expect_text": EXPECT_TEXT.get(ex.get("expect"), ex.get("expect") or "?")} for ex in row.get("examples") or []]
        classes.append({"name": name, "probes": row.get("probes", 0), "false_positives": row.get("false_positives", 0),
                        "false_negatives": row.get("false_negatives", 0), "examples": examples})
    # Classes with failures first: they are what the badge is about.
    classes.sort(key=lambda c: (-(c["false_positives"] > 0), -(c["false_negatives"] > 0), c["name"]))
    return {"summary": summary, "audit": shown, "open": open_, "classes": classes,
            "constant_bias": report.get("constant_bias") or [], "watch": open_ is not None}


def model_dirs() -> list[Path]:
    """Where local models are looked for: the roots a run may name a directory under
    (``var/models`` and those ``TEMPER_MODEL_DIRS`` adds; controlplane/common/model_refs.py)."""
    return [Path(d) for d in settings.TEMPER_MODEL_DIRS]


def model_catalogue() -> list[dict[str, str]]:
    """The base models a platform admin registered for every team (``base:<name>``), then local
    Hugging Face model directories (those with a config.json) under :func:`model_dirs`."""
    found = [{"path": f"base:{b.name}", "name": f"{b.name} (registered)"}
             for b in BaseModel.objects.only("name")]
    for root in model_dirs():
        if not root.is_dir():
            continue
        for config in sorted(root.glob("*/config.json")):
            found.append({"path": str(config.parent), "name": config.parent.name})
    return found


def config_form_schema() -> dict[str, Any]:
    """What the run form's trainer settings are rendered from: the schema of a run's config section
    (every trainer setting but those the run owns, with a run's defaults) and the order to show
    its sections and top-level settings in."""
    props = run_config_schema()["properties"]
    order = [k for k in FORM_FIRST if k in props] + [k for k in props if k not in FORM_FIRST]
    return {"properties": props, "order": order, "open": [k for k in FORM_FIRST if k in props]}


def queue_view(*, actor: Principal) -> dict[str, Any]:
    """Pools and their use, the actor's teams' quotas and use, the queue with reasons, running runs."""
    running = list(Run.objects.filter(state=RunState.RUNNING).select_related("team").order_by("-priority", "started_at"))
    used: dict[str, int] = {}
    for r in running:
        pool = "train_gpu" if r.gpus > 0 else "cpu"
        used[pool] = used.get(pool, 0) + r.slots
    pools = [{"name": p.name, "kind": p.kind, "capacity": p.capacity, "description": p.description}
             for p in ResourcePool.objects.all()]
    if not any(p["kind"] == "cpu" for p in pools):
        pools.append({"name": "cpu (default)", "kind": "cpu", "capacity": DEFAULT_CPU_SLOTS, "description": "no cpu pool configured"})
    capacity: dict[str, int] = {}
    for p in pools:
        if p["kind"] != "judge":  # a price only: no slots
            capacity[p["kind"]] = capacity.get(p["kind"], 0) + p["capacity"]
    kinds = [{"kind": k, "capacity": c, "used": used.get(k, 0)} for k, c in sorted(capacity.items())]
    teams = Team.objects.filter(id__in=actor.team_ids).order_by("slug")
    quotas = {q.team_id: q for q in TeamQuota.objects.filter(team__in=teams)}
    team_rows = []
    for t in teams:
        mine = [r for r in running if r.team_id == t.id]
        q = quotas.get(t.id)
        team_rows.append({"team": t, "max_gpus": q.max_gpus if q else None, "max_runs": q.max_concurrent_runs if q else None,
                          "gpus": sum(r.gpus for r in mine), "runs": len(mine)})
    queued = list(Run.objects.filter(state=RunState.QUEUED, team_id__in=actor.team_ids).select_related("team")
                  .order_by("-priority", "queued_at"))
    now = timezone.now()
    workers = list(WorkerHeartbeat.objects.filter(last_seen__gte=now - timedelta(minutes=5)).order_by("worker"))
    # Which run holds each GPU the workers report (another team's run only as that).
    held = {(node["worker"], d): (f"run #{r.id}" if r.team_id in actor.roles else "another team's run")
            for r in running if r.gpus > 0 for node in r.nodes for d in node["devices"]}
    for w in workers:
        w.device_rows = [{**d, "held_by": held.get((w.worker, d.get("index")), "")}
                         for d in (w.meta or {}).get("devices") or [] if isinstance(d, dict)]
        w.sandbox_rows = sandbox_pool_rows(w.meta)
    return {
        "kinds": kinds, "pools": pools, "team_rows": team_rows,
        "queued": [{"run": r, "note": r.scheduler_note or {}, "waiting_s": (now - r.queued_at).total_seconds() if r.queued_at else None}
                   for r in queued],
        # Another team's running run shows only what the pools need: its priority, pool and slots
        # (its name, team, step, phase and domains in flight are that team's).
        "running": [{"run": r, "mine": mine, "pool": "train_gpu" if r.gpus > 0 else "cpu", "slots": r.slots,
                     "placement": (r.placement or {}) if r.gpus > 0 else {},
                     "inflight": (r.inflight or {}).get("per_domain", {}) if mine else {},
                     "phase": (r.inflight or {}).get("phase", "") if mine else ""}
                    for r in running for mine in [r.team_id in actor.roles]],
        "workers": workers,
        "has_sandbox_pools": any(w.sandbox_rows for w in workers),
        "gpu_note": _gpu_note(capacity.get("train_gpu", 0), workers),
        "scheduler": scheduler_status(now=now),
        "lanes": lanes_view(now=now),
        "long_lane": _long_lane_domains([r for r in running if r.team_id in actor.roles]),
    }


def sandbox_pool_rows(meta: dict | None) -> list[dict[str, Any]]:
    """A worker's sandbox pools from its heartbeat (workers/sandbox/figures.py), one row per domain.

    >>> sandbox_pool_rows({"sandbox_pools": {"b": {"size": 3, "idle": 1, "target": 3, "wait_p50_s": 0.002,
    ...     "wait_p99_s": 0.3, "creations_per_s": 0.05}, "a": "junk"}})
    [{'domain': 'b', 'size': 3, 'idle': 1, 'target': 3, 'wait_p50_ms': 2.0, 'wait_p99_ms': 300.0, 'creations_per_s': 0.05}]
    """
    pools = (meta or {}).get("sandbox_pools") or {}
    rows = []
    for domain, f in sorted(pools.items()) if isinstance(pools, dict) else []:
        if not isinstance(f, dict):
            continue
        ms = {f"{name}_ms": round(f[f"{name}_s"] * 1000, 1) if isinstance(f.get(f"{name}_s"), (int, float)) else None
              for name in ("wait_p50", "wait_p99")}
        rows.append({"domain": domain, "size": f.get("size", 0), "idle": f.get("idle", 0), "target": f.get("target", 0),
                     **ms, "creations_per_s": f.get("creations_per_s", 0.0)})
    return rows


def _gpu_note(pool_gpus: int, workers: list[WorkerHeartbeat]) -> str:
    """Where the train GPU pools promise other than the live train workers' GPUs, say so: the
    pools are what the scheduler admits against."""
    reported = sum(len((w.meta or {}).get("devices") or []) for w in workers if "train" in (w.queues or []))
    if pool_gpus == reported:
        return ""
    return (f"The train GPU pools hold {pool_gpus} GPU(s); the live workers on the train queue report {reported}. "
            "The scheduler admits runs against the pools: change them on the Manage page to match the hosts.")


def _long_lane_domains(runs: list[Run]) -> dict[int, list[str]]:
    """Per run (of the actor's teams): the domains its last step sent to the long lane."""
    out: dict[int, list[str]] = {}
    for run in runs:
        keys = MetricPoint.objects.filter(run=run, step=run.current_step, key__endswith="/long_lane", value=1.0).values_list("key", flat=True)
        slugs = sorted(k.removeprefix("verify/").removesuffix("/long_lane") for k in keys)
        if slugs:
            out[run.id] = slugs
    return out


MAX_COMPARED_RUNS = 6
"""Runs one comparison overlays at most."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def run_settings(run: Run) -> dict[str, Any]:
    """What a run was configured with, flattened for a diff: its own fields, its domains' current
    weights, and each trainer setting it set (``config.algorithm.clip_high``)."""
    out: dict[str, Any] = {"base_model": run.base_model, "priority": run.priority, "gpus": run.gpus,
                           "budget.tokens": run.budget_tokens,
                           "budget.cost": amount_text(run.budget_cost), **owned_values(run)}
    for rd in run.run_domains.select_related("domain"):
        out[f"domains.{rd.domain.slug}"] = rd.weight
    out.update({f"config.{k}": v for k, v in _flatten(run.config or {}).items() if k})
    return out


def settings_diff(runs: list[Run]) -> list[dict[str, Any]]:
    """Every setting any of the compared runs set, each with one value per run (a trainer setting
    a run left unset: the default it ran with; a domain it does not train: None) and whether they
    differ, differing ones first."""
    trainer = config_settings()

    def default(key: str) -> Any:
        path = key.removeprefix("config.")
        if key.startswith("config.") and path in RUN_DEFAULTS:
            return RUN_DEFAULTS[path]
        return trainer[path].default if key.startswith("config.") and path in trainer else None

    flat = [run_settings(r) for r in runs]
    keys = sorted({k for f in flat for k in f})
    rows = [{"key": k, "values": [f[k] if k in f else default(k) for f in flat]} for k in keys]
    for row in rows:
        row["differs"] = len({json.dumps(v, sort_keys=True, default=str) for v in row["values"]}) > 1
    return sorted(rows, key=lambda r: (not r["differs"], r["key"]))
