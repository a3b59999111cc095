"""The run driver: one long task owns one run and loops sample -> generate -> verify -> update.

:func:`drive` is the whole life of a run on a worker: claim it, admit it
(:func:`controlplane.runs.preflight.run_preflight`: every refusal before it starts), build the
trainer's Job from the run's pinned config and domain versions (resuming from the last checkpoint
when there is one), then loop: the step boundary (:meth:`RunDriver.before_step`: lease, pause,
cancel, preemption, domain weights, served queues), the step, and the per-step observers
(workers/observers.py: metrics, the step's record, evaluation, alerts, checkpoints, budgets); then
finish. Whatever ends it early (a lost lease, an outage, a lost rank, an error) is answered by
:meth:`RunDriver.stopped_by`.

It holds the run's lease (renewed every step and by a thread during long steps) and writes each
step idempotently. With a staleness bound above 0 the Job verifies upcoming batches on its own
thread while the current one trains, so the ``verify_batch`` given to it touches no database: what
is in flight is kept in memory (:class:`InFlight`) and written by the driver's threads.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable

from django.conf import settings
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.db import close_old_connections

from controlplane import dispatch
from controlplane.domains.pins import domain_quotas, pinned
from controlplane.live.services import run_wake
from controlplane.registry.selectors import run_eval_suite
from controlplane.runs import services as runs
from controlplane.runs.models import Run, RunState
from controlplane.runs.preflight import Preflight, checkpoint_root, run_preflight, trainer_config, with_model_paths
from controlplane.runs.selectors import run_domains
from controlplane.scheduling.selectors import QueueService, worker_stale_s
from trainer.run_fields import RUN_DEFAULTS
from workers import broker, outage
from workers.domains import register_data_domains, worker_name
from workers.evaluate import periodic_eval
from workers.compute_observers import Budgets, SandboxPools, SplitAdvice, verify_lanes_bound
from workers.observers import (FINISHED, Alerts, Checkpoints, DomainMix, HeldOut, Levels, LiveQuotas, QueueWatch, Recorder,
                               Silence, StepDone, VerifyCounters, VerifyLanes, _alerts)
from workers.usage import step_usage
from workers.verify import environment_context, make_verify_batch, worker_queue

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_EVERY = RUN_DEFAULTS["checkpoint.every_steps"]


def run_environment_context(slugs: list[str], limits: Callable[[str], int | None] | None = None):
    """The context a run's environments get: the sandbox, behind each domain's sandbox quota as it
    stands now, with and without Redis (``limits``: the leader's, refreshed at every step boundary;
    else the quotas read again at most every :data:`SANDBOX_LIMITS_EVERY_S`, as a follower rank
    reads them)."""
    return environment_context(limits or SandboxLimits(slugs).get)


SANDBOX_LIMITS_EVERY_S = 5.0


class SandboxLimits:
    """Each domain's ``max_concurrent_sandboxes``, read again when older than
    :data:`SANDBOX_LIMITS_EVERY_S`: an admin's change reaches the episodes of a follower rank."""

    def __init__(self, slugs: list[str]) -> None:
        self.slugs, self._lock, self._read_at, self._limits = list(slugs), threading.Lock(), -SANDBOX_LIMITS_EVERY_S, {}

    def get(self, slug: str) -> int | None:
        with self._lock:
            if time.monotonic() - self._read_at >= SANDBOX_LIMITS_EVERY_S:
                try:
                    self._limits = {s: q.max_concurrent_sandboxes for s, q in domain_quotas(slugs=self.slugs).items()}
                except (DatabaseOperationalError, DatabaseInterfaceError):  # keep the last known quotas
                    log.warning("could not read the sandbox quotas of %s; keeping the last ones", self.slugs, exc_info=True)
                    if self._read_at < 0:
                        raise  # none known yet: the episode's sandbox fails as infrastructure
                self._read_at = time.monotonic()
            return self._limits.get(slug)


