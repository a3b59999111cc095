"""Small factories for the control plane's objects."""
from __future__ import annotations

import itertools
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from controlplane.accounts.models import ApiToken, Membership, Team, token_digest
from controlplane.accounts.principal import Principal
from controlplane.domains.models import AUDIT_COUNTS, AUDIT_OPEN, AuditStatus, Domain, DomainVersion, VerifierAudit
from controlplane.runs.models import Run, RunDomain
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.models import ResourcePool, TeamQuota, WorkerHeartbeat

_seq = itertools.count(1)

EXACT = {"stages": [{"type": "exact", "params": {}, "timeout_s": 1.0}]}


def user(username: str | None = None, *, staff: bool = False, password: str = "pw-123456"):
    User = get_user_model()
    name = username or f"user{next(_seq)}"
    return User.objects.create_user(username=name, password=password, is_staff=staff, is_superuser=staff)


def team(slug: str | None = None) -> Team:
    slug = slug or f"team{next(_seq)}"
    return Team.objects.create(slug=slug, name=slug.title())


def member(team_: Team, role: str, username: str | None = None):
    u = user(username)
    Membership.objects.create(user=u, team=team_, role=role)
    return u


def actor(u) -> Principal:
    return Principal.for_user(u)


def domain(slug: str | None = None, *, team_: Team | None = None, audited: bool = True, **fields) -> Domain:
    """A domain with version 1; ``audited``: its verifier audit done and clean (audits gate every
    use of a version: without one a run on it waits)."""
    slug = slug or f"dom-{next(_seq)}"
    data = {"title": slug, "kind": "math", "family": "test", "task_source": {"family": "test"}, "verifier": EXACT}
    data.update(fields)
    d = Domain.objects.create(slug=slug, team=team_, **data)
    v = DomainVersion.objects.create(domain=d, version=1, snapshot=d.snapshot())
    if audited:
        audits_passed([v])
    return d


def audits_passed(versions=None) -> int:
    """Test setup standing in for the audit worker: each of ``versions`` (by default every version
    with no finished audit) gets a finished audit that found nothing, its open audit when it has
    one (as the worker would record it), else a new one. Tests of the audit itself run the real
    auditor (tests/controlplane/test_verifier_audit.py); this is for tests about something else.
    Returns how many audits it finished."""
    if versions is None:
        versions = DomainVersion.objects.all()
    done = 0
    for v in versions:
        if v.audits.filter(status=AuditStatus.DONE).exists():
            continue
        audit = v.audits.filter(status__in=AUDIT_OPEN).first() or VerifierAudit(domain_version=v, note="test setup")
        for name in AUDIT_COUNTS:
            setattr(audit, name, 0)
        audit.wall_s, audit.auditor_version, audit.note = 0.0, "test-setup", audit.note or "test setup"
        audit.terminate(AuditStatus.DONE)
        audit.save()
        done += 1
    return done


def run(team_: Team, *, by=None, domains: list[Domain] | None = None, state: str = "draft", **fields) -> Run:
    data = {"name": f"run {next(_seq)}", "base_model": "tiny", "budget_steps": 10}
    data.update(fields)
    r = Run.objects.create(team=team_, created_by=by, state=state, **data)
    for d in domains or []:
        RunDomain.objects.create(run=r, domain=d, domain_version=d.versions.get(version=d.version), weight=1.0)
    return r


def live_worker(queues: list[str], name: str = "verify@test") -> WorkerHeartbeat:
    """A worker serving ``queues`` that has just said it is alive (its heartbeat row), as a
    running Celery worker records it: for in-process tests whose ``send`` stands in for it."""
    hb, _ = WorkerHeartbeat.objects.update_or_create(worker=name, defaults={"queues": queues, "last_seen": timezone.now()})
    return hb


def token(u, team_: Team, role: str, *, expires_in: timedelta = timedelta(days=1), revoked: bool = False) -> tuple[ApiToken, str]:
    secret = f"tmp_test{next(_seq)}_" + "x" * 20
    now = timezone.now()
    t = ApiToken.objects.create(
        user=u, team=team_, role=role, name="test", prefix=secret[:12], digest=token_digest(secret),
        created_at=now - timedelta(days=2), expires_at=now + expires_in, revoked_at=now if revoked else None,
    )
    return t, secret


def run_payload(domains: list[str], **overrides) -> dict:
    payload = {
        "name": "my run",
        "base_model": "tiny-llama",
        "domains": [{"slug": s, "weight": 1.0} for s in domains],
        "budget": {"steps": 20},
    }
    payload.update(overrides)
    return payload


def synced_team(domains: list[str], role: str = "admin") -> tuple[Team, Principal]:
    """``domains`` synced from the trainer's catalogue, and team ``acme`` with a member of
    ``role``; returns the team and that member as an actor."""
    call_command("domains", "sync", "--no-progress", "--only", *domains, verbosity=0)
    audits_passed(DomainVersion.objects.filter(domain__slug__in=domains))
    team_ = team("acme")
    return team_, actor(member(team_, role))


def one_slot_contest(tmp_path, config: dict):
    """Runs that compete for one slot: ``builtin-addition`` synced, one CPU slot, team ``acme`` (no
    GPUs, two concurrent runs) with an admin, and a tiny model built under ``tmp_path``. Returns
    ``new_run(name, priority, steps)``, which creates and starts a run with ``config`` as the admin."""
    from trainer.models.tiny import build_tiny

    team_, admin = synced_team(["builtin-addition"])
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=1)
    TeamQuota.objects.create(team=team_, max_gpus=0, max_concurrent_runs=2)
    model = str(build_tiny(tmp_path / "model", layers=2))

    def new_run(name: str, priority: int, steps: int) -> Run:
        r = run_create(actor=admin, data=run_payload(["builtin-addition"], team="acme", name=name, base_model=model,
                                                     priority=priority, budget={"steps": steps}, config=config))
        return run_start(actor=admin, run=r)

    return new_run
