"""What a run's driver watches around each step (workers/driver.py).

The driver's loop is step -> observers: each observer is a small object whose ``after_step(done)``
is called, in the order the driver lists them, after every step, with a :class:`StepDone` holding
what the step produced. Observers listed before the :class:`Recorder` add to the step's metrics
(verification latencies, lanes, counters); the recorder writes the step; those after it watch what
was written (held-out evaluation, alerts, checkpoints, silent workers, budgets). An observer
returns None to go on, :data:`FINISHED` to end the run as completed, or the driver's reason for a
pause it has just recorded. Each database write goes through the driver's hold (``db``), one write
at a time, so a database outage retries exactly the write it interrupted.
"""
from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError

from controlplane.alerts import services as alerts
from controlplane.domains.pins import domain_quotas
from controlplane.domains.policy import Quarantine, capped_shares
from controlplane.runs import forecast
from controlplane.runs import services as runs
from controlplane.runs import watch
from controlplane.runs.models import MetricPoint, Run, RunDomain
from controlplane.runs.selectors import run_quarantined_domains, run_weights
from controlplane.scheduling.selectors import QueueService, queue_service
from workers import lanes as lanes_
from workers.evaluate import periodic_eval
from workers.verify import LOST, NO_WORKER

log = logging.getLogger(__name__)

FINISHED = "completed"
"""What an observer returns to end the run as completed (a wall-clock or token budget spent)."""


@dataclass
class StepDone:
    """One step as the driver saw it: the run's row as of the step's heartbeat, the step's number,
    its metrics (observers before the recorder add to them), the trajectories it generated, the
    samples the Job's callback kept, the tokens they hold and the step's usage."""

    run: Run
    step: int
    metrics: dict[str, float]
    trajectories: list
    samples: list
    tokens: int
    usage: Any


class VerifyLanes:
    """Slow sandboxed domains go to the long verification lane while a worker serves it
    (:meth:`task_for`, asked by the verify path on every batch); after each step, the domains'
    latency metrics (``verify/<d>/p50_s``, ``p99_s``), a lane move as a ``lane`` event, and each
    sandboxed domain's lane as ``verify/<d>/long_lane``."""

    def __init__(self, run: Run, needs: dict[str, str | None], queues: "QueueWatch", db: Callable) -> None:
        self.run, self.queues, self.db = run, queues, db
        self.sandboxed = sorted(slug for slug, queue in needs.items() if queue == lanes_.QUEUES[lanes_.SHORT])
        self.lanes = lanes_.Lanes(settings.TEMPER_VERIFY_LONG_S, seed=lane_seed(self.sandboxed))

    def task_for(self, slug: str) -> str | None:
        """The long lane's task for a long domain while a worker serves it (else the usual one)."""
        if settings.TEMPER_VERIFY_LANES and self.lanes.lane(slug) == lanes_.LONG and self.queues.served(lanes_.QUEUES[lanes_.LONG]):
            return lanes_.TASKS[lanes_.LONG]
        return None

    def after_step(self, done: StepDone) -> None:
        latencies = step_latencies(done.trajectories)
        done.metrics.update(latency_metrics(latencies))
        self.db(_observe_lanes, done.run, self.lanes, {d: v for d, v in latencies.items() if d in self.sandboxed}, done.step)
        done.metrics.update({f"verify/{d}/long_lane": float(self.task_for(d) is not None) for d in self.sandboxed})


class Levels:
    """A domain's curriculum level that moved at this step is a ``level`` event, with the step from
    which its batches are sampled at the new level."""

    def __init__(self, job, db: Callable) -> None:
        self.job, self.db = job, db
        self.levels = dict(job.sampler.levels)

    def after_step(self, done: StepDone) -> None:
        for slug, before, after in level_changes(self.levels, self.job.sampler.levels):
            self.db(runs.run_event_record, run=done.run, kind="level",
                    message=level_message(slug, before, after, done.step, done.run.staleness),
                    data={"domain": slug, "from": before, "to": after, "recorded_step": done.step,
                          "step": done.step + 1 + done.run.staleness})
        self.levels = dict(self.job.sampler.levels)