class InFlight:
    """What the driver waits on, shared by its threads: the step loop's phase and the items in
    verification per domain (from any batch of the pipeline), with the time it last changed.

    >>> inflight = InFlight()
    >>> inflight.set_phase("step")
    >>> with inflight.verifying({"code": 3}):
    ...     with inflight.verifying({"code": 1, "math": 2}):
    ...         print(inflight.snapshot()[1]["phase"], inflight.snapshot()[1]["per_domain"])
    ...     print(inflight.snapshot()[1]["per_domain"])
    verify {'code': 4, 'math': 2}
    {'code': 3}
    >>> inflight.snapshot()[1]["phase"], inflight.snapshot()[1]["per_domain"]
    ('step', {})
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase = "starting"
        self._verifying: Counter[str] = Counter()
        self._since = time.time()
        self._blocked: str | None = None
        self.version = 0

    def block(self, note: str | None) -> None:
        """What the run is held by (the broker unreachable), shown as its phase; None: no more."""
        with self._lock:
            if note is not None and self._blocked is None or note is None and self._blocked is not None:
                self._since = time.time()
            self._blocked = note
            self.version += 1

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self._phase = phase
            self._changed()

    @contextmanager
    def verifying(self, per_domain: dict[str, int]):
        with self._lock:
            self._verifying.update(per_domain)
            self._changed()
        try:
            yield
        finally:
            with self._lock:
                self._verifying.subtract(per_domain)
                self._verifying = +self._verifying  # drop the zeros
                self._changed()

    def _changed(self) -> None:
        """(Under the lock.) What the driver waits on changed now: a new version for the page."""
        self._since = time.time()
        self.version += 1

    def snapshot(self) -> tuple[int, dict]:
        """``(version, {"phase", "since", "per_domain"})``; phase is what holds the run (the broker
        unreachable) while something does, ``verify`` while items are being verified, else the
        step loop's."""
        with self._lock:
            phase = self._blocked or ("verify" if self._verifying else self._phase)
            return self.version, {"phase": phase, "since": datetime.fromtimestamp(self._since, timezone.utc).isoformat(),
                                  "per_domain": dict(self._verifying)}


def drive(run_id: int, worker: str | None = None, send=None, abort: Callable[[str], None] | None = None) -> str:
    """Drive the run until it ends or must stop; returns why it returned. Leading several ranks,
    ``abort(reason)`` ends this process when the watchdog finds a rank lost while this thread
    waits in a collective with it (workers/launch.py passes it)."""
    worker = worker or worker_name()
    placed = Run.objects.filter(pk=run_id).values_list("gpus", "placement").first()
    if placed and placed[0] > 0 and (placed[1] or {}).get("worker") not in (None, worker):
        return f"not claimed (its GPUs were assigned on {placed[1]['worker']})"
    run = runs.run_claim(run_id=run_id, worker=worker)
    if run is None:
        return "not claimed (not running, or another live driver owns it)"
    admitted = run_preflight(run=run, worker=worker, world=_world())
    if admitted.refused:
        return admitted.refused
    if run.gpus > 0 and run.placement:
        _record_devices(run, worker)
    _record_ranks(run, worker)
    driver = RunDriver(run, worker, admitted, send=send, abort=abort)
    try:
        job = driver.build()
        while job.step_count < driver.run.budget_steps:
            if (stop := driver.before_step()) is not None:
                return stop
            if (stop := driver.observe(driver.step())) not in (None, FINISHED):
                return stop
            if stop == FINISHED:
                break
        return driver.finish()
    except Exception as exc:  # noqa: BLE001 - each way a run stops early is answered, the worker lives on
        return driver.stopped_by(exc)
    finally:
        driver.close()


