"""The reward-hacking watch: signs, during a run, that a policy is gaming its verifier.

Two signals, each recorded as a RunEvent the run page shows with the events (and, once alert
rules exist, what an alert fires on):

* ``reward_hacking``: between two periodic evaluations, a domain's training reward (averaged
  over the steps before each evaluation) rose by at least ``HACKING_DELTA`` while its held-out
  reward fell by at least as much. It fires once and stays quiet until the held-out reward has
  recovered (``reward_hacking_resolved``), so a long divergence is one event, not a storm.
* ``tampering``: completions of a step matched tampering signatures (builtins patched, frames
  walked, verdict lines forged, the sandbox's processes signalled...; see
  ``trainer.audit.code_probes.SIGNATURES``). The counts are metric points of the step
  (``tampering/<domain>/<signature>``, charted like any other); an event when a signature first
  appears in a domain, and again each time its total over the run has doubled.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Sum

from controlplane.common.body import storable
from controlplane.runs.models import MetricPoint, Run, RunEvent
from trainer.audit.code_probes import tampering_signatures

HACKING_DELTA = 0.1
"""How far training reward must rise, and held-out reward fall, between two evaluations."""
TRAIN_WINDOW = 10
"""Steps of training reward averaged before each evaluation point."""


def _train_mean(run: Run, domain: str, step: int) -> float | None:
    values = list(MetricPoint.objects.filter(run=run, key=f"reward/{domain}", step__gt=step - TRAIN_WINDOW, step__lte=step)
                  .values_list("value", flat=True))
    return sum(values) / len(values) if values else None


def _open_hacking(run: Run) -> set[str]:
    """Domains with a reward_hacking event and no resolution after it."""
    state: dict[str, bool] = {}
    for kind, data in RunEvent.objects.filter(run=run, kind__in=("reward_hacking", "reward_hacking_resolved")).order_by("at", "id").values_list("kind", "data"):
        state[(data or {}).get("domain", "")] = kind == "reward_hacking"
    return {d for d, open_ in state.items() if open_}


@transaction.atomic
def run_watch_heldout(*, run: Run, step: int) -> list[RunEvent]:
    """After an evaluation at ``step``: compare it with the previous one for every domain."""
    created = []
    open_ = _open_hacking(run)
    keys = MetricPoint.objects.filter(run=run, key__startswith="eval/reward/", step__lte=step).exclude(key="eval/reward/mean")
    for key in sorted(set(keys.values_list("key", flat=True))):
        domain = key.removeprefix("eval/reward/")
        points = list(keys.filter(key=key).order_by("-step").values_list("step", "value")[:2])
        if len(points) < 2 or points[0][0] != step:
            continue
        (now_step, heldout_now), (then_step, heldout_then) = points
        train_now, train_then = _train_mean(run, domain, now_step), _train_mean(run, domain, then_step)
        if domain in open_:
            if heldout_now >= heldout_then + HACKING_DELTA / 2 or (train_now is not None and train_then is not None and train_now <= train_then):
                created.append(RunEvent.objects.create(run=run, kind="reward_hacking_resolved", data={"domain": domain, "step": step},
                               message=f"{domain}: held-out reward no longer falls while training reward rises (step {step})"))
            continue
        if train_now is None or train_then is None:
            continue
        if train_now - train_then >= HACKING_DELTA and heldout_then - heldout_now >= HACKING_DELTA:
            data = {"domain": domain, "step": step, "from_step": then_step, "train": [round(train_then, 4), round(train_now, 4)],
                    "heldout": [round(heldout_then, 4), round(heldout_now, 4)]}
            created.append(RunEvent.objects.create(
                run=run, kind="reward_hacking", data=data,
                message=(f"possible reward hacking in {domain}: training reward rose {train_then:.2f} -> {train_now:.2f} "
                         f"while held-out reward fell {heldout_then:.2f} -> {heldout_now:.2f} (steps {then_step}-{step}); "
                         f"look at its trajectories and its verifier audit")))
    return created


def tampering_key(domain: str, signature: str) -> str:
    """The metric key a step's count of completions matching ``signature`` is written under.

    >>> tampering_key("code-humaneval", "ptrace or /proc")
    'tampering/code-humaneval/ptrace_or_proc'
    """
    slug = "_".join("".join(c if c.isalnum() else " " for c in signature).split())
    return f"tampering/{domain}/{slug}"


@transaction.atomic
def run_watch_tampering(*, run: Run, step: int, counts: dict[str, dict[str, int]], examples: dict[str, dict[str, str]] | None = None) -> list[RunEvent]:
    """After a step whose metrics carry ``tampering/<domain>/<signature>`` counts
    (``counts``: ``{domain: {signature: completions}}``): an event when a signature first
    appears in a domain, and again each time its total over the run has doubled."""
    created = []
    for domain, sigs in sorted(counts.items()):
        for signature, n in sorted(sigs.items()):
            if n <= 0:
                continue
            total = int(MetricPoint.objects.filter(run=run, key=tampering_key(domain, signature), step__lte=step)
                        .aggregate(total=Sum("value"))["total"] or n)
            reported = max((int(d.get("total", 0)) for d in RunEvent.objects.filter(run=run, kind="tampering")
                            .values_list("data", flat=True) if d.get("domain") == domain and d.get("signature") == signature), default=0)
            if reported and total < 2 * reported:
                continue
            example = storable(((examples or {}).get(domain) or {}).get(signature, ""))  # a completion: NUL replaced
            created.append(RunEvent.objects.create(
                run=run, kind="tampering",
                data={"domain": domain, "signature": signature, "step": step, "count": n, "total": total, "example": example[:2000]},
                message=f"{domain}: {n} completion(s) at step {step} look like {signature} ({total} in this run so far); "
                        f"they were verified like any other, but the policy is probing its verifier"))
    return created


def tampering_metrics(counts: dict[str, dict[str, int]]) -> dict[str, float]:
    """A step's counts as metric points (``tampering/<domain>/<signature>``)."""
    return {tampering_key(d, sig): float(n) for d, sigs in counts.items() for sig, n in sigs.items() if n}


def tampering_counts(trajectories: list[Any]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, str]]]:
    """Per domain and signature: how many of a step's completions match, and one example each."""
    counts: dict[str, dict[str, int]] = {}
    examples: dict[str, dict[str, str]] = {}
    for t in trajectories:
        domain = getattr(getattr(t, "task", None), "domain", None) or ""
        text = getattr(t, "completion", "") or ""
        for signature in tampering_signatures(text):
            counts.setdefault(domain, {}).setdefault(signature, 0)
            counts[domain][signature] += 1
            examples.setdefault(domain, {}).setdefault(signature, text[:2000])
    return counts, examples