class DomainMix:
    """The run's domain weights, share caps and quarantine. Weights changed through the API and
    caps changed by an admin take effect at each step boundary (:meth:`before_step`); a domain
    whose verifications are mostly infrastructure errors is quarantined after the step that shows
    it (:meth:`after_step`): its samples stop and the run goes on."""

    def __init__(self, job, run: Run, domains: list[RunDomain], live: "LiveQuotas", db: Callable) -> None:
        self.job, self.live, self.db = job, live, db
        self.weights = {rd.domain.slug: rd.weight for rd in domains}
        self.caps = live.caps
        self.quarantine = Quarantine(run_quarantined_domains(run=run))
        if self.quarantine.quarantined:
            _apply_quarantine(job, self.weights, self.caps, self.quarantine.quarantined)

    def before_step(self, run: Run) -> list[str]:
        """Apply the weights and caps in force now; the domains the run samples from."""
        self.weights, self.caps = self.db(_apply_weights, self.job, run, self.weights, self.live, self.quarantine.quarantined)
        return [d for d, w in self.weights.items() if w > 0 and d not in self.quarantine.quarantined]

    def after_step(self, done: StepDone) -> None:
        unanswered = Counter(t.task.domain for t in done.trajectories if t.verification is not None
                             and (NO_WORKER in t.verification.details or LOST in t.verification.details))
        for slug, bad, seen in self.quarantine.observe(without_unanswered(done.metrics, unanswered), list(self.weights)):
            self.db(runs.run_event_record, run=done.run, kind="quarantine",
                    data={"domain": slug, "infra": bad, "samples": seen, "step": done.step},
                    message=f"domain {slug} quarantined: {bad:.0f} of its last {seen:.0f} verifications "
                            f"were infrastructure errors; its samples stop, the run goes on")
            _apply_quarantine(self.job, self.weights, self.caps, self.quarantine.quarantined)


class VerifyCounters:
    """The verify path's running counts: batches re-sent and items lost after every re-send."""

    def __init__(self, gatherer) -> None:
        self.gatherer = gatherer

    def after_step(self, done: StepDone) -> None:
        done.metrics["verify/resent_batches"] = float(self.gatherer.stats["resent"])
        done.metrics["verify/lost_items"] = float(self.gatherer.stats["lost_items"])


class Recorder:
    """Writes the step (idempotently): its metrics with the tampering counts, its sampled
    trajectories, tokens and usage, under the verifier versions it ran; then the run's tampering
    watch reads what was written."""

    def __init__(self, worker: str, versions: dict[str, int], db: Callable) -> None:
        self.worker, self.versions, self.db = worker, versions, db

    def after_step(self, done: StepDone) -> None:
        counts, examples = watch.tampering_counts(done.trajectories)
        done.metrics.update(watch.tampering_metrics(counts))
        self.db(runs.run_record_step, run=done.run, worker=self.worker, step=done.step, metrics=done.metrics,
                samples=done.samples, verifier_versions=self.versions, tokens=done.tokens, usage=done.usage)
        self.db(watch.run_watch_tampering, run=done.run, step=done.step, counts=counts, examples=examples)


class HeldOut:
    """Every ``every`` steps, the in-training evaluation on the held-out split, then its watch and
    the forecast it updates (``forecast/asymptote*`` points, for the charts and alert rules)."""

    def __init__(self, job, every: int, db: Callable) -> None:
        self.job, self.every, self.db = job, every, db

    def after_step(self, done: StepDone) -> None:
        if self.every and done.step % self.every == 0:
            self.db(periodic_eval, self.job, done.run, done.step)
            self.db(watch.run_watch_heldout, run=done.run, step=done.step)
            self.db(_forecast, done.run, done.step)


class Alerts:
    """The run's alert rules, on what its steps wrote."""

    def __init__(self, db: Callable) -> None:
        self.db = db

    def after_step(self, done: StepDone) -> None:
        self.db(_alerts, done.run, done.step)


class Checkpoints:
    """A checkpoint every ``every`` steps (``save`` skips a step already saved)."""

    def __init__(self, every: int, save: Callable[[], None]) -> None:
        self.every, self.save = every, save

    def after_step(self, done: StepDone) -> None:
        if done.step % self.every == 0:
            self.save()


