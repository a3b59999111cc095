"""Server-rendered registry pages: versions with their aliases, and the comparison view."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.common.errors import InvalidInput, ServiceError
from controlplane.common.validation import is_row_id
from controlplane.registry import aliases, selectors
from controlplane.registry.models import ALIASES, ModelVersion


@login_required
def versions_page(request: HttpRequest, *, status: int = 200, move: dict | None = None) -> HttpResponse:
    """Versions and aliases; members move aliases here (production through the promotion gate,
    whose refusal is shown with its regressions), team admins override the gate with a reason."""
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    versions = list(selectors.version_list(actor=actor, team=team.slug if team else "")[:300])
    aliases = list(selectors.alias_list(actor=actor, team=team.slug if team else "").order_by("base", "name"))
    runs = sorted({v.run_id for v in versions if v.run_id}, reverse=True)
    return render(request, "registry/versions.html", {
        "versions": versions, "aliases": aliases, "runs": runs, "alias_names": ALIASES,
        "can_move": team is not None and actor.can(team.id, "run.control"),
        "can_override": team is not None and actor.can(team.id, "team.admin"),
        "move": move or {"values": {}, "errors": {}, "gate": None},
    }, status=status)


@login_required
@require_POST
def alias_move_view(request: HttpRequest) -> HttpResponse:
    """Point an alias at a version (the form on the versions page); the service decides who may
    and runs the gate, so the page refuses exactly what the API refuses."""
    actor = Principal.for_user(request.user)
    values = {"version": request.POST.get("version", ""), "alias": request.POST.get("alias", ""),
              "reason": request.POST.get("reason", "")[:2000], "override": request.POST.get("override") == "on"}
    errors: dict[str, list[str]] = {}
    try:
        if not is_row_id(values["version"]):
            raise InvalidInput.one("version", "choose a version")
        version = selectors.version_get(actor=actor, ref=int(values["version"]))
        alias = aliases.alias_move(actor=actor, version=version, name=values["alias"], reason=values["reason"],
                                    override=values["override"])
    except aliases.GateRefused as exc:
        return versions_page(request, status=exc.status, move={"values": values, "errors": {}, "gate": exc.verdict,
                                                               "refused": str(exc)})
    except InvalidInput as exc:
        for e in exc.errors:
            errors.setdefault(e.path if e.path in ("version", "alias", "reason") else "form", []).append(e.message)
        return versions_page(request, status=exc.status, move={"values": values, "errors": errors, "gate": None})
    except ServiceError as exc:
        return versions_page(request, status=exc.status, move={"values": values, "errors": {"form": [str(exc)]}, "gate": None})
    messages.success(request, f"{alias.base}:{alias.name} now points at {alias.version.name}.")
    return HttpResponseRedirect(reverse("registry"))


@login_required
@require_POST
def alias_rollback_view(request: HttpRequest) -> HttpResponse:
    """Point an alias back at the version it pointed at before its last move."""
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    base, name = request.POST.get("base", "")[:100], request.POST.get("alias", "")
    try:
        if team is None:
            raise InvalidInput.one("team", "you are in no team")
        alias = aliases.alias_rollback(actor=actor, team=team, base=base, name=name,
                                        reason=request.POST.get("reason", "")[:2000])
    except ServiceError as exc:
        return versions_page(request, status=exc.status, move={"values": {}, "errors": {"form": [str(exc)]}, "gate": None})
    messages.success(request, f"{alias.base}:{alias.name} rolled back to {alias.version.name}.")
    return HttpResponseRedirect(reverse("registry"))


def _interval_style(lo, hi, mean) -> dict:
    """Positions (percent of a 0..1 track) of a cell's interval bar and mean mark."""
    clamp = lambda x: max(0.0, min(1.0, x)) * 100  # noqa: E731
    if lo is None or hi is None or mean is None or lo != lo:
        return {}
    return {"left": f"{clamp(lo):.1f}", "width": f"{max(clamp(hi) - clamp(lo), 0.5):.1f}", "mean": f"{clamp(mean):.1f}"}


@login_required
def compare_page(request: HttpRequest) -> HttpResponse:
    """``?v=ID&v=ID...`` (several versions), ``?run=ID`` (the policy it started RL from and its last
    checkpoint: its step-0 checkpoint after an SFT stage, else its base model), ``&from=base`` (its
    base model, say a random init, instead) or ``&from=first`` (its first checkpoint); ``&baseline=ID`` picks what the others
    are measured against (default: a base model among them, else the earliest; never the order
    they were ticked in)."""
    actor = Principal.for_user(request.user)
    refs = list(dict.fromkeys(r for r in request.GET.getlist("v") if r))
    suite = request.GET.get("suite", "")
    run_id = request.GET.get("run", "")
    start_note = ""
    if not refs and is_row_id(run_id):
        ordered = list(ModelVersion.objects.filter(run_id=int(run_id), team_id__in=actor.team_ids).order_by("step"))
        start = request.GET.get("from", "")
        if ordered and start not in ("first", "start"):
            started_after_sft = ordered[0].step == 0 and start != "base"
            if started_after_sft:  # the policy RL started from: the run's SFT stage's, its step 0
                start_note = (f"Baseline: the run's starting policy after its SFT stage ({ordered[0].name}, step 0), "
                              "not the base model it was trained from")
            else:  # no SFT stage: the run starts from its base model
                base = ModelVersion.objects.filter(team_id=ordered[0].team_id, kind="base", base_model=ordered[0].base_model).first()
                ordered = ([base] if base else []) + [v for v in ordered if v.step > 0 or start != "base"]
                start_note = f"Baseline: the base model ({base.name})" if base else ""
        elif ordered:
            start_note = f"Baseline: the run's first checkpoint ({ordered[0].name}, step {ordered[0].step})"
        refs = [str(v.pk) for v in (ordered[:1] + ordered[-1:])] if len(ordered) > 1 else []
    context = {"refs": refs, "suite": suite, "result": None, "error": "", "baseline": "", "start_note": start_note,
               "run_id": run_id if is_row_id(run_id) else "", "suites": selectors.suite_list(actor=actor)}
    if len(refs) < 2:
        context["error"] = "Choose at least two versions to compare."
        return render(request, "registry/compare.html", context)
    try:
        result = selectors.compare_versions(actor=actor, refs=refs, suite=suite, baseline=request.GET.get("baseline", ""),
                                            lineage_baseline=True)
    except ServiceError as exc:
        context["error"] = str(exc)
    else:
        for row in result["rows"]:
            for cell in row["cells"]:
                cell["bar"] = _interval_style(cell.get("lo"), cell.get("hi"), cell.get("mean"))
        context["result"] = result
        context["baseline"] = str(result["versions"][0]["id"])
    return render(request, "registry/compare.html", context)