class RunDriver:
    """One run's driver on this worker, between admission and its end: what its loop needs (the
    job, the verify path, the holds of the broker and the database, the lease thread, the
    observers) and each part of the loop, which :func:`drive` strings together."""

    def __init__(self, run: Run, worker: str, admitted: Preflight, send=None, abort: Callable[[str], None] | None = None) -> None:
        self.run, self.worker, self.admitted, self.abort = run, worker, admitted, abort
        pins = admitted.pins
        self.live = LiveQuotas([pin.slug for pin in pins])
        send = send or (lambda name, args: dispatch.producer().send_task(
            name, args=args, queue=dispatch.TASK_QUEUES[name], priority=self.live.message_priority(args[0])))
        self.inflight = InFlight()
        # A broker outage holds the run (sends retried with backoff, the panel says so) for up to the
        # run's collective timeout; a longer one pauses it (BrokerUnreachable, in stopped_by).
        send = broker.HeldSend(send, hold_s=run.collective_timeout_s, on_wait=self.inflight.block)
        # So does a database outage: the step loop's reads and writes of the run's rows are retried
        # the same way (each is safe to run again); a longer one pauses it (DatabaseUnreachable).
        self.db = outage.HeldDatabase(hold_s=run.collective_timeout_s, on_wait=self.inflight.block)
        self.versions = {pin.slug: pin.version for pin in pins}
        self.queues = QueueWatch()
        self.needs = {pin.slug: worker_queue(pin.verifier_spec) for pin in pins}  # domain -> the queue its verification needs
        self.lanes = VerifyLanes(run, self.needs, self.queues, self.db)
        self.verify_remote, self.gatherer = make_verify_batch(
            cascades={pin.slug: pin.verifier_spec for pin in pins}, versions=self.versions, served=self.queues.served,
            timeouts=self.live.timeouts, priorities=self.live.priorities, send=send,
            deadline_s=settings.TEMPER_VERIFY_DEADLINE_S or None, lane=self.lanes.task_for,
            artifacts=lambda: self.artifacts)
        self.artifacts: dict | None = None  # the job's artifacts setting, once the job is made
        self.collected: dict = {}
        self.job = None
        self.saved_step = -1  # the step of the checkpoint on disk: a pause right after it does not save it again
        self.stop_renewing = threading.Event()
        threading.Thread(target=_renew_lease, args=(run.id, worker, self.stop_renewing, self.inflight, self.queues),
                         name=f"lease-run-{run.id}", daemon=True).start()

    def verify_batch(self, items):
        """Verify (on the Job's verify thread when it overlaps), counting the items in flight."""
        with self.inflight.verifying(Counter(task.domain for _, task in items)):
            return self.verify_remote(items)

    def collect(self, step: int, metrics: dict, samples: list) -> None:
        """The Job's callback: the step's samples, for the record."""
        self.collected.update(step=step, metrics=dict(metrics), samples=list(samples))

    def checkpoint(self) -> None:
        if self.saved_step != self.job.step_count:
            _checkpoint(self.job, self.run, self.db)
            self.saved_step = self.job.step_count

    def build(self):
        """The run's Job, resumed from its last checkpoint or new (with its SFT stage), and the
        observers of its steps."""
        from trainer import ranks  # lazy: trainer.job and its imports load torch and transformers (seconds)
        from trainer.job import Job  # lazy: as above; every worker imports this module, only rollout workers drive

        run, pins = self.run, self.admitted.pins
        register_data_domains(pins)
        env_context = run_environment_context([pin.slug for pin in pins], self.live.sandboxes.get)
        ckpt = runs.latest_checkpoint(run)
        if ckpt is not None:
            runs.run_rewind(run=run, to_step=ckpt.step)
            self.job = Job.resume(ckpt.path, callbacks=[self.collect], verify_batch=self.verify_batch, env_context=env_context)
            self.saved_step = ckpt.step
            runs.run_event_record(run=run, kind="resumed", message=f"resumed from the checkpoint at step {ckpt.step}",
                                  data={"checkpoint_step": ckpt.step})
        else:
            runs.run_rewind(run=run, to_step=0)
            shutil.rmtree(checkpoint_root(run.id), ignore_errors=True)
            cfg = with_model_paths(trainer_config(run, self.admitted.domains, self.live.caps), self.admitted.model_paths)
            self.job = Job(cfg, callbacks=[self.collect], verify_batch=self.verify_batch, env_context=env_context)
            if self.job.config.sft.steps > 0:
                self.sft()
        self.artifacts = dataclasses.asdict(self.job.config.artifacts)
        if ranks.leading():
            def rank_lost(lost) -> None:  # on the watchdog's thread; this one waits in a collective
                reason = _pause_lost_rank(self.run, self.worker, lost, "no heartbeat")
                (self.abort or _exit_now)(reason)
            ranks.on_rank_lost(rank_lost)
        self.mix = DomainMix(self.job, run, self.admitted.domains, self.live, self.db)
        every = self.job.config.checkpoint.every_steps or DEFAULT_CHECKPOINT_EVERY
        advice = SplitAdvice(self.job, lambda: verify_lanes_bound(self.needs, self.live.sandboxes), self.db)
        self.observers = [self.lanes, SandboxPools(), Levels(self.job, self.db), self.mix, VerifyCounters(self.gatherer), advice,
                          Recorder(self.worker, self.versions, self.db), HeldOut(self.job, self.eval_every(fresh=ckpt is None), self.db),
                          Alerts(self.db), Checkpoints(every, self.checkpoint), Silence(self.needs, self.worker, self.checkpoint),
                          Budgets(self.db)]
        return self.job

    def sft(self) -> None:
        """The run's SFT stage, as a run event; the policy it ends with is kept as step 0's checkpoint:
        the registry's default baseline and the held-out curve's first point (not the random init),
        and where a restart resumes."""
        losses = self.job.sft()
        left = self.job.sft_stage.left
        message = f"SFT: {len(losses)} steps" + (f", final loss {losses[-1]:.4f}" if losses else "")
        if left:
            message += "; left the stage at a pass rate of {:g}: ".format(self.job.config.sft.until_pass_rate) + ", ".join(
                f"{slug} at step {v['step']} ({v['pass_rate']:.2f})" for slug, v in left.items())
        runs.run_event_record(run=self.run, kind="sft", message=message, data={"steps": len(losses), "left": left} if left else None)
        self.checkpoint()

    def eval_every(self, *, fresh: bool) -> int:
        """How often the in-training evaluation runs (0: never). A run whose held-out curve comes
        from an evaluation suite (every checkpoint evaluated on it) runs none; a new run's curve
        starts with the base model's point."""
        every = self.job.config.eval.every_steps
        if every and (suite := run_eval_suite(self.run)) is not None:
            if fresh:
                runs.run_event_record(run=self.run, kind="eval_source",
                                      message=f"held-out curve from the suite {suite.suite.slug} v{suite.version} (every "
                                              f"checkpoint is evaluated on it as it is saved); eval.every_steps is not used",
                                      data={"suite": suite.suite.slug, "version": suite.version})
            return 0
        if every and fresh:
            periodic_eval(self.job, self.run, 0)  # the base model's point of the eval curves
        return every

    def before_step(self) -> str | None:
        """The step boundary: renew the lease and obey a cancel, pause or preemption; apply the
        domain weights and caps in force; pause when a queue the domains need has no live worker.
        Returns the driver's reason when the run stops here."""
        run = self.run = self.db(runs.run_heartbeat, run_id=self.run.id, worker=self.worker)
        if run.state == RunState.CANCELLED:
            self.db(runs.run_finish, run=run, worker=self.worker, state=RunState.CANCELLED)
            return "cancelled"
        if run.state == RunState.PAUSED or run.preempt_requested:
            self.checkpoint()
            self.db(runs.run_park, run=run, worker=self.worker)
            return "preempted" if run.preempt_requested else "paused"
        active = self.mix.before_step(run)
        missing = self.db(self.queues.unserved, self.needs, active)
        if missing and self.db.ended_within(worker_stale_s()):
            # The workers' heartbeats stopped with the database: they look silent until their next beat.
            missing = []
        if missing:
            self.checkpoint()
            _pause_unserved(run, self.worker, self.queues.service, missing)
            return f"paused (no live worker on queue {', '.join(missing)})"
        return None

    def step(self) -> StepDone:
        """One step of the Job, with its usage (wall and CPU seconds, tokens, GPUs)."""
        self.inflight.set_phase("step")
        self.db(_inflight, self.run.id, self.worker, self.inflight)
        wall0, cpu0 = time.monotonic(), time.process_time()
        metrics = self.job.step()
        used = step_usage(self.job.last_generated, self.job.last_trained, wall_s=time.monotonic() - wall0,
                          cpu_s=time.process_time() - cpu0, gpus=self.run.gpus)
        samples = self.collected.get("samples", [])
        return StepDone(run=self.run, step=self.job.step_count, metrics=metrics, trajectories=self.job.last_generated,
                        samples=samples, tokens=int(sum(s.get("tokens", 0) for s in samples)), usage=used)

    def observe(self, done: StepDone) -> str | None:
        """Each observer after the step, in order; the first that ends the run says why."""
        for observer in self.observers:
            if (stop := observer.after_step(done)) is not None:
                return stop
        return None

    def finish(self) -> str:
        self.checkpoint()  # the last step's, unless the loop just saved it
        self.db(runs.run_finish, run=self.run, worker=self.worker, state=RunState.COMPLETED)
        return "completed"

    def stopped_by(self, exc: Exception) -> str:
        """What the run becomes when ``exc`` ended its loop, and the driver's reason: a lost lease
        leaves it to its new owner; an unreachable broker or database, or a storage that refused a
        checkpoint, pauses it (outside the run); a rank lost under a collective pauses it, naming
        the rank; anything else fails it with the traceback."""
        from trainer import ranks  # lazy: as in build()
        from trainer.checkpoint import CheckpointWriteError  # lazy: as in build()

        run, worker = self.run, self.worker
        if isinstance(exc, runs.LeaseLost):
            log.warning("run %s: %s; stopping", run.id, exc)
            return "lease lost"
        if isinstance(exc, (outage.Unreachable, CheckpointWriteError)):
            log.error("run %s: %s", run.id, exc)
            unreachable = isinstance(exc, outage.Unreachable)
            if isinstance(exc, outage.DatabaseUnreachable):
                # Its pause is a row too: wait for the database (the lease lapses meanwhile, so a
                # scheduler that sees it first resumes the run from its checkpoint instead).
                log.error("run %s: waiting for the database to record the pause", run.id)
                self.db.wait_until_back()
            try:
                (_pause_outside if unreachable else _pause_storage)(run, worker, exc)
            except runs.LeaseLost:
                return "lease lost"
            return f"paused ({exc.service} unreachable)" if unreachable else "paused (storage error)"
        lost = ranks.lost_rank(wait_s=4 * ranks.heartbeat_interval()) if ranks.leading() and ranks.is_collective_error(exc) else None
        if lost is not None:  # a rank died under a collective: the run pauses, it does not fail
            try:
                return _pause_lost_rank(run, worker, lost, f"its connection closed ({str(exc).strip()[:200]})")
            except runs.LeaseLost:
                return "lease lost"
        error = "".join(traceback.format_exception(exc))
        log.error("run %s failed:\n%s", run.id, error)
        try:
            runs.run_finish(run=run, worker=worker, state=RunState.FAILED, error=error)
        except runs.LeaseLost:
            pass
        _alerts(run, run.current_step)
        return "failed"

    def close(self) -> None:
        self.stop_renewing.set()
        if self.job is not None:
            self.job.close()


