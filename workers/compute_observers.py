"""The observers of what a run's compute does (workers/observers.py says what an observer is):
the split advisor on the stage clocks (:class:`SplitAdvice`), the sandbox pools' figures
(:class:`SandboxPools`) and the budgets that end a run (:class:`Budgets`: wall clock, tokens,
money)."""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import replace
from decimal import Decimal
from typing import Any, Callable

from controlplane.runs import services as runs
from controlplane.runs import usage
from controlplane.runs.cost import Prices, add_costs, amount_text, cost, round_amount
from trainer import advisor as advisor_
from trainer.pipeline import VERIFY_THREADS
from workers import lanes as lanes_
from workers.observers import FINISHED, StepDone

log = logging.getLogger(__name__)


class SplitAdvice:
    """The split advisor (trainer/advisor.py) on each step's stage clocks: the knobs in force as
    metrics (``advisor/staleness``, ``advisor/verify_lanes``, and ``advisor/expected_gain``, the
    share of a step the steady proposal would save); a steady proposal that changes is an
    ``advice`` event (the run page shows the latest); with the run's ``autoscale: on`` a due one is
    made in the job's pipeline, between this step and the next, as an ``autoscale`` event with
    before, after and why. A fault of the advisor is logged and never stops the run."""

    def __init__(self, job, lanes_bound: Callable[[], int], db: Callable) -> None:
        self.job, self.lanes_bound, self.db = job, lanes_bound, db
        self.autoscale = job.config.rollout.autoscale == "on"
        bounds = advisor_.Bounds(staleness=job.config.rollout.staleness, verify_lanes=lanes_bound())
        self.advisor = advisor_.Advisor(advisor_.pipeline_knobs(job.pipeline), bounds)
        self.shown: tuple[str, int] | None = None
        """``(knob, to)`` of the last ``advice`` event (None: none, or balanced)."""

    def after_step(self, done: StepDone) -> None:
        if "pipeline/window_s" not in done.metrics:
            return
        try:
            steady, made = self._advise(done.metrics)
        except Exception:  # noqa: BLE001 - a side channel of the run, not part of it
            log.exception("run %s: the split advisor at step %s failed", done.run.id, done.step)
            return
        if made is not None:
            self.shown = None
            self.db(runs.run_event_record, run=done.run, kind="autoscale", data={**made.as_dict(), "step": done.step},
                    message=f"autoscale: {made.knob} {made.before} -> {made.after} from step {done.step + 1}; "
                            f"{made.reason}; expected step {made.step_s[0]:.2f} s -> {made.step_s[1]:.2f} s")
            return
        if steady is None and self.advisor.current is not None:
            return  # a proposal not steady yet: what was shown stands
        key = (steady.knob, steady.after) if steady is not None else None
        if key != self.shown:
            self.shown = key
            self.db(runs.run_event_record, run=done.run, kind="advice", message=advice_message(steady, self.autoscale),
                    data={**(steady.as_dict() if steady else {"knob": None}), "step": done.step, "autoscale": self.autoscale})

    def _advise(self, metrics: dict[str, float]):
        """Fold the step in; ``(steady proposal, the change made now)``."""
        self.advisor.bounds = replace(self.advisor.bounds, verify_lanes=self.lanes_bound())
        steady = self.advisor.observe(metrics)
        made = None
        if self.autoscale and self.advisor.due(steady):
            advisor_.apply(self.job.pipeline, steady)
            self.advisor.applied(steady)
            made, steady = steady, None
        knobs = advisor_.pipeline_knobs(self.job.pipeline)  # what the pipeline runs with now
        metrics.update({"advisor/staleness": float(knobs.staleness), "advisor/verify_lanes": float(knobs.verify_lanes),
                        "advisor/expected_gain": round(steady.gain, 4) if steady is not None else 0.0})
        return steady, made


def advice_message(proposal, autoscale: bool) -> str:
    """An ``advice`` event's words.

    >>> advice_message(None, False)
    'split advisor: balanced as far as the driver can change it; no change proposed'
    """
    if proposal is None:
        return "split advisor: balanced as far as the driver can change it; no change proposed"
    who = ("autoscale makes it at a step boundary" if autoscale and proposal.applicable
           else "autoscale is off: a run with autoscale on, such as a clone of this one, makes it itself" if proposal.applicable
           else "a person makes it (the deployment or the next run)")
    return (f"split advisor proposes {proposal.knob} {proposal.before} -> {proposal.after}: {proposal.reason}; expected "
            f"step {proposal.step_s[0]:.2f} s -> {proposal.step_s[1]:.2f} s ({who})")


def verify_lanes_bound(needs: dict[str, str | None], sandboxes: dict[str, int]) -> int:
    """The most verify lanes the run's verify workers can take: a lane keeps at least one of a
    domain's sandboxes busy, so the largest sandbox quota among the domains verified on workers,
    at most ``MAX_VERIFY_LANES``; a run verified in the driver's process only keeps the pipeline's
    lanes (more threads there only contend for the interpreter).

    >>> verify_lanes_bound({"code": "verify", "add": None}, {"code": 4, "add": 16}), verify_lanes_bound({"add": None}, {})
    (4, 2)
    """
    quotas = [sandboxes.get(slug, 1) for slug, queue in needs.items() if queue is not None]
    return max(1, min(advisor_.MAX_VERIFY_LANES, max(quotas))) if quotas else VERIFY_THREADS


