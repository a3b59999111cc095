"""Writes for quotas and pools (platform admins), and worker heartbeats (workers)."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import FieldError, InvalidInput
from controlplane.common.validation import validate
from controlplane.domains.selectors import audit_gates
from controlplane.domains.services import audit_ensure
from controlplane.registry.services import eval_holds_release
from controlplane.runs.ceilings import DEFAULT_CPU_SLOTS
from controlplane.runs.cost import amount_text, parse_amount
from controlplane.runs.services import RESUME_WHEN_SERVED, lease_s, run_pause_system
from controlplane.runs.models import Run, RunDomain, RunEvent, RunState
from controlplane.scheduling.models import PRICE_UNITS, PoolKind, ResourcePool, SchedulerTick, TeamQuota, WorkerHeartbeat
from controlplane.scheduling.scheduler import Decision, Quota, RunView, schedule
from controlplane.scheduling.selectors import TRAIN_QUEUE, QueueService, direct_queue, queue_service, train_workers
from trainer.ceilings import ceiling_map_errors

TEAM_QUOTA_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "max_gpus": {"type": "integer", "minimum": 0, "maximum": 100000},
        "max_concurrent_runs": {"type": "integer", "minimum": 0, "maximum": 100000},
        "ceilings": {"type": "object", "maxProperties": 200,
                     "description": "Trainer setting path (rollout.n) or size (sequences_per_step) -> the most this "
                                    "team's runs may use, at most the setting's global bound; replaces the team's "
                                    "ceilings ({} removes them).",
                     "additionalProperties": {"type": "number"}},
    },
}

POOL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "capacity"],
    "properties": {
        "kind": {"type": "string", "enum": ["train_gpu", "rollout_gpu", "cpu", "sandbox", "judge"]},
        "capacity": {"type": "integer", "minimum": 0, "maximum": 1000000},
        "description": {"type": "string", "maxLength": 200},
        "price": {"type": ["number", "string", "null"], "maxLength": 40,
                  "description": "What one unit costs in TEMPER_CURRENCY (a GPU-hour, CPU-hour, sandbox-hour or million "
                                 "judge tokens, by kind), as a number or a decimal string; null: not set (left out: "
                                 "unchanged)."},
    },
}


def _loosened(current: dict, new: dict) -> list[str]:
    """The ceilings of ``current`` that ``new`` raises or removes, each as ``path: old -> new``.

    >>> _loosened({"rollout.n": 8, "sft.steps": 10}, {"rollout.n": 16, "rollout.max_new_tokens": 64})
    ['rollout.n: 8 -> 16', 'sft.steps: 10 -> none']
    """
    return [f"{path}: {old} -> {new.get(path, 'none')}" for path, old in current.items()
            if path not in new or new[path] > old]


def _quota_view(quota: TeamQuota) -> dict:
    return {"max_gpus": quota.max_gpus, "max_concurrent_runs": quota.max_concurrent_runs, "ceilings": dict(quota.ceilings)}


@transaction.atomic
def team_quota_set(*, actor: Principal, team: Team, changes: dict) -> TeamQuota:
    """Set a team's quota. GPUs and concurrent runs need a platform admin; the ceilings on the size
    of the team's runs (``ceilings``, see :mod:`controlplane.runs.ceilings`) a platform admin sets
    as it likes, and the team's admin may only tighten (lower a ceiling or add one: raising or
    removing one needs a platform admin, or a team admin could undo the platform's limit). Each
    ceiling is checked against the trainer setting it bounds."""
    if not actor.platform_admin:
        if not isinstance(changes, dict) or set(changes) - {"ceilings"}:
            actor.require_platform_admin("setting team quotas")
        actor.require(team.id, "team.admin", "team")
    validate(changes, TEAM_QUOTA_SCHEMA, "quota")
    if "ceilings" in changes:
        errors = ceiling_map_errors(changes["ceilings"], "quota.ceilings")
        if errors:
            raise InvalidInput([FieldError(path, message) for path, message in errors])
    quota, _ = TeamQuota.objects.select_for_update().get_or_create(team=team)
    if "ceilings" in changes and not actor.platform_admin:
        loosened = _loosened(quota.ceilings, changes["ceilings"])
        if loosened:
            actor.require_platform_admin(f"raising or removing a team ceiling ({', '.join(loosened)})")
    before = _quota_view(quota)
    for name, value in changes.items():
        setattr(quota, name, value)
    quota.full_clean()
    quota.save()
    after = _quota_view(quota)
    if after != before:
        audit_record(actor=actor, obj=quota, action="quota.set", before=before, after=after, team=team)
    return quota


@transaction.atomic
def pool_set(*, actor: Principal, name: str, data: dict) -> ResourcePool:
    actor.require_platform_admin("changing resource pools")
    validate(data, POOL_SCHEMA, "pool")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise InvalidInput.one("name", "must be letters, digits, - or _")
    data = dict(data)
    if data.get("price") is not None:
        try:
            data["price"] = parse_amount(data["price"])
        except ValueError as exc:
            raise InvalidInput.one("pool.price", str(exc)) from None
        if data["kind"] not in PRICE_UNITS:
            raise InvalidInput.one("pool.price", f"a {data['kind']} pool has no price: no usage figure counts its time "
                                                 "apart from a run's GPUs (priced by the train_gpu pools); leave it empty")
    pool = ResourcePool.objects.select_for_update().filter(name=name).first()
    before = None if pool is None else _pool_view(pool)
    pool = pool or ResourcePool(name=name)
    for key, value in data.items():
        setattr(pool, key, value)
    pool.full_clean()
    pool.save()
    audit_record(actor=actor, obj=pool, action="pool.set", before=before, after=_pool_view(pool), team=None)
    return pool


def _pool_view(pool: ResourcePool) -> dict:
    return {"kind": pool.kind, "capacity": pool.capacity, "price": amount_text(pool.price)}


def heartbeat_record(*, worker: str, queues: list[str], meta: dict | None = None) -> WorkerHeartbeat:
    hb, _ = WorkerHeartbeat.objects.update_or_create(
        worker=worker, defaults={"queues": list(queues), "last_seen": timezone.now(), "meta": meta or {}}
    )
    return hb


def worker_sweep(*, stale_after_s: float = 60.0, forget_after_s: float = 24 * 3600.0) -> dict:
    """Forget workers silent longer than ``forget_after_s``; report the stale and the alive."""
    now = timezone.now()
    WorkerHeartbeat.objects.filter(last_seen__lt=now - timedelta(seconds=forget_after_s)).delete()
    stale = list(WorkerHeartbeat.objects.filter(last_seen__lt=now - timedelta(seconds=stale_after_s)).values_list("worker", flat=True))
    alive = WorkerHeartbeat.objects.filter(last_seen__gte=now - timedelta(seconds=stale_after_s)).count()
    return {"alive": alive, "stale": stale}


def min_run_s() -> float:
    """A run is never preempted before it has run this long since it last started
    (TEMPER_MIN_RUN_S, 60 s)."""
    return float(settings.TEMPER_MIN_RUN_S)


def _capacity() -> dict[str, int]:
    capacity: dict[str, int] = {}
    for kind, total in ResourcePool.objects.exclude(kind=PoolKind.JUDGE).values_list("kind", "capacity"):
        capacity[kind] = capacity.get(kind, 0) + total
    capacity.setdefault("cpu", DEFAULT_CPU_SLOTS)
    return capacity


def _view(run, started):
    placed = (run.placement or {}) if run.gpus > 0 or run.hosts > 1 else {}
    nodes = tuple((n["worker"], tuple(n["devices"])) for n in run.nodes) if run.hosts > 1 and placed else ()
    return RunView(
        id=run.id, team=run.team.slug, priority=run.priority, pool="train_gpu" if run.gpus > 0 else "cpu",
        slots=run.slots, queued_at=(run.queued_at or run.created_at).timestamp(),
        started_at=started.timestamp() if started else None, preempting=run.preempt_requested,
        placement=(placed["worker"], tuple(placed["devices"])) if placed.get("worker") else None,
        hosts=run.hosts, nodes=nodes,
    )


def drive_task(run: Run) -> tuple[str, str | None]:
    """The task that drives ``run`` and the queue to send it to: a placed run's (a GPU run, or one
    spread over several hosts) goes to the train queue of its first node's worker
    (``Run.placement``), which starts the other nodes; a CPU run's to the rollout queue."""
    worker = (run.placement or {}).get("worker") if run.gpus > 0 or run.hosts > 1 else None
    return (TRAIN_DRIVE_TASK, direct_queue(worker)) if worker else (DRIVE_TASK, None)


