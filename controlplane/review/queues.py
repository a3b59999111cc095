"""Review queues: creating one (the request) and sampling it (a worker).

:func:`queue_create` checks a new queue's settings, saves it in state ``sampling`` and sends
``temper.review.sample`` (judge queue), so the request returns at once. :func:`queue_sample`, on
the worker, reads the judged population, scores it with another judge version or a rule where
disagreement sampling needs one (no transaction is held meanwhile; the queue's ``sampling`` says
how far it got, for the page and the CLI), draws the sample, then writes the items and turns the
queue ``ready`` in one short transaction. A sample that cannot be drawn turns the queue ``failed``
with the field and the reason; its name may be used again.
"""
from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any, Callable

import numpy as np
from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import Conflict, FieldError, InvalidInput
from controlplane.common.validation import validate
from controlplane.domains.models import Domain
from controlplane.review import sampling
from controlplane.review.models import Judge, JudgeConfig, QueueState, ReviewItem, ReviewQueue
from controlplane.review.services import INFRA_OUTCOMES, QUEUE_SCHEMA, _require_admin, judge_build
from controlplane.runs.models import Trajectory
from trainer.outcomes import INFRASTRUCTURE_OUTCOMES
from trainer.tasks.base import Task
from trainer.verifiers import NO_CONTEXT, compile_cascade, validate_cascade
from trainer.verifiers.isolation import ProcessPool
from trainer.verifiers.judge import JudgeRequest

log = logging.getLogger(__name__)

MAX_POPULATION = 20000
"""The most judged trajectories a queue is sampled from (the oldest first)."""

RULE_BUDGET_S = 60.0
"""The most a rule verifier may take over a queue's whole population: a rule verifier must be
cheap; one that needs longer fails the sample, naming how far it got."""

JUDGE_BUDGET_S = 600.0
"""The most another judge version may take scoring a queue's population (disagreement sampling);
one that needs longer fails the sample, naming how far it got (sample a smaller population)."""

SAMPLE_DEADLINE_S = 3700.0
"""A queue still sampling after this long (the task's hard time limit) was lost with its worker or
its message: its name may be used again, and its page says so."""

MAX_SAMPLING = 2
"""Queues a team may have sampling at once: sampling runs on the judge queue that every team's runs
use, so one team cannot fill it."""

PROGRESS_EVERY_S = 0.5
"""How often the worker writes how far scoring got."""


def _judged(trajectory: Trajectory) -> dict | None:
    details = (trajectory.details or {}).get("details") or {}
    if "judge_score" not in details:
        return None
    return details


def _score_with(config: JudgeConfig, rows: list[Trajectory], references: list[str],
                progress: Callable[[int], None] = lambda done: None) -> list[float | None]:
    """Another judge version's scores (0-1) on the population."""
    judge = judge_build(config)
    out: list[float | None] = []
    deadline = time.monotonic() + JUDGE_BUDGET_S
    for i, (t, ref) in enumerate(zip(rows, references)):
        progress(i)
        if time.monotonic() > deadline:
            raise InvalidInput.one("compare_to.judge_version", f"{config} took more than {JUDGE_BUDGET_S:g} s over {i} of "
                                                               f"{len(rows)} trajectories; sample a smaller population")
        try:
            out.append(float(judge(JudgeRequest(t.prompt, t.completion, ref or None)).score))
        except SoftTimeLimitExceeded:
            raise
        except Exception:  # noqa: BLE001 - an unscored item keeps the floor weight
            out.append(None)
    return out


def _score_with_rule(spec: dict, rows: list[Trajectory], references: list[str],
                     progress: Callable[[int], None] = lambda done: None) -> list[float | None]:
    """A rule cascade's scores on the population. Its stages run as a verify worker runs them: in
    a verifier process of their own, each killed at its timeout, and the whole population within
    :data:`RULE_BUDGET_S`."""
    cascade = compile_cascade(spec, NO_CONTEXT)  # a rule has no sandbox, judge or environment stage (_rule_errors)
    out: list[float | None] = []
    deadline = time.monotonic() + RULE_BUDGET_S
    pool = ProcessPool(1)
    try:
        for i, (t, ref) in enumerate(zip(rows, references)):
            progress(i)
            if time.monotonic() > deadline:
                raise InvalidInput.one("compare_to.rule", f"the rule took more than {RULE_BUDGET_S:g} s over {i} of {len(rows)} "
                                                          "trajectories; a rule verifier must be cheap")
            v = cascade(t.completion, Task(t.domain, t.task_id or str(t.pk), t.prompt, answer=ref or None), pool=pool)
            out.append(None if v.outcome in INFRASTRUCTURE_OUTCOMES else float(v.score))
    finally:
        pool.close()
    return out


