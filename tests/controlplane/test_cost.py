"""Cost in money (controlplane/runs/cost.py): prices set by a platform admin per pool, costs that
are usage times prices per step, run, domain and team in the API, the CSV and the pages, unknown
(never 0) where a price is missing, and a run's money budget: refused at submission unless a
positive finite amount, and the run completes at the step where its cost reaches it."""
from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput
from controlplane.runs.cost import Prices, add_costs, amount_text, cost, parse_amount, prices_from_pools
from controlplane.runs.models import Run, RunEvent
from controlplane.runs.services import run_record_step
from controlplane.scheduling.models import ResourcePool
from controlplane.scheduling.services import _capacity, pool_set
from controlplane.web.pages import run_as_form_data
from tests import factories
from workers.compute_observers import Budgets
from workers.observers import FINISHED, StepDone

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("money_context")]

PRICES = {"gpus": ("train_gpu", "2.40"), "cpus": ("cpu", "0.036"), "sandboxes": ("sandbox", "0.72"), "judges": ("judge", "5")}
"""Pool name -> (kind, price): GPU-hour, CPU-hour, sandbox-hour, million judge tokens."""


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def priced(world, **only) -> None:
    for name, (kind, price) in (only or PRICES).items():
        pool_set(actor=Principal.for_user(world.staff), name=name, data={"kind": kind, "capacity": 4, "price": price})


def driven(team, *, name="r", budget_cost=None):
    run = factories.run(team, state="running", budget_steps=100, gpus=0, name=name)
    Run.objects.filter(pk=run.pk).update(driver="w1", budget_cost=budget_cost)
    run.refresh_from_db()
    return run


def step_usage(step: int) -> dict:
    """Distinct figures per step and domain, each exact in binary, so a dropped or doubled row shows."""
    return {"": {"wall_s": 2.0, "cpu_s": 100.0 * step, "gpu_s": 1800.0 * step},
            "addition": {"generated_tokens": 10, "completions": 4, "sandbox_s": 5.0 * step, "judge_calls": 0},
            "parity": {"generated_tokens": 10, "completions": 4, "judge_calls": step, "judge_tokens": 2000 * step}}


def record(run, step):
    run_record_step(run=run, worker="w1", step=step, metrics={}, samples=[], verifier_versions={}, usage=step_usage(step))


def expected(totals: dict) -> dict[str, Decimal]:
    """Usage times prices, written out: the figure over its unit, times the pool's price."""
    p = {kind: Decimal(price) for kind, price in PRICES.values()}
    parts = {"gpu": Decimal(repr(totals["gpu_s"])) / 3600 * p["train_gpu"],
             "cpu": Decimal(repr(totals["cpu_s"])) / 3600 * p["cpu"],
             "sandbox": Decimal(repr(totals["sandbox_s"])) / 3600 * p["sandbox"],
             "judge": Decimal(totals["judge_tokens"]) / 10**6 * p["judge"]}
    return {**parts, "total": sum(parts.values())}


def test_the_pure_function_prices_each_part_and_leaves_an_unpriced_one_unknown():
    prices = Prices(gpu=Decimal("2.40"), cpu=Decimal("0.036"), sandbox=None, judge=Decimal("5"))
    c = cost({"gpu_s": 3600 * 3, "cpu_s": 7200.0, "sandbox_s": 0, "judge_tokens": 10**6}, prices)
    assert c == {"gpu": Decimal("7.2"), "cpu": Decimal("0.072"), "sandbox": Decimal(0), "judge": Decimal(5),
                 "total": Decimal("12.272")}  # no sandbox time: 0 even without a sandbox price
    used = cost({"sandbox_s": 1.0, "gpu_s": 3600}, prices)
    assert used["sandbox"] is None and used["total"] is None and used["gpu"] == Decimal("2.4")


def test_one_price_per_kind_is_the_highest_and_an_unpriced_pool_makes_it_unknown():
    prices = prices_from_pools([("train_gpu", Decimal("2")), ("train_gpu", Decimal("3.5")), ("cpu", Decimal("1")),
                                ("cpu", None), ("rollout_gpu", None)], "EUR")
    assert (prices.gpu, prices.cpu, prices.sandbox, prices.judge, prices.currency) == (Decimal("3.5"), None, None, None, "EUR")


