"""The ``swe-pkg-*`` domains' task source and episode environment (:mod:`trainer.families.pkgs.catalogue`,
:mod:`trainer.families.pkgs.environment`), on real bubblewrap sessions: the session starts in the
task's starting tree committed ONCE in git (no commit, branch, tag, reflog entry or stash holds
the fix), the package's suite runs with ``python3 -m pytest``, and the submission is exactly the
diff of what the episode changed (caches left out); the reference's episode passes ``pkg_tests``.
The session limits fit the largest package: its whole suite runs in one command and its final
tree is read back."""
from __future__ import annotations

import functools
import hashlib
import json
import random
import shlex

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.families.pkgs import tasks
from trainer.families.pkgs.catalogue import LEVELS, SESSION_LIMITS, PkgSource, make_task, new_environment
from trainer.families.pkgs.environment import TREE_BYTES, starting_files, task_record
from trainer.families.pkgs.pins import PINS, source_tree
from trainer.families.pkgs.verifier import pkg_tests
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.patches import apply_patch
from workers.sandbox import execute, get_runtime, open_session


def context() -> VerifyContext:
    return VerifyContext(execute=execute, open_session=functools.partial(open_session, backend="bwrap"))


def bash(env, command: str) -> str:
    result = env.step(json.dumps({"tool": "bash", "command": command}))
    assert not result.done, result.observation
    return result.observation


@functools.lru_cache(maxsize=None)
def small_task() -> Task:
    """A level-1 task of the package with the smallest tree (a quick suite)."""
    name = min(tasks.package_names(), key=lambda n: sum(map(len, source_tree(n).values())))
    record = next(r for n, r in tasks.all_tasks(1) if n == name)
    return make_task("swe-pkg-named", name, record)


def test_the_sources_draw_seeded_tasks_of_their_level_whose_answer_undoes_the_mutation():
    for slug, level in LEVELS.items():
        source = PkgSource(slug, level)
        drawn = [source.sample(random.Random(seed)) for seed in range(6)]
        again = [source.sample(random.Random(seed)) for seed in range(6)]
        assert [(t.id, t.prompt, t.answer) for t in drawn] == [(t.id, t.prompt, t.answer) for t in again]
        assert len({t.id for t in drawn}) > 1
        for task in drawn[:2]:
            package = task.meta["package"]
            record = task_record(package, task.id)
            assert task.domain == slug and record["level"] == level == task.meta["level"]
            assert task.meta["package"] == package and task.meta["version"] == PINS[package].version
            assert "files" not in task.meta and task.meta["environment"] == "shell"
            assert record["prompt"] in task.prompt and "python3 -m pytest" in task.prompt
            start = starting_files(task)
            fixed = apply_patch(start, task.answer)  # the reference: the sdist's own files back
            original = source_tree(package)
            assert {p: fixed[p] for p in record["files"]} == {p: original[p] for p in record["files"]}
            assert all(start[p] != original[p] for p in record["files"][:1])


@pytest.fixture
def session_of():
    """Opens a task's episode on real bubblewrap; every session is given back at the end."""
    envs = []

    def open_episode(task: Task):
        require(*bwrap_ready())
        env = new_environment(task)
        env.bind(context())
        env.reset(task)
        envs.append(env)
        assert env.failure is None, env.failure
        return env

    yield open_episode
    for env in envs:
        env.close()
    assert get_runtime("bwrap").stats()["held"] == 0


