"""The run's ``artifacts`` setting inside the job: every verification keeps only what the run would
store (none when ``keep`` is false, at most ``max_bytes`` per trajectory), and a sampled
trajectory carries them apart from its details, for the control plane to store."""
from __future__ import annotations

import pytest

from trainer.job import Job
from trainer.outcomes import Verification
from trainer.verifiers import artifacts
from trainer.verifiers.artifacts import Artifact

SMALL, LARGE = Artifact.of("report.xml", b"r" * 100, 1 << 10), Artifact.of("output.log", b"o" * 300, 1 << 10)
MISSING = Artifact("junit.xml", b"", 0, "no such file")


def with_files(items):
    return [Verification.passed(stage="repo_tests", **artifacts.detail([SMALL, LARGE, MISSING])) for _ in items]


def step_samples(config: dict) -> tuple[Job, list[dict]]:
    seen = []
    job = Job(config, callbacks=[lambda step, metrics, samples: seen.append(samples)], verify_batch=with_files,
              samples_per_step=2)
    job.step()
    return job, seen[0]


def test_kept_within_max_bytes_and_carried_apart_from_the_details(base_config):
    job, samples = step_samples({**base_config, "artifacts": {"keep": True, "max_bytes": 200}})
    assert samples and all("artifacts" not in s["details"] and s["details"]["stage"] == "repo_tests" for s in samples)
    kept = [Artifact.from_dict(a) for a in samples[0]["artifacts"]]
    assert [(a.name, a.data, a.refused) for a in kept] == [
        ("report.xml", b"r" * 100, ""), ("output.log", b"", "300 bytes: over the run's artifacts.max_bytes (200)"),
        ("junit.xml", b"", "no such file")]
    held = [artifacts.split(t.verification.details)[1] for t in job.last_generated]
    assert all(sum(len(a.data) for a in arts) == 100 for arts in held)  # no trajectory holds more than the run keeps


@pytest.mark.parametrize("setting", [{"keep": False}, {"keep": True, "max_bytes": 0}])
def test_dropped_or_bounded_to_nothing(base_config, setting):
    job, samples = step_samples({**base_config, "artifacts": setting})
    if setting["keep"]:
        assert all(a["data_b64"] == "" for s in samples for a in s["artifacts"])
    else:
        assert all("artifacts" not in s and "artifacts" not in s["details"] for s in samples)
        assert all("artifacts" not in t.verification.details for t in job.last_generated)