def _rule_errors(spec: Any) -> list[FieldError]:
    errors = [FieldError(p.replace("verifier", "compare_to.rule", 1), m) for p, m in validate_cascade(spec)]
    if not errors and any(s.get("type") in ("judge", "code_tests", "repo_tests", "cad_mesh", "shell_state", "pkg_tests", "environment") for s in spec["stages"]):
        errors.append(FieldError("compare_to.rule", "a rule verifier runs cheap stages only (no judge, sandbox or environment)"))
    return errors


def _population(queue: ReviewQueue):
    """The trajectories a queue may be sampled from (its team's, of its domain, judged by its
    judge version, no infrastructure outcome), oldest first."""
    return (Trajectory.objects.filter(run__team_id=queue.team_id, domain=queue.domain.slug, judge_version=queue.judge_config_id)
            .exclude(outcome__in=INFRA_OUTCOMES).order_by("id"))


@transaction.atomic
def queue_create(*, actor: Principal, team: Team, data: dict, send: bool = True) -> ReviewQueue:
    """Check a new review queue of judged trajectories of one domain and judge version, and save
    it to be sampled by a worker (:func:`queue_sample`, sent once this transaction commits; with
    ``send`` False the caller samples it itself, as ``manage.py review queues create --here``)."""
    validate(data, QUEUE_SCHEMA)
    _require_admin(actor, team.id, "team")
    domain = Domain.objects.filter(slug=data["domain"]).filter(Q(team__isnull=True) | Q(team=team)).first()
    judge = Judge.objects.filter(slug=data["judge"], team=team).first()
    errors = []
    if domain is None:
        errors.append(FieldError("domain", f"no domain {data['domain']!r}"))
    if judge is None:
        errors.append(FieldError("judge", f"no judge {data['judge']!r} in team {team.slug}"))
    if errors:
        raise InvalidInput(errors)
    config = judge.versions.filter(version=data["version"]).first() if "version" in data else judge.active
    if config is None:
        raise InvalidInput.one("version", f"judge {judge.slug!r} has no such version")
    strategy = data.get("strategy", "uniform")
    compare_to = data.get("compare_to") or {}
    if strategy == "disagreement" and not compare_to:
        raise InvalidInput.one("compare_to", "required for disagreement sampling: {\"rule\": cascade} or {\"judge_version\": N}")
    if "rule" in compare_to:
        if errors := _rule_errors(compare_to["rule"]):
            raise InvalidInput(errors)
    elif "judge_version" in compare_to:
        other = judge.versions.filter(version=compare_to["judge_version"]).first()
        if other is None or other.pk == config.pk:
            raise InvalidInput.one("compare_to.judge_version", "must be another version of the same judge")
    same_name = ReviewQueue.objects.filter(domain=domain, judge_config=config, name=data["name"])
    if same_name.exclude(state=QueueState.FAILED).exclude(_lost()).exists():
        raise InvalidInput.one("name", f"a queue named {data['name']!r} exists for {domain.slug} and {config}")
    sampling = ReviewQueue.objects.filter(team=team, state=QueueState.SAMPLING).exclude(_lost()).count()
    if sampling >= MAX_SAMPLING:
        raise Conflict(f"team {team.slug} has {sampling} queues being sampled (at most {MAX_SAMPLING} at once); "
                       "create this one when they are ready")
    params = {"size": int(data.get("size", 50)), "seed": int(data.get("seed", 0)), "compare_to": compare_to}
    if strategy == "low_confidence":
        params["threshold"] = float(data.get("threshold", 0.5))
    queue = ReviewQueue(
        team=team, domain=domain, judge_config=config, name=data["name"], strategy=strategy, params=params, population=0,
        reviewers_per_item=data.get("reviewers_per_item", 1), blind=data.get("blind", True),
        reservation_s=data.get("reservation_s", 600), created_by=actor.user, state=QueueState.SAMPLING,
        sampling={"stage": "queued", "done": 0, "total": 0},
    )
    if not _population(queue).exists():
        raise InvalidInput.one("domain", _nothing_to_sample(team, domain, judge, config))
    same_name.delete()  # a failed sample of the same name is replaced
    queue.full_clean()
    queue.save()
    audit_record(actor=actor, obj=queue, action="review_queue.create", team=team,
                 after={"domain": domain.slug, "judge": str(config), "strategy": strategy, "size": params["size"]})
    if send:
        dispatch.send_on_commit("temper.review.sample", queue.pk)
    return queue


