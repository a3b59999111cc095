"""The swe-pkg build end to end on a small real package (webcolors) in bubblewrap sandboxes: a few
tasks of each level, each kept on the fail-to-pass / pass-to-pass rules, with a prompt written
from the failures, and a task's starting tree failing exactly its fail-to-pass tests."""
from __future__ import annotations

import gzip
import json

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.families.pkgs import build, runner
from trainer.families.pkgs.pins import source_tree
from trainer.families.pkgs.runner import Results
from trainer.verifiers.patches import apply_patch
from workers.pkgs_build import executor
from workers.sandbox import Limits, execute

CONFIG = build.BuildConfig(seed=0, level1=6, level2=6, level3=1, max_mutants=64, batch=12, parallel=1)


@pytest.fixture(scope="module")
def built():
    ok, reason = bwrap_ready()
    require(ok, reason)
    doc, figures = build.build_package("webcolors", executor("bwrap"), CONFIG)
    return doc, figures


def test_tasks_of_every_level_are_kept_by_the_rules(built):
    doc, figures = built
    assert figures["levels"] == {"1": 6, "2": 6, "3": 1} and figures["tried"] <= CONFIG.max_mutants
    tree = source_tree("webcolors")
    passing = set(doc["passing"])
    assert len(passing) > 400
    for task in doc["tasks"]:
        assert task["f2p"] and set(task["f2p"]) <= passing and len(task["f2p"]) <= 2 * CONFIG.max_f2p
        mutated = apply_patch(tree, task["diff"])
        assert sorted(p for p in tree if mutated[p] != tree[p]) == task["files"]
        assert len(task["files"]) == (2 if task["level"] == 3 else 1)
        assert task["id"].startswith(f"webcolors-{task['level']}-")


def test_prompts_come_from_failures_not_from_the_diff(built):
    doc, _ = built
    for task in doc["tasks"]:
        prompt = task["prompt"]
        assert any(t in prompt for t in task["f2p"]) and "diff --git" not in prompt
        for line in task["diff"].splitlines():
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---")) and len(line[1:].strip()) >= 6:
                assert line[1:].strip() not in prompt, (task["id"], line)
        named = task["files"][0] in prompt
        assert named == (task["level"] == 1), task["id"]


def test_a_starting_tree_fails_its_f2p_and_passes_the_rest(built):
    doc, _ = built
    task = next(t for t in doc["tasks"] if t["level"] == 3)
    tree = apply_patch(source_tree("webcolors"), task["diff"])
    p2p = sorted(set(doc["passing"]) - set(task["f2p"]))
    job = runner.test_job(tree, task["f2p"] + p2p)
    verdict = execute(job.files, job.command, Limits(cpu_s=60, wall_s=60, memory_mb=1024, output_bytes=8 << 20), backend="bwrap")
    results = runner.read_results(verdict.stdout, job)
    assert set(task["f2p"]) <= set(results.failed) and set(p2p) <= results.passed


def _failing(tree: dict[str, str], tests: list[str]) -> set[str]:
    job = runner.test_job(tree, tests)
    verdict = execute(job.files, job.command, Limits(cpu_s=60, wall_s=60, memory_mb=1024, output_bytes=8 << 20), backend="bwrap")
    return set(tests) - runner.read_results(verdict.stdout, job).passed


def test_a_pairs_bugs_interact_as_recorded(built):
    """Each bug of the level-3 task run alone and both together: the recorded interaction is what
    the runs show, and it is not empty (a test fails with either bug and with both, fails only with
    both, or one bug hides the other's failure); either bug alone fails a test, so fixing one is not enough."""
    doc, _ = built
    task = next(t for t in doc["tasks"] if t["level"] == 3)
    tree = source_tree("webcolors")
    both = apply_patch(tree, task["diff"])
    passing = sorted(doc["passing"])
    alone = [_failing({**tree, path: both[path]}, passing) for path in task["files"]]
    together = _failing(both, passing)
    assert together == set(task["f2p"]) and all(alone)
    how = build.interaction(build.Kept(0, {}, [], sorted(alone[0]), {}), build.Kept(1, {}, [], sorted(alone[1]), {}),
                            task["f2p"])
    assert how == task["interaction"] and any(how.values()), how


def test_the_written_file_is_reproducible(built, tmp_path):
    doc, _ = built
    path = build.write_tasks(doc, tmp_path)
    assert path.name == "webcolors.json.gz" and path.read_bytes() == build.encode(json.loads(gzip.decompress(path.read_bytes())))


def test_judge_keeps_only_clean_fail_to_pass():
    base = build.Baseline(frozenset({"a", "b", "c"}), 4, {}, 1.0)
    ok = Results(frozenset({"b", "c"}), {"a": "E assert 1 == 2", "d": "x"}, 4)
    assert build.judge(ok, base, 5) == ["a"]
    assert build.judge(Results(frozenset({"a", "b", "c"}), {}, 4), base, 5) is None  # nothing fails
    assert build.judge(Results(frozenset({"c"}), {"a": "x", "b": "y"}, 4), base, 1) is None  # too many break
    assert build.judge(Results(frozenset({"b"}), {"a": "x"}, 4, skipped=frozenset({"c"})), base, 5) is None  # c skipped now
    assert build.judge(Results(frozenset({"b", "c"}), {"a": runner.NO_RESULT}, 4), base, 5) is None  # a crash
    assert build.judge(Results(frozenset({"b", "c"}), {"a": "x"}, 3), base, 5) is None  # collection changed
    assert build.judge(Results(frozenset({"b", "c"}), {"a": "x"}, 4, error="timed out"), base, 5) is None
