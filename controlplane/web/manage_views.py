"""Admin work in the app: team quotas and members, resource pools and base models.

The page shows each role what it may change: platform admins (Django staff) every team's quota,
the pools and the base models; a team's admins their team's members and a tightening of its
ceilings. Every form posts to a view that calls the same service as the API and the CLI, so the
service's rules (roles, validation, audit) decide; a refused or invalid form re-renders the page
with each error beside its field, keeping what was typed."""
from __future__ import annotations

import functools
import math
from typing import Callable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.accounts import services as account_services
from controlplane.accounts.models import Membership, Role, Team
from controlplane.accounts.principal import Principal
from controlplane.common.errors import FieldError, InvalidInput, ServiceError
from controlplane.common.validation import schema_errors
from controlplane.registry import selectors as registry_selectors
from controlplane.registry import services as registry_services
from controlplane.scheduling import services as scheduling_services
from controlplane.scheduling.models import PoolKind, ResourcePool, TeamQuota
from controlplane.scheduling.selectors import gpu_quota_note

MAX_CEILING_LINES = 200


def admin_teams(actor: Principal) -> list[Team]:
    """The teams whose quota or members ``actor`` may manage: every team for a platform admin,
    else the teams where they are an admin."""
    teams = Team.objects.order_by("slug")
    if actor.platform_admin:
        return list(teams)
    return [t for t in teams.filter(pk__in=actor.team_ids) if actor.can(t.id, "team.admin")]


def may_manage(actor: Principal) -> bool:
    return actor.platform_admin or any(actor.can(t, "team.admin") for t in actor.team_ids)


