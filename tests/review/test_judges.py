"""Judges: an OpenAI-compatible endpoint (a local fake server, real HTTP and parsing), the
embedding-similarity judge on the shipped MiniLM weights, and the outcomes of their failures."""
from __future__ import annotations

import json

import threading

import pytest

from tests.review.fake_openai import FakeOpenAI
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers import run_cascade
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.judge import JudgeSpec
from trainer.verifiers.judges import HttpJudge, SimilarityJudge, build_judge, parse_score

TASK = Task("essays", "1", "Name the capital of France.", answer="Paris is the capital of France.")


def http_spec(url, **kw):
    base = {"name": "grader", "kind": "http", "model": "judge-1", "endpoint_url": url, "score_format": "binary",
            "rubric": "Task: {prompt}\nAnswer: {completion}\nReference: {reference}", "backoff_s": 0.01, "timeout_s": 2.0}
    return JudgeSpec(**{**base, **kw})


def judged(spec, completion="Paris.", timeout_s=10.0, **params):
    context = VerifyContext.with_judges({spec.name: HttpJudge(spec) if spec.kind == "http" else build_judge(spec)})
    return run_cascade({"stages": [{"type": "judge", "params": {"judge": spec.name, **params}, "timeout_s": timeout_s}]}, completion, TASK,
                       context=context)


@pytest.mark.parametrize("text,fmt,expected", [
    ("Looks right.\nSCORE: PASS", "binary", 1.0), ("score: fail", "binary", 0.0), ("FAIL", "binary", 0.0),
    ('{"score": 3}', "ordinal", 3.0), ("Reasoning... Score: **5**", "ordinal", 5.0), ("0.75", "unit", 0.75),
    ("SCORE: 2\n...\nSCORE: 4", "ordinal", 4.0),
])
def test_parse_score(text, fmt, expected):
    assert parse_score(text, fmt) == expected


@pytest.mark.parametrize("text,fmt", [("SCORE: 7", "ordinal"), ("SCORE: 1.5", "unit"), ("it is good", "binary"), ("", "unit"), ("SCORE: 2.5", "ordinal")])
def test_unparseable_answers_are_judge_errors(text, fmt):
    with FakeOpenAI([text]) as server:
        v = judged(http_spec(server.url, score_format=fmt))
    assert v.outcome is Outcome.JUDGE_ERROR
    assert v.reward is None  # masked, never a reward of 0
    assert "unparseable" in v.details["error"]


def test_http_judge_pass_fail_and_what_it_sends(monkeypatch):
    monkeypatch.setenv("GRADER_KEY", "sk-test-123")
    with FakeOpenAI(["The response names Paris. SCORE: PASS", "SCORE: FAIL"]) as server:
        spec = http_spec(server.url, api_key_env="GRADER_KEY")
        ok = judged(spec)
        bad = judged(spec, completion="Lyon")
    assert ok.outcome is Outcome.PASS and ok.reward == 1.0
    assert ok.details["judge_raw"] == 1.0 and ok.details["judge_format"] == "binary"
    assert bad.outcome is Outcome.FAIL and bad.reward == 0.0
    body = server.requests[0]
    assert body["model"] == "judge-1"
    assert "Task: Name the capital of France.\nAnswer: Paris.\nReference: Paris is the capital" in body["messages"][-1]["content"]
    assert server.auth == ["Bearer sk-test-123"] * 2
    # The tokens the endpoint reports are kept for compute accounting (judge tokens).
    assert ok.details["judge_tokens"] == len(json.dumps(body).split()) + len("The response names Paris. SCORE: PASS".split())
    assert [s["type"] for s in ok.details["stages"]] == ["judge"]


def test_ordinal_and_unit_scores_are_normalised():
    with FakeOpenAI(["SCORE: 4"]) as server:
        v = judged(http_spec(server.url, score_format="ordinal"), threshold=0.5)
    assert v.details["judge_raw"] == 4.0 and v.details["judge_score"] == 0.75 and v.outcome is Outcome.PASS
    with FakeOpenAI(["SCORE: 0.4"]) as server:
        v = judged(http_spec(server.url, score_format="unit"), graded=True)
    assert v.outcome is Outcome.PARTIAL and v.reward == pytest.approx(0.4)


