"""A step's sampled trajectories hold what a hostile candidate wrote: a shell episode's final tree
(its diff is the completion) may hold NUL bytes and names that are not UTF-8, and a check's
output (in the details) what the candidate's program printed. PostgreSQL stores neither a NUL
nor a lone surrogate, in text or in JSON: the step is written with them replaced, never lost."""
from __future__ import annotations

import pytest

from controlplane.runs.models import RunEvent, Trajectory
from controlplane.runs.services import run_record_step
from controlplane.runs.watch import run_watch_tampering
from tests import factories


@pytest.mark.django_db
def test_nul_and_lone_surrogates_in_a_sample_are_stored_replaced_and_the_step_is_written():
    run = factories.run(factories.team())
    run.driver = "w1"
    run.save(update_fields=["driver"])
    sample = {"domain": "shell-data", "task_id": "t\x00", "prompt": "p", "outcome": "fail", "reward": 0.0,
              "completion": "+++ b/bin\udcff\n+a\x00b\n", "details": {"stdout": "OK\x00", "k\x00": ["\ud800"]},
              "transcript": [{"observation": "x\x00"}]}
    run_record_step(run=run, worker="w1", step=1, metrics={}, samples=[sample], verifier_versions={})
    row = Trajectory.objects.get(run=run, step=1)
    assert row.completion == "+++ b/bin\ufffd\n+a\ufffdb\n" and row.task_id == "t\ufffd"
    assert row.details["details"] == {"stdout": "OK\ufffd", "k\ufffd": ["\ufffd"]}
    assert row.details["transcript"] == [{"observation": "x\ufffd"}]


@pytest.mark.django_db
def test_a_tampering_example_with_nul_is_stored_replaced():
    run = factories.run(factories.team())
    events = run_watch_tampering(run=run, step=1, counts={"shell-data": {"forged-ok": 3}},
                                 examples={"shell-data": {"forged-ok": "echo OK\x00\udcff"}})
    assert [e.data["example"] for e in events] == ["echo OK\ufffd\ufffd"]
    assert RunEvent.objects.get(pk=events[0].pk).data["example"] == "echo OK\ufffd\ufffd"
