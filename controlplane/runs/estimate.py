"""A plan before a run: what a run body would consume, from what its domains were measured to cost.

The arithmetic (docs/runs.md, "A plan before a run"): a step draws ``rollout.prompts_per_step``
tasks of ``rollout.n`` completions each, split over the domains by their shares, so domain ``d``
has ``c_d = prompts_per_step * n * share_d`` completions a step. Each domain's figures per
completion come from the best evidence there is, named in its ``source``:

1. ``history``: the team's latest ``HISTORY_RUNS`` runs of the same base model that worked on the
   domain (their ``UsageRecord`` rows): generated tokens, trained tokens per generated token, sandbox seconds
   and judge tokens per completion of the domain's own rows; wall and CPU seconds per completion
   of those runs' step rows (a run's wall time over all its completions, every domain's).
2. ``evaluation``: the team's latest completed evaluation of the domain (``EvalResult``, read by
   the registry and handed in as :class:`Measured`): tokens and seconds per task over the samples
   per task. An evaluation times generation and verification only; it records no CPU, sandbox or
   judge figures and no update, so CPU seconds are the wall seconds times ``CPU_PER_WALL``,
   trained tokens the generated ones times ``TRAINED_PER_GENERATED``, and sandbox seconds and
   judge tokens are not measured (counted as 0 and listed under the figure's ``unmeasured``).
3. ``assumed``: no measurement: every completion uses its whole token allowance (an upper bound)
   at the measured domains' mean seconds per token; with no measured domain at all its time is
   unknown, and so are the run's wall, GPU and CPU seconds (``None``).

Then per step: ``completions = sum c_d``, ``generated_tokens = sum c_d * tokens_d``,
``trained_tokens = sum c_d * tokens_d * trained_d``, ``wall_s = sum c_d * seconds_d``,
``cpu_s = sum c_d * cpu_d``, ``sandbox_s = sum c_d * sandbox_d``, ``judge_tokens = sum c_d *
judge_d``, and ``gpu_s = wall_s * gpus`` (how the driver counts GPU-seconds: the run's GPUs times
the wall time it held them). The run's figures are the step's times its steps: ``budget.steps``,
or fewer where ``budget.wall_s`` would stop it first. The figures' keys are ``UsageRecord``'s, so a
price list can be applied to ``usage`` as to a run's recorded usage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Callable

from django.db.models import Count, Q, Sum

from controlplane.accounts.principal import Principal
from controlplane.common.words import duration
from controlplane.runs.cost import Prices, amount_text, as_json, cost
from controlplane.runs.models import UsageRecord
from controlplane.runs.services import run_validate
from controlplane.runs.spec import RunSpec
from controlplane.runs.usage import current_prices
from trainer.config import TrainerConfig, load_config

FIGURES = ("completions", "generated_tokens", "trained_tokens", "wall_s", "gpu_s", "cpu_s", "sandbox_s", "judge_tokens")
"""The estimate's figures, in ``UsageRecord``'s names."""
INT_FIGURES = frozenset({"completions", "generated_tokens", "trained_tokens", "judge_tokens"})
CPU_PER_WALL = 1.0
"""Assumed where a domain has no run history: the driver keeps one core busy while it runs."""
HISTORY_RUNS = 5
"""A domain's run history: the team's latest this many runs of the base model that worked on it
(older runs may have run on other hardware or code)."""
TRAINED_PER_GENERATED = 1.0
"""Assumed where a domain has no run history: the update trains on every generated completion
(dropped groups of equal rewards make it less)."""


@dataclass(frozen=True)
class Measured:
    """One domain's figures per completion from one source (see the module's docstring)."""

    source: str
    """``history``, ``evaluation`` or ``assumed``."""
    detail: str
    """Which runs or which evaluation, in words."""
    tokens: float
    """Generated tokens per completion."""
    seconds: float | None
    """Wall seconds per completion; None where unknown."""
    cpu_s: float | None = None
    """CPU seconds per completion (None: ``seconds * CPU_PER_WALL``)."""
    trained: float | None = None
    """Trained tokens per generated token (None: ``TRAINED_PER_GENERATED``)."""
    sandbox_s: float | None = None
    """Sandbox seconds per completion; None where not measured."""
    judge_tokens: float | None = None
    """Judge tokens per completion; None where not measured."""


def history(*, team_id: int, slugs: list[str], base_model: str) -> dict[str, Measured]:
    """Per domain of ``slugs``, its figures from the team's latest ``HISTORY_RUNS`` runs of
    ``base_model`` that worked on it (two queries); a domain no such run worked on is left out."""
    per_domain = (UsageRecord.objects.filter(team_id=team_id, domain__in=slugs, run__base_model=base_model)
                  .values("domain", "run_id").annotate(generated=Sum("generated_tokens"), trained=Sum("trained_tokens"),
                                                       completions=Sum("completions"), sandbox=Sum("sandbox_s"),
                                                       judge=Sum("judge_tokens")))
    by_domain: dict[str, list[dict]] = {}
    for r in sorted(per_domain, key=lambda r: -r["run_id"]):  # the latest runs first
        if r["completions"] and len(by_domain.get(r["domain"], ())) < HISTORY_RUNS:
            by_domain.setdefault(r["domain"], []).append(r)
    runs = {r["run_id"]: r for r in (
        UsageRecord.objects.filter(run_id__in={r["run_id"] for rows in by_domain.values() for r in rows}).values("run_id")
        .annotate(wall=Sum("wall_s", filter=Q(domain="")), cpu=Sum("cpu_s", filter=Q(domain="")),
                  completions=Sum("completions", filter=~Q(domain="")), steps=Count("id", filter=Q(domain=""))))}
    out: dict[str, Measured] = {}
    for slug in slugs:
        rows = by_domain.get(slug)
        if not rows:
            continue
        ran = [runs[r["run_id"]] for r in rows if runs.get(r["run_id"], {}).get("completions")]
        completions = sum(r["completions"] for r in rows)
        generated = sum(r["generated"] for r in rows)
        run_completions = sum(r["completions"] for r in ran)
        ids = ", ".join(f"#{r['run_id']}" for r in sorted(ran, key=lambda r: r["run_id"]))
        out[slug] = Measured(
            source="history",
            detail=f"{len(ran)} earlier run(s) of {base_model} ({ids}), {sum(r['steps'] for r in ran)} steps, "
                   f"{completions} completions of this domain",
            tokens=generated / completions,
            seconds=sum(r["wall"] or 0 for r in ran) / run_completions if run_completions else None,
            cpu_s=sum(r["cpu"] or 0 for r in ran) / run_completions if run_completions else None,
            trained=sum(r["trained"] for r in rows) / generated if generated else TRAINED_PER_GENERATED,
            sandbox_s=sum(r["sandbox"] for r in rows) / completions,
            judge_tokens=sum(r["judge"] for r in rows) / completions)
    return out


def _token_allowance(cfg: TrainerConfig) -> int:
    """Most model tokens one completion may generate: a turn's ``max_new_tokens``, or, for
    multi-turn episodes, the episode's token budget."""
    r = cfg.rollout
    return r.max_new_tokens if r.max_turns == 1 else min(r.max_episode_tokens, r.max_new_tokens * r.max_turns)


