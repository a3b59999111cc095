"""What the in-process run-driver tests share (the driver runs in the test; ``send`` stands in for
the verify workers): a run made running as the scheduler would, a team's uploaded code domain,
and the handle a ``send`` of a verify batch returns."""
from __future__ import annotations

import json

from controlplane.accounts.models import Team
from controlplane.domains.services import domain_upload_jsonl
from controlplane.runs.services import run_create
from tests import factories

SMALL = {"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2}}
"""A run's config on the built-in domains: small steps, a checkpoint every 2."""


def running_run(actor, model: str, *, steps: int, domains: list[str], config: dict = SMALL, **extra):
    """A run of team acme on ``domains`` from ``model``, for ``steps`` steps, moved to running (the
    scheduler's part) so that ``drive`` takes it."""
    run = run_create(actor=actor, data=factories.run_payload(domains, team="acme", base_model=model,
                                                             budget={"steps": steps}, config=config, **extra))
    run.transition("queued"); run.transition("running"); run.save()
    return run


def code_domain(actor, slug: str, title: str = "") -> None:
    """A team's uploaded code domain whose verifier runs tests in the sandbox (a verify worker's
    work, off the driver)."""
    lines = "\n".join(json.dumps({"prompt": f"def f{i}():", "tests": "assert True"}) for i in range(4))
    domain_upload_jsonl(actor=actor, team=Team.objects.get(slug="acme"), jsonl=lines, data={
        "slug": slug, "title": title or slug, "kind": "code", "verifier": {"stages": [{"type": "code_tests", "timeout_s": 5.0}]}})
    factories.audits_passed()  # the audit worker's part: audits gate every use of a version


class Replies:
    """What a ``send`` of a verify batch returns: its ``results``, there already."""

    def __init__(self, results: list[dict]):
        self.results = results

    @classmethod
    def each(cls, result: dict, n: int) -> Replies:
        """The same ``result`` for each of a batch's ``n`` items."""
        return cls([result] * n)

    def get(self, **kw):
        return list(self.results)

    def revoke(self):
        pass