class Silence:
    """Workers that look alive but answered none of the last steps' verifications: the run saves
    its checkpoint and pauses for a person to look (:class:`SilentQueues`)."""

    def __init__(self, needs: dict[str, str | None], worker: str, save: Callable[[], None]) -> None:
        self.queues, self.worker, self.save = SilentQueues(needs), worker, save

    def after_step(self, done: StepDone) -> str | None:
        if stuck := self.queues.observe(done.trajectories):
            self.save()
            _pause_silent(done.run, self.worker, stuck)
            return f"paused (workers on queue {', '.join(stuck)} answer nothing)"
        return None


def lane_seed(slugs: list[str], runs: int = 5, steps: int = 20) -> dict[str, list[float]]:
    """Each domain's recent verification latencies from the runs before this one (the p99 of
    each of its last ``steps`` steps in its last ``runs`` runs): a domain known to be slow starts
    in the long lane instead of holding the short one until this run has measured it."""
    out: dict[str, list[float]] = {}
    for slug in slugs:
        run_ids = list(RunDomain.objects.filter(domain__slug=slug).order_by("-run_id").values_list("run_id", flat=True)[:runs])
        values = MetricPoint.objects.filter(run_id__in=run_ids, key=f"verify/{slug}/p99_s").order_by("-id").values_list("value", flat=True)
        out[slug] = list(values[: runs * steps])
    return out


def _observe_lanes(run: Run, lanes, latencies: dict[str, list[float]], step: int) -> None:
    """Fold a step's latencies into the lanes; a domain that changes lane is a run event."""
    for slug, before, after in lanes.observe(latencies):
        p95 = lanes.p95(slug) or 0.0
        runs.run_event_record(run=run, kind="lane", data={"domain": slug, "from": before, "to": after, "step": step, "p95_s": p95},
                              message=f"domain {slug} moves to the {after} verification lane: its p95 is {p95:.2f} s "
                                      f"(long from {lanes.long_s:g} s)")


def level_changes(before: dict[str, int], after: dict[str, int]) -> list[tuple[str, int, int]]:
    """Each domain whose curriculum level moved at this step: (slug, from, to).

    >>> level_changes({"a": 0, "b": 1}, {"a": 1, "b": 1, "c": 0})
    [('a', 0, 1)]
    """
    return [(slug, before.get(slug, 0), level) for slug, level in after.items() if level != before.get(slug, 0)]


def level_message(slug: str, before: int, after: int, step: int, staleness: int) -> str:
    """The ``level`` event's words: what moved, and from which step its batches are sampled at it.

    >>> level_message("builtin-sorting", 0, 1, 40, 0)
    'builtin-sorting moved up to curriculum level 1 after step 40 (it passed level 0): its batches from step 41 are harder, so its reward drops there by design'
    """
    way = "up" if after > before else "down"
    return (f"{slug} moved {way} to curriculum level {after} after step {step} (it passed level {before}): its batches "
            f"from step {step + 1 + staleness} are {'harder' if after > before else 'easier'}, so its reward "
            f"{'drops' if after > before else 'rises'} there by design")


def _aside(what: str, record: Callable[..., Any], run: Run, step: int) -> None:
    """``record(run=run, step=step)``, a side channel of the run (its alert rules, its forecast): a
    fault there is logged and never stops the run. A database outage is not such a fault: it is
    raised, for the driver's hold to retry it once the database is back."""
    try:
        record(run=run, step=step)
    except (DatabaseOperationalError, DatabaseInterfaceError):
        raise
    except Exception:  # noqa: BLE001 - a side channel of the run, not part of it
        log.exception("run %s: %s at step %s failed", run.id, what, step)


def _forecast(run: Run, step: int) -> None:
    """Record the forecast the step's evaluation updates (``forecast/asymptote*`` points)."""
    _aside("the forecast", forecast.run_record_forecast, run, step)


def _alerts(run: Run, step: int) -> None:
    """Evaluate the run's alert rules on what its steps wrote (controlplane/alerts): a rule whose
    condition holds at this step fires now."""
    _aside("alert evaluation", alerts.alerts_after_step, run, step)