def _assumed(measured: list[Measured], allowance: int) -> Measured:
    """A domain with no measurement, at ``allowance`` tokens per completion and the measured
    domains' mean seconds per token (unknown when none was measured)."""
    rates = [m.seconds / m.tokens for m in measured if m.seconds is not None and m.tokens > 0]
    rate = sum(rates) / len(rates) if rates else None
    how = (f"the mean seconds per token of the {len(rates)} measured domain(s)" if rate is not None
           else "no domain of the run is measured, so its time is unknown")
    return Measured(source="assumed", detail=f"no run history and no evaluation: {allowance} tokens per completion "
                    f"(the run's allowance, an upper bound) at {how}",
                    tokens=float(allowance), seconds=rate * allowance if rate is not None else None)


def domain_figures(spec: RunSpec, cfg: TrainerConfig, *, histories: dict[str, Measured],
                   evaluations: dict[str, Measured]) -> list[dict[str, Any]]:
    """Each domain's share, completions a step and figures per completion, with their source."""
    allowance = _token_allowance(cfg)
    chosen: dict[str, Measured] = {}
    for slug, _ in spec.domains:
        m = histories.get(slug) or evaluations.get(slug)
        if m is not None and m.tokens > allowance:  # a completion of this run cannot be longer
            scale = allowance / m.tokens
            m = replace(m, tokens=float(allowance), seconds=None if m.seconds is None else m.seconds * scale,
                        detail=m.detail + f"; capped at the run's {allowance} tokens per completion, time in proportion")
        if m is not None:
            chosen[slug] = m
    total = sum(w for _, w in spec.domains) or 1.0
    per_step = cfg.rollout.prompts_per_step * cfg.rollout.n
    out = []
    for slug, weight in spec.domains:
        m = chosen.get(slug) or _assumed(list(chosen.values()), allowance)
        out.append({"slug": slug, "share": weight / total, "completions_per_step": per_step * weight / total,
                    "source": m.source, "detail": m.detail, "tokens_per_completion": m.tokens,
                    "seconds_per_completion": m.seconds,
                    "cpu_s_per_completion": m.cpu_s if m.cpu_s is not None else
                    (None if m.seconds is None else m.seconds * CPU_PER_WALL),
                    "trained_per_generated": m.trained if m.trained is not None else TRAINED_PER_GENERATED,
                    "sandbox_s_per_completion": m.sandbox_s, "judge_tokens_per_completion": m.judge_tokens})
    return out


