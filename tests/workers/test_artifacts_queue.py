"""The run's ``artifacts`` setting at the verify worker: what a run drops (``keep: false``) or
cannot hold (past ``max_bytes``) is taken out of the results before they are sent back, so it
never crosses the verify queue; a batch sent without a setting comes back whole."""
from __future__ import annotations

import pytest

from tests import factories
from trainer.verifiers import artifacts
from trainer.verifiers.artifacts import Artifact

pytestmark = pytest.mark.django_db

REPORT, LOG = Artifact.of("report.xml", b"r" * 100, 1 << 10), Artifact.of("output.log", b"o" * 300, 1 << 10)


@pytest.fixture
def worker(monkeypatch):
    """The verify task of a sandboxed domain, its cascade's results carrying two artifacts each."""
    from workers import tasks, verify

    factories.domain("code", verifier={"stages": [{"type": "code_tests"}]})
    monkeypatch.setattr(verify, "verify_items", lambda spec, items, max_concurrent_sandboxes=None: [
        {"outcome": "pass", "score": 1.0, "details": {"stage": "code_tests", **artifacts.detail([REPORT, LOG])}}
        for _ in items])
    return tasks.verify_batch


def _sent(results):
    return [[(a.name, len(a.data), a.refused) for a in artifacts.split(r["details"])[1]] for r in results]


def test_keep_false_sends_no_artifact_back(worker):
    results = worker("code", 1, [{}, {}], None, {"keep": False, "max_bytes": 1 << 20})
    assert [r["details"] for r in results] == [{"stage": "code_tests"}] * 2


def test_max_bytes_keeps_the_listing_and_drops_the_bytes_past_it(worker):
    results = worker("code", 1, [{}], None, {"keep": True, "max_bytes": 200})
    assert _sent(results) == [[("report.xml", 100, ""), ("output.log", 0, "300 bytes: over the run's artifacts.max_bytes (200)")]]


def test_without_a_setting_the_results_come_back_whole(worker):
    assert _sent(worker("code", 1, [{}], None)) == [[("report.xml", 100, ""), ("output.log", 300, "")]]


def test_the_setting_rides_with_every_batch_and_is_read_at_each_call():
    from trainer.outcomes import Outcome
    from trainer.tasks.base import Task
    from workers.verify import make_verify_batch

    sent, setting = [], {"keep": True, "max_bytes": 10}

    class Done:
        def __init__(self, n):
            self.n = n

        def get(self, timeout, **kw):
            return [{"outcome": "pass", "score": 1.0, "details": {}}] * self.n

        def revoke(self):
            pass

    def send(name, args):
        sent.append(args)
        return Done(len(args[2]))

    verify, _ = make_verify_batch(cascades={"code": {"stages": [{"type": "code_tests"}]}}, versions={"code": 3},
                                  timeouts={"code": 1.0}, send=send, artifacts=lambda: setting)
    items = [("x", Task("code", "1", "p", answer="x"))]
    assert [v.outcome for v in verify(items)] == [Outcome.PASS]
    setting = {"keep": False, "max_bytes": 0}
    verify(items)
    assert [a[4] for a in sent] == [{"keep": True, "max_bytes": 10}, {"keep": False, "max_bytes": 0}]
    plain, _ = make_verify_batch(cascades={"code": {"stages": [{"type": "code_tests"}]}}, versions={"code": 3},
                                 timeouts={"code": 1.0}, send=send)
    plain(items)
    assert len(sent[-1]) == 4  # no setting: the batch is sent as before, and comes back whole