def test_run_and_team_costs_are_usage_times_prices_in_the_api_the_csv_and_the_pages(world):
    priced(world)
    runs = [driven(world.team, name=f"run {i}") for i in range(2)]
    for i, run in enumerate(runs):
        for step in range(1, 3 + i):
            record(run, step)
    admin = client_for(world.users["admin"])
    totals = []
    for i, run in enumerate(runs):
        body = admin.get(f"/api/runs/{run.id}/usage").json()
        c, want = body["cost"], expected(body["totals"])
        assert c["currency"] == "USD" and c["prices"] == {"gpu": "2.4", "cpu": "0.036", "sandbox": "0.72", "judge": "5", "currency": "USD"}
        assert {k: Decimal(v) for k, v in c["totals"].items()} == {k: v.quantize(Decimal("0.000001")) for k, v in want.items()}
        # The step series sums to the total; the domains' own costs and the steps' shared one too.
        assert sum(Decimal(s["total"]) for s in c["steps"]) == Decimal(c["totals"]["total"])
        assert [s["step"] for s in c["steps"]] == list(range(1, 3 + i))
        assert Decimal(c["domains"]["addition"]["sandbox"]) + Decimal(c["domains"]["parity"]["judge"]) \
            + Decimal(c["shared"]["total"]) == Decimal(c["totals"]["total"])
        assert c["domains"]["addition"]["judge"] == "0.000000" and c["shared"]["sandbox"] == "0.000000"
        totals.append(Decimal(c["totals"]["total"]))
        # Running, 100 steps in its budget: the steps left at the mean cost of the recent steps.
        left = body["projection"]["steps_left"]
        mean = sum(Decimal(s["total"]) for s in c["steps"]) / len(c["steps"])
        assert Decimal(body["projection"]["cost_to_finish"]) == (mean * left).quantize(Decimal("0.000001"))
    report = admin.get("/api/teams/acme/usage").json()
    assert Decimal(report["totals"]["cost"]["total"]) == sum(totals) == sum(Decimal(r["cost"]["total"]) for r in report["runs"])
    assert {d["domain"]: d["cost"]["total"] for d in report["domains"]} == {
        "addition": str((Decimal(5 * (1 + 2) + 5 * (1 + 2 + 3)) / 3600 * Decimal("0.72")).quantize(Decimal("0.000001"))),
        "parity": str((Decimal(2000 * (3 + 6)) / 10**6 * 5).quantize(Decimal("0.000001")))}
    rows = list(csv.DictReader(io.StringIO(admin.get("/api/teams/acme/usage?format=csv").content.decode())))
    assert [(r["kind"], r["cost_total"], r["currency"]) for r in rows if r["kind"] != "domain"] == \
        [("run", r["cost"]["total"], "USD") for r in report["runs"]] + [("total", report["totals"]["cost"]["total"], "USD")]
    page = admin.get("/usage/").content.decode()
    assert "a GPU-hour 2.4 · a CPU-hour 0.036 · a sandbox-hour 0.72 · a million judge tokens 5." in page
    assert f'data-field="cost_total"><b>{Decimal(report["totals"]["cost"]["total"]):.2f}</b>' in page
    card = admin.get(f"/runs/{runs[0].id}/usage/").content.decode()
    assert f"<b>{totals[0]:.2f}</b>" in card and 'data-testid="cost-steps"' in card


def test_a_price_not_set_is_an_unknown_cost_never_zero(world):
    priced(world, gpus=PRICES["gpus"], cpus=PRICES["cpus"], sandboxes=PRICES["sandboxes"])  # no judge price
    run = driven(world.team)
    record(run, 1)
    admin = client_for(world.users["admin"])
    c = admin.get(f"/api/runs/{run.id}/usage").json()["cost"]
    assert c["totals"]["judge"] is None and c["totals"]["total"] is None and c["prices"]["judge"] is None
    assert c["domains"]["parity"]["total"] is None and c["domains"]["addition"]["total"] is not None
    assert c["steps"] == [{"step": 1, "total": None}]
    rows = list(csv.DictReader(io.StringIO(admin.get("/api/teams/acme/usage?format=csv").content.decode())))
    assert [r["cost_total"] for r in rows if r["kind"] == "total"] == [""]
    card = admin.get(f"/runs/{run.id}/usage/").content.decode()
    assert 'data-field="cost_total"><b>unknown</b>' in card and 'data-testid="cost-unknown"' in card


@pytest.mark.parametrize("price, message", [
    ("NaN", "must be a finite amount of money"), ("-1", "must be 0 or more"), ("abc", "must be a decimal number"),
    ("0.0000000001", "may have 9 decimal places at most"), (True, "must be a number"),
    ("1_000", "must be a decimal number"), ("\u0661\u0662", "must be a decimal number"), ("0x10", "must be a decimal number"),
])
def test_a_bad_price_is_refused_naming_the_field_and_nothing_is_saved(world, price, message):
    staff = client_for(world.staff)
    r = staff.put("/api/pools/gpus", json.dumps({"kind": "train_gpu", "capacity": 2, "price": price}), content_type="application/json")
    assert r.status_code == 422, r.content
    assert [e["path"] for e in r.json()["errors"]] == ["pool.price"] and message in r.json()["errors"][0]["message"]
    assert not ResourcePool.objects.filter(name="gpus").exists()