def parse_ceilings(text: str) -> dict[str, float]:
    """``path = value`` lines (``rollout.n = 8``) as the quota's ceilings map; blank lines and
    ``#`` comments are skipped. Every bad line is reported at once, by its number.

    >>> parse_ceilings("rollout.n = 8\\n# note\\nsequences_per_step=64")
    {'rollout.n': 8, 'sequences_per_step': 64}
    """
    out: dict[str, float] = {}
    errors: list[FieldError] = []
    lines = text.splitlines()
    if len(lines) > MAX_CEILING_LINES:
        raise InvalidInput.one("ceilings", f"at most {MAX_CEILING_LINES} lines")
    for number, line in enumerate(lines, start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        path, sep, value = (part.strip() for part in line.partition("="))
        if not sep or not path or not value:
            errors.append(FieldError("ceilings", f"line {number}: expected 'path = number', got {line!r}"))
            continue
        try:
            number_value = float(value)
        except ValueError:
            errors.append(FieldError("ceilings", f"line {number}: {value!r} is not a number"))
            continue
        if not math.isfinite(number_value):
            errors.append(FieldError("ceilings", f"line {number}: {value!r} is not a finite number"))
            continue
        if path in out:
            errors.append(FieldError("ceilings", f"line {number}: {path} is set twice"))
            continue
        out[path] = int(number_value) if number_value.is_integer() else number_value
    if errors:
        raise InvalidInput(errors)
    return out


def ceilings_text(ceilings: dict) -> str:
    return "\n".join(f"{path} = {value}" for path, value in sorted(ceilings.items()))


def _int_field(data, name: str, errors: list[FieldError]) -> int | None:
    raw = (data.get(name) or "").strip()
    try:
        return int(raw)
    except ValueError:
        errors.append(FieldError(name, f"{raw!r} is not a whole number" if raw else "required"))
        return None


def _team_rows(teams: list[Team]) -> list[dict]:
    quotas = {q.team_id: q for q in TeamQuota.objects.filter(team__in=teams)}
    gpu_slots = sum(ResourcePool.objects.filter(kind=PoolKind.TRAIN_GPU).values_list("capacity", flat=True))
    members: dict[int, list[Membership]] = {}
    for m in Membership.objects.filter(team__in=teams).select_related("user").order_by("user__username"):
        members.setdefault(m.team_id, []).append(m)
    rows = []
    for team in teams:
        quota = quotas.get(team.id) or TeamQuota(team=team)
        rows.append({"team": team, "quota": quota, "ceilings": ceilings_text(quota.ceilings),
                     "gpu_note": gpu_quota_note(quota.max_gpus, gpu_slots=gpu_slots),
                     "members": members.get(team.id, []), "errors": {}, "values": {}})
    return rows


def _render(request: HttpRequest, actor: Principal, *, status: int = 200, team_errors: dict | None = None,
            pool_errors: dict | None = None, base_errors: dict | None = None) -> HttpResponse:
    """The page; ``team_errors`` is ``{slug: (section, {field: [messages]}, values)}`` for the
    form that was refused, so its errors sit beside its fields and its input is kept."""
    teams = admin_teams(actor)
    rows = _team_rows(teams)
    for row in rows:
        refused = (team_errors or {}).get(row["team"].slug)
        if refused:
            section, errors, values = refused
            row[f"{section}_errors"], row[f"{section}_values"] = errors, values
    return render(request, "manage/index.html", {
        "rows": rows, "platform_admin": actor.platform_admin,
        "pools": list(ResourcePool.objects.all()), "pool_kinds": PoolKind.choices,
        "currency": settings.TEMPER_CURRENCY,
        "pool_errors": (pool_errors or {}).get("errors", {}), "pool_values": (pool_errors or {}).get("values", {}),
        "base_models": list(registry_selectors.base_model_list()),
        "base_errors": (base_errors or {}).get("errors", {}), "base_values": (base_errors or {}).get("values", {}),
        "roles": Role.choices,
    }, status=status)


def _by_field(exc: InvalidInput, prefix: str = "") -> dict[str, list[str]]:
    """Errors keyed by the form field they belong to (``quota.ceilings`` -> ``ceilings``)."""
    out: dict[str, list[str]] = {}
    for e in exc.errors:
        path = e.path.removeprefix(prefix).lstrip(".")
        field = path.split(".", 1)[0].split("[", 1)[0] or "form"
        message = e.message if path == field else f"{path}: {e.message}"
        out.setdefault(field, []).append(message)
    return out


def _refused(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    """A role the service refused, or an object it did not find: the page, with the reason."""
    messages.error(request, str(exc))
    return _render(request, Principal.for_user(request.user), status=exc.status)


def _forbidden_page(request: HttpRequest) -> HttpResponse:
    return render(request, "manage/index.html", {"forbidden": True}, status=403)


@login_required
def manage_page(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    if not may_manage(actor):
        return _forbidden_page(request)
    return _render(request, actor)


def _team_for(actor: Principal, slug: str) -> Team | None:
    return next((t for t in admin_teams(actor) if t.slug == slug), None)


def _manage_post(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A form post of the page, by a signed-in user who may manage something (else the page's 403):
    ``view`` is called with their principal after the request; a role or object its service refuses
    (a :class:`ServiceError` it does not catch itself) is the page with the reason."""

    @login_required
    @require_POST
    @functools.wraps(view)
    def post(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        actor = Principal.for_user(request.user)
        if not may_manage(actor):
            return _forbidden_page(request)
        try:
            return view(request, actor, *args, **kwargs)
        except ServiceError as exc:
            return _refused(request, exc)

    return post


def _team_post(view: Callable[[HttpRequest, Principal, Team], HttpResponse]) -> Callable[..., HttpResponse]:
    """:func:`_manage_post` for a form about one team (``slug`` in the URL): ``view`` is called with
    the team, when the actor manages it (else the page with a 404)."""

    @functools.wraps(view)
    def with_team(request: HttpRequest, actor: Principal, slug: str) -> HttpResponse:
        team = _team_for(actor, slug)
        if team is None:
            messages.error(request, f"you do not manage team {slug!r}")
            return _render(request, actor, status=404)
        return view(request, actor, team)

    return _manage_post(with_team)


@_team_post
def quota_save(request: HttpRequest, actor: Principal, team: Team) -> HttpResponse:
    """A platform admin sets GPUs, concurrent runs and ceilings; a team admin only the ceilings
    (and only tighter: :func:`scheduling_services.team_quota_set` says why)."""
    slug = team.slug
    values = {k: request.POST.get(k, "") for k in ("max_gpus", "max_concurrent_runs", "ceilings")}
    changes: dict = {}
    errors: list[FieldError] = []
    # The page sends GPUs and runs from a platform admin only (a team admin's fields are disabled);
    # a form that sends them anyway goes to the service, which refuses a team admin.
    for name in ("max_gpus", "max_concurrent_runs"):
        if name in request.POST:
            value = _int_field(request.POST, name, errors)
            if value is not None:
                changes[name] = value
    try:
        ceilings = parse_ceilings(values["ceilings"])
    except InvalidInput as exc:
        errors.extend(exc.errors)
    else:
        changes["ceilings"] = ceilings
    try:
        if errors:  # with every other problem of the form, not one at a time
            raise InvalidInput(errors + schema_errors(changes, scheduling_services.TEAM_QUOTA_SCHEMA, "quota")
                               if changes else errors)
        quota = scheduling_services.team_quota_set(actor=actor, team=team, changes=changes)
    except InvalidInput as exc:
        return _render(request, actor, status=422, team_errors={slug: ("quota", _by_field(exc, "quota"), values)})
    messages.success(request, f"Quota of {slug} saved.")
    if note := gpu_quota_note(quota.max_gpus):
        messages.warning(request, f"Quota of {slug}: {note}.")
    return HttpResponseRedirect(reverse("manage") + f"#team-{slug}")


@_team_post
def member_save(request: HttpRequest, actor: Principal, team: Team) -> HttpResponse:
    """Add a user to the team or change their role (team admins and platform admins)."""
    slug = team.slug
    values = {"username": request.POST.get("username", "").strip()[:150], "role": request.POST.get("role", "")}
    try:
        if not values["username"]:
            raise InvalidInput.one("username", "required")
        account_services.membership_set(actor=actor, team=team, username=values["username"], role=values["role"])
    except InvalidInput as exc:
        return _render(request, actor, status=422, team_errors={slug: ("member", _by_field(exc), values)})
    messages.success(request, f"{values['username']} is {values['role']} in {slug}.")
    return HttpResponseRedirect(reverse("manage") + f"#team-{slug}")


@_manage_post
def pool_save(request: HttpRequest, actor: Principal) -> HttpResponse:
    """Create a resource pool or change its kind, capacity, description or price (platform
    admins); an empty price is none set."""
    values = {k: request.POST.get(k, "").strip() for k in ("name", "kind", "capacity", "description", "price")}
    errors: list[FieldError] = []
    capacity = _int_field(request.POST, "capacity", errors)
    try:
        if errors:
            raise InvalidInput(errors)
        data = {"kind": values["kind"], "capacity": capacity, "description": values["description"][:200],
                "price": values["price"][:40] or None}
        scheduling_services.pool_set(actor=actor, name=values["name"], data=data)
    except InvalidInput as exc:
        return _render(request, actor, status=422, pool_errors={"errors": _by_field(exc, "pool"), "values": values})
    messages.success(request, f"Pool {values['name']} saved.")
    return HttpResponseRedirect(reverse("manage") + "#pools")


@_manage_post
def base_model_save(request: HttpRequest, actor: Principal) -> HttpResponse:
    """Register a base model for every team, or point one elsewhere (platform admins)."""
    values = {k: request.POST.get(k, "").strip() for k in ("name", "path", "description")}
    try:
        data = {k: v for k, v in values.items() if v or k != "description"}
        registry_services.base_model_register(actor=actor, data=data)
    except InvalidInput as exc:
        return _render(request, actor, status=422, base_errors={"errors": _by_field(exc), "values": values})
    messages.success(request, f"Base model {values['name']} registered: runs name it base:{values['name']}.")
    return HttpResponseRedirect(reverse("manage") + "#base-models")


@_manage_post
def base_model_delete(request: HttpRequest, actor: Principal, name: str) -> HttpResponse:
    """Remove a base model (platform admins)."""
    registry_services.base_model_remove(actor=actor, name=name)
    messages.success(request, f"Base model {name} removed.")
    return HttpResponseRedirect(reverse("manage") + "#base-models")
