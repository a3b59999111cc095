"""The stages with natural artifacts hand them back in the real sandbox: a repository task's
JUnit report and output log (``repo_tests``), a CAD answer's solid as STL (``cad_mesh``), a shell
task's final diff (``shell_state``); a stage asking the sandbox for a file gets it, or why not."""
from __future__ import annotations

import json
import random
import struct
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

from trainer.catalogue import all_domains
from trainer.families.shell.verifier import reference_diff, shell_state
from trainer.families.swe.catalogue import wrong_transcript
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers import artifacts
from trainer.verifiers.artifacts import Outputs
from trainer.verifiers.code import sandbox_stage
from workers.verify import verification_from_dict, verify_items

DOMAINS = all_domains()


def handed(verification) -> dict:
    return {a.name: a for a in artifacts.split(verification.details)[1]}


def test_repo_tests_hands_back_the_junit_report_and_the_output_log(real_sandbox):
    spec = DOMAINS["swe-bugfix"]
    task = spec.source.sample(random.Random(4), 1)
    good, bad = (spec.cascade(real_sandbox)(c, task) for c in (task.answer, wrong_transcript(task)))
    assert good.outcome is Outcome.PASS and bad.outcome is Outcome.FAIL
    for verification, failures in ((good, 0), (bad, None)):
        files = handed(verification)
        assert sorted(files) == ["output.log", "report.xml"]
        suite = ElementTree.fromstring(files["report.xml"].data)
        assert int(suite.get("tests")) == len(verification.details["tests"]) > 0
        assert suite.get("name") == f"swe-bugfix/{task.id}"
        found = int(suite.get("failures"))
        assert found == 0 if failures == 0 else found == len(verification.details["failed"]) > 0
        assert files["output.log"].data == verification.details["stderr"].encode()[-len(files["output.log"].data):]


def test_cad_mesh_hands_back_the_solid_it_checked_as_stl(real_sandbox):
    from tests.services import require_sandbox_libs

    require_sandbox_libs()
    spec = DOMAINS["cad-part"]
    task = spec.source.sample(random.Random(1), 0)
    verification = spec.cascade(real_sandbox)(task.answer, task)
    assert verification.outcome is Outcome.PASS
    solid = handed(verification)["solid.stl"]
    count = struct.unpack_from("<I", solid.data, 80)[0]
    assert count == verification.details["geometry"]["triangles"] and len(solid.data) == 84 + 50 * count
    rows = np.frombuffer(solid.data[84:], dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
    assert np.allclose(rows["v"].reshape(-1, 3).min(axis=0), verification.details["geometry"]["bbox_min"], atol=1e-4)


def test_shell_state_hands_back_the_final_diff():
    task = Task("shell-data", "x", "...", meta={"family": "data", "seed": 3, "level": 0})
    diff = reference_diff(task)
    verification = shell_state(diff, task)
    assert verification.outcome is Outcome.PASS
    assert handed(verification)["final.diff"].data == diff.encode()


def test_a_stage_gets_the_files_its_job_asks_for(real_sandbox):
    @sandbox_stage({"cpu_s": 5, "wall_s": 10})
    def build(completion, task, run):
        verdict = run({"build.sh": completion}, ["bash", "build.sh"], outputs=Outputs(("build.log", "dist/app")))
        return verdict

    task = Task("t", "1", "build it")
    verdict = build("echo compiling > build.log; mkdir dist; ln -s /etc/passwd dist/app; exit 1", task, context=real_sandbox)
    assert (verdict.status, verdict.exit_code) == ("runtime_error", 1)
    assert [(a.name, a.data, a.refused) for a in verdict.artifacts] == [
        ("build.log", b"compiling\n", ""), ("dist/app", b"", "not a regular file: a symbolic link")]


@pytest.mark.parametrize("stage", ["repo_tests", "cad_mesh", "shell_state"])
def test_without_a_sandbox_no_artifact_is_made_up(stage):
    from trainer.verifiers import STAGES

    slug = {"repo_tests": "swe-bugfix", "cad_mesh": "cad-part", "shell_state": "shell-config"}[stage]
    task = DOMAINS[slug].source.sample(random.Random(0), 0)
    verification = STAGES[stage].fn(task.answer if slug != "shell-config" else reference_diff(task), task)
    assert verification.outcome is Outcome.SANDBOX_ERROR
    assert [a.name for a in handed(verification).values()] in ([], ["final.diff"])


def test_they_cross_the_verify_queue_as_json_from_a_group_verified_together():
    """The worker's side (a task's group in one sandbox allocation), its JSON, the driver's side."""
    spec = DOMAINS["swe-feature"]
    task = spec.source.sample(random.Random(2), 0)
    item = {"completion": task.answer, "task": {k: getattr(task, k) for k in task.__dataclass_fields__}}
    results = json.loads(json.dumps(verify_items(spec.verifier_spec, [item, item])))
    got = [verification_from_dict(r) for r in results]
    assert [v.outcome for v in got] == [Outcome.PASS, Outcome.PASS]
    assert all(sorted(handed(v)) == ["output.log", "report.xml"] for v in got)
