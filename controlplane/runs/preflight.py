"""Admission: every refusal a run can meet on the worker before it starts, in one place.

The API checks a run when it is saved; the worker that claims it checks again before anything is
allocated (defence in depth: the row may have been written another way, or a team's ceilings,
allow list or judges changed since). :func:`run_preflight` is that check. Each refusal names its
field, fails the run with a ``refused`` event, and tells the driver why it returned. Apps that build
on runs add refusals of their own through :data:`run_preflight_wanted` (the review app: a judge of
another team), so this module never imports them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.dispatch import Signal

from controlplane.common.model_refs import ModelRefused, config_refs, resolve_model
from controlplane.domains.pins import domain_quotas, pinned
from controlplane.runs import services as runs
from controlplane.runs.ceilings import api_field, trainer_config_refusal
from controlplane.runs.models import Run, RunDomain, RunState
from controlplane.runs.selectors import run_domains
from controlplane.runs.spec import RunSpec
from controlplane.runs.store import checkpoint_root
from trainer.catalogue import DomainSpec
from trainer.config import put_path
from trainer.verifiers.cascade import CascadeError

log = logging.getLogger(__name__)

run_preflight_wanted = Signal()
"""Sent (``sender=Run, run=..., domains=[RunDomain], pins=[DomainSpec]``) when a worker is about
to start a run: each receiver returns ``(why, [(field, message), ...])`` for a refusal (the review
app: "a domain names another team's judge"), or None. Apps that build on runs connect to it in their
AppConfig.ready."""


def share_caps(slugs: list[str]) -> dict[str, float]:
    """Each domain's current ``max_share`` quota."""
    return {slug: q.max_share for slug, q in domain_quotas(slugs=slugs).items()}


def trainer_config(run: Run, domains: list[RunDomain], caps: dict[str, float] | None = None) -> dict:
    """The trainer config of a stored run (:meth:`RunSpec.trainer_config`), its domains' weights
    capped by their ``max_share`` quotas (``caps``, read now when not given)."""
    caps = caps if caps is not None else share_caps([rd.domain.slug for rd in domains])
    return RunSpec.from_run(run, domains).trainer_config(run_id=run.id, storage=str(checkpoint_root(run.id)), caps=caps)


def with_model_paths(cfg: dict, paths: dict[str, str]) -> dict:
    """``cfg`` with each model reference replaced by what :func:`confined_model_paths` resolved it
    to, so the trainer loads exactly the directory that was checked."""
    for path, value in paths.items():
        put_path(cfg, path, value)
    return cfg


def placement_errors(run: Run, world: int) -> list[tuple[str, str]]:
    """A GPU run about to start on the devices the scheduler assigned: as many devices as it asks
    (on all of its hosts), a whole number of engines of ``rollout.tensor_parallel_size`` of them,
    and one rank per engine in this process group."""
    devices = [d for node in run.nodes for d in node["devices"]]
    per_rank = run.devices_per_rank
    problems = []
    if len(devices) != run.gpus:
        problems.append(("gpus", f"asks {run.gpus} GPUs; {len(devices)} were assigned ({devices})"))
    elif run.gpus % per_rank:
        problems.append(("config.rollout.tensor_parallel_size", f"engines of {per_rank} GPUs do not divide its {run.gpus} GPUs"))
    elif world != run.ranks:
        problems.append(("config.parallel.ranks", f"{run.ranks} rank(s) expected for {run.gpus} GPUs in engines of {per_rank}; "
                                                  f"this job has {world}"))
    return problems


def oversized_errors(run: Run, domains: list[RunDomain], caps: dict[str, float] | None = None) -> list[tuple[str, str]]:
    """The trainer config this worker is about to start, against the trainer's own bounds and the
    team's ceilings as they are now (a run above them fails: resuming cannot fix a config)."""
    if not isinstance(run.config, dict):
        return [("config", "must be an object")]
    return [(api_field(path), message) for path, message in trainer_config_refusal(trainer_config(run, domains, caps), team=run.team)]


