"""A team's ceilings on the size of its runs, checked when a run is validated and again by the
worker that starts it.

Every trainer setting has a global upper bound a host survives, written once in
:mod:`trainer.config` (``_num(..., le=...)`` and the products in ``SIZES``). A team's quota may add
lower ceilings for the same settings and sizes (``TeamQuota.ceilings``, set through the team quota
API): the run API refuses a run above them with 422 naming the field and the ceiling, and the run
driver refuses a run whose config (written by any means) is above the bounds or the ceilings of
that moment before it allocates anything.

The ceilings are stored on the team's quota (``TeamQuota`` of the scheduling app); this module
reads them through the team (``quota__ceilings``) and imports nothing of the scheduling app, which
imports the runs app.
"""
from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db.models import Sum

from controlplane.accounts.models import Team
from controlplane.common.errors import FieldError
from controlplane.runs.spec import RunSpec
from trainer import run_fields
from trainer.ceilings import ceiling_errors
from trainer.config import ConfigError, TrainerConfig, load_config, whole_number_at
from trainer.rollout import engine_problem

def team_ceilings(team: Team) -> dict[str, float]:
    """The ceilings on ``team``'s runs now, read afresh (``{}`` when it has none)."""
    found = Team.objects.filter(pk=team.pk).values_list("quota__ceilings", flat=True).first()
    return dict(found or {})


DEFAULT_CPU_SLOTS = 1
"""CPU slots when no cpu pool is configured (the scheduler's default, controlplane/scheduling)."""


def gpu_request_errors(*, team: Team, gpus: int) -> list[FieldError]:
    """A run that asks for more GPUs than the train GPU pools hold together, or than its team may
    hold at once, could never be admitted: refused when it is submitted, with the numbers, instead
    of waiting in the queue for ever. Pools and the team's quota are read through the app
    registry and the team (this app imports nothing of the scheduling app)."""
    if gpus <= 0:
        return []
    pools = apps.get_model("scheduling", "ResourcePool").objects.filter(kind="train_gpu")
    total = pools.aggregate(total=Sum("capacity"))["total"] or 0
    errors = []
    if gpus > total:
        errors.append(FieldError("gpus", f"asks for {gpus} GPUs; the train GPU pools hold {total} in all"
                                         + ("" if total else " (no train GPU pool exists: a platform admin adds one, "
                                                             "or run on CPU with gpus 0)")))
    quota = Team.objects.filter(pk=team.pk).values_list("quota__max_gpus", flat=True).first()
    limit = quota if quota is not None else apps.get_model("scheduling", "TeamQuota")._meta.get_field("max_gpus").default
    if gpus > limit:
        errors.append(FieldError("gpus", f"asks for {gpus} GPUs; team {team.slug} may hold at most {limit} at once"))
    return errors


_HOSTS_DIVIDE = "the hosts must divide the ranks (each host runs as many)"


