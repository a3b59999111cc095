"""A run's money budget in the real driver: a tiny model trains on a built-in domain with the CPU
pool priced, and the run completes at the step where its cost reaches its budget (before its
steps run out), with a ``budget`` event naming the step and the amounts."""
from __future__ import annotations

from decimal import Decimal

import pytest

from controlplane.runs.models import Run, RunEvent, UsageRecord
from controlplane.runs.usage import run_usage
from controlplane.scheduling.models import ResourcePool
from tests import factories
from tests.workers.driving import running_run
from workers.driver import drive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("money_context")]


def test_the_driver_completes_a_run_at_the_step_its_cost_reaches_its_money_budget(tiny_model, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in this in-process test
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(["builtin-addition"])
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=1, price=Decimal("999999"))  # per CPU-hour
    run = running_run(actor, tiny_model, steps=6, domains=["builtin-addition"])
    Run.objects.filter(pk=run.pk).update(budget_cost=Decimal("0.000001"))  # any CPU second of step 1 is more

    assert drive(run.id, worker="w1", send=lambda name, args: None) == "completed"
    run.refresh_from_db()
    assert run.state == "completed" and run.current_step == 1  # not 6
    cpu_s = UsageRecord.objects.get(run=run, step=1, domain="").cpu_s
    spent = run_usage(run)["cost"]["totals"]["total"]
    assert Decimal(spent) == (Decimal(repr(cpu_s)) * 999999 / 3600).quantize(Decimal("0.000001"))
    event = RunEvent.objects.get(run=run, kind="budget")
    assert event.data == {"budget": "cost", "step": 1, "spent": spent, "limit": "0.000001", "currency": "USD"}
