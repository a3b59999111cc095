"""Every database constraint refuses what it should (a violating row raises IntegrityError)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.accounts.models import ApiToken, AuditLog, Membership, Team
from controlplane.domains.models import Domain, DomainVersion
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunDomain, RunEvent, Trajectory
from controlplane.scheduling.models import ResourcePool, TeamQuota
from tests import factories

pytestmark = pytest.mark.django_db


def violates(make):
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            make()


def test_team_constraints():
    factories.team("a")
    violates(lambda: Team.objects.create(slug="a", name="dup"))
    violates(lambda: Team.objects.create(slug="", name="empty"))


def test_membership_constraints():
    team = factories.team()
    user = factories.member(team, "member")
    violates(lambda: Membership.objects.create(user=user, team=team, role="admin"))
    other = factories.team()
    violates(lambda: Membership.objects.create(user=user, team=other, role="owner"))


def test_token_constraints():
    team = factories.team()
    user = factories.member(team, "member")
    t, _ = factories.token(user, team, "member")
    now = timezone.now()
    base = dict(user=user, team=team, name="x", prefix="tmp_", created_at=now, expires_at=now + timedelta(days=1))
    violates(lambda: ApiToken.objects.create(role="member", digest=t.digest, **base))
    violates(lambda: ApiToken.objects.create(role="root", digest="b" * 64, **base))
    violates(lambda: ApiToken.objects.create(role="member", digest="c" * 64, **{**base, "expires_at": now - timedelta(days=1)}))
    violates(lambda: ApiToken.objects.create(role="member", digest="d" * 64, **{**base, "name": ""}))


def test_domain_constraints():
    d = factories.domain("one")
    base = dict(title="t", kind="math", task_source={"family": "x"}, verifier=factories.EXACT)
    violates(lambda: Domain.objects.create(slug="one", **base))
    violates(lambda: Domain.objects.create(slug="", **base))
    violates(lambda: Domain.objects.create(slug="k", **{**base, "kind": "poetry"}))
    violates(lambda: Domain.objects.create(slug="s", max_concurrent_sandboxes=-1, **base))
    violates(lambda: Domain.objects.create(slug="m0", max_share=0, **base))
    violates(lambda: Domain.objects.create(slug="m2", max_share=1.5, **base))
    violates(lambda: Domain.objects.create(slug="t0", task_timeout_s=0, **base))
    violates(lambda: Domain.objects.create(slug="p0", priority=0, **base))
    violates(lambda: Domain.objects.create(slug="p100", priority=100, **base))
    violates(lambda: Domain.objects.create(slug="v0", version=0, **base))
    violates(lambda: DomainVersion.objects.create(domain=d, version=1, snapshot={}))
    violates(lambda: DomainVersion.objects.create(domain=d, version=0, snapshot={}))


def test_domain_version_and_audit_rows_are_immutable():
    d = factories.domain("imm")
    v = d.versions.get()
    v.note = "changed"
    with pytest.raises(TypeError):
        v.save()
    with pytest.raises(TypeError):
        DomainVersion.objects.filter(pk=v.pk).update(note="x")
    row = AuditLog.objects.create(actor_name="x", object_type="t", object_id="1", action="a")
    row.action = "b"
    with pytest.raises(TypeError):
        row.save()
    with pytest.raises(TypeError):
        row.delete()
    with pytest.raises(TypeError):
        AuditLog.objects.all().delete()
    with pytest.raises(TypeError):
        AuditLog.objects.all().update(action="c")
    assert AuditLog.objects.get(pk=row.pk).action == "a"


def test_run_constraints():
    team = factories.team()
    base = dict(team=team, name="r", base_model="m", budget_steps=5)
    Run.objects.create(**base)
    violates(lambda: Run.objects.create(**{**base, "name": ""}))
    violates(lambda: Run.objects.create(**{**base, "base_model": ""}))
    violates(lambda: Run.objects.create(**{**base, "state": "exploded"}))
    violates(lambda: Run.objects.create(**{**base, "priority": 0}))
    violates(lambda: Run.objects.create(**{**base, "priority": 100}))
    violates(lambda: Run.objects.create(**{**base, "gpus": -1}))
    violates(lambda: Run.objects.create(**{**base, "staleness": -1}))
    violates(lambda: Run.objects.create(**{**base, "budget_steps": 0}))
    violates(lambda: Run.objects.create(**{**base, "budget_tokens": 0}))
    violates(lambda: Run.objects.create(**{**base, "budget_seconds": 0}))
    violates(lambda: Run.objects.create(**{**base, "current_step": -1}))


def test_run_children_constraints():
    team = factories.team()
    d = factories.domain("dd")
    run = factories.run(team, domains=[d])
    dv = d.versions.get()
    violates(lambda: RunDomain.objects.create(run=run, domain=d, domain_version=dv, weight=1))
    other = factories.domain("ee")
    violates(lambda: RunDomain.objects.create(run=run, domain=other, domain_version=other.versions.get(), weight=-0.5))
    MetricPoint.objects.create(run=run, step=1, domain="dd", key="reward/dd", value=0.5)
    violates(lambda: MetricPoint.objects.create(run=run, step=1, domain="dd", key="reward/dd", value=0.7))
    violates(lambda: MetricPoint.objects.create(run=run, step=-1, domain="", key="k", value=1))
    violates(lambda: MetricPoint.objects.create(run=run, step=2, domain="", key="", value=1))
    violates(lambda: Trajectory.objects.create(run=run, step=1, domain="dd", prompt="p", completion="c", outcome="great"))
    violates(lambda: Trajectory.objects.create(run=run, step=-1, domain="dd", prompt="p", completion="c", outcome="pass"))
    Checkpoint.objects.create(run=run, step=3, path="/tmp/x")
    violates(lambda: Checkpoint.objects.create(run=run, step=3, path="/tmp/y"))
    violates(lambda: Checkpoint.objects.create(run=run, step=-1, path="/tmp/z"))
    violates(lambda: RunEvent.objects.create(run=run, kind=""))


def test_metric_point_write_is_idempotent_with_ignore_conflicts():
    run = factories.run(factories.team())
    rows = [MetricPoint(run=run, step=s, domain="", key="loss/policy", value=float(s)) for s in range(3)]
    MetricPoint.objects.bulk_create(rows, ignore_conflicts=True)
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=s, domain="", key="loss/policy", value=9.0) for s in range(3)], ignore_conflicts=True)
    assert list(run.metrics.order_by("step").values_list("value", flat=True)) == [0.0, 1.0, 2.0]


def test_scheduling_constraints():
    team = factories.team()
    violates(lambda: TeamQuota.objects.create(team=team, max_gpus=-1))
    violates(lambda: TeamQuota.objects.create(team=team, max_concurrent_runs=-1))
    TeamQuota.objects.create(team=team)
    violates(lambda: TeamQuota.objects.create(team=team))
    violates(lambda: ResourcePool.objects.create(name="p", kind="cpu", capacity=-1))
    violates(lambda: ResourcePool.objects.create(name="q", kind="tpu", capacity=1))
    ResourcePool.objects.create(name="r", kind="cpu", capacity=1)
    violates(lambda: ResourcePool.objects.create(name="r", kind="cpu", capacity=2))
