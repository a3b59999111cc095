"""A run on the swe-pkg domains (``swe-pkg-named``, ``swe-pkg-unnamed``, ``swe-pkg-pair``) goes
end to end through the run driver: each episode holds a real bubblewrap session in its package's
starting tree (opened behind the domain's sandbox quota, given back at the end), its final tree
goes to the verify queue as a diff, and the worker's own task judges it there with the
``pkg_tests`` stage in a fresh sandbox. The tiny model's turns are not commands, so every episode
is cut with its tree unchanged and fails: the point is that the loop runs."""
from __future__ import annotations

import pytest

from controlplane.runs.models import MetricPoint, Trajectory
from tests import factories
from tests.services import require
from tests.workers.driving import Replies, running_run
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

DOMAINS = ["swe-pkg-named", "swe-pkg-unnamed", "swe-pkg-pair"]
SMALL = {"rollout": {"prompts_per_step": 3, "n": 2, "max_new_tokens": 8, "max_turns": 2, "max_episode_tokens": 96},
         "tokenizer": {"max_prompt_tokens": 128}}


def test_a_run_on_the_package_domains_holds_a_session_per_episode_and_judges_on_the_verify_queue(
        settings, tmp_path, monkeypatch, tiny_model):
    from controlplane import dispatch
    from workers.sandbox import bwrap, get_runtime
    from workers.tasks import verify_batch

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the package domains' sessions")
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in-process
    settings.VAR_DIR = tmp_path
    _, actor = factories.synced_team(DOMAINS)
    run = running_run(actor, tiny_model, steps=2, domains=DOMAINS, config=SMALL)
    factories.live_worker(["verify"])
    sent, verdicts = [], []

    def send(name, args):  # the verify worker's task, run here: the pinned cascade, the real sandbox
        assert name == "temper.verify.batch"
        sent.append(args)
        results = verify_batch.run(*args)
        verdicts.extend(results)
        return Replies(results)

    assert drive(run.id, worker="w1", send=send) == "completed"
    assert sent and {args[0] for args in sent} <= set(DOMAINS)
    items = [item for _, _, batch, *_ in sent for item in batch]
    assert items and all(item["task"]["meta"]["environment"] == "shell" and "files" not in item["task"]["meta"]
                         for item in items)  # the tree is the environment's, never the task's
    assert all(item["completion"] == "" for item in items)  # no command ran: the tree is as the task left it
    assert verdicts and all(v["outcome"] == "fail" for v in verdicts), verdicts
    outcomes = MetricPoint.objects.filter(run=run, key__startswith="outcome/swe-pkg-").exclude(domain="")
    assert sorted(set(outcomes.values_list("step", flat=True))) == [1, 2]
    assert not outcomes.filter(key__endswith="/sandbox_error").exists()
    assert not outcomes.filter(key__endswith="/pass").exclude(value=0).exists()
    stored = Trajectory.objects.filter(run=run, domain__startswith="swe-pkg-")
    assert stored.exists() and all("python3 -m pytest" in t.prompt for t in stored)
    assert all(t.details["transcript"][0]["role"] == "model" for t in stored)
    assert get_runtime("bwrap").stats()["held"] == 0  # every episode's session given back