def _record_devices(run: Run, worker: str) -> None:
    """A ``devices`` event: the GPUs this driver's process was given and what torch sees of them."""
    import torch  # lazy, as in drive()

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    runs.run_event_record(run=run, kind="devices", data={"worker": worker, "devices": run.placement.get("devices", []),
                                                         "cuda_visible_devices": visible, "cuda_device_count": count},
                          message=f"on GPUs {visible or '(none set)'} of {worker} (CUDA_VISIBLE_DEVICES); torch sees "
                                  f"{count} CUDA device(s)")


def _world() -> int:
    import torch.distributed as dist  # lazy, as in drive()

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _record_ranks(run: Run, worker: str) -> None:
    """A ``ranks`` event when this driver leads a job of several ranks (workers/launch.py)."""
    import torch.distributed as dist  # lazy, as in drive()

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    world, backend = dist.get_world_size(), dist.get_backend()
    hosts = [node["worker"] for node in run.nodes] if len(run.nodes) > 1 else [worker]
    where = f"on {worker}" if len(hosts) == 1 else f"on {len(hosts)} hosts ({', '.join(hosts)}; {world // len(hosts)} each)"
    runs.run_event_record(run=run, kind="ranks", data={"world": world, "backend": backend, "worker": worker, "hosts": hosts},
                          message=f"the job runs on {world} ranks ({backend}), launched by torchrun {where}: rank 0 "
                                  "drives and verifies, the rollout is split across the ranks, the update is data parallel")


