"""Reads for the registry, filtered to the actor's teams; the comparison and the promotion gate."""
from __future__ import annotations

from django.conf import settings
from django.db.models import Q, QuerySet

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, NotFound, found
from controlplane.common.queries import filter_given
from controlplane.common.validation import MAX_ROW_ID, is_row_id
from controlplane.registry.models import (Alias, AliasMove, BaseModel, EvalResult, EvalRun, EvalState, EvalSuite, EvalSuiteVersion,
                                         ModelVersion)
from controlplane.registry.stats import bootstrap_ci, paired_delta, task_scores
from controlplane.runs.estimate import Measured
from controlplane.runs.models import Run
from trainer.config import EvalConfig


def version_list(*, actor: Principal, team: str = "", base: str = "", run: int | None = None) -> QuerySet[ModelVersion]:
    qs = (ModelVersion.objects.filter(team_id__in=actor.team_ids)
          .select_related("team", "run", "parent").prefetch_related("aliases"))
    return filter_given(qs, team__slug=team, base=base, run_id=run).order_by("-created_at", "-id")


def version_get(*, actor: Principal, ref: int | str) -> ModelVersion:
    """A version by id, or by name (``tiny@12/40``), or by alias (``tiny:production``)."""
    qs = ModelVersion.objects.filter(team_id__in=actor.team_ids).select_related("team", "run", "parent")
    version = None
    if isinstance(ref, int):
        version = qs.filter(pk=ref).first() if 0 < ref <= MAX_ROW_ID else None
    elif is_row_id(ref):
        version = qs.filter(pk=int(ref)).first()
    elif ":" in ref:
        base, _, alias = ref.rpartition(":")
        a = Alias.objects.filter(team_id__in=actor.team_ids, base=base, name=alias).first()
        version = a.version if a else None
    else:
        version = qs.filter(name=ref).first()
    return found(version, f"model version {ref!r} not found")


def base_model_list() -> QuerySet[BaseModel]:
    """Every registered base model (every signed-in user may see them: they are for every team)."""
    return BaseModel.objects.all()


def version_for_team(*, ref: str, team_id: int | None) -> ModelVersion | None:
    """The version ``ref`` names (id, ``v<id>``, name, or ``<base>:<alias>``) among team
    ``team_id``'s, or None: another team's version is as absent as a missing one."""
    if team_id is None or not ref:
        return None
    qs = ModelVersion.objects.filter(team_id=team_id)
    if is_row_id(ref) or (ref[:1] == "v" and is_row_id(ref[1:])):
        by_id = qs.filter(pk=int(ref.lstrip("v"))).first()
        if by_id is not None or is_row_id(ref):
            return by_id
    version = qs.filter(name=ref).first()
    if version is None and ":" in ref:
        base, _, alias = ref.rpartition(":")
        a = Alias.objects.filter(team_id=team_id, base=base, name=alias).select_related("version").first()
        version = a.version if a else None
    return version


def suite_list(*, actor: Principal) -> QuerySet[EvalSuite]:
    return EvalSuite.objects.filter(Q(team__isnull=True) | Q(team_id__in=actor.team_ids)).order_by("slug")


def suite_version_get(*, actor: Principal, slug: str, version: int | None = None) -> EvalSuiteVersion:
    suite = found(suite_list(actor=actor).filter(slug=slug).first(), f"eval suite {slug!r} not found")
    sv = suite.versions.filter(version=version or suite.version).select_related("suite").first()
    return found(sv, f"eval suite {slug!r} has no version {version}")


def eval_list(*, actor: Principal, version: ModelVersion | None = None) -> QuerySet[EvalRun]:
    qs = EvalRun.objects.filter(version__team_id__in=actor.team_ids).select_related("version", "suite_version__suite")
    if version is not None:
        qs = qs.filter(version=version)
    return qs.order_by("-created_at", "-id")


def eval_get(*, actor: Principal, eval_id: int) -> EvalRun:
    return found(eval_list(actor=actor).filter(pk=eval_id).first(), f"evaluation {eval_id} not found")