def confined_model_paths(run: Run) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The run's base model and the model and tokenizer directories its config names, resolved
    again for the run's team and under this worker's TEMPER_MODEL_DIRS: ``(paths, refusals)``,
    paths mapping each trainer config path to what the trainer loads (a real directory, or a
    hub id)."""
    refs = [("base_model", "model.path", run.base_model, "config.json")]
    refs += [(f"config.{path}", path, value, needs) for path, value, needs in config_refs(run.config)]
    paths, fields = {}, []
    for field_, path, ref, needs in refs:
        try:
            paths[path] = resolve_model(ref, team_id=run.team_id, needs=needs).path
        except ModelRefused as exc:
            fields.append((field_, str(exc)))
    return paths, fields


@dataclass
class Preflight:
    """What admission found: the run's domains and their pinned versions, the model paths the
    trainer loads, and ``refused`` (the driver's reason) when the run may not start."""

    domains: list[RunDomain] = field(default_factory=list)
    pins: list[DomainSpec] = field(default_factory=list)
    model_paths: dict[str, str] = field(default_factory=dict)
    refused: str | None = None


def run_preflight(*, run: Run, worker: str, world: int) -> Preflight:
    """Every check a claimed run meets before its job is built, in order: its devices (a GPU run
    placed by the scheduler), its config against the bounds and its team's ceilings, the models it
    loads, and what the apps connected to :data:`run_preflight_wanted` refuse. The first check that
    refuses fails the run with a ``refused`` event naming each field; ``refused`` says why."""
    if run.gpus > 0 and run.placement and (problems := placement_errors(run, world)):
        return _refuse(run, worker, "starting", problems, "its devices do not fit its settings")
    domains = run_domains(run=run)
    pins, unrunnable = pinned_domains(domains)
    if problems := oversized_errors(run, domains):
        return _refuse(run, worker, "starting", problems, "config above its bounds or its team's ceilings")
    paths, problems = confined_model_paths(run)
    if problems:
        return _refuse(run, worker, "loading a model", problems, "a model or tokenizer it names is not one its team may load")
    for _, refusal in run_preflight_wanted.send(sender=Run, run=run, domains=domains, pins=pins):
        if refusal and refusal[1]:
            return _refuse(run, worker, "starting", refusal[1], refusal[0])
    if unrunnable:
        return _refuse(run, worker, "starting", unrunnable, "a domain version it pins cannot run here")
    return Preflight(domains=domains, pins=pins, model_paths=paths)


def pinned_domains(domains: list[RunDomain]) -> tuple[list[DomainSpec], list[tuple[str, str]]]:
    """Each of a run's domains as it pins it, and a problem for each pinned version that cannot run:
    no task source here (a slug neither in the trainer's catalogue nor an upload) or a verifier
    that no longer compiles (a stage type this code lacks)."""
    pins, problems = [], []
    for rd in domains:
        where = f"domains.{rd.domain.slug}"
        try:
            pins.append(pinned(rd.domain_version))
        except CascadeError as exc:
            problems += [(f"{where}.{path}", message) for path, message in exc.errors]  # paths start at "verifier"
        except ValueError as exc:
            problems.append((where, str(exc)))
    return pins, problems


def _refuse(run: Run, worker: str, before: str, fields: list[tuple[str, str]], why: str) -> Preflight:
    """Fail ``run`` with a ``refused`` event naming each field and why."""
    message = f"refused by the worker before {before}: " + "; ".join(f"{f}: {m}" for f, m in fields)
    log.error("run %s: %s", run.id, message)
    runs.run_event_record(run=run, kind="refused", message=message[:500],
                          data={"errors": [{"path": f, "message": m} for f, m in fields], "worker": worker})
    runs.run_finish(run=run, worker=worker, state=RunState.FAILED, error=message)
    return Preflight(refused=f"refused ({why})")
