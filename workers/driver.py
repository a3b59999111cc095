"""The run driver: one long task owns one run and loops sample -> generate -> verify -> update.

It holds the run's lease (renewed every step), builds the trainer's Job from the run's pinned
config and domain versions (resuming from the last checkpoint when there is one), writes each
step's metrics and sampled trajectories idempotently, checkpoints every ``checkpoint.every_steps``
steps, and at each step boundary obeys pause, cancel, preemption and domain-weight changes.

With a staleness bound above 0 the Job verifies upcoming batches on its own thread while the
current one trains, so the ``verify_batch`` given to it touches no database: what is in flight
is kept in memory (:class:`InFlight`) and written by the driver's threads.
"""
from __future__ import annotations

import copy
import logging
import os
import shutil
import statistics
import threading
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.db import close_old_connections

from controlplane import dispatch
from controlplane.alerts import services as alerts
from controlplane.common.model_refs import ModelRefused, config_refs, resolve_model
from controlplane.common.storage import store_dir
from controlplane.domains.pins import PinnedDomain, domain_quotas
from controlplane.domains.policy import Quarantine, capped_shares
from controlplane.domains.schemas import judge_stage_refs
from controlplane.live.services import run_wake
from controlplane.registry.selectors import run_eval_suite
from controlplane.review.selectors import judges_of_other_teams
from controlplane.runs import services as runs
from controlplane.runs import watch
from controlplane.runs.models import MetricPoint, Run, RunDomain, RunState
from controlplane.runs.selectors import run_domains, run_quarantined_domains, run_weights
from controlplane.scheduling.selectors import QueueService, queue_service, worker_stale_s
from controlplane.runs.ceilings import api_field, trainer_config_refusal
from trainer.config import RUN_DEFAULTS, RUN_OWNED, has_path, put_path
from workers import broker, outage
from workers import lanes as lanes_
from workers.domains import register_data_domains, worker_name
from workers.evaluate import periodic_eval
from workers.usage import step_usage
from workers.verify import LOST, NO_WORKER, environment_context, make_verify_batch, worker_queue

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_EVERY = RUN_DEFAULTS["checkpoint.every_steps"]
def run_environment_context(slugs: list[str]):
    """The context a run's environments get (the sandbox, behind each domain's sandbox quota as
    it stands when the run starts on this worker)."""
    limits = ({s: q.max_concurrent_sandboxes for s, q in domain_quotas(slugs=slugs).items()}
              if settings.REDIS_URL and slugs else {})
    return environment_context(limits)


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
            self._phase, self._since = phase, time.time()
            self.version += 1

    @contextmanager
    def verifying(self, per_domain: dict[str, int]):
        with self._lock:
            self._verifying.update(per_domain)
            self._since = time.time()
            self.version += 1
        try:
            yield
        finally:
            with self._lock:
                self._verifying.subtract(per_domain)
                self._verifying = +self._verifying  # drop the zeros
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


def checkpoint_root(run_id: int) -> Path:
    return store_dir() / "checkpoints" / f"run-{run_id}"


def trainer_config(run: Run, domains: list[RunDomain], caps: dict[str, float] | None = None) -> dict:
    """The trainer config of a run: its config section, a run's defaults (``RUN_DEFAULTS``) for
    the settings it leaves out, and every setting the run owns (``RUN_OWNED``) from its source."""
    cfg = copy.deepcopy(run.config or {})
    for path, value in RUN_DEFAULTS.items():
        if not has_path(cfg, path):
            put_path(cfg, path, value)
    sources = {
        "id": f"run-{run.id}",
        "base_model": run.base_model,
        "domains": capped_shares({rd.domain.slug: rd.weight for rd in domains},
                                 caps if caps is not None else _caps([rd.domain.slug for rd in domains])),
        "staleness": run.staleness,
        "budget.steps": run.budget_steps,
        "budget.wall_s": run.budget_seconds or 0.0,  # the trainer's "no limit" is 0
        "storage": str(checkpoint_root(run.id)),
    }
    for owned in RUN_OWNED:
        put_path(cfg, owned.path, sources[owned.source])
    return cfg


