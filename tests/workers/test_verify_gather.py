"""Fan-out verification: a lost or late batch is re-sent a bounded number of times, then its
items are sandbox_error (masked), and the run is never blocked."""
from __future__ import annotations

from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from workers.verify import make_verify_batch

CODE = {"stages": [{"type": "code_tests", "params": {}, "timeout_s": 1.0}]}
EXACT = {"stages": [{"type": "exact", "timeout_s": 1.0}]}


class Lost:
    """A result that never arrives (its worker was killed)."""

    def get(self, timeout, **kw):
        raise TimeoutError(f"no result within {timeout:.2f} s")

    def revoke(self):
        pass


class Done:
    def __init__(self, value):
        self.value = value

    def get(self, timeout, **kw):
        return self.value

    def revoke(self):
        pass


def _items(n, domain="code"):
    return [(f"answer {i}", Task(domain, str(i), "p", answer=f"answer {i}")) for i in range(n)]


def _verify(send):
    return make_verify_batch(cascades={"code": CODE, "easy": EXACT}, versions={"code": 1, "easy": 1},
                             timeouts={"code": 0.01, "easy": 0.01}, send=send)


def test_a_lost_batch_is_resent_and_its_results_used(monkeypatch):
    calls = []

    def send(name, args):
        calls.append(args)
        if len(calls) == 1:
            return Lost()
        return Done([{"outcome": "pass", "score": 1.0, "details": {}} for _ in args[2]])

    verify, gatherer = _verify(send)
    gatherer.deadline_s = lambda n: 0.01
    out = verify(_items(3))
    assert [v.outcome for v in out] == [Outcome.PASS] * 3
    assert len(calls) == 2 and gatherer.stats["resent"] == 1 and gatherer.stats["lost_items"] == 0


def test_a_batch_lost_every_time_becomes_sandbox_error():
    calls = []
    verify, gatherer = _verify(lambda name, args: calls.append(args) or Lost())
    gatherer.deadline_s = lambda n: 0.01
    out = verify(_items(2) + _items(1, domain="easy"))
    assert [v.outcome for v in out[:2]] == [Outcome.SANDBOX_ERROR] * 2
    assert all(v.is_infrastructure and v.reward is None for v in out[:2])
    assert out[2].outcome == Outcome.PASS  # cheap domains verify inline, unaffected
    assert len(calls) == gatherer.max_attempts and gatherer.stats["lost_items"] == 2


def test_a_lane_names_the_task_of_sandbox_batches_only():
    """Duration-aware dispatch (workers/lanes.py): ``lane`` re-routes a domain's sandbox batches to
    the long lane's task; judged domains keep the judge queue, inline ones are not sent."""
    judged = {"stages": [{"type": "judge", "judge": "j", "timeout_s": 5.0}]}
    sent = []

    def send(name, args):
        sent.append((name, args[0]))
        return Done([{"outcome": "pass", "score": 1.0, "details": {}} for _ in args[2]])

    verify, _ = make_verify_batch(cascades={"code": CODE, "judged": judged, "easy": EXACT}, versions={"code": 1, "judged": 1, "easy": 1},
                                  timeouts={"code": 1.0, "judged": 1.0, "easy": 1.0}, send=send,
                                  lane=lambda slug: "temper.verify.batch_long")
    out = verify(_items(2) + _items(2, "judged") + _items(2, "easy"))
    assert len(out) == 6 and all(v is not None for v in out)
    assert sorted(set(sent)) == [("temper.judge.batch", "judged"), ("temper.verify.batch_long", "code")]