def follower_ready(run_id: int) -> list[str]:
    """What a follower rank needs before it builds the run's job: the domains the run's uploads
    define, registered in this process's catalogue as the driver registers them. Returns the
    run's domain slugs."""
    run = Run.objects.get(pk=run_id)
    pins = [pinned(rd.domain_version) for rd in run_domains(run=run)]
    register_data_domains(pins)
    return [pin.slug for pin in pins]


def _inflight(run_id: int, worker: str, inflight: InFlight) -> int:
    """Say what the driver waits on (for "what is it waiting on" in the API and the run page),
    while this worker still drives the run."""
    version, snapshot = inflight.snapshot()
    if runs.run_record_inflight(run_id=run_id, worker=worker, inflight=snapshot):
        try:  # the run page shows it at once; a missing channel layer never stops the driver
            run_wake(run_id=run_id)
        except Exception:  # noqa: BLE001 - the page also polls; the driver goes on
            log.warning("could not wake the page of run %s", run_id, exc_info=True)
    return version


INFLIGHT_EVERY_S = 1.0
"""How often the lease thread writes what is in flight, when it changed."""


def _renew_lease(run_id: int, worker: str, stop: threading.Event, inflight: InFlight | None = None,
                 queues: "QueueWatch | None" = None) -> None:
    """Keep the lease fresh while a long step runs, what is in flight written while the step's
    threads verify, and which queues have a live worker read; stops when told or when the lease
    is gone."""
    renewed = time.monotonic()
    written = -1
    while not stop.wait(min(INFLIGHT_EVERY_S, runs.lease_s() / 4)):
        try:
            if inflight is not None and inflight.version != written:
                written = _inflight(run_id, worker, inflight)
            if queues is not None and queues.age_s() >= QueueWatch.EVERY_S:
                queues.refresh()
            if time.monotonic() - renewed >= runs.lease_s() / 4:
                renewed = time.monotonic()
                if not runs.run_renew(run_id=run_id, worker=worker):
                    return
        except Exception:  # noqa: BLE001 - a missed renewal is retried; the step loop also renews
            log.warning("lease renewal failed for run %s", run_id, exc_info=True)
        finally:
            close_old_connections()