def refuse_oversized(run: Run, domains: list[RunDomain], worker: str, caps: dict[str, float]) -> bool:
    """Defence in depth: the trainer config this worker is about to start is checked again, against
    the trainer's own bounds and the team's ceilings as they are now, before anything is allocated.
    The API checked it when the run was created, but the row may have been written another way, or
    the team's ceilings lowered since. A run above them fails (resuming cannot fix a config) with an
    event naming each field and its bound; returns True then."""
    if isinstance(run.config, dict):
        errors = trainer_config_refusal(trainer_config(run, domains, caps), team=run.team)
        fields = [(api_field(path), message) for path, message in errors]
    else:
        fields = [("config", "must be an object")]
    if not fields:
        return False
    message = "refused by the worker before starting: " + "; ".join(f"{path}: {msg}" for path, msg in fields)
    log.error("run %s: %s", run.id, message)
    runs.run_event_record(run=run, kind="refused", message=message[:500],
                          data={"errors": [{"path": path, "message": msg} for path, msg in fields], "worker": worker})
    runs.run_finish(run=run, worker=worker, state=RunState.FAILED, error=message)
    return True


def confined_model_paths(run: Run, worker: str) -> dict[str, str] | None:
    """Defence in depth: the run's base model and the model and tokenizer directories its config
    names are resolved again here, for the run's team and under this worker's TEMPER_MODEL_DIRS,
    before anything is loaded (the API checked them when the run was saved, but the row may have
    been written another way, or the allow list narrowed since). Returns the trainer config path
    of each -> what the trainer loads (a real directory, or a hub id); a reference refused fails
    the run with a ``refused`` event naming the field, and returns None."""
    refs = [("base_model", "model.path", run.base_model, "config.json")]
    refs += [(f"config.{path}", path, value, needs) for path, value, needs in config_refs(run.config)]
    paths, fields = {}, []
    for field, path, ref, needs in refs:
        try:
            paths[path] = resolve_model(ref, team_id=run.team_id, needs=needs).path
        except ModelRefused as exc:
            fields.append((field, str(exc)))
    if not fields:
        return paths
    _refuse(run, worker, "loading a model", fields)
    return None


def refuse_foreign_judges(run: Run, pins: list[PinnedDomain], teams: dict[str, int | None], worker: str) -> bool:
    """Defence in depth: a pinned domain version whose judge stage names another team's judge
    (saved before domains were held to their team's judges) would be verified by that team's
    judge, which is resolved by name on the judge queue. Such a run fails before it starts, with a
    ``refused`` event in the words the API uses for a judge that is not found; returns True then.
    ``teams`` is each domain's team (None: global)."""
    fields = []
    for pin in pins:
        refs = judge_stage_refs(pin.verifier)
        foreign = judges_of_other_teams(team_id=teams[pin.slug], names=[name for _, name in refs]) if refs else set()
        fields += [(f"domains.{pin.slug}.{path}", f"judge {name!r} not found (a judge stage names a judge of the domain's team)")
                   for path, name in refs if name in foreign]
    if fields:
        _refuse(run, worker, "starting", fields)
    return bool(fields)


def _refuse(run: Run, worker: str, before: str, fields: list[tuple[str, str]]) -> None:
    """Fail ``run`` with a ``refused`` event naming each field and why."""
    message = f"refused by the worker before {before}: " + "; ".join(f"{f}: {m}" for f, m in fields)
    log.error("run %s: %s", run.id, message)
    runs.run_event_record(run=run, kind="refused", message=message[:500],
                          data={"errors": [{"path": f, "message": m} for f, m in fields], "worker": worker})
    runs.run_finish(run=run, worker=worker, state=RunState.FAILED, error=message)


