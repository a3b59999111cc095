"""Runs on the real-world domains go end to end through the run driver (repositories; CAD and
function calling below). A run on the repository domains goes end to end through the run driver: domains synced from
the catalogue, the tiny model's multi-turn episodes in the repository environment (its
``run_tests`` in the real sandbox), each episode's final diff sent to the verify queue and judged
there by the worker's own task with the hidden tests in a fresh sandbox, outcomes per domain
recorded every step and trajectories stored with their turns (the tiny model fails the tasks:
the point is that the loop runs)."""
from __future__ import annotations

import pytest

from controlplane.runs.models import MetricPoint, Trajectory
from tests import factories
from tests.services import require
from tests.workers.driving import Replies, running_run
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

DOMAINS = ["swe-bugfix", "swe-feature", "swe-refactor"]
SMALL = {"rollout": {"prompts_per_step": 3, "n": 2, "max_new_tokens": 8, "max_turns": 3, "max_episode_tokens": 96},
         "tokenizer": {"max_prompt_tokens": 128}}


def test_a_run_on_the_repository_domains_completes_with_outcomes_per_domain(settings, tmp_path, monkeypatch, tiny_model):
    from controlplane import dispatch
    from workers.sandbox import bwrap
    from workers.tasks import verify_batch

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the repository domains' sandbox")
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in-process
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(DOMAINS)
    run = running_run(actor, tiny_model, steps=2, domains=DOMAINS, config=SMALL)
    factories.live_worker(["verify"])
    sent = []

    def send(name, args):  # the verify worker's task, run here: the pinned cascade, the real sandbox
        assert name == "temper.verify.batch"
        sent.append(args)
        return Replies(verify_batch.run(*args))

    assert drive(run.id, worker="w1", send=send) == "completed"
    assert sent and {args[0] for args in sent} <= set(DOMAINS)
    assert all(item["completion"].startswith("diff --git") or item["completion"] == "" for args in sent for item in args[2])
    outcomes = MetricPoint.objects.filter(run=run, key__startswith="outcome/swe-").exclude(domain="")
    assert set(outcomes.values_list("domain", flat=True)) <= set(DOMAINS) and outcomes.exists()
    assert sorted(set(outcomes.values_list("step", flat=True))) == [1, 2]
    assert not outcomes.filter(key__endswith="/sandbox_error").exists()
    stored = Trajectory.objects.filter(run=run, domain__startswith="swe-")
    assert stored.exists() and all(t.prompt.startswith("You are working in a Python repository") for t in stored)
    assert all(t.details["transcript"][0]["role"] == "model" for t in stored)


def test_a_run_on_the_cad_function_calling_and_text_game_domains_completes_with_outcomes_per_domain(settings, tmp_path, monkeypatch, tiny_model):
    """CAD scripts go to the verify queue (their sandbox); function calls, BFCL's multi-turn
    conversations and a text game verify inline (their environments)."""
    from controlplane import dispatch
    from workers.sandbox import bwrap
    from workers.tasks import verify_batch

    from tests.services import require_sandbox_libs

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the CAD domains' sandbox")
    require_sandbox_libs()
    from tests.services import require_java

    require_java()
    domains = ["cad-part", "cad-modify", "cad-fit", "bfcl-simple", "bfcl-parallel-multiple", "bfcl-relevance", "bfcl-multi-base",
               "game-coin"]
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(domains)
    run = running_run(actor, tiny_model, steps=2, domains=domains, config={
        "rollout": {"prompts_per_step": 8, "n": 2, "max_new_tokens": 8, "max_turns": 3, "max_episode_tokens": 96},
        "tokenizer": {"max_prompt_tokens": 128}})
    factories.live_worker(["verify"])
    sent = []

    def send(name, args):
        sent.append(args[0])
        return Replies(verify_batch.run(*args))

    assert drive(run.id, worker="w1", send=send) == "completed"
    assert set(sent) <= {"cad-part", "cad-modify", "cad-fit"}  # only the sandboxed domains leave the driver
    outcomes = MetricPoint.objects.filter(run=run, key__startswith="outcome/").exclude(domain="")
    assert {d.split("-")[0] for d in outcomes.values_list("domain", flat=True)} == {"cad", "bfcl", "game"}
    assert sorted(set(outcomes.values_list("step", flat=True))) == [1, 2]
    assert not outcomes.filter(key__endswith="/sandbox_error").exists()


SHELL_DOMAINS = ["shell-data", "shell-config", "shell-git"]


def test_a_run_on_the_shell_domains_holds_a_session_per_episode_and_judges_on_the_verify_queue(settings, tmp_path, monkeypatch, tiny_model):
    """Shell episodes each hold a real bubblewrap session (opened with the task's files and setup,
    behind the domain's sandbox quota, given back at the end), and their final trees go to the
    verify queue as diffs judged there in a fresh sandbox; the tiny model's turns are not
    commands, so every episode is cut and fails: the point is that the loop runs."""
    from controlplane import dispatch
    from workers.sandbox import bwrap, get_runtime
    from workers.tasks import verify_batch

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the shell domains' sessions")
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(SHELL_DOMAINS)
    run = running_run(actor, tiny_model, steps=2, domains=SHELL_DOMAINS, config=SMALL)
    factories.live_worker(["verify"])
    sent = []

    def send(name, args):
        sent.append(args)
        return Replies(verify_batch.run(*args))

    assert drive(run.id, worker="w1", send=send) == "completed"
    assert sent and {args[0] for args in sent} <= set(SHELL_DOMAINS)
    for domain, _, items, *_ in sent:
        for item in items:  # a final tree as a diff; shell-git's with the repository's bundle after it
            diff, _, bundle = item["completion"].partition("# git bundle")
            assert diff == "" or diff.startswith("diff --git")
            assert bundle.startswith(" (") if domain == "shell-git" else not bundle
    outcomes = MetricPoint.objects.filter(run=run, key__startswith="outcome/shell-").exclude(domain="")
    assert sorted(set(outcomes.values_list("step", flat=True))) == [1, 2]
    assert not outcomes.filter(key__endswith="/sandbox_error").exists()
    assert not outcomes.filter(key__endswith="/pass").exclude(value=0).exists()
    stored = Trajectory.objects.filter(run=run, domain__startswith="shell-")
    assert stored.exists() and all(t.details["transcript"][0]["role"] == "model" for t in stored)
    assert get_runtime("bwrap").stats()["held"] == 0  # every episode's session given back