def _lost() -> Q:
    """Queues still sampling past :data:`SAMPLE_DEADLINE_S`: lost with their worker or message."""
    return Q(state=QueueState.SAMPLING, created_at__lt=timezone.now() - timedelta(seconds=SAMPLE_DEADLINE_S))


def queue_lost(queue: ReviewQueue) -> bool:
    """Whether ``queue`` is still sampling past :data:`SAMPLE_DEADLINE_S` (its worker or message lost)."""
    return queue.state == QueueState.SAMPLING and queue.created_at < timezone.now() - timedelta(seconds=SAMPLE_DEADLINE_S)


def queue_sample(queue_id: int, progress: Callable[[dict], None] | None = None) -> str:
    """Draw a queue's items (a worker's task; safe to run twice: a queue no longer sampling is left
    as it is). ``progress`` is also given each ``sampling`` written. Returns the queue's state."""
    queue = ReviewQueue.objects.select_related("team", "domain", "judge_config__judge").filter(pk=queue_id).first()
    if queue is None or queue.state != QueueState.SAMPLING:
        return queue.state if queue is not None else "gone"
    try:
        items, population, meta = _draw(queue, progress)
    except InvalidInput as exc:
        return _failed(queue, "; ".join(str(e) for e in exc.errors))
    except BaseException as exc:  # the worker's time limit, a judge that cannot load, the database: never stuck sampling
        _failed(queue, f"sampling stopped: {type(exc).__name__}: {str(exc)[:300]} (create the queue again)")
        raise
    with transaction.atomic():
        locked = ReviewQueue.objects.select_for_update().filter(pk=queue.pk, state=QueueState.SAMPLING).first()
        if locked is None:  # sampled by another worker meanwhile, or deleted
            return "gone"
        ReviewItem.objects.bulk_create(items)
        locked.params = {**locked.params, **meta}
        locked.population, locked.state = population, QueueState.READY
        locked.sampling = {"stage": "done", "done": population, "total": population}
        locked.save(update_fields=["params", "population", "state", "sampling"])
    return QueueState.READY


def _failed(queue: ReviewQueue, message: str) -> str:
    """The queue could not be sampled: ``failed``, saying why (its name may be used again)."""
    ReviewQueue.objects.filter(pk=queue.pk, state=QueueState.SAMPLING).update(
        state=QueueState.FAILED, error=message[:2000], sampling={**queue.sampling, "stage": "failed"})
    log.info("review queue %s: sampling failed: %s", queue.pk, message)
    return QueueState.FAILED


def _progress(queue: ReviewQueue, stage: str, total: int, also: Callable[[dict], None] | None) -> Callable[[int], None]:
    """Write how far ``stage`` got (at most every :data:`PROGRESS_EVERY_S`, and at its start)."""
    last = [0.0]

    def report(done: int) -> None:
        now = time.monotonic()
        if done and now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        sampling = {"stage": stage, "done": done, "total": total}
        ReviewQueue.objects.filter(pk=queue.pk).update(sampling=sampling)
        if also is not None:
            also(sampling)
    return report


