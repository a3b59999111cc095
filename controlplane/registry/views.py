"""Server-rendered registry pages: versions with their aliases, and the comparison view."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.common.errors import ServiceError
from controlplane.common.validation import is_row_id
from controlplane.registry import selectors
from controlplane.registry.models import ModelVersion


@login_required
def versions_page(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    versions = list(selectors.version_list(actor=actor, team=team.slug if team else "")[:300])
    aliases = list(selectors.alias_list(actor=actor, team=team.slug if team else "").order_by("base", "name"))
    runs = sorted({v.run_id for v in versions if v.run_id}, reverse=True)
    return render(request, "registry/versions.html", {"versions": versions, "aliases": aliases, "runs": runs})


def _interval_style(lo, hi, mean) -> dict:
    """Positions (percent of a 0..1 track) of a cell's interval bar and mean mark."""
    clamp = lambda x: max(0.0, min(1.0, x)) * 100  # noqa: E731
    if lo is None or hi is None or mean is None or lo != lo:
        return {}
    return {"left": f"{clamp(lo):.1f}", "width": f"{max(clamp(hi) - clamp(lo), 0.5):.1f}", "mean": f"{clamp(mean):.1f}"}


@login_required
def compare_page(request: HttpRequest) -> HttpResponse:
    """``?v=ID&v=ID...`` (several versions), ``?run=ID`` (its base model and last checkpoint) or
    ``?run=ID&from=first`` (its first and last checkpoint); ``&baseline=ID`` picks what the others
    are measured against (default: a base model among them, else the earliest; never the order
    they were ticked in)."""
    actor = Principal.for_user(request.user)
    refs = list(dict.fromkeys(r for r in request.GET.getlist("v") if r))
    suite = request.GET.get("suite", "")
    run_id = request.GET.get("run", "")
    if not refs and is_row_id(run_id):
        ordered = list(ModelVersion.objects.filter(run_id=int(run_id), team_id__in=actor.team_ids).order_by("step"))
        if ordered and request.GET.get("from") != "first":  # the run's base model against its last checkpoint
            base = ModelVersion.objects.filter(team_id=ordered[0].team_id, kind="base", base_model=ordered[0].base_model).first()
            ordered = ([base] if base else []) + ordered
        refs = [str(v.pk) for v in (ordered[:1] + ordered[-1:])] if len(ordered) > 1 else []
    context = {"refs": refs, "suite": suite, "result": None, "error": "", "baseline": "",
               "suites": selectors.suite_list(actor=actor)}
    if len(refs) < 2:
        context["error"] = "Choose at least two versions to compare."
        return render(request, "registry/compare.html", context)
    baseline = request.GET.get("baseline", "")
    try:
        if not baseline:
            baseline = str(selectors.default_baseline([selectors.version_get(actor=actor, ref=r) for r in refs]).pk)
        result = selectors.compare_versions(actor=actor, refs=refs, suite=suite, baseline=baseline)
    except ServiceError as exc:
        context["error"] = str(exc)
    else:
        for row in result["rows"]:
            for cell in row["cells"]:
                cell["bar"] = _interval_style(cell.get("lo"), cell.get("hi"), cell.get("mean"))
        context["result"] = result
        context["baseline"] = str(result["versions"][0]["id"])
    return render(request, "registry/compare.html", context)