def placement_words(placement: dict) -> str:
    """Where an admitted run was placed, for its ``admitted`` event.

    >>> placement_words({"worker": "t@a", "devices": [0, 1]})
    ' on t@a, GPUs 0,1'
    >>> placement_words({"worker": "t@a", "devices": [], "nodes": [{"worker": "t@a", "devices": []}, {"worker": "t@b", "devices": []}]})
    ' on 2 hosts: t@a (drives); t@b'
    """
    def node(n: dict) -> str:
        return n["worker"] + (f", GPUs {','.join(map(str, n['devices']))}" if n.get("devices") else "")

    nodes = placement.get("nodes") or []
    if len(nodes) > 1:
        return f" on {len(nodes)} hosts: " + "; ".join(node(n) + (" (drives)" if i == 0 else "") for i, n in enumerate(nodes))
    return f" on {node(placement)}" if placement.get("worker") else ""


@transaction.atomic
def schedule_tick(*, now=None, min_run: float | None = None, worker: str = ""):
    """Admit, preempt and explain; re-dispatch runs whose driver died; queue again the runs
    paused for want of a worker once one is back; record the tick (``SchedulerTick``). Safe to
    run twice, and concurrently."""
    began = time.monotonic()
    now = now or timezone.now()
    service = queue_service(now=now)
    _resume_served(service)
    # The runs' rows only (not their teams'), in one order, so two ticks or a tick and a driver
    # never hold them in opposite orders.
    runs = list(Run.objects.select_for_update(of=("self",)).filter(state__in=[RunState.QUEUED, RunState.RUNNING])
                .select_related("team").order_by("pk"))
    quotas = _team_quotas(runs)
    # When each running run last started (its latest admission): preemption waits MIN_RUN_S from it.
    admitted = dict(RunEvent.objects.filter(run__in=[r for r in runs if r.state == RunState.RUNNING], kind="admitted")
                    .order_by("run_id", "at").values_list("run_id", "at"))
    started = {r.id: admitted.get(r.id) or r.started_at for r in runs}
    workers = train_workers(now=now)
    held = _audit_holds([r for r in runs if r.state == RunState.QUEUED], now)
    eval_holds_release(now=now)  # evaluations wait on the same audits
    decision = schedule(
        queued=[_view(r, None) for r in runs if r.state == RunState.QUEUED and r.id not in held],
        running=[_view(r, started[r.id]) for r in runs if r.state == RunState.RUNNING],
        capacity=_capacity(), quotas=quotas, now=now.timestamp(), min_run_s=min_run_s() if min_run is None else min_run,
        hosts={w: d for w, d in workers.items() if d}, workers=workers,
    )
    by_id = {r.id: r for r in runs}
    _carry_out(decision, by_id)
    _note_audit_holds(held, by_id, first_position=len(decision.pending) + 1)
    cutoff = now - timedelta(seconds=lease_s())
    for run in runs:
        if run.state != RunState.RUNNING or run.id in decision.admit:
            continue
        seen = run.driver_seen_at or started[run.id]
        if seen is not None and seen >= cutoff:
            continue
        _recover(run, now, service)
    tick = {"at": timezone.now(), "duration_ms": round((time.monotonic() - began) * 1000, 3),
            "queued": sum(1 for r in runs if r.state == RunState.QUEUED and r.id not in decision.admit),
            "admitted": len(decision.admit), "preempted": len(decision.preempt), "worker": worker[:200]}
    # One row, made by the migration: concurrent ticks queue on its lock instead of racing to insert.
    if not SchedulerTick.objects.filter(pk=1).update(**tick):
        SchedulerTick.objects.create(pk=1, **tick)
    return decision