def _draw(queue: ReviewQueue, also: Callable[[dict], None] | None = None) -> tuple[list[ReviewItem], int, dict]:
    """The queue's items (unsaved), the population they were drawn from, and what to add to its
    params; InvalidInput (naming the field) when no sample can be drawn."""
    config, params = queue.judge_config, queue.params
    _progress(queue, "reading the judged trajectories", 0, also)(0)
    rows = [t for t in _population(queue)[:MAX_POPULATION] if _judged(t) is not None]
    if not rows:
        raise InvalidInput.one("domain", _nothing_to_sample(queue.team, queue.domain, config.judge, config))
    details = [_judged(t) for t in rows]
    references = [str(d.get("judge_reference", "") or "") for d in details]
    scores = np.asarray([float(d["judge_score"]) for d in details])
    raws = [float(d.get("judge_raw", d["judge_score"])) for d in details]
    compare: list[float | None] = [None] * len(rows)
    compare_to = params.get("compare_to") or {}
    if "rule" in compare_to:
        compare = _score_with_rule(compare_to["rule"], rows, references, _progress(queue, "scoring with the rule", len(rows), also))
    elif "judge_version" in compare_to:
        other = config.judge.versions.get(version=compare_to["judge_version"])
        compare = _score_with(other, rows, references, _progress(queue, f"scoring with {other}", len(rows), also))
    size, strategy = int(params.get("size", 50)), queue.strategy
    rng = np.random.default_rng(int(params.get("seed", 0)))
    fmt = config.score_format
    strata = sampling.score_strata(scores, fmt)
    classes = [int(v >= 0.5) for v in scores] if fmt != "ordinal" else []
    added: dict[str, int] = {}
    if strategy == "uniform":
        draws = sampling.sample_uniform(len(rows), size, rng)
        if classes:
            draws, added = sampling.ensure_classes(draws, classes, rng)
    elif strategy == "stratified":
        draws = sampling.sample_stratified(strata, size, rng)
    elif strategy == "disagreement":
        diffs = np.asarray([abs(s - c) if c is not None else 0.0 for s, c in zip(scores, compare)])
        draws = sampling.sample_poisson(sampling.FLOOR + diffs, size, rng)
    else:
        threshold = float(params.get("threshold", 0.5))
        draws = sampling.sample_poisson(sampling.low_confidence_weights(sampling.confidence_of(scores, threshold)), size, rng)
    if not len(draws):
        raise InvalidInput.one("strategy", f"{strategy} sampling drew no item from the {len(rows)} judged trajectories "
                                           f"of {queue.domain.slug} (size {size}); try another strategy or a larger size")
    order = rng.permutation(len(draws))
    items = [ReviewItem(queue=queue, trajectory=rows[d.index], task_id=rows[d.index].task_id, prompt=rows[d.index].prompt,
                        completion=rows[d.index].completion, reference=references[d.index], judge_score=float(scores[d.index]),
                        judge_raw=raws[d.index], compare_score=compare[d.index], stratum=d.stratum or strata[d.index],
                        propensity=d.propensity, position=int(pos))
             for d, pos in zip(draws, order)]
    meta = {"added_per_class": added,
            **({"population_classes": {"pass": sum(classes), "fail": len(classes) - sum(classes)}} if classes else {})}
    return items, len(rows), meta


def _nothing_to_sample(team: Team, domain: Domain, judge: Judge, config) -> str:
    """Why a queue of ``domain`` judged by ``config`` would be empty, and what to do instead."""
    of_team = Trajectory.objects.filter(run__team=team, domain=domain.slug)
    if not of_team.exists():
        return (f"nothing to sample: no run of team {team.slug} has trajectories of {domain.slug} yet (a queue samples "
                f"the judged answers of the team's runs; start a run on {domain.slug} and let it train)")
    versions = sorted(set(judge.versions.filter(pk__in=of_team.exclude(judge_version__isnull=True)
                                                .values("judge_version")).values_list("version", flat=True)))
    if versions and config.version not in versions:
        return (f"nothing to sample: {domain.slug}'s trajectories were judged by version(s) "
                f"{', '.join(f'v{v}' for v in versions)} of {judge.slug}, none by v{config.version} (set version)")
    judged = of_team.filter(judge_version=config.pk)
    if judged.exists():
        return (f"nothing to sample: every one of the {judged.count()} trajectories of {domain.slug} judged by "
                f"{judge.slug} v{config.version} was an infrastructure error, with no judge score")
    return (f"nothing to sample: {of_team.count()} trajectories of {domain.slug}, none judged by {judge.slug} (its "
            f"verifier does not use this judge, or its runs did not get to judging yet)")