def step_latencies(trajs) -> dict[str, list[float]]:
    """Each domain's verification latencies (``details["verify_s"]``) over a step's trajectories."""
    out: dict[str, list[float]] = {}
    for t in trajs:
        seconds = t.verification.details.get("verify_s") if t.verification is not None else None
        if isinstance(seconds, (int, float)):
            out.setdefault(t.task.domain, []).append(float(seconds))
    return out


def latency_metrics(latencies: dict[str, list[float]]) -> dict[str, float]:
    """Per-domain verification latency of one step: ``verify/<domain>/p50_s`` and ``p99_s``.

    >>> latency_metrics({"d": [0.1, 0.2, 0.3, 0.4]})
    {'verify/d/p50_s': 0.25, 'verify/d/p99_s': 0.397}
    """
    out = {}
    for domain, values in latencies.items():
        out[f"verify/{domain}/p50_s"] = round(statistics.median(values), 6)
        out[f"verify/{domain}/p99_s"] = lanes_.percentile(values, 0.99)
    return out


def _pause_silent(run: Run, worker: str, queues: list[str]) -> None:
    """Workers that look alive but answered none of the last steps' verifications pause the run
    for a person to look (a hung pool, a sandbox runtime that never returns): their masked steps
    would otherwise go on for ever, burning generation and training nothing. It waits for a
    user's resume, since the queue looks served and the scheduler could not tell it has healed."""
    names = ", ".join(queues)
    runs.run_pause_system(run=run, worker=worker, cause="unanswered",
                          message=f"paused at step {run.current_step}: the workers on queue {names} look alive but "
                                  f"answered none of the verifications of the last {SilentQueues.STEPS} steps, even "
                                  f"after re-sending (see `celery -A workers.celery inspect active`); resume the run "
                                  "once they answer",
                          data={"queue": queues[0], "queues": queues, "steps": SilentQueues.STEPS})


class SilentQueues:
    """Counts, per queue, the consecutive steps in which every verification sent to it was lost
    after every re-send (``details["lost"]``) and none answered: such steps are masked and do
    not count toward a domain's quarantine, so this is what stops a run whose workers are alive
    but answer nothing.

    >>> from types import SimpleNamespace as NS
    >>> from trainer.outcomes import Outcome, Verification
    >>> lost = NS(task=NS(domain="code"), verification=Verification(Outcome.SANDBOX_ERROR, 0.0, {LOST: "verify"}))
    >>> ok = NS(task=NS(domain="code"), verification=Verification(Outcome.PASS, 1.0, {}))
    >>> watch = SilentQueues({"code": "verify", "addition": None})
    >>> [watch.observe([lost, lost]) for _ in range(SilentQueues.STEPS - 1)], watch.observe([lost, ok])
    ([[], []], [])
    >>> [watch.observe([lost]) for _ in range(SilentQueues.STEPS)][-1]
    ['verify']
    """

    STEPS = 3

    def __init__(self, needs: dict[str, str | None]) -> None:
        self.needs = needs
        self.streak: Counter = Counter()

    def observe(self, trajectories) -> list[str]:
        """Count one step; the queues silent for ``STEPS`` steps in a row."""
        lost, answered = Counter(), Counter()
        for t in trajectories:
            queue = self.needs.get(t.task.domain)
            if queue is None or t.verification is None or NO_WORKER in t.verification.details:
                continue
            (lost if LOST in t.verification.details else answered)[queue] += 1
        for queue in set(self.needs.values()) - {None}:
            self.streak[queue] = self.streak[queue] + 1 if lost[queue] and not answered[queue] else 0
        return sorted(q for q, n in self.streak.items() if n >= self.STEPS)


def without_unanswered(metrics: dict[str, float], unanswered: Counter) -> dict[str, float]:
    """The step's metrics as the quarantine sees them: verifications that no worker was there to
    do (``details["no_worker"]``) or that no worker answered after every re-send
    (``details["lost"]``) are the deployment's fault, not the domain's, and do not count; the
    quarantine is for domains whose workers answer with infrastructure errors (a broken sandbox
    image, a judge that keeps failing). A queue left with no live worker pauses the run instead.

    >>> without_unanswered({"outcome/code/sandbox_error": 6.0, "outcome/code/pass": 2.0}, Counter({"code": 4}))
    {'outcome/code/sandbox_error': 2.0, 'outcome/code/pass': 2.0}
    """
    out = dict(metrics)
    for slug, n in unanswered.items():
        key = f"outcome/{slug}/sandbox_error"
        out[key] = max(out.get(key, 0.0) - n, 0.0)
    return out


