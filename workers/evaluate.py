"""Evaluation jobs (the eval queue) and the run driver's periodic evaluation.

``run_eval`` evaluates one model version on one eval suite version with the trainer's rollout
engines, verifying with each item's pinned domain version (sandbox stages run in this worker),
and records pass@k, mean reward, outcomes, tokens and seconds per task, and every task's scores.
With greedy items the results are the same every time it runs.
"""
from __future__ import annotations

import logging
import traceback


from controlplane.common.model_refs import REGISTRY_PREFIX, resolve_model
from controlplane.domains.models import DomainVersion
from controlplane.domains.pins import domain_quotas, pinned
from controlplane.registry import services
from trainer import catalogue
from trainer.catalogue import DomainSpec
from trainer.evaluation import EvalSpec, evaluate, evaluate_job, load_for_eval
from workers import verify
from workers.domains import register_data_domains, worker_name

log = logging.getLogger(__name__)


def _verifier(pin: DomainSpec):
    """``verify_batch`` with a pinned domain's cascade, in this process (its sandboxes within the
    domain's quota shared with the verify workers, read at every batch: Redis or, on the embedded
    default, the machine's lock files hold it)."""
    def verify_batch(items):
        limit = domain_quotas(slugs=[pin.slug])[pin.slug].max_concurrent_sandboxes
        payload = [{"completion": c, "task": verify.task_to_dict(t)} for c, t in items]
        return [verify.verification_from_dict(d)
                for d in verify.verify_items(pin.verifier_spec, payload, max_concurrent_sandboxes=limit)]

    return verify_batch


def run_eval(eval_run_id: int, worker: str = "") -> str:
    """Run one evaluation to the end; safe to run twice (a completed one is left alone)."""
    ev = services.eval_claim(eval_run_id=eval_run_id, worker=worker or worker_name())
    if ev is None:
        return "nothing to do (finished already, or unknown)"
    engine = None
    try:
        # The version's files, checked again for its team before anything else (a base version's
        # path is held to the rules for directories named directly; controlplane/common/model_refs.py).
        path = resolve_model(f"{REGISTRY_PREFIX}{ev.version.pk}", team_id=ev.version.team_id).path
        items = ev.suite_version.items
        wanted = {(i["domain"], i["domain_version"]) for i in items}
        rows = {(dv.domain.slug, dv.version): dv for dv in DomainVersion.objects.filter(
            domain__slug__in=[i["domain"] for i in items]).select_related("domain")}
        missing = [f"{slug}@v{version}" for slug, version in sorted(wanted - rows.keys())]
        if missing:
            raise RuntimeError("pinned domain versions not found: " + ", ".join(missing))
        pins = {key: pinned(rows[key]) for key in sorted(wanted)}  # ValueError: a domain unknown to the trainer
        register_data_domains(list(pins.values()))
        domains = catalogue.all_domains()
        longest = max(i.get("max_episode_tokens", 512) + 512 for i in items)
        engine, tokenizer = load_for_eval(path, engine=ev.engine, max_model_len=longest)
        results = []
        for item in items:
            pin = pins[(item["domain"], item["domain_version"])]
            spec = EvalSpec.from_item(item)
            [result] = evaluate(engine, tokenizer, [spec], domains=domains, verify_batch=_verifier(pin))
            s = result.summary()
            results.append({"domain": spec.domain, "domain_version": pin.version, "layer": spec.layer,
                            "tasks": s["tasks"], "samples": s["samples"], "pass_at": s["pass_at"],
                            "mean_reward": s["mean_reward"], "outcomes": s["outcomes"],
                            "tokens_per_task": s["tokens_per_task"], "seconds_per_task": s["seconds_per_task"],
                            "per_task": [t.as_dict() for t in result.tasks]})
        services.eval_record(eval_run=ev, results=results)
        return "completed"
    except Exception:  # noqa: BLE001 - the evaluation fails with the reason; the worker lives on
        error = traceback.format_exc()
        log.error("evaluation %s failed:\n%s", eval_run_id, error)
        services.eval_fail(eval_run=ev, error=error)
        return "failed"
    finally:
        close = getattr(engine, "close", None)
        if close:
            close()


def periodic_eval(job, run, step: int) -> dict[str, float]:
    """The driver's evaluation every ``eval.every_steps``: greedy on the run's held-out tasks,
    written as ``eval/...`` metric points at ``step`` (plotted beside the training curves)."""
    metrics, _ = evaluate_job(job)
    services.run_record_eval(run=run, step=step, metrics=metrics)
    return metrics