def _checkpoint(job, run: Run, db: outage.Hold) -> None:
    """Save the job's checkpoint, then record it: a checkpoint row only ever names a complete
    directory (a write the storage refuses raises CheckpointWriteError and records nothing). The
    record goes through ``db`` (a database outage holds it, the directory is not written again)."""
    path = job.save_checkpoint(checkpoint_root(run.id) / f"step-{job.step_count}")
    db(runs.run_record_checkpoint, run=run, step=job.step_count, path=str(path))


def _pause_storage(run: Run, worker: str, exc) -> None:
    """A checkpoint the storage refused pauses the run (it does not fail it: nothing is wrong with
    the run, and its earlier checkpoints are intact); a user resumes it once the storage is fixed,
    and it continues from its last intact checkpoint, re-running the steps after it."""
    intact = runs.latest_checkpoint(run)
    where = (f"the run is paused at its last intact checkpoint, step {intact.step}" if intact is not None
             else "the run is paused with no intact checkpoint and restarts from step 0")
    runs.run_pause_system(run=run, worker=worker, cause="storage",
                          message=f"{exc}; {where}; resume it once the storage is fixed",
                          data={"failed_step": exc.step, "directory": str(exc.path.parent), "errno": exc.errno,
                                "error": str(exc.cause), "intact_step": intact.step if intact is not None else None})