def _team_quotas(runs: list[Run]) -> dict[str, Quota]:
    """Each team's quota by slug (a team of these runs without one gets the default row)."""
    quotas = {q.team.slug: Quota(q.max_gpus, q.max_concurrent_runs) for q in TeamQuota.objects.select_related("team")}
    for run in runs:
        if run.team.slug not in quotas:
            quota, _ = TeamQuota.objects.get_or_create(team=run.team)
            quotas[run.team.slug] = Quota(quota.max_gpus, quota.max_concurrent_runs)
    return quotas


def _carry_out(decision: Decision, by_id: dict[int, Run]) -> None:
    """Admit (and dispatch the driver of), preempt and explain, as the tick decided."""
    for run_id in decision.admit:
        run = by_id[run_id]
        run.transition(RunState.RUNNING)
        run.scheduler_note = {}
        run.driver, run.driver_seen_at = "", None
        run.placement = decision.placements.get(run_id, {})
        run.save()
        where = placement_words(run.placement) if run.placement else ""
        RunEvent.objects.create(run=run, kind="admitted", message=f"admitted (priority {run.priority}){where}",
                                data={"placement": run.placement} if run.placement else {})
        task, queue = drive_task(run)
        dispatch.send_on_commit(task, run_id, queue=queue)
    for run_id in decision.preempt:
        run = by_id[run_id]
        run.preempt_requested = True
        run.save(update_fields=["preempt_requested", "updated_at"])
        waiting = [rid for rid, note in decision.pending.items() if f"run {run_id} " in note["reason"]]
        RunEvent.objects.create(run=run, kind="preemption", message=f"asked to checkpoint and yield its slot to run {waiting[0] if waiting else '?'}",
                                data={"for": waiting})
    for run_id, note in decision.pending.items():
        run = by_id[run_id]
        if run.scheduler_note != note:
            run.scheduler_note = note
            run.save(update_fields=["scheduler_note", "updated_at"])