def alias_list(*, actor: Principal, team: str = "") -> QuerySet[Alias]:
    qs = Alias.objects.filter(team_id__in=actor.team_ids).select_related("team", "version")
    return qs.filter(team__slug=team) if team else qs


def alias_history(*, actor: Principal, base: str, name: str) -> QuerySet[AliasMove]:
    return (AliasMove.objects.filter(alias__team_id__in=actor.team_ids, alias__base=base, alias__name=name)
            .select_related("from_version", "to_version", "actor").order_by("-at", "-id"))


# ----------------------------------------------------------------------------- comparison
def latest_eval(version: ModelVersion, suite_version: EvalSuiteVersion) -> EvalRun | None:
    return (EvalRun.objects.filter(version=version, suite_version=suite_version, state=EvalState.COMPLETED)
            .order_by("-finished_at", "-id").first())


def run_eval_suite(run: Run) -> EvalSuiteVersion | None:
    """The suite a run's held-out curve comes from (its current version): the run team's own
    auto-evaluating suites before shared ones, by slug, the first that evaluates one of the run's
    domains. Every checkpoint of the run, and its base model, is evaluated on it as it is saved;
    those stored results are the run page's ``eval/...`` points, the registry's and the
    comparison's: one truth. None where no such suite exists (the driver's in-training
    evaluation, ``eval.every_steps``, then draws the curve)."""
    slugs = set(run.run_domains.values_list("domain__slug", flat=True))
    suites = EvalSuite.objects.filter(auto_evaluate=True).filter(Q(team__isnull=True) | Q(team_id=run.team_id))
    for suite in sorted(suites, key=lambda s: (s.team_id is None, s.slug)):
        sv = suite.versions.filter(version=suite.version).first()
        if sv is not None and any(item["domain"] in slugs for item in sv.items):
            return sv
    return None


def eval_source(run: Run) -> dict | None:
    """What the run page names beside its held-out chart: the suite and each item's settings, or
    the in-training evaluation's settings, or None when nothing evaluates the run."""
    sv = run_eval_suite(run)
    if sv is not None:
        return {"kind": "suite", "suite": sv.suite.slug, "version": sv.version,
                "items": [{k: item.get(k) for k in ("domain", "tasks", "samples", "temperature", "level", "levels", "max_new_tokens", "k")}
                          for item in sv.items]}
    ev = (run.config or {}).get("eval") or {}
    if not ev.get("every_steps"):
        return None
    defaults = EvalConfig()  # the trainer's defaults for what the run does not set
    return {"kind": "in_training", "every_steps": ev["every_steps"],
            "tasks_per_domain": ev.get("tasks_per_domain", defaults.tasks_per_domain),
            "seed": ev.get("seed", defaults.seed), "temperature": 0.0}


def common_suite_versions(versions: list[ModelVersion], suite: str = "") -> list[EvalSuiteVersion]:
    """The latest version of each suite that every one of ``versions`` has a completed evaluation on."""
    qs = EvalSuiteVersion.objects.filter(eval_runs__state=EvalState.COMPLETED).select_related("suite")
    if suite:
        qs = qs.filter(suite__slug=suite)
    for v in versions:
        qs = qs.filter(pk__in=EvalRun.objects.filter(version=v, state=EvalState.COMPLETED).values("suite_version"))
    latest: dict[int, EvalSuiteVersion] = {}
    for sv in qs.distinct():
        if sv.suite_id not in latest or sv.version > latest[sv.suite_id].version:
            latest[sv.suite_id] = sv
    return sorted(latest.values(), key=lambda sv: sv.suite.slug)