def with_model_paths(cfg: dict, paths: dict[str, str]) -> dict:
    """``cfg`` with each model reference replaced by what :func:`confined_model_paths` resolved it
    to, so the trainer loads exactly the directory that was checked."""
    for path, value in paths.items():
        put_path(cfg, path, value)
    return cfg


def drive(run_id: int, worker: str | None = None, send=None, abort: Callable[[str], None] | None = None) -> str:
    """Drive the run until it ends or must stop; returns why it returned. Leading several ranks,
    ``abort(reason)`` ends this process when the watchdog finds a rank lost while this thread
    waits in a collective with it (workers/launch.py passes it)."""
    # lazy: trainer.job and trainer.checkpoint import torch and transformers (seconds); every
    # worker imports this module at start (workers.tasks), and only the rollout workers drive runs.
    from trainer import ranks
    from trainer.checkpoint import CheckpointWriteError
    from trainer.job import Job

    worker = worker or worker_name()
    placed = Run.objects.filter(pk=run_id).values_list("gpus", "placement").first()
    if placed and placed[0] > 0 and (placed[1] or {}).get("worker") not in (None, worker):
        return f"not claimed (its GPUs were assigned on {placed[1]['worker']})"
    run = runs.run_claim(run_id=run_id, worker=worker)
    if run is None:
        return "not claimed (not running, or another live driver owns it)"
    if run.gpus > 0 and run.placement:
        if problems := placement_errors(run, _world()):
            _refuse(run, worker, "starting", problems)
            return "refused (its devices do not fit its settings)"
        _record_devices(run, worker)
    _record_ranks(run, worker)
    domains = run_domains(run=run)
    pins = [PinnedDomain.from_version(rd.domain_version) for rd in domains]
    live = LiveQuotas([pin.slug for pin in pins])
    if refuse_oversized(run, domains, worker, live.caps):
        return "refused (config above its bounds or its team's ceilings)"
    model_paths = confined_model_paths(run, worker)
    if model_paths is None:
        return "refused (a model or tokenizer it names is not one its team may load)"
    if refuse_foreign_judges(run, pins, {rd.domain.slug: rd.domain.team_id for rd in domains}, worker):
        return "refused (a domain names another team's judge)"
    send = send or (lambda name, args: dispatch.producer().send_task(name, args=args, queue=dispatch.TASK_QUEUES[name],
                                                                     priority=live.message_priority(args[0])))
    inflight = InFlight()
    # A broker outage holds the run (sends retried with backoff, the panel says so) for up to the
    # run's collective timeout; a longer one pauses it (BrokerUnreachable, below).
    send = broker.HeldSend(send, hold_s=run.collective_timeout_s, on_wait=inflight.block)
    # So does a database outage: the step loop's reads and writes of the run's rows are retried
    # the same way (each is safe to run again); a longer one pauses it (DatabaseUnreachable, below).
    db = outage.HeldDatabase(hold_s=run.collective_timeout_s, on_wait=inflight.block)
    versions = {pin.slug: pin.version for pin in pins}
    queues = QueueWatch()
    needs = {pin.slug: worker_queue(pin.verifier) for pin in pins}  # domain -> the queue its verification needs
    sandboxed = sorted(slug for slug, queue in needs.items() if queue == lanes_.QUEUES[lanes_.SHORT])
    lanes = lanes_.Lanes(settings.TEMPER_VERIFY_LONG_S, seed=lane_seed(sandboxed))

    def lane(slug: str) -> str | None:
        """The long lane's task for a long domain while a worker serves it (else the usual one)."""
        if settings.TEMPER_VERIFY_LANES and lanes.lane(slug) == lanes_.LONG and queues.served(lanes_.QUEUES[lanes_.LONG]):
            return lanes_.TASKS[lanes_.LONG]
        return None

    verify_remote, gatherer = make_verify_batch(
        cascades={pin.slug: pin.verifier for pin in pins}, versions=versions, served=queues.served,
        timeouts=live.timeouts, priorities=live.priorities, send=send, deadline_s=settings.TEMPER_VERIFY_DEADLINE_S or None,
        lane=lane)
    silent = SilentQueues(needs)

    def verify_batch(items):
        """Verify (on the Job's verify thread when it overlaps), counting the items in flight."""
        with inflight.verifying(Counter(task.domain for _, task in items)):
            return verify_remote(items)

    collected: dict = {}
    env_context = run_environment_context([pin.slug for pin in pins])

    def collect(step: int, metrics: dict, samples: list) -> None:
        collected.update(step=step, metrics=dict(metrics), samples=list(samples))

    job = None
    stop_renewing = threading.Event()
    threading.Thread(target=_renew_lease, args=(run.id, worker, stop_renewing, inflight, queues), name=f"lease-run-{run.id}",
                     daemon=True).start()
    saved = {"step": -1}  # the step of the checkpoint on disk: a pause right after it does not save it again

    def checkpoint() -> None:
        if saved["step"] != job.step_count:
            _checkpoint(job, run, db)
            saved["step"] = job.step_count
    try:
        register_data_domains(pins)
        ckpt = runs.latest_checkpoint(run)
        if ckpt is not None:
            runs.run_rewind(run=run, to_step=ckpt.step)
            job = Job.resume(ckpt.path, callbacks=[collect], verify_batch=verify_batch, env_context=env_context)
            saved["step"] = ckpt.step
            runs.run_event_record(run=run, kind="resumed", message=f"resumed from the checkpoint at step {ckpt.step}",
                                    data={"checkpoint_step": ckpt.step})
        else:
            runs.run_rewind(run=run, to_step=0)
            shutil.rmtree(checkpoint_root(run.id), ignore_errors=True)
            job = Job(with_model_paths(trainer_config(run, domains, live.caps), model_paths), callbacks=[collect],
                      verify_batch=verify_batch, env_context=env_context)
            if job.config.sft.steps > 0:
                losses = job.sft()
                left = job.sft_stage.left
                message = f"SFT: {len(losses)} steps" + (f", final loss {losses[-1]:.4f}" if losses else "")
                if left:
                    message += "; left the stage at a pass rate of {:g}: ".format(job.config.sft.until_pass_rate) + ", ".join(
                        f"{slug} at step {v['step']} ({v['pass_rate']:.2f})" for slug, v in left.items())
                runs.run_event_record(run=run, kind="sft", message=message,
                                      data={"steps": len(losses), "left": left} if left else None)
                # The policy RL starts from, kept as step 0: the registry's default baseline and the
                # held-out curve's first point (not the random init), and where a restart resumes.
                checkpoint()
        if ranks.leading():
            def rank_lost(lost) -> None:  # on the watchdog's thread; this one waits in a collective
                reason = _pause_lost_rank(run, worker, lost, "no heartbeat")
                (abort or _exit_now)(reason)
            ranks.on_rank_lost(rank_lost)
        weights = {rd.domain.slug: rd.weight for rd in domains}
        caps = live.caps
        quarantine = Quarantine(run_quarantined_domains(run=run))
        if quarantine.quarantined:
            _apply_quarantine(job, weights, caps, quarantine.quarantined)
        every = job.config.checkpoint.every_steps or DEFAULT_CHECKPOINT_EVERY
        eval_every = job.config.eval.every_steps
        if eval_every and (suite := run_eval_suite(run)) is not None:
            # One held-out truth: the suite's stored evaluations of the run's checkpoints draw the curve.
            eval_every = 0
            if ckpt is None:
                runs.run_event_record(run=run, kind="eval_source",
                                      message=f"held-out curve from the suite {suite.suite.slug} v{suite.version} (every "
                                              f"checkpoint is evaluated on it as it is saved); eval.every_steps is not used",
                                      data={"suite": suite.suite.slug, "version": suite.version})
        if eval_every and ckpt is None:
            periodic_eval(job, run, 0)  # the base model's point of the eval curves
        started = time.monotonic()
        levels = dict(job.sampler.levels)
        while job.step_count < run.budget_steps:
            run = db(runs.run_heartbeat, run_id=run.id, worker=worker)
            if run.state == RunState.CANCELLED:
                db(runs.run_finish, run=run, worker=worker, state=RunState.CANCELLED)
                return "cancelled"
            if run.state == RunState.PAUSED or run.preempt_requested:
                checkpoint()
                db(runs.run_park, run=run, worker=worker)
                return "preempted" if run.preempt_requested else "paused"
            weights, caps = db(_apply_weights, job, run, weights, live, quarantine.quarantined)
            missing = db(queues.unserved, needs, [d for d, w in weights.items() if w > 0 and d not in quarantine.quarantined])
            if missing and db.ended_within(worker_stale_s()):
                # The workers' heartbeats stopped with the database: they look silent until their next beat.
                missing = []
            if missing:
                checkpoint()
                _pause_unserved(run, worker, queues.service, missing)
                return f"paused (no live worker on queue {', '.join(missing)})"
            inflight.set_phase("step")
            db(_inflight, run.id, worker, inflight)
            wall0, cpu0 = time.monotonic(), time.process_time()
            metrics = job.step()
            used = step_usage(job.last_generated, job.last_trained, wall_s=time.monotonic() - wall0,
                              cpu_s=time.process_time() - cpu0, gpus=run.gpus)
            latencies = step_latencies(job.last_generated)
            metrics.update(latency_metrics(latencies))
            db(_observe_lanes, run, lanes, {d: v for d, v in latencies.items() if d in sandboxed}, job.step_count)
            for slug, before, after in level_changes(levels, job.sampler.levels):
                db(runs.run_event_record, run=run, kind="level", message=level_message(slug, before, after, job.step_count, run.staleness),
                   data={"domain": slug, "from": before, "to": after, "recorded_step": job.step_count,
                         "step": job.step_count + 1 + run.staleness})
            levels = dict(job.sampler.levels)
            metrics.update({f"verify/{d}/long_lane": float(lane(d) is not None) for d in sandboxed})
            unanswered = Counter(t.task.domain for t in job.last_generated if t.verification is not None
                                 and (NO_WORKER in t.verification.details or LOST in t.verification.details))
            for slug, bad, seen in quarantine.observe(without_unanswered(metrics, unanswered), list(weights)):
                db(runs.run_event_record, run=run, kind="quarantine", data={"domain": slug, "infra": bad, "samples": seen, "step": job.step_count},
                                        message=f"domain {slug} quarantined: {bad:.0f} of its last {seen:.0f} verifications "
                                                f"were infrastructure errors; its samples stop, the run goes on")
                _apply_quarantine(job, weights, caps, quarantine.quarantined)
            step = job.step_count
            metrics["verify/resent_batches"] = float(gatherer.stats["resent"])
            metrics["verify/lost_items"] = float(gatherer.stats["lost_items"])
            tokens = int(sum(s.get("tokens", 0) for s in collected.get("samples", [])))
            counts, examples = watch.tampering_counts(job.last_generated)
            metrics.update(watch.tampering_metrics(counts))
            db(runs.run_record_step, run=run, worker=worker, step=step, metrics=metrics,
               samples=collected.get("samples", []), verifier_versions=versions, tokens=tokens, usage=used)
            db(watch.run_watch_tampering, run=run, step=step, counts=counts, examples=examples)
            if eval_every and step % eval_every == 0:
                db(periodic_eval, job, run, step)
                db(watch.run_watch_heldout, run=run, step=step)
            db(_alerts, run, step)
            if step % every == 0:
                checkpoint()
            if stuck := silent.observe(job.last_generated):
                checkpoint()
                _pause_silent(run, worker, stuck)
                return f"paused (workers on queue {', '.join(stuck)} answer nothing)"
            if run.budget_seconds and time.monotonic() - started > run.budget_seconds:
                break
            if run.budget_tokens and run.tokens_used >= run.budget_tokens:
                break
        checkpoint()  # the last step's, unless the loop just saved it
        db(runs.run_finish, run=run, worker=worker, state=RunState.COMPLETED)
        return "completed"
    except runs.LeaseLost as exc:
        log.warning("run %s: %s; stopping", run_id, exc)
        return "lease lost"
    except (outage.Unreachable, CheckpointWriteError) as exc:  # outside the run: it pauses
        log.error("run %s: %s", run_id, exc)
        unreachable = isinstance(exc, outage.Unreachable)
        if isinstance(exc, outage.DatabaseUnreachable):
            # Its pause is a row too: wait for the database (the lease lapses meanwhile, so a
            # scheduler that sees it first resumes the run from its checkpoint instead).
            log.error("run %s: waiting for the database to record the pause", run_id)
            db.wait_until_back()
        try:
            (_pause_outside if unreachable else _pause_storage)(run, worker, exc)
        except runs.LeaseLost:
            return "lease lost"
        return f"paused ({exc.service} unreachable)" if unreachable else "paused (storage error)"
    except Exception as exc:  # noqa: BLE001 - the run fails with the reason; the worker lives on
        lost = ranks.lost_rank(wait_s=4 * ranks.heartbeat_interval()) if ranks.leading() and ranks.is_collective_error(exc) else None
        if lost is not None:  # a rank died under a collective: the run pauses, it does not fail
            try:
                return _pause_lost_rank(run, worker, lost, f"its connection closed ({str(exc).strip()[:200]})")
            except runs.LeaseLost:
                return "lease lost"
        error = traceback.format_exc()
        log.error("run %s failed:\n%s", run_id, error)
        try:
            runs.run_finish(run=run, worker=worker, state=RunState.FAILED, error=error)
        except runs.LeaseLost:
            pass
        _alerts(run, run.current_step)
        return "failed"
    finally:
        stop_renewing.set()
        if job is not None:
            job.close()


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