def _sum(domains: list[dict[str, Any]], per_completion) -> tuple[float | None, list[str]]:
    """``sum c_d * per_completion(d)`` over the domains, and the slugs whose figure is unknown
    (they count as 0; the sum is None when no domain is known)."""
    known = [(d, per_completion(d)) for d in domains]
    unmeasured = [d["slug"] for d, v in known if v is None]
    if len(unmeasured) == len(domains):
        return None, unmeasured
    return sum(d["completions_per_step"] * v for d, v in known if v is not None), unmeasured


def _per_step(domains: list[dict[str, Any]], gpus: int) -> dict[str, tuple[float | None, list[str]]]:
    """Each figure of one step, with the domains it could not measure."""
    wall = _sum(domains, lambda d: d["seconds_per_completion"])
    return {
        "completions": (sum(d["completions_per_step"] for d in domains), []),
        "generated_tokens": _sum(domains, lambda d: d["tokens_per_completion"]),
        "trained_tokens": _sum(domains, lambda d: d["tokens_per_completion"] * d["trained_per_generated"]),
        "wall_s": wall,
        "gpu_s": (None if wall[0] is None else wall[0] * gpus, wall[1]),
        "cpu_s": _sum(domains, lambda d: d["cpu_s_per_completion"]),
        "sandbox_s": _sum(domains, lambda d: d["sandbox_s_per_completion"]),
        "judge_tokens": _sum(domains, lambda d: d["judge_tokens_per_completion"]),
    }


def _sources(domains: list[dict[str, Any]], gpus: int) -> dict[str, str]:
    """Where each figure comes from, in words."""
    by: dict[str, list[str]] = {}
    for d in domains:
        by.setdefault(d["source"], []).append(d["slug"])
    kinds = "; ".join(f"{kind}: {', '.join(slugs)}" for kind, slugs in sorted(by.items()))
    only_history = "run history where a domain has it, else not measured"
    return {
        "completions": "rollout.prompts_per_step x rollout.n, split by the domains' shares",
        "generated_tokens": f"tokens per completion ({kinds})",
        "trained_tokens": f"generated tokens x trained per generated (run history, else {TRAINED_PER_GENERATED:g} assumed)",
        "wall_s": f"seconds per completion ({kinds})",
        "gpu_s": f"wall seconds x the run's {gpus} GPU(s), as the driver counts GPU-seconds",
        "cpu_s": f"run history's CPU seconds per completion, else wall seconds x {CPU_PER_WALL:g} (assumed)",
        "sandbox_s": only_history,
        "judge_tokens": only_history,
    }


def _steps(spec: RunSpec, wall_per_step: float | None) -> tuple[int, str]:
    """The steps the run would take, and why: its step budget, unless its wall limit ends it
    first (the driver checks the limit after each step, so the step that passes it is the last)."""
    steps = int(spec.value("budget.steps") or 1)
    limit = spec.value("budget.wall_s")
    if limit and wall_per_step and math.floor(limit / wall_per_step) + 1 < steps:
        return math.floor(limit / wall_per_step) + 1, f"budget.wall_s ({limit:g} s) ends the run before budget.steps ({steps})"
    return steps, "budget.steps"