def _note_audit_holds(held: dict[int, tuple[str, str, int, int]], by_id: dict[int, Run], *, first_position: int) -> None:
    """The runs an audit holds, after those the scheduler left waiting: each one's note, and an
    event once per wait (not per tick)."""
    for position, (run_id, (verdict, reason, blocking, pins)) in enumerate(sorted(held.items()), start=first_position):
        run = by_id[run_id]
        before = run.scheduler_note or {}
        note = {"position": position, "binding": "audit", "reason": reason, "used": pins - blocking, "limit": pins,
                "verdict": verdict}
        if before != note:
            run.scheduler_note = note
            run.save(update_fields=["scheduler_note", "updated_at"])
        if before.get("binding") != "audit" or before.get("verdict") != verdict:  # once per wait, not per tick
            RunEvent.objects.create(run=run, kind="audit_blocked" if verdict == "refuse" else "audit_wait",
                                    message=reason[:4000], data={"verdict": verdict})


def _audit_holds(queued: list[Run], now) -> dict[int, tuple[str, str, int, int]]:
    """Queued runs that may not start yet because a pinned domain version's verifier audit has not
    cleared it (``domains.selectors.audit_gates``): run id -> (``wait`` or ``refuse``, the reasons,
    how many of its pins hold it, how many pins it has). A refused run stays queued with the reason
    until an admin overrides the audit or a new audit passes; it then starts like any other."""
    if not queued:
        return {}
    pins = list(RunDomain.objects.filter(run__in=queued).select_related("domain_version__domain").order_by("run_id", "id"))
    versions = {p.domain_version_id: p.domain_version for p in pins}
    gates = audit_gates(versions=versions.values(), now=now)
    # A run queued before its version had any audit (queued before audits gated runs) would wait
    # on nothing: its audit is requested here, as run_start does.
    audit_ensure(versions=[v for vid, v in versions.items() if gates[vid].verdict == "wait"], note="a queued run waits on it")
    out: dict[int, tuple[str, str, int, int]] = {}
    counts: dict[int, int] = {}
    for p in pins:
        counts[p.run_id] = counts.get(p.run_id, 0) + 1
        gate = gates[p.domain_version_id]
        if gate.verdict == "ok":
            continue
        verdict, reason, blocking, _ = out.get(p.run_id, ("wait", "", 0, 0))
        verdict = "refuse" if "refuse" in (verdict, gate.verdict) else "wait"
        out[p.run_id] = (verdict, f"{reason}; {gate.reason}" if reason else gate.reason, blocking + 1, 0)
    return {rid: (v, r, b, counts[rid]) for rid, (v, r, b, _) in out.items()}