def compare(*, versions: list[ModelVersion], suite_version: EvalSuiteVersion) -> dict:
    """Per layer and domain, each version's mean reward with a bootstrap interval (over tasks),
    pass@k, and its paired difference to the first version (the baseline) with an interval.

    ``regression`` marks a significant drop (the difference's interval lies below 0),
    ``improvement`` a significant gain.
    """
    evals = [latest_eval(v, suite_version) for v in versions]
    results = [{(r.layer, r.domain): r for r in ev.results.all()} if ev else {} for ev in evals]
    keys = sorted({k for rs in results for k in rs}, key=lambda k: (k[0] != "capability", k[0], k[1]))
    rows = []
    for layer, domain in keys:
        base_scores = task_scores(results[0][(layer, domain)].per_task) if (layer, domain) in results[0] else {}
        cells = []
        for i, (v, rs) in enumerate(zip(versions, results)):
            r = rs.get((layer, domain))
            if r is None:
                cells.append({"version": v.pk, "name": v.name, "missing": True})
                continue
            scores = task_scores(r.per_task)
            lo, hi = bootstrap_ci(list(scores.values()))
            cell = {"version": v.pk, "name": v.name, "missing": False, "mean": r.mean_reward, "lo": lo, "hi": hi,
                    "tasks": r.tasks, "pass_at": r.pass_at, "outcomes": r.outcomes,
                    "tokens_per_task": r.tokens_per_task, "seconds_per_task": r.seconds_per_task,
                    "delta": None, "delta_lo": None, "delta_hi": None, "regression": False, "improvement": False}
            if i > 0 and base_scores:
                d = paired_delta(base_scores, scores)
                cell.update(delta=d["delta"], delta_lo=d["lo"], delta_hi=d["hi"],
                            regression=d["hi"] is not None and d["hi"] < 0,
                            improvement=d["lo"] is not None and d["lo"] > 0)
            cells.append(cell)
        rows.append({"layer": layer, "domain": domain, "cells": cells})
    return {"suite": suite_version.suite.slug, "suite_version": suite_version.version,
            "versions": [{"id": v.pk, "name": v.name, "eval": ev.pk if ev else None} for v, ev in zip(versions, evals)],
            "rows": rows}


def compare_versions(*, actor: Principal, refs: list[str], suite: str = "", suite_version: int | None = None,
                     baseline: str = "", lineage_baseline: bool = False) -> dict:
    """Compare two or more versions on a suite they were all evaluated on. The baseline is
    ``baseline`` (one of ``refs``) where given, else :func:`default_baseline` with
    ``lineage_baseline`` (the comparison page), else the first of ``refs`` (the API); the others
    follow in the order given."""
    if len(refs) < 2:
        raise InvalidInput.one("versions", "name at least two versions")
    versions = [version_get(actor=actor, ref=r) for r in refs]
    chosen = None
    if baseline:
        chosen = version_get(actor=actor, ref=baseline)
        if chosen.pk not in [v.pk for v in versions]:
            raise InvalidInput.one("baseline", f"{chosen.name} is not one of the compared versions")
    elif lineage_baseline:
        chosen = default_baseline(versions)
    if chosen is not None:
        versions = [chosen] + [v for v in versions if v.pk != chosen.pk]
    if suite and suite_version:
        sv = suite_version_get(actor=actor, slug=suite, version=suite_version)
    else:
        common = common_suite_versions(versions, suite)
        if not common:
            raise NotFound("no eval suite version has a completed evaluation of every one of these versions"
                           + (f" (suite {suite})" if suite else ""))
        # The suite these versions were evaluated on most recently.
        sv = max(common, key=lambda c: max(latest_eval(v, c).finished_at or latest_eval(v, c).created_at for v in versions))
    return compare(versions=versions, suite_version=sv)


def default_baseline(versions: list[ModelVersion]) -> ModelVersion:
    """What a comparison measures the others against when nobody chose: a base model among them,
    else the earliest in lineage (lowest step of a run, then the oldest version), never the
    order they were ticked in."""
    return min(versions, key=lambda v: (not v.is_base, v.step if v.run_id else 0, v.pk))


def promotion_threshold() -> float:
    """Largest drop in a domain's mean reward that promotion tolerates (TEMPER_PROMOTION_MAX_REGRESSION)."""
    return float(getattr(settings, "TEMPER_PROMOTION_MAX_REGRESSION", 0.02))


