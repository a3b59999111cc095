"""Every legal run transition works, every other one is refused with a clear error."""
from __future__ import annotations

import itertools

import pytest

from controlplane.runs.models import TRANSITIONS, IllegalTransition, Run, RunState
from tests import factories

STATES = [s.value for s in RunState]
LEGAL = {
    ("draft", "queued"), ("draft", "cancelled"),
    ("queued", "running"), ("queued", "cancelled"), ("queued", "failed"),
    ("running", "paused"), ("running", "completed"), ("running", "failed"), ("running", "cancelled"),
    ("paused", "running"), ("paused", "queued"), ("paused", "completed"), ("paused", "failed"), ("paused", "cancelled"),
}


def test_the_table_is_the_documented_machine():
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == LEGAL


@pytest.mark.parametrize("src,dst", [p for p in itertools.product(STATES, STATES) if p[0] != p[1]])
def test_transition(src, dst):
    run = Run(state=src, name="r", base_model="m", budget_steps=1)
    if (src, dst) in LEGAL:
        assert run.transition(dst) is True
        assert run.state == dst
    else:
        with pytest.raises(IllegalTransition) as err:
            run.transition(dst)
        assert f"cannot go from {src} to {dst}" in str(err.value)
        assert run.state == src


@pytest.mark.parametrize("state", STATES)
def test_same_state_is_a_no_op(state):
    run = Run(state=state, name="r", base_model="m", budget_steps=1)
    assert run.transition(state) is False


def test_timestamps_follow_the_states(db):
    run = factories.run(factories.team())
    run.transition("queued")
    assert run.queued_at is not None and run.started_at is None
    run.transition("running")
    started = run.started_at
    run.transition("paused")
    run.transition("running")
    assert run.started_at == started
    run.transition("completed")
    assert run.finished_at is not None and run.is_terminal


def test_unknown_state_refused():
    with pytest.raises(IllegalTransition, match="unknown run state"):
        Run(state="draft").transition("exploded")
