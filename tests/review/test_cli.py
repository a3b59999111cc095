"""``manage.py review``: the same services, permissions and audit as the API."""
from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from controlplane.accounts.models import AuditLog

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("review", *args, stdout=out)
    return out.getvalue()


def test_cli_queue_labels_stats_versions_and_rollback(judged):
    assert "sim" in run("--user", "acme-viewer", "judges", "list")
    out = run("--user", "acme-admin", "queues", "create", "acme", "domain=capitals", "judge=sim", "name=cli", "strategy=uniform", "size=6")
    sampled = int(re.search(r"(\d+) items sampled", out).group(1))
    assert sampled == 6 or (sampled > 6 and "were added from the population" in out)  # both of the judge's classes
    with pytest.raises(CommandError, match="may not do this"):
        run("--user", "acme-reviewer", "queues", "create", "acme", "domain=capitals", "judge=sim", "name=x")
    with pytest.raises(CommandError, match="size: must be at least 1"):
        run("--user", "acme-admin", "queues", "create", "acme", "domain=capitals", "judge=sim", "name=y", "size=0")
    from controlplane.review.models import ReviewQueue

    queue = ReviewQueue.objects.get(name="cli")
    assert "labelled items: 0" in run("--user", "acme-viewer", "queues", "stats", str(queue.id))
    assert "cli" in run("--user", "acme-reviewer", "queues", "list")
    out = run("--user", "acme-admin", "judges", "edit", "sim", "rubric=Compare with the reference.", "--note", "rubric")
    assert "v2 (proposed" in out
    assert "may not be calibrated: no labelled items yet" in run("--user", "acme-admin", "judges", "calibration", "sim", "1")
    with pytest.raises(CommandError, match="cannot be marked calibrated"):
        run("--user", "acme-admin", "judges", "promote", "sim", "2")
    with pytest.raises(CommandError, match="no previous version"):
        run("--user", "acme-admin", "judges", "rollback", "sim")
    assert "threshold 0.3" in run("--user", "acme-admin", "judges", "threshold", "sim", "0.3")
    assert AuditLog.objects.filter(action__in=["judge.version", "judge.threshold", "review_queue.create"]).count() == 3


def test_demo_setup_makes_a_judge_and_a_judged_domain_once(world):
    from controlplane.domains.models import Domain
    from controlplane.review.models import Judge

    out = run("--user", "acme-admin", "demo", "setup", "acme")
    assert "acme-similarity" in out and "capitals-judged" in out
    run("--user", "acme-admin", "demo", "setup", "acme")  # idempotent
    assert Judge.objects.filter(slug="acme-similarity").count() == 1
    domain = Domain.objects.get(slug="capitals-judged")
    assert domain.team.slug == "acme" and domain.verifier["stages"][0]["params"]["judge"] == "acme-similarity"
    assert len(domain.task_source["tasks"]) == 24


def test_cli_shadow_inline_runs_the_judge_task_in_this_process(judged):
    # v1 is the only version: no other version's labelled items to re-score, but the task runs here.
    assert "sim@v1: 0 items scored in shadow, 0 judge errors" in run("--user", "acme-admin", "judges", "shadow", "sim", "1", "--inline")


def test_cli_queue_sampled_here_or_waiting_for_a_worker(judged):
    """``--here`` draws the sample in the command's process (a progress bar on standard error);
    ``--no-wait`` returns once the queue is saved, for a worker of the judge queue to draw."""
    from controlplane.review.models import ReviewQueue

    out = run("--user", "acme-admin", "queues", "create", "acme", "domain=capitals", "judge=sim", "name=here", "size=4", "--here")
    assert re.search(r"queue \d+: \d+ items sampled \(uniform\) from 45 judged trajectories", out)
    assert ReviewQueue.objects.get(name="here").state == "ready"
    out = run("--user", "acme-admin", "queues", "create", "acme", "domain=capitals", "judge=sim", "name=later", "--no-wait")
    assert "a worker on the judge queue draws its sample" in out