class QueueWatch:
    """Which queues a live worker serves, as the driver's threads see it: read from the workers'
    heartbeats by the driver's lease thread every ``EVERY_S`` and at each step boundary, and
    asked without a database query by the verify path (possibly on the Job's verify thread)."""

    EVERY_S = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = 0.0
        self.service = QueueService(live=frozenset(), last_seen={})
        self.refresh()

    def refresh(self) -> QueueService:
        service = queue_service()
        with self._lock:
            self.service, self._read_at = service, time.monotonic()
        return service

    def age_s(self) -> float:
        return time.monotonic() - self._read_at

    def served(self, queue: str) -> bool:
        with self._lock:
            return self.service.served(queue)

    def unserved(self, needs: dict[str, str | None], domains: list[str]) -> list[str]:
        """The queues that ``domains`` need and no live worker serves (read afresh)."""
        service = self.refresh()
        return sorted({q for d in domains if (q := needs.get(d)) and not service.served(q)})


class LiveQuotas:
    """A run's domains' quota and priority, re-read at every step: an admin's change reaches the
    run within a step. ``timeouts``, ``priorities`` and ``sandboxes`` are updated in place (the
    verify path and the environments' sandboxes read them at each call); ``caps`` is replaced."""

    def __init__(self, slugs: list[str]) -> None:
        self.slugs = list(slugs)
        self.timeouts: dict[str, float] = {}
        self.priorities: dict[str, int] = {}
        self.sandboxes: dict[str, int] = {}
        self.caps: dict[str, float] = {}
        self.refresh()

    def refresh(self) -> bool:
        """Read the quotas; True when a share cap changed."""
        quotas = domain_quotas(slugs=self.slugs)
        self.timeouts.update({slug: q.task_timeout_s for slug, q in quotas.items()})
        self.priorities.update({slug: q.priority for slug, q in quotas.items()})
        self.sandboxes.update({slug: q.max_concurrent_sandboxes for slug, q in quotas.items()})
        caps = {slug: q.max_share for slug, q in quotas.items()}
        changed, self.caps = caps != self.caps, caps
        return changed

    def message_priority(self, slug: str) -> int:
        """The Celery message priority of a domain's verification batch (Redis: 0 goes first)."""
        return round(9 * (99 - self.priorities.get(slug, 50)) / 98)


def _apply_quarantine(job, weights: dict[str, float], caps: dict[str, float], quarantined: set[str]) -> None:
    """Stop sampling quarantined domains and those paused (weight 0); when none is left the run
    cannot go on."""
    active = {d: w for d, w in weights.items() if d not in quarantined and w > 0}
    if not active:
        raise RuntimeError("every domain of the run is quarantined for infrastructure errors or paused")
    shares = capped_shares(active, caps)
    job.sampler.set_weights({d: shares.get(d, 0.0) for d in weights})


def _apply_weights(job, run: Run, current: dict[str, float], live: LiveQuotas,
                   quarantined: set[str]) -> tuple[dict[str, float], dict[str, float]]:
    """Domain weights changed through the API, and share caps changed by an admin, take effect
    at this step boundary. Returns the weights and caps now in force."""
    latest = run_weights(run=run)
    caps_changed = live.refresh()
    if latest != current or caps_changed:
        _apply_quarantine(job, latest, live.caps, quarantined)
    if latest != current:
        paused = sorted(d for d, w in latest.items() if w == 0)
        runs.run_event_record(run=run, kind="weights_applied",
                              message=f"domain weights applied at step {job.step_count}: "
                                      + ", ".join(f"{d} {w:g}" for d, w in latest.items())
                                      + (f" ({', '.join(paused)} paused)" if paused else ""),
                              data={"weights": latest, "paused": paused, "step": job.step_count})
    if caps_changed:
        runs.run_event_record(run=run, kind="quotas_applied", message=f"domain share caps applied at step {job.step_count}",
                                data={"max_share": live.caps})
    return latest, live.caps