def promotion_gate(*, candidate: ModelVersion, current: ModelVersion | None, suite: str = "",
                   threshold: float | None = None) -> dict:
    """May ``candidate`` replace ``current`` as production?

    Refused when, on any suite both were evaluated on (the latest common version of each), a
    domain's mean reward drops by more than ``threshold`` and significantly (the paired bootstrap
    interval of the difference lies below 0), or when there is no common evaluation to judge by.
    """
    threshold = promotion_threshold() if threshold is None else threshold
    verdict = {"ok": True, "threshold": threshold, "current": current.name if current else None,
               "candidate": candidate.name, "suites": [], "regressions": [], "reason": ""}
    if current is None or current.pk == candidate.pk:
        verdict["reason"] = "no production version yet" if current is None else "already production"
        return verdict
    suites = common_suite_versions([current, candidate], suite)
    if not suites:
        verdict.update(ok=False, reason=f"{candidate.name} has no evaluation comparable with production ({current.name})"
                       + (f" on suite {suite}" if suite else ""))
        return verdict
    for sv in suites:
        verdict["suites"].append(f"{sv.suite.slug}@v{sv.version}")
        for row in compare(versions=[current, candidate], suite_version=sv)["rows"]:
            cell = row["cells"][1]
            if cell.get("missing") or cell["delta"] is None:
                continue
            if cell["delta"] < -threshold and cell["regression"]:
                verdict["regressions"].append({"suite": sv.suite.slug, "suite_version": sv.version, "layer": row["layer"],
                                               "domain": row["domain"], "delta": cell["delta"],
                                               "lo": cell["delta_lo"], "hi": cell["delta_hi"]})
    if verdict["regressions"]:
        worst = min(verdict["regressions"], key=lambda r: r["delta"])
        verdict.update(ok=False, reason=f"{len(verdict['regressions'])} domain(s) regress beyond {threshold:g}; worst "
                       f"{worst['domain']} ({worst['layer']}) {worst['delta']:+.3f} [{worst['lo']:+.3f}, {worst['hi']:+.3f}]")
    else:
        verdict["reason"] = "no domain regresses beyond the threshold"
    return verdict


# ----------------------------------------------------------------------------- a run's estimate
def eval_task_costs(*, team_id: int, slugs: list[str], base_model: str) -> dict[str, Measured]:
    """Per domain of ``slugs``, its measured cost per completion from the team's latest completed
    evaluation of it (one query): a version of ``base_model`` (its base or one of its runs'
    checkpoints) first, else any of the team's; tokens and seconds per task over the samples per
    task. A domain no evaluation measured is left out. The run form's estimate reads these where
    a domain has no run history (controlplane/runs/estimate.py)."""
    rows = (EvalResult.objects.filter(eval_run__version__team_id=team_id, eval_run__state=EvalState.COMPLETED,
                                      domain__in=slugs, tasks__gt=0, samples__gt=0)
            .order_by("-eval_run__finished_at", "-id")
            .values("domain", "layer", "tasks", "samples", "tokens_per_task", "seconds_per_task", "eval_run_id",
                    "eval_run__finished_at", "eval_run__version__name", "eval_run__version__base_model",
                    "eval_run__suite_version__suite__slug", "eval_run__suite_version__version"))
    best: dict[str, dict] = {}
    for r in rows:  # newest first: the first of the same base model wins, else the first of any
        held = best.get(r["domain"])
        same = r["eval_run__version__base_model"] == base_model
        if held is None or (same and held["eval_run__version__base_model"] != base_model):
            best[r["domain"]] = r
    out = {}
    for slug, r in best.items():
        per_task = r["samples"] / r["tasks"]
        when = r["eval_run__finished_at"]
        out[slug] = Measured(
            source="evaluation",
            detail=(f"evaluation #{r['eval_run_id']} of {r['eval_run__version__name']} on "
                    f"{r['eval_run__suite_version__suite__slug']}@v{r['eval_run__suite_version__version']} ({r['layer']}), "
                    f"{r['tasks']} tasks x {per_task:g} samples{f', {when:%Y-%m-%d}' if when else ''}"),
            tokens=r["tokens_per_task"] / per_task, seconds=r["seconds_per_task"] / per_task)
    return out
