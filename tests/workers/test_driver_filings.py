"""A run on the long-report domains goes end to end through the run driver: domains synced from
the catalogue, the tiny model's multi-turn episodes against the report environment, outcomes per
domain recorded every step, trajectories with their turns stored (the tiny model fails them: the
point is that the loop runs)."""
from __future__ import annotations

import pytest

from controlplane.runs.models import MetricPoint, Trajectory
from tests import factories
from tests.workers.driving import running_run
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

DOMAINS = ["filing-adjusted-margin", "filing-segment-share", "filing-debt-due", "filing-eps"]
SMALL = {"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 8, "max_turns": 3, "max_episode_tokens": 96},
         "tokenizer": {"max_prompt_tokens": 128}}


def test_a_run_on_the_report_domains_completes_with_outcomes_per_domain(settings, tmp_path, monkeypatch, tiny_model):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in-process
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(DOMAINS)
    run = running_run(actor, tiny_model, steps=3, domains=DOMAINS, config=SMALL)

    def no_send(name, args):
        raise AssertionError("multi-turn episodes are verified by their environment; nothing goes to a queue")

    assert drive(run.id, worker="w1", send=no_send) == "completed"
    outcomes = MetricPoint.objects.filter(run=run, key__startswith="outcome/filing-").exclude(domain="")
    assert set(outcomes.values_list("domain", flat=True)) <= set(DOMAINS) and outcomes.exists()
    assert sorted(set(outcomes.values_list("step", flat=True))) == [1, 2, 3]
    assert not outcomes.filter(key__endswith="/sandbox_error").exists()
    stored = Trajectory.objects.filter(run=run, domain__startswith="filing-")
    assert stored.exists() and all(t.prompt.startswith("You are analysing the annual report") for t in stored)