def test_prices_are_set_by_platform_admins_on_pools_by_api_and_page(world):
    member = client_for(world.users["admin"])  # a team's admin is no platform admin
    body = {"kind": "train_gpu", "capacity": 2, "price": "2.5"}
    assert member.put("/api/pools/gpus", json.dumps(body), content_type="application/json").status_code == 403
    staff = client_for(world.staff)
    r = staff.put("/api/pools/gpus", json.dumps(body), content_type="application/json")
    assert r.status_code == 200 and r.json()["price"] == "2.5" and r.json()["price_unit"] == "GPU-hour"
    assert ResourcePool.objects.get(name="gpus").price == Decimal("2.5")
    with pytest.raises(InvalidInput) as exc:  # no figure counts rollout GPU time: a price there would be read by nothing
        pool_set(actor=Principal.for_user(world.staff), name="vllm", data={"kind": "rollout_gpu", "capacity": 2, "price": 1})
    assert [e.path for e in exc.value.errors] == ["pool.price"]
    r = staff.post("/manage/pools/", {"name": "judges", "kind": "judge", "capacity": "0", "price": "3.75"})
    assert r.status_code == 302 and ResourcePool.objects.get(name="judges").price == Decimal("3.75")
    r = staff.post("/manage/pools/", {"name": "judges", "kind": "judge", "capacity": "0", "price": "lots"})
    assert r.status_code == 422 and ResourcePool.objects.get(name="judges").price == Decimal("3.75")
    assert "must be a decimal number" in r.content.decode()
    listed = {p["name"]: p for p in member.get("/api/pools").json()}
    assert listed["judges"]["price"] == "3.75" and listed["judges"]["price_unit"] == "million judge tokens"
    assert 'data-field="price">3.75 a million judge tokens' in staff.get("/manage/").content.decode()


@pytest.mark.parametrize("cost, message", [
    (0, "must be above 0"), (-5, "must be above 0"), ("NaN", "must be a finite amount of money"),
    ("Infinity", "must be a finite amount of money"), ("ten", "must be a decimal number"), (True, "must be a number"),
    ("1_000", "must be a decimal number"), ("\u0661\u0662", "must be a decimal number"),
])
def test_a_money_budget_that_is_not_a_positive_finite_amount_is_refused_naming_the_field(world, cost, message):
    member = client_for(world.users["member"])
    body = factories.run_payload(["addition"], team="acme", budget={"steps": 20, "cost": cost})
    r = member.post("/api/runs", json.dumps(body), content_type="application/json")
    assert r.status_code == 422, r.content
    errors = r.json()["errors"]
    assert [e["path"] for e in errors] == ["budget.cost"] and message in errors[0]["message"]
    assert not Run.objects.exists()


def test_a_money_budget_nan_literal_in_the_body_is_refused(world):
    member = client_for(world.users["member"])
    text = json.dumps(factories.run_payload(["addition"], team="acme")).replace('"steps": 20', '"steps": 20, "cost": NaN')
    r = member.post("/api/runs", text, content_type="application/json")
    assert r.status_code == 422 and [e["path"] for e in r.json()["errors"]] == ["budget.cost"], r.content
    assert not Run.objects.exists()


def test_a_money_budget_is_stored_shown_and_cloned_exactly(world):
    member = client_for(world.users["member"])
    body = factories.run_payload(["addition"], team="acme", budget={"steps": 20, "cost": "12.10"})
    r = member.post("/api/runs", json.dumps(body), content_type="application/json")
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    assert run.budget_cost == Decimal("12.10")
    assert member.get(f"/api/runs/{run.id}").json()["budget_cost"] == "12.1"
    assert run_as_form_data(run)["budget"]["cost"] == "12.1"


def test_the_run_completes_at_the_step_where_its_cost_reaches_the_money_budget(world):
    priced(world)
    # Each step costs 1.2 (GPU) + 0.001 (CPU) + 0.001 (sandbox) + 0.01 (judge) times its number.
    per_step = [expected({"gpu_s": 1800.0 * s, "cpu_s": 100.0 * s, "sandbox_s": 5.0 * s, "judge_tokens": 2000 * s})["total"]
                for s in range(1, 6)]
    run = driven(world.team, budget_cost=sum(per_step[:3]))  # reached exactly at step 3
    budgets = Budgets()
    stops = []
    for step in range(1, 6):
        record(run, step)
        run.refresh_from_db()
        stops.append(budgets.after_step(StepDone(run=run, step=step, metrics={}, trajectories=[], samples=[], tokens=0,
                                                 usage=step_usage(step))))
        if stops[-1] == FINISHED:
            break
    assert stops == [None, None, FINISHED]
    event = RunEvent.objects.get(run=run, kind="budget")
    assert event.data == {"budget": "cost", "step": 3, "spent": str(sum(per_step[:3]).quantize(Decimal("0.000001"))),
                          "limit": amount_text(run.budget_cost), "currency": "USD"}
    assert event.message.startswith("money budget reached at step 3:")