def _pause_lost_rank(run: Run, worker: str, lost, how: str) -> str:
    """A rank of the run stopped answering (stopped, killed, its host gone): the run pauses, naming
    the rank, its host and its stage, and resumes from its last checkpoint when started again, on
    this host or another. Returns the driver's reason."""
    run = Run.objects.get(pk=run.pk)
    intact = runs.latest_checkpoint(run)
    where = (f"it resumes from its last checkpoint, step {intact.step}," if intact is not None
             else "it restarts from step 0 (no checkpoint yet)")
    runs.run_pause_system(run=run, worker=worker, cause="rank",
                          message=f"paused at step {run.current_step}: {lost.describe()} ({how}, {lost.silent_s:.0f} s "
                                  f"without a heartbeat); {where} when started again, on this host or another",
                          data={"rank": lost.rank, "host": lost.host, "pid": lost.pid, "stage": lost.stage,
                                "silent_s": round(lost.silent_s, 1)})
    return f"paused ({lost.describe()})"


def _pause_outside(run: Run, worker: str, exc: outage.Unreachable) -> None:
    """A service the run needs (the broker, the database) stayed unreachable for longer than the
    run holds: the run pauses, naming it, and resumes from its last checkpoint when started again
    (its step in progress is done again)."""
    run = Run.objects.get(pk=run.pk)
    intact = runs.latest_checkpoint(run)
    where = (f"it resumes from its last checkpoint, step {intact.step}," if intact is not None
             else "it restarts from step 0 (no checkpoint yet)")
    runs.run_pause_system(run=run, worker=worker, cause=exc.service,
                          message=f"paused at step {run.current_step}: {exc}; {where} when started again",
                          data={"waited_s": round(exc.waited_s, 1), "hold_s": exc.hold_s, "error": str(exc.cause)[:500]})


def _exit_now(reason: str) -> None:
    """The default abort: end this process (its ranks end when their collectives find it gone)."""
    log.error("%s; ending the driver", reason)
    os._exit(1)


def _pause_unserved(run: Run, worker: str, service: QueueService, missing: list[str]) -> None:
    """No live worker serves a queue the run's verification needs: the run pauses (its domains
    are not quarantined: nothing is wrong with them) and the scheduler resumes it when a worker
    serves the queue again."""
    notes = "; ".join(service.unserved_note(q) for q in missing)
    runs.run_pause_system(run=run, worker=worker, cause="no_worker", wait_for_queue=missing[0],
                          message=f"paused at step {run.current_step}: {notes}; it resumes from its last checkpoint by "
                                  "itself when a worker serves the queue",
                          data={"queue": missing[0], "queues": missing})