class SandboxPools:
    """Each sandboxed domain's pool figures of the step, from what its verifications carried
    (``details["sandbox_wait_s"]``, ``sandbox_pool_size``, ``sandbox_creations_per_s``):
    ``sandbox/<d>/wait_p50_s``, ``wait_p99_s``, ``pool_size`` and ``creations_per_s``."""

    def after_step(self, done: StepDone) -> None:
        done.metrics.update(pool_metrics([t.verification.details for t in done.trajectories if t.verification is not None],
                                         [t.task.domain for t in done.trajectories if t.verification is not None]))


def pool_metrics(details: list[dict], domains: list[str]) -> dict[str, float]:
    """Per domain, the sandbox waits' p50 and p99 and the largest pool size and creation rate its
    verifications saw (verifications without a sandbox carry none and count for nothing).

    >>> pool_metrics([{"sandbox_wait_s": 0.1, "sandbox_pool_size": 2, "sandbox_creations_per_s": 0.05},
    ...               {"sandbox_wait_s": 0.3, "sandbox_pool_size": 4, "sandbox_creations_per_s": 0.1}, {}], ["d", "d", "m"])
    {'sandbox/d/wait_p50_s': 0.2, 'sandbox/d/wait_p99_s': 0.298, 'sandbox/d/pool_size': 4.0, 'sandbox/d/creations_per_s': 0.1}
    """
    seen: dict[str, list[dict]] = {}
    for d, domain in zip(details, domains):
        if isinstance(d.get("sandbox_wait_s"), (int, float)):
            seen.setdefault(domain, []).append(d)
    out: dict[str, float] = {}
    for domain, rows in seen.items():
        waits = [float(d["sandbox_wait_s"]) for d in rows]
        out[f"sandbox/{domain}/wait_p50_s"] = round(statistics.median(waits), 6)
        out[f"sandbox/{domain}/wait_p99_s"] = lanes_.percentile(waits, 0.99)
        for name in ("pool_size", "creations_per_s"):
            out[f"sandbox/{domain}/{name}"] = max(float(d.get("sandbox_" + name) or 0.0) for d in rows)
    return out


class Budgets:
    """The run's wall-clock budget (from when its loop started), token budget and money budget:
    spent, the run completes at this step, with a ``budget`` event saying which. The money budget
    is checked after the recorder wrote the step: the run's cost so far (its usage at the pools'
    prices, read each step) reaching ``budget_cost`` ends it; a cost that cannot be known (a
    figure it used has no price) is one ``budget`` event saying why, and the run goes on."""

    def __init__(self, db: Callable[..., Any] | None = None) -> None:
        self.started = time.monotonic()
        self.db = db or (lambda fn, *args, **kwargs: fn(*args, **kwargs))
        self.prices: Prices | None = None
        self.spent: dict[str, Decimal | None] | None = None
        """The run's cost so far, exact, per part and in all, at ``prices``, up to step ``counted``."""
        self.counted = 0
        self.warned = False

    def after_step(self, done: StepDone) -> str | None:
        run = done.run
        if run.budget_seconds and (spent := time.monotonic() - self.started) > run.budget_seconds:
            return self._spent(done, "wall_s", f"wall-clock budget of {run.budget_seconds:g} s spent at step {done.step} "
                                               f"({spent:.0f} s)", spent=round(spent, 1), limit=run.budget_seconds)
        if run.budget_tokens and run.tokens_used >= run.budget_tokens:
            return self._spent(done, "tokens", f"token budget of {run.budget_tokens} spent at step {done.step} "
                                               f"({run.tokens_used} tokens)", spent=run.tokens_used, limit=run.budget_tokens)
        if run.budget_cost is not None:
            return self.db(self._money, done)
        return None

    def _spent(self, done: StepDone, budget: str, message: str, **data: Any) -> str:
        """A ``budget`` event for a wall or token budget spent; the run completes."""
        self.db(runs.run_event_record, run=done.run, kind="budget", data={"budget": budget, "step": done.step, **data},
                message=f"{message}; the run completes")
        return FINISHED

    def _money(self, done: StepDone) -> str | None:
        run, prices = done.run, usage.current_prices()
        if prices != self.prices or self.spent is None or self.spent["total"] is None:  # first step, new prices, unknown
            spent = usage.run_cost_sum(run, prices)
        elif self.counted == done.step:  # this call retried after a database outage: the step is in already
            spent = self.spent
        else:
            spent = add_costs([self.spent, *(cost(f, prices, rounded=False) for f in (done.usage or {}).values())])
        self.prices, self.spent, self.counted = prices, spent, done.step
        currency, budget = prices.currency, run.budget_cost
        if self.spent["total"] is None:
            if not self.warned:
                self.warned = True
                unpriced = [part for part, value in self.spent.items() if value is None and part != "total"]
                runs.run_event_record(run=run, kind="budget", data={"budget": "cost", "step": done.step, "unpriced": unpriced},
                                      message=f"money budget of {amount_text(budget)} {currency} not checked: the run used "
                                              f"a resource without a price (unset: {', '.join(unpriced)}); it goes on")
            return None
        if self.spent["total"] < budget:
            return None
        spent = round_amount(self.spent["total"])
        runs.run_event_record(run=run, kind="budget", data={"budget": "cost", "step": done.step, "spent": str(spent),
                                                            "limit": amount_text(budget), "currency": currency},
                              message=f"money budget reached at step {done.step}: {spent} {currency} spent of "
                                      f"{amount_text(budget)} {currency}; the run completes")
        return FINISHED