def rank_errors(*, gpus: int, config: Any, cpu_slots: int | None = None) -> list[FieldError]:
    """A GPU run has one rank per group of ``rollout.tensor_parallel_size`` GPUs (one per GPU by
    default): the tensor-parallel size divides ``gpus``, and ``config.parallel.ranks``, when set,
    is 1 or that number of groups. A CPU run holds one CPU slot per rank and tensor-parallel
    worker (each is bound to cores of its own), so it may not need more than the cpu pools hold
    (``cpu_slots``; read from the pools when None).

    >>> [e.message for e in rank_errors(gpus=2, config={"parallel": {"ranks": 3}})]
    ['a run with 2 GPUs runs one rank per GPU: leave it out, or set 2']
    >>> rank_errors(gpus=2, config={"parallel": {"ranks": 2}}), rank_errors(gpus=0, config={"parallel": {"ranks": 3}}, cpu_slots=4)
    ([], [])
    >>> [e.message for e in rank_errors(gpus=0, config={"parallel": {"ranks": 3}}, cpu_slots=2)]
    ['asks for 3 ranks, one CPU slot each; the cpu pools hold 2 (a platform admin adds capacity)']
    >>> [e.message for e in rank_errors(gpus=0, config={"rollout": {"tensor_parallel_size": 2}, "parallel": {"ranks": 2}}, cpu_slots=2)]
    ['asks for 2 ranks with engines of 2 tensor-parallel workers, one CPU slot each (4); the cpu pools hold 2 (a platform admin adds capacity)']
    >>> rank_errors(gpus=0, config={"rollout": {"tensor_parallel_size": 2}}, cpu_slots=2)
    []
    >>> [e.message for e in rank_errors(gpus=6, config={"rollout": {"tensor_parallel_size": 4}})]
    ["splits the run's 6 GPUs into engines of 4: it must divide the GPUs"]
    >>> [e.message for e in rank_errors(gpus=8, config={"rollout": {"tensor_parallel_size": 2}, "parallel": {"ranks": 8}})]
    ['a run with 8 GPUs and engines of 2 runs 4 ranks, one per engine: leave it out, or set 4']

    Its ranks are spread evenly over ``config.parallel.hosts`` hosts:

    >>> [e.message for e in rank_errors(gpus=0, config={"parallel": {"ranks": 3, "hosts": 2}}, cpu_slots=4)]
    ['spreads 3 ranks over 2 hosts: the hosts must divide the ranks (each host runs as many)']
    >>> [e.message for e in rank_errors(gpus=6, config={"rollout": {"tensor_parallel_size": 2}, "parallel": {"hosts": 2}})]
    ['spreads 3 ranks (engines of 2 of its 6 GPUs) over 2 hosts: the hosts must divide the ranks (each host runs as many)']
    >>> rank_errors(gpus=8, config={"parallel": {"hosts": 2}}), rank_errors(gpus=0, config={"parallel": {"ranks": 2, "hosts": 2}}, cpu_slots=2)
    ([], [])
    """
    ranks, tp = whole_number_at(config, "parallel.ranks"), whole_number_at(config, "rollout.tensor_parallel_size") or 1
    hosts = whole_number_at(config, "parallel.hosts") or 1
    if gpus > 0:
        if tp > 1 and gpus % tp:
            return [FieldError("config.rollout.tensor_parallel_size",
                               f"splits the run's {gpus} GPUs into engines of {tp}: it must divide the GPUs")]
        groups = gpus // tp
        if ranks is not None and ranks not in (1, groups):
            how = f"{gpus} GPUs runs one rank per GPU" if tp == 1 else f"{gpus} GPUs and engines of {tp} runs {groups} ranks, one per engine"
            return [FieldError("config.parallel.ranks", f"a run with {how}: leave it out, or set {groups}")]
        if groups % hosts:
            what = f"{groups} ranks" + (f" (engines of {tp} of its {gpus} GPUs)" if tp > 1 else " (one per GPU)")
            return [FieldError("config.parallel.hosts", f"spreads {what} over {hosts} hosts: {_HOSTS_DIVIDE}")]
        return []
    ranks = ranks if ranks is not None and ranks > 1 else 1
    if ranks % hosts:
        return [FieldError("config.parallel.hosts", f"spreads {ranks} rank{'s' if ranks > 1 else ''} over {hosts} hosts: {_HOSTS_DIVIDE}")]
    if ranks * tp <= 1:
        return []
    if cpu_slots is None:
        pools = apps.get_model("scheduling", "ResourcePool").objects.filter(kind="cpu")
        cpu_slots = pools.aggregate(total=Sum("capacity"))["total"] if pools.exists() else DEFAULT_CPU_SLOTS
    if ranks * tp > cpu_slots:
        if tp == 1:
            return [FieldError("config.parallel.ranks", f"asks for {ranks} ranks, one CPU slot each; the cpu pools hold "
                                                        f"{cpu_slots} (a platform admin adds capacity)")]
        what = f"{ranks} rank{'s' if ranks > 1 else ''} with engines of {tp} tensor-parallel workers"
        return [FieldError("config.rollout.tensor_parallel_size", f"asks for {what}, one CPU slot each ({ranks * tp}); "
                                                                  f"the cpu pools hold {cpu_slots} (a platform admin adds capacity)")]
    return []


def api_field(path: str) -> str:
    """Where a trainer setting is set in a run's API body: ``config.<path>``, or the run's own field
    for a setting the run owns (``limits.max_steps`` -> ``budget.steps``).

    >>> api_field("rollout.n"), api_field("limits.max_steps")
    ('config.rollout.n', 'budget.steps')
    """
    owned = {o.path: o.source for o in run_fields.RUN_OWNED if not o.assigned}
    return owned.get(path, f"config.{path}")


def body_trainer_config(data: dict[str, Any]) -> dict[str, Any]:
    """The trainer settings a run body asks for (:meth:`RunSpec.trainer_config`): the control
    plane's assigned settings (name, checkpoint directory) keep the trainer's defaults, as no bound
    concerns them, and the domains' weights are not capped by their quotas."""
    return RunSpec.from_body(data).trainer_config()


def ceiling_field_errors(cfg: TrainerConfig, *, team: Team) -> list[FieldError]:
    """``cfg``'s settings and sizes above ``team``'s ceilings, at the run API's field paths."""
    errors = ceiling_errors(cfg, team_ceilings(team), f"team {team.slug} (team ceiling)")
    return [FieldError(api_field(path), message) for path, message in errors]


def run_body_ceiling_errors(*, team: Team, data: dict[str, Any]) -> list[FieldError]:
    """The run API's check: a run body (already valid against the trainer's own bounds) whose
    settings exceed its team's ceilings is refused, each error naming the field and the ceiling."""
    try:
        cfg = load_config(body_trainer_config(data))
    except ConfigError as exc:  # reported by the schema check already; here, only what it missed
        return [FieldError(api_field(path), message) for path, message in exc.errors]
    return ceiling_field_errors(cfg, team=team)


def trainer_config_refusal(config: dict[str, Any], *, team: Team) -> list[tuple[str, str]]:
    """The worker's check of the trainer config it is about to start, as ``(path, message)``: the
    trainer's own bounds (``load_config``), an engine this host cannot run, then ``team``'s
    ceilings as they are now. Empty when the run may start."""
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        return list(exc.errors)
    problem = engine_problem(cfg.rollout.engine)
    return ([("rollout.engine", problem)] if problem else []) + ceiling_errors(
        cfg, team_ceilings(team), f"team {team.slug} (team ceiling)")