def _rounded(key: str, value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(round(value)) if key in INT_FIGURES else round(value, 3)


def estimate(spec: RunSpec, *, histories: dict[str, Measured], evaluations: dict[str, Measured]) -> dict[str, Any]:
    """The run's estimated figures, per step and in all, each with its source, the domains'
    figures per completion and the assumptions made. ``histories`` (:func:`history`) and
    ``evaluations`` (the registry's ``eval_task_costs``) give the measured domains."""
    cfg = load_config(spec.trainer_config())
    domains = domain_figures(spec, cfg, histories=histories, evaluations=evaluations)
    per_step = _per_step(domains, spec.gpus)
    steps, steps_source = _steps(spec, per_step["wall_s"][0])
    sources = _sources(domains, spec.gpus)
    figures = {key: {"value": _rounded(key, None if v is None else v * steps), "per_step": None if v is None else round(v, 3),
                     "source": sources[key], "unmeasured": unmeasured}
               for key, (v, unmeasured) in per_step.items()}
    for key, f in figures.items():  # seconds in words, as the usage card shows them
        if key.endswith("_s"):
            f["text"], f["per_step_text"] = duration(f["value"]), duration(f["per_step"])
    return {
        "steps": {"value": steps, "source": steps_source},
        "figures": figures,
        "usage": {key: f["value"] for key, f in figures.items()},
        "domains": [{k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()} for d in domains],
        "rollout": {"prompts_per_step": cfg.rollout.prompts_per_step, "n": cfg.rollout.n, "gpus": spec.gpus,
                    "tokens_per_completion_at_most": _token_allowance(cfg)},
        "assumptions": assumptions(cfg),
    }


def assumptions(cfg: TrainerConfig) -> list[str]:
    """What the estimate takes as given, in words (the form shows them)."""
    out = [
        "Every step draws rollout.prompts_per_step tasks of rollout.n completions, split by the domains' shares"
        + (" (the adaptive budget varies n per task: the mean is taken as rollout.n)" if cfg.sampler.adaptive_budget else "") + ".",
        f"Run history counts only the team's latest {HISTORY_RUNS} runs of the same base model on a domain; its wall "
        "and CPU seconds per completion are those runs' time over all their completions.",
        "An evaluation times generation and verification, not the update, on the hardware it ran on: a domain "
        "measured only by one is likely faster there than in a run.",
        f"Without run history: CPU seconds = wall seconds x {CPU_PER_WALL:g}, trained tokens = generated x "
        f"{TRAINED_PER_GENERATED:g}, and sandbox seconds and judge tokens are not measured (counted as 0).",
        "Not counted: the supervised warm-up stage, in-training evaluations (eval.every_steps) and time queued.",
    ]
    return out


def run_estimate(*, actor: Principal, data: Any, evaluations: Callable[..., dict[str, Measured]]) -> dict[str, Any]:
    """The estimate of a run body, validated as ``POST /api/runs`` validates it (the same
    ``InvalidInput`` naming each field; nothing is saved). ``evaluations(team_id=, slugs=,
    base_model=)`` gives the domains' evaluation figures (the registry's ``eval_task_costs``:
    the registry reads the runs app, not the other way round)."""
    plan = run_validate(actor=actor, data=data)
    slugs = [slug for slug, _ in plan.spec.domains]
    where = {"team_id": plan.team.id, "slugs": slugs, "base_model": plan.spec.base_model}
    out = estimate(plan.spec, histories=history(**where), evaluations=evaluations(**where))
    out["cost"] = priced(out["usage"], current_prices(), plan.spec.budget_cost)
    return out


def priced(usage: dict[str, Any], prices: Prices, budget: Decimal | None) -> dict[str, Any]:
    """The estimate's cost in money: its figures times the platform admin's prices
    (:func:`controlplane.runs.cost.cost`: a part unknown where a figure above 0, or not measured,
    has no price), with the money budget and whether the estimate stays within it."""
    parts = cost(usage, prices)
    total = parts["total"]
    return {**as_json(parts), "currency": prices.currency, "prices": prices.as_dict(),
            "budget": amount_text(budget),
            "within_budget": None if budget is None or total is None else total <= budget}