def placement_errors(run: Run, world: int) -> list[tuple[str, str]]:
    """Defence in depth for a GPU run about to start on the devices the scheduler assigned: as
    many devices as it asks (on all of its hosts), a whole number of engines of
    ``rollout.tensor_parallel_size`` of them, and one rank per engine in this process group (the API checked the settings when the
    run was saved; the row may have been written another way)."""
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
    pins = [PinnedDomain.from_version(rd.domain_version) for rd in run_domains(run=run)]
    register_data_domains(pins)
    return [pin.slug for pin in pins]


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


def _alerts(run: Run, step: int) -> None:
    """Evaluate the run's alert rules on what its steps wrote (controlplane/alerts): a rule whose
    condition holds at this step fires now. A fault here is logged; it never stops the run. A
    database outage is not such a fault: it is raised, for the driver's hold to retry the step's
    alerts once the database is back."""
    try:
        alerts.alerts_after_step(run=run, step=step)
    except (DatabaseOperationalError, DatabaseInterfaceError):
        raise
    except Exception:  # noqa: BLE001 - alerting is a side channel of the run, not part of it
        log.exception("run %s: alert evaluation at step %s failed", run.id, step)


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


def _caps(slugs: list[str]) -> dict[str, float]:
    """Each domain's current ``max_share`` quota."""
    return {slug: q.max_share for slug, q in domain_quotas(slugs=slugs).items()}


class LiveQuotas:
    """A run's domains' quota and priority, re-read at every step: an admin's change reaches the
    run within a step. ``timeouts`` and ``priorities`` are updated in place (the verify path
    reads them at each call); ``caps`` is replaced."""

    def __init__(self, slugs: list[str]) -> None:
        self.slugs = list(slugs)
        self.timeouts: dict[str, float] = {}
        self.priorities: dict[str, int] = {}
        self.caps: dict[str, float] = {}
        self.refresh()

    def refresh(self) -> bool:
        """Read the quotas; True when a share cap changed."""
        quotas = domain_quotas(slugs=self.slugs)
        self.timeouts.update({slug: q.task_timeout_s for slug, q in quotas.items()})
        self.priorities.update({slug: q.priority for slug, q in quotas.items()})
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