def test_missing_api_key_is_a_judge_error(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with FakeOpenAI(["SCORE: PASS"]) as server:
        v = judged(http_spec(server.url, api_key_env="NOPE_KEY"))
    assert v.outcome is Outcome.JUDGE_ERROR and "NOPE_KEY" in v.details["error"]
    assert server.requests == []


def test_server_errors_are_retried_with_backoff():
    with FakeOpenAI([503, 429, "SCORE: PASS"]) as server:
        v = judged(http_spec(server.url, retries=2))
    assert v.outcome is Outcome.PASS and v.details["judge_attempts"] == 3
    with FakeOpenAI([500]) as server:
        v = judged(http_spec(server.url, retries=2))
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None
    assert len(server.requests) == 3 and "after 3 attempts" in v.details["error"]
    with FakeOpenAI([400]) as server:  # a client error is not retried
        v = judged(http_spec(server.url, retries=2))
    assert v.outcome is Outcome.JUDGE_ERROR and len(server.requests) == 1


def test_timeouts_are_judge_errors_not_zero_rewards():
    # the request times out (the judge's own timeout) ...
    with FakeOpenAI([("sleep", 1.0, "SCORE: PASS")]) as server:
        v = judged(http_spec(server.url, timeout_s=0.2, retries=0))
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None
    # ... or the stage's timeout in the cascade runs out first
    with FakeOpenAI([("sleep", 1.0, "SCORE: PASS")]) as server:
        v = judged(http_spec(server.url, timeout_s=5.0, retries=0), timeout_s=0.2)
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None


def test_unreachable_endpoint_is_a_judge_error():
    v = judged(http_spec("http://127.0.0.1:9/v1", retries=1))
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None


def test_concurrency_limit_per_judge():
    with FakeOpenAI([("sleep", 0.2, "SCORE: PASS")]) as server:
        context = VerifyContext.with_judges({"grader": HttpJudge(http_spec(server.url, max_concurrent=2))})
        threads = [threading.Thread(target=run_cascade, args=({"stages": [{"type": "judge", "params": {"judge": "grader"}}]}, "x", TASK),
                                    kwargs={"context": context})
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 6
    assert server.max_in_flight == 2


def test_similarity_judge_on_the_shipped_minilm_weights():
    spec = JudgeSpec("sim", kind="similarity", score_format="unit")
    context = VerifyContext.with_judges({"sim": SimilarityJudge(spec)})
    cascade = {"stages": [{"type": "judge", "params": {"judge": "sim", "threshold": 0.6}}]}
    good = run_cascade(cascade, "The capital of France is Paris.", TASK, context=context)
    bad = run_cascade(cascade, "I like turtles.", TASK, context=context)
    no_ref = run_cascade({"stages": [{"type": "judge", "params": {"judge": "sim"}}]}, "x", Task("d", "2", "q"), context=context)
    assert good.outcome is Outcome.PASS and good.details["similarity"] > 0.9
    assert bad.outcome is Outcome.FAIL and bad.details["similarity"] < 0.3
    assert no_ref.outcome is Outcome.JUDGE_ERROR and no_ref.reward is None
    ordinal = SimilarityJudge(JudgeSpec("sim", kind="similarity", score_format="ordinal"))
    from trainer.verifiers.judge import JudgeRequest

    assert ordinal(JudgeRequest("q", "Paris is France's capital.", "Paris is the capital of France.")).raw in (4.0, 5.0)


def test_unknown_judge_is_a_judge_error():
    v = run_cascade({"stages": [{"type": "judge", "params": {"judge": "nobody"}}]}, "x", TASK)
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None


def test_local_judge_runs_a_locally_built_model(tmp_path):
    """The local kind loads a causal LM from a directory and generates; a random tiny model's
    answer does not parse, which is a judge_error (masked), not a fail."""
    from trainer.models.tiny import build_tiny

    path = str(build_tiny(tmp_path / "judge-model", layers=1))
    spec = JudgeSpec("local", kind="local", model=path, rubric="{completion}", max_tokens=6, score_format="binary")
    v = run_cascade({"stages": [{"type": "judge", "params": {"judge": "local"}}]}, "Paris", TASK,
                    context=VerifyContext.with_judges({"local": build_judge(spec)}))
    assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None
    assert "unparseable binary answer" in v.details["error"]
    missing = VerifyContext.with_judges({"nowhere": build_judge(JudgeSpec("nowhere", kind="local", model=str(tmp_path / "none")))})
    assert run_cascade({"stages": [{"type": "judge", "params": {"judge": "nowhere"}}]}, "x", TASK, context=missing).outcome is Outcome.JUDGE_ERROR


def test_judge_slots_are_shared_across_workers_through_redis(settings):
    """The worker's limiter: one judge's slots live in Redis, so every judge worker shares them."""
    from tests.services import require_redis
    from trainer.verifiers.judge import JudgeError
    from workers import judge as worker_judge

    settings.REDIS_URL = require_redis()
    settings.TEMPER_JUDGE_WAIT_S = 0.2
    worker_judge._slots.clear()
    try:
        with worker_judge.shared_limit("slots-test", 1, 5.0):
            with pytest.raises(JudgeError, match="busy|slots of judge"):
                with worker_judge.shared_limit("slots-test", 1, 5.0):
                    pass
        with worker_judge.shared_limit("slots-test", 1, 5.0):  # released
            pass
    finally:
        worker_judge._slots.clear()