def test_the_session_holds_one_commit_of_the_starting_tree_and_nothing_of_the_fix(session_of):
    task = small_task()
    package = task.meta["package"]
    record = task_record(package, task.id)
    env = session_of(task)
    head = bash(env, "git rev-parse HEAD").split()[1]
    assert bash(env, "git log --all --format='%H %s'") == f"[stdout]\n{head} {package} {PINS[package].version}\n[exit status 0]"
    assert bash(env, "git for-each-ref --format='%(refname) %(objectname)'") == f"[stdout]\nrefs/heads/main {head}\n[exit status 0]"
    assert bash(env, "git reflog --all --format=%H") == f"[stdout]\n{head}\n{head}\n[exit status 0]"  # HEAD's and main's one entry
    assert bash(env, "git stash list; git tag; git rev-list --all --reflog --count") == "[stdout]\n1\n[exit status 0]"
    assert bash(env, "git fsck --unreachable --no-reflogs --dangling 2>&1; git status --porcelain") == "[exit status 0]"
    start, original = starting_files(task), source_tree(package)
    for path in record["files"]:  # the mutant is what is committed; no object holds the original's lines
        assert bash(env, f"git show HEAD:{path} | sha1sum") == bash(env, f"sha1sum < {path}")
        assert bash(env, f"sha1sum < {path}").split()[1] == hashlib.sha1(start[path].encode()).hexdigest()
    for path in record["files"]:  # the original file (the fix) is no object of the repository
        data = original[path].encode()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert bash(env, f"git cat-file -e {blob} 2>/dev/null && echo held || echo absent") == "[stdout]\nabsent\n[exit status 0]"
        data = start[path].encode()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # the control: the mutant's is
        assert bash(env, f"git cat-file -e {blob} 2>/dev/null && echo held || echo absent") == "[stdout]\nheld\n[exit status 0]"


def test_pytest_runs_the_suite_and_the_submission_is_what_the_episode_changed(session_of):
    task = small_task()
    record = task_record(task.meta["package"], task.id)
    env = session_of(task)
    failing = " ".join(shlex.quote(node) for node in record["f2p"][:3])
    assert "[exit status 1]" in bash(env, f"python3 -m pytest -q {failing}")
    tag = "TEMPER_FIX"
    assert "[exit status 0]" in bash(env, f"git apply - <<'{tag}'\n{task.answer}{tag}")
    assert bash(env, f"python3 -m pytest -q {failing}").endswith("[exit status 0]")
    assert bash(env, "git status --porcelain") == "".join(f"[stdout]\n M {p}\n" for p in record["files"]) + "[exit status 0]"
    assert env.step('{"tool": "submit"}').done
    submission = env.submission()
    assert submission == task.answer  # exactly the change: no cache, no .git
    verdict = pkg_tests(submission, task, context=context())
    assert verdict.outcome is Outcome.PASS, verdict.details


def test_new_and_deleted_files_are_in_the_submission_and_caches_are_not(session_of):
    task = small_task()
    record = task_record(task.meta["package"], task.id)
    env = session_of(task)
    path = record["files"][0]
    bash(env, f"rm {path} && echo note > NOTES.txt && mkdir -p x/__pycache__ .pytest_cache "
              "&& echo junk > x/__pycache__/y.pyc && echo junk > z.pyc && echo junk > .pytest_cache/v")
    env.step('{"tool": "submit"}')
    submission = env.submission()
    assert f"diff --git a/{path} b/{path}\ndeleted file mode 100644\n" in submission
    assert "diff --git a/NOTES.txt b/NOTES.txt\nnew file mode 100644\n" in submission
    assert submission.count("diff --git") == 2


def test_the_session_limits_fit_the_largest_package(session_of):
    sizes = {name: sum(len(text.encode()) for text in source_tree(name).values()) for name in tasks.package_names()}
    largest = max(sizes, key=sizes.get)
    assert sizes[largest] * 4 < TREE_BYTES and sizes[largest] * 16 < SESSION_LIMITS["tmpfs_mb"] << 20
    record = next(r for n, r in tasks.all_tasks(None) if n == largest)
    env = session_of(make_task("swe-pkg-named", largest, record))
    observation = bash(env, "python3 -m pytest -q 2>&1 | tail -2")  # the whole suite, the bug in it
    assert " passed" in observation and "[killed" not in observation, observation
    assert env.step('{"tool": "submit"}').done and env.final is not None and env.submission() == ""


@pytest.mark.parametrize("missing", [{"task_id": "nope-1-0", "package": "nope"}, {"task_id": "toolz-9-9", "package": "toolz"}, {}])
def test_a_task_the_build_does_not_hold_is_a_masked_sandbox_error(missing):
    env = new_environment(None)
    env.bind(context())
    env.reset(Task("swe-pkg-named", "x", "Fix it.", meta={"environment": "shell", **missing}))
    result = env.step('{"tool": "submit"}')
    assert result.done and result.outcome.outcome is Outcome.SANDBOX_ERROR and env.session is None