DRIVE_TASK = "temper.rollout.drive_run"
TRAIN_DRIVE_TASK = "temper.train.drive_run"
log = logging.getLogger(__name__)


def _recover(run: Run, now, service: QueueService) -> None:
    """A running run whose lease went silent. One dead driver makes one ``recovery`` event,
    however many ticks (or concurrent schedulers) notice it: the takeover is a conditional update
    of the lease the dead driver left (it clears the driver and starts a fresh lease period for
    the next one), and only the tick whose update took it records the event and re-dispatches.
    A run re-dispatched that no driver claimed within a lease (its message lost) is sent again
    without another event. With no live worker on the driver's queue the run is paused naming
    the queue, and resumes by itself when one is back. A GPU run goes back to the worker holding
    its devices while that worker lives; when it does not, the run is paused and queued again
    once a train worker is live, to be given devices anew."""
    task, direct = drive_task(run)
    queue = direct or dispatch.TASK_QUEUES[task]
    if direct and not service.served(direct):
        worker = run.placement["worker"]
        run_pause_system(run=run, worker=run.driver, cause="devices_lost", wait_for_queue=TRAIN_QUEUE,
                         message=f"paused at step {run.current_step}: {worker}, which "
                                 f"{'holds its GPUs' if run.gpus > 0 else 'leads its hosts'}, is gone; it is queued again "
                                 "to be placed anew from its last checkpoint when a train worker is live",
                         data={"queue": direct, "previous_driver": run.driver, "placement": run.placement})
        return
    if not service.served(queue):
        note = service.unserved_note(queue)
        run_pause_system(run=run, worker=run.driver, cause="no_worker", wait_for_queue=queue,
                         message=f"paused at step {run.current_step}: {note}; it resumes from its last checkpoint by itself "
                                 "when a worker serves the queue", data={"queue": queue, "previous_driver": run.driver})
        return
    taken = Run.objects.filter(pk=run.pk, state=RunState.RUNNING, driver=run.driver,
                               driver_seen_at=run.driver_seen_at).update(driver="", driver_seen_at=now, inflight={})
    if not taken:  # another scheduler took it first
        return
    if run.driver:
        RunEvent.objects.create(run=run, kind="recovery", data={"previous_driver": run.driver, "step": run.current_step},
                                message=f"driver {run.driver} silent for over {lease_s():.0f} s; resuming from the last "
                                        "checkpoint on another worker")
    else:
        log.warning("run %s: dispatched but no driver claimed it within %.0f s; sending it again", run.id, lease_s())
    dispatch.send_on_commit(task, run.id, queue=direct)


def _resume_served(service: QueueService) -> list[int]:
    """Runs the system paused for want of a worker on a queue that a live worker serves again go
    back to the queue, to resume from their last checkpoint when admitted."""
    resumed = []
    waiting = Run.objects.select_for_update().filter(state=RunState.PAUSED, scheduler_note__has_key=RESUME_WHEN_SERVED).order_by("pk")
    for run in waiting:
        queue = run.scheduler_note[RESUME_WHEN_SERVED]
        if not service.served(queue):
            continue
        run.transition(RunState.QUEUED)
        run.scheduler_note = {}
        run.save()
        RunEvent.objects.create(run=run, kind="resumed", data={"cause": "worker_back", "queue": queue},
                                message=f"a live worker serves queue {queue} again; queued to resume from the last checkpoint")
        resumed.append(run.id)
    return resumed