def test_a_money_budget_that_cannot_be_checked_says_so_once_and_the_run_goes_on(world):
    priced(world, gpus=PRICES["gpus"], cpus=PRICES["cpus"], sandboxes=PRICES["sandboxes"])  # no judge price
    run = driven(world.team, budget_cost=Decimal("0.01"))
    budgets = Budgets()
    for step in (1, 2):
        record(run, step)
        assert budgets.after_step(StepDone(run=run, step=step, metrics={}, trajectories=[], samples=[], tokens=0,
                                           usage=step_usage(step))) is None
    events = list(RunEvent.objects.filter(run=run, kind="budget"))
    assert len(events) == 1 and events[0].data["unpriced"] == ["judge"]
    assert "not checked" in events[0].message
    priced(world, judges=PRICES["judges"])  # the admin sets the price: the next step checks and stops
    record(run, 3)
    assert budgets.after_step(StepDone(run=run, step=3, metrics={}, trajectories=[], samples=[], tokens=0,
                                       usage=step_usage(3))) == FINISHED


def test_prices_from_the_command_line(world):
    def cli(*args):
        out = io.StringIO()
        call_command("temper", "--user", world.staff.username, "pools", *args, stdout=out)
        return out.getvalue()

    assert "pool gpus: train_gpu x8, 2.75 USD a GPU-hour" in cli("set", "gpus", "--kind", "train_gpu", "--capacity", "8", "--price", "2.75")
    assert "pool gpus: train_gpu x4, 2.75 USD a GPU-hour" in cli("set", "gpus", "--capacity", "4")  # the price is kept
    with pytest.raises(CommandError, match=r"pool.price: must be a finite amount of money"):
        cli("set", "gpus", "--price", "Infinity")
    assert "pool gpus: train_gpu x4, no price" in cli("set", "gpus", "--price", "none")
    assert ResourcePool.objects.get(name="gpus").price is None
    listing = cli("list")
    assert "gpus" in listing and "not set" in listing and "GPU-hour" in listing


def test_a_wall_or_token_budget_spent_says_so_in_the_same_kind_of_event(world):
    run = driven(world.team)
    Run.objects.filter(pk=run.pk).update(budget_tokens=100, tokens_used=150)
    run.refresh_from_db()
    done = StepDone(run=run, step=4, metrics={}, trajectories=[], samples=[], tokens=0, usage={})
    assert Budgets().after_step(done) == FINISHED
    event = RunEvent.objects.get(run=run, kind="budget")
    assert event.data == {"budget": "tokens", "step": 4, "spent": 150, "limit": 100}
    assert event.message == "token budget of 100 spent at step 4 (150 tokens); the run completes"


def test_a_judge_pool_is_a_price_only_and_adds_no_slots_to_the_scheduler(world):
    priced(world, cpus=("cpu", "0.04"), judges=("judge", "5"))
    assert _capacity() == {"cpu": 4}
    page = client_for(world.users["member"]).get("/queue/").content.decode()
    kinds = page.split('data-testid="pools"')[1].split("</table>")[0]
    assert "<td>cpu</td>" in kinds and "judge" not in kinds


def test_money_is_exact_whatever_the_threads_decimal_context():
    """reasoning-gym's decimal tasks set the thread's decimal precision (in the driver and the
    audit, which generate tasks); a price, a cost and a budget are computed in their own context."""
    import decimal

    ambient = decimal.getcontext().copy()
    try:
        decimal.getcontext().prec = 3
        prices = Prices(gpu=Decimal("2.40"), cpu=Decimal("0.036"), sandbox=Decimal("0.72"), judge=Decimal("5"))
        assert parse_amount("123456.789") == Decimal("123456.789") and parse_amount("2.40") == Decimal("2.40")
        c = cost({"gpu_s": 1234.5, "cpu_s": 100.0, "sandbox_s": 5.0, "judge_tokens": 2000}, prices)
        assert c["gpu"] == Decimal("0.823000") and c["total"] == Decimal("0.835000")
        assert add_costs([c, c])["total"] == Decimal("1.670000")
        assert decimal.getcontext().prec == 3  # the ambient context is left as it was
    finally:
        decimal.setcontext(ambient)
