"""A cascade over many completions (``Cascade.run_many``, what a verify worker runs on a batch)
gives each the verdict it gets alone: a ``process`` stage's calls go to one verifier worker in
one message, and a call that hangs or kills its worker is that call's outcome only."""
from __future__ import annotations

import os

import pytest

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.cascade import compile_cascade
from trainer.verifiers.context import NO_CONTEXT
from trainer.verifiers.isolation import ProcessPool
from trainer.verifiers.stages import STAGES, StageType, register_stage

THIS = __name__


def hostile(completion: str, task: Task) -> Verification:
    """What the completion asks: hang, kill the worker, raise, or pass with the worker's pid."""
    if completion == "hang":
        while True:
            pass
    if completion == "die":
        os._exit(0)
    if completion == "raise":
        raise ValueError("the stage broke")
    if completion == "exit":
        raise SystemExit(0)
    return Verification.passed(pid=os.getpid(), echo=completion)


@pytest.fixture(scope="module", autouse=True)
def stage_type():
    register_stage(StageType("t_hostile", f"{THIS}:hostile", {"type": "object", "additionalProperties": False, "properties": {}}))
    yield
    STAGES.pop("t_hostile", None)


@pytest.fixture
def pool():
    p = ProcessPool(max_workers=1)
    yield p
    p.close()


def test_each_call_of_a_batch_gets_the_outcome_it_gets_alone(pool):
    cascade = compile_cascade({"stages": [{"type": "t_hostile", "timeout_s": 1.0}]}, NO_CONTEXT)
    completions = ["a", "hang", "b", "die", "c", "raise", "exit", "d"]
    task = Task("test", "1", "q")
    together = cascade.run_many([(c, task) for c in completions], pool=pool)
    alone = [cascade.run(c, task, pool=pool) for c in completions]
    assert [v.outcome for v in together] == [v.outcome for v in alone] == [
        Outcome.PASS, Outcome.TIMEOUT, Outcome.PASS, Outcome.RUNTIME_ERROR, Outcome.PASS, Outcome.RUNTIME_ERROR,
        Outcome.RUNTIME_ERROR, Outcome.PASS]
    assert [v.details.get("echo") for v in together] == ["a", None, "b", None, "c", None, None, "d"]
    # the calls before a hang share one worker; the hang's worker is killed and the rest go to a fresh one
    pids = [v.details.get("pid") for v in together]
    assert pids[0] != pids[2] != pids[4] and pids[4] == pids[7]
    assert "ValueError: the stage broke" in together[5].details["error"]
    assert all(v.details["stages"][0]["outcome"] == v.outcome.value for v in together)


def test_a_batch_goes_to_the_worker_in_one_message_and_each_call_keeps_its_own_clock(pool):
    cascade = compile_cascade({"stages": [{"type": "t_hostile", "timeout_s": 5.0}]}, NO_CONTEXT)
    task = Task("test", "1", "q")
    results = cascade.run_many([(str(i), task) for i in range(50)], pool=pool)
    assert [v.details["echo"] for v in results] == [str(i) for i in range(50)]
    assert len({v.details["pid"] for v in results}) == 1
    assert all(0 <= v.details["verify_s"] < 5.0 for v in results)


def test_later_stages_run_only_for_the_completions_still_undecided(pool):
    spec = {"stages": [{"type": "exact"}, {"type": "t_hostile", "timeout_s": 1.0}]}
    cascade = compile_cascade(spec, NO_CONTEXT)
    tasks = [Task("test", str(i), "q", answer="yes") for i in range(3)]
    together = cascade.run_many([("yes", tasks[0]), ("hang", tasks[1]), ("no", tasks[2])], pool=pool)
    alone = [cascade.run(c, t, pool=pool) for c, t in [("yes", tasks[0]), ("hang", tasks[1]), ("no", tasks[2])]]
    assert [v.outcome for v in together] == [v.outcome for v in alone]
    assert [[s["type"] for s in v.details["stages"]] for v in together] == [[s["type"] for s in v.details["stages"]] for v in alone]


def test_a_worker_reads_a_pinned_spec_once_per_digest_and_never_serves_another_spec_under_it():
    from trainer.verifiers.cascade import spec_digest
    from workers.verify import pinned_spec

    reads = []
    database = {("d", 1): {"stages": [{"type": "exact"}]}}

    def read(slug, version):
        reads.append((slug, version))
        return database[(slug, version)]

    digest = spec_digest(database[("d", 1)])
    assert pinned_spec("d", 1, digest, read) == database[("d", 1)]
    assert pinned_spec("d", 1, digest, read) == database[("d", 1)]
    assert reads == [("d", 1)]
    # the domain recreated under the same slug and version with another spec (a fresh database):
    # the batch names the new spec's digest, so the spec kept under the old digest is not used
    database[("d", 1)] = {"stages": [{"type": "regex", "params": {"pattern": "x"}}]}
    assert pinned_spec("d", 1, spec_digest(database[("d", 1)]), read) == database[("d", 1)]
    # a batch whose digest is not the database's spec's: the database's spec, read each time, not kept
    assert pinned_spec("d", 1, "0" * 32, read) == database[("d", 1)]
    assert pinned_spec("d", 1, "0" * 32, read) == database[("d", 1)]
    # no digest (an older sender): read each time
    pinned_spec("d", 1, None, read)
    assert len(reads) == 5


def test_the_drivers_verify_batch_verifies_each_local_domains_items_together_in_their_order(monkeypatch):
    from trainer.verifiers.cascade import Cascade
    from workers.verify import make_verify_batch

    exact = {"stages": [{"type": "exact"}]}
    verify, _ = make_verify_batch(cascades={"a": exact, "b": exact}, versions={"a": 1, "b": 1}, timeouts={"a": 1.0, "b": 1.0},
                                  send=lambda name, args: pytest.fail("nothing goes to a queue"))
    items = [(str(i % 3), Task("a" if i % 2 else "b", str(i), "q", answer="1")) for i in range(12)]
    calls = []
    real = Cascade.run_many
    monkeypatch.setattr(Cascade, "run_many", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    results = verify(items)
    assert calls == [6, 6]
    assert [v.outcome is Outcome.PASS for v in results] == [c == "1" for c, _ in items]

    def crash(self, batch, **kw):
        raise RuntimeError("the cascade broke")

    monkeypatch.setattr(Cascade, "run_many", crash)  # and so does run, which goes through it
    assert {v.outcome for v in verify(items[:3])} == {Outcome.SANDBOX_ERROR}


def test_the_trainers_inline_verification_gives_each_item_its_own_verdict_across_domains(monkeypatch):
    from trainer import catalogue
    from trainer.job import verify_inline

    domains = {slug: catalogue.get(slug) for slug in ("math-linear", "math-fractions")}
    tasks = {slug: spec.source.sample(__import__("random").Random(3), 0) for slug, spec in domains.items()}
    items = [(tasks[slug].answer if i % 3 else "wrong", tasks[slug]) for i, slug in enumerate(["math-linear", "math-fractions"] * 4)]
    together = verify_inline(domains)(items)
    alone = [domains[t.domain].verify(c, t) for c, t in items]
    assert [v.outcome for v in together] == [v.outcome for v in alone]
    assert {v.outcome for v in together} == {Outcome.PASS, Outcome.FAIL}

    from trainer.verifiers.cascade import Cascade

    def crash(self, batch, **kw):
        raise RuntimeError("the cascade broke")

    monkeypatch.setattr(Cascade, "run_many", crash)
    assert {v.outcome for v in verify_inline(domains)(items[:2])} == {Outcome.JUDGE_ERROR}
