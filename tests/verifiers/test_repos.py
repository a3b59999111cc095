"""Software-engineering tasks in a repository (``swe-*``): three families over three levels, at
least 200 distinct problems, the reference solution of every family passes in the real sandbox
and wrong changes of each kind fail (the bug left in, a constant body, a rename that keeps an
alias, a move that keeps a copy, edits of the visible tests, hostile programs, two answers);
the environment keeps its state across turns, runs the tests in the sandbox and submits the
final diff."""
from __future__ import annotations

import json
import random

import pytest

from trainer.audit.code_probes import hostile_programs
from trainer.catalogue import all_domains
from trainer.families.swe.catalogue import wrong_transcript
from trainer.families.swe.environment import RepoEnv
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.families.swe.repo_kernels import KERNELS
from trainer.families.swe.repos import FAMILIES, LEVELS, repo_task
from trainer.verifiers.code import extract_code
from trainer.verifiers.patches import apply_patch, tree_diff

DOMAINS = {slug: spec for slug, spec in all_domains().items() if spec.family == "repos"}


def task_of(family: str, seed: int, level: int) -> Task:
    spec = DOMAINS[f"swe-{family}"]
    return spec.source.sample(random.Random(seed), level)


def edited(task: Task, edits: list[dict]) -> str:
    """A transcript: these tool calls, then submit."""
    return "\n".join(json.dumps(e) for e in edits + [{"tool": "submit"}])


def final(task: Task, completion: str) -> dict[str, str]:
    env = RepoEnv()
    env.reset(task)
    for line in completion.splitlines():
        if env.step(line).done:
            break
    return env.tree


@pytest.fixture
def verify(real_sandbox):
    def run(completion: str, task: Task):
        return DOMAINS[task.domain].cascade(real_sandbox)(completion, task)
    return run


def test_three_families_three_levels_and_at_least_200_distinct_problems():
    assert sorted(DOMAINS) == ["swe-bugfix", "swe-feature", "swe-refactor"]
    assert all(spec.source.levels == LEVELS == 3 and spec.environment is not None for spec in DOMAINS.values())
    problems = set()
    for family in FAMILIES:
        for level in range(LEVELS):
            for seed in range(150):
                spec = repo_task(family, seed, level)
                problems.add((family, level, spec.statement.split("\n- ")[0] if family == "refactor" else "",
                              tuple(spec.targets), tuple(sorted(spec.files[p] for p in spec.files if p.endswith(".py")))))
    by_family = {f: sum(1 for p in problems if p[0] == f) for f in FAMILIES}
    assert sum(by_family.values()) >= 200 and min(by_family.values()) >= 60, by_family
    # the level is the difficulty: more modules, a vaguer statement, two changes at the top
    small, large = repo_task("bugfix", 1, 0), repo_task("bugfix", 1, 2)
    assert len(small.files) < len(large.files) and "`" + small.package + "/" in small.statement
    assert len(large.targets) == 2 and "/" not in large.statement.split("Fix")[0].replace("`", "").split("(")[0]


def test_every_planted_bug_is_caught_by_the_hidden_tests_and_not_by_the_visible_ones():
    for family_seed in range(60):
        spec = repo_task("bugfix", family_seed, family_seed % 3)
        for name in spec.targets:
            assert any(name in t for t in spec.hidden)
    for kernel in KERNELS.values():
        assert len(kernel.bugs) == 2 and len(kernel.renames) >= 2
        assert kernel.stub_source().rstrip().endswith("raise NotImplementedError")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("level", range(LEVELS))
def test_reference_passes_and_a_wrong_change_fails_in_the_sandbox(verify, family, level):
    for seed in range(3):
        task = task_of(family, 100 * level + seed, level)
        good = verify(task.answer, task)
        assert good.outcome is Outcome.PASS, (task.id, good.details)
        # the final diff of the reference episode passes too (what a multi-turn episode submits)
        diff = tree_diff(repo_task(family, task.meta["seed"], level).files, final(task, task.answer))
        assert verify(diff, task).outcome is Outcome.PASS
        bad = verify(wrong_transcript(task), task)
        assert bad.outcome is Outcome.FAIL and not bad.is_infrastructure, (task.id, bad.details)


def test_wrong_changes_of_every_kind_fail(verify):
    bug = task_of("bugfix", 5, 2)
    spec = repo_task("bugfix", bug.meta["seed"], 2)
    one_fix = edited(bug, spec.edits[:1])  # two bugs reported, one fixed
    assert verify(one_fix, bug).outcome is Outcome.FAIL
    # the visible tests deleted or rewritten to pass: the hidden ones still judge
    tests = [p for p in spec.files if p.startswith("tests/test_")]
    gutted = edited(bug, [{"tool": "write", "path": p, "content": "import unittest\n"} for p in tests])
    assert verify(gutted, bug).outcome is Outcome.FAIL
    assert verify(edited(bug, []), bug).outcome is Outcome.FAIL  # nothing changed

    feature = task_of("feature", 2, 0)
    fspec = repo_task("feature", feature.meta["seed"], 0)
    kernel = KERNELS[fspec.targets[0]]
    path = next(e["path"] for e in fspec.edits)
    for body in ("return None", "return 0", "return []", "return ''"):
        constant = edited(feature, [dict(fspec.edits[0], new=fspec.edits[0]["old"].replace("raise NotImplementedError", body))])
        assert verify(constant, feature).outcome is Outcome.FAIL, body
    for bug_index in range(len(kernel.bugs)):  # a plausible implementation with a bug in it
        buggy = edited(feature, [dict(fspec.edits[0], new=kernel.bugged_source(bug_index))])
        assert verify(buggy, feature).outcome is Outcome.FAIL, bug_index
    assert path.endswith(".py")


def test_a_refactor_that_keeps_the_old_name_or_a_copy_fails_on_its_shape(verify):
    for seed in range(40):
        task = task_of("refactor", seed, 0)
        spec = repo_task("refactor", task.meta["seed"], 0)
        check = spec.structure[0]
        if check["check"] == "absent":
            new = spec.structure[1]["name"]
            path = spec.structure[1]["path"]
            alias = edited(task, spec.edits + [{"tool": "write", "path": path,
                                                "content": spec.edits[0]["content"] + f"\n{check['name']} = {new}\n"}])
            verdict = verify(alias, task)
            assert verdict.outcome is Outcome.FAIL and "still used" in verdict.details["structure"][0]
        else:
            name, old_path = check["name"], spec.structure[1]["path"]
            copy = edited(task, spec.edits[:1])  # the new module written, the old one untouched
            verdict = verify(copy, task)
            assert verdict.outcome is Outcome.FAIL and any(old_path in s for s in verdict.details["structure"]), name


def test_hostile_programs_in_the_tree_earn_nothing_and_are_never_infrastructure(verify):
    """Every hostile program of the code audit, appended to the module of the function under
    test (a later def wins): forged markers, early exits, patched builtins, reading the tests..."""
    task = task_of("feature", 9, 0)
    spec = repo_task("feature", task.meta["seed"], 0)
    name = spec.targets[0]
    path = spec.edits[0]["path"]
    for attack, completion in hostile_programs(name).items():
        code = extract_code(completion)
        verdict = verify(edited(task, [{"tool": "write", "path": path, "content": spec.files[path] + "\n\n" + code}]), task)
        assert verdict.outcome is not Outcome.PASS and verdict.reward == 0.0, attack
        assert not verdict.is_infrastructure, (attack, verdict.details)


def test_one_change_per_completion_and_a_diff_must_apply(verify):
    task = task_of("bugfix", 3, 0)
    spec = repo_task("bugfix", task.meta["seed"], 0)
    good = tree_diff(spec.files, final(task, task.answer))
    assert verify(f"Here is the fix:\n```diff\n{good}```\n", task).outcome is Outcome.PASS
    two = f"```diff\n{good}```\nor\n```diff\n{good}```"
    assert verify(two, task).outcome is Outcome.PARSE_ERROR
    assert verify(good + '\n{"tool": "submit"}', task).outcome is Outcome.PARSE_ERROR
    assert verify(good.replace("@@ -", "@@ -9", 1), task).outcome is Outcome.PASS  # placed where its lines match, as git does
    mangled = good.replace("\n  ", "\n  zzz", 1)  # a context line the file does not have
    assert verify(mangled, task).outcome is Outcome.PARSE_ERROR
    escape = "--- /dev/null\n+++ b/../../etc/owned\n@@ -0,0 +1 @@\n+x\n"
    verdict = verify(escape, task)
    assert verdict.outcome is Outcome.PARSE_ERROR and "invalid path" in verdict.details["error"]
    assert verify("", task).outcome is Outcome.PARSE_ERROR


def test_patches_round_trip_and_apply_with_offsets():
    rng = random.Random(0)
    for seed in range(30):
        spec = repo_task(FAMILIES[seed % 3], seed, seed % 3)
        changed = dict(spec.files)
        for path in rng.sample(sorted(changed), 3):
            lines = changed[path].splitlines(keepends=True)
            if lines:
                lines[rng.randrange(len(lines))] = "# edited\n"
            changed[path] = "".join(lines)
        changed["NEW.md"] = "new"  # no newline at the end
        del changed["pyproject.toml"]
        patch = tree_diff(spec.files, changed)
        assert apply_patch(spec.files, patch) == changed
    # a hunk whose line numbers are off still applies where its lines match
    base = {"m.py": "".join(f"x{i}\n" for i in range(20))}
    patch = tree_diff(base, {"m.py": base["m.py"].replace("x10\n", "y10\n")}).replace("@@ -8,7", "@@ -3,7")
    assert apply_patch(base, patch)["m.py"].count("y10") == 1


def test_the_environment_keeps_state_runs_tests_in_the_sandbox_and_submits_a_diff(real_sandbox):
    task = task_of("feature", 4, 1)
    spec = repo_task("feature", task.meta["seed"], 1)
    env = RepoEnv()
    env.bind(real_sandbox)
    env.reset(task)
    path = spec.edits[0]["path"]
    module = path.split("/")[1][:-3]
    first = env.step(json.dumps({"tool": "run_tests"})).observation
    assert "NotImplementedError" in first and "FAILED" in first  # the stub's visible test fails
    assert env.step(json.dumps(spec.edits[0])).observation.startswith("replaced 1")
    assert spec.targets[0] in env.step(json.dumps({"tool": "read", "path": path})).observation
    assert env.step(json.dumps({"tool": "git_status"})).observation == f" M {path}"
    assert "raise NotImplementedError" in env.step(json.dumps({"tool": "git_diff"})).observation
    after = env.step(json.dumps({"tool": "run_tests", "pattern": f"test_{module}.py"})).observation
    assert "OK" in after and "exit 0" in after
    assert env.step(json.dumps({"tool": "git_commit", "message": "Implement it"})).observation.startswith("[main 0000001]")
    assert env.step(json.dumps({"tool": "git_diff"})).observation == "(no changes since the last commit)"
    assert env.step(json.dumps({"tool": "git_log"})).observation.splitlines() == ["0000001 Implement it", "0000000 initial commit"]
    # a test run that never ends is the turn's timeout, not a crash of the episode
    loop = env.step(json.dumps({"tool": "write", "path": "tests/test_zloop.py", "content": "while True:\n    pass\n"}))
    assert not loop.done
    hung = env.step(json.dumps({"tool": "run_tests"})).observation
    assert "timeout" in hung
    assert env.step(json.dumps({"tool": "delete", "path": "tests/test_zloop.py"})).observation == "deleted tests/test_zloop.py"
    for bad in ({"tool": "write", "path": "../x", "content": ""}, {"tool": "read", "path": "/etc/passwd"},
                {"tool": "write", "path": ".git/config", "content": ""}, {"tool": "replace", "path": path, "old": "def ", "new": "x"}):
        assert env.step(json.dumps(bad)).observation.startswith("error:"), bad
    result = env.step('{"tool": "submit"}')
    assert result.done and result.outcome is None
    assert env.submission() == tree_diff(spec.files, env.tree) and f"+++ b/{path}" in env.submission()
    assert env.summary()["test_runs"] == 3 and env.summary()["commits"] == 1


def test_a_multi_turn_episode_submits_its_diff_for_the_domains_verifier():
    """The trainer's runner: an environment that leaves the verdict to its domain makes the
    trajectory's completion its submission, unverified, with the turns kept."""
    from trainer.episodes import multi_turn
    from trainer.rollout.base import Generation

    task = task_of("bugfix", 8, 0)
    calls = task.answer.splitlines()

    class Tokenizer:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) % 97 for c in text[:50]]}

        def decode(self, ids, skip_special_tokens=True):
            return calls[ids[0]]

    class Engine:
        def __init__(self):
            self.turn = 0

        def generate(self, contexts, params):
            out = [Generation(token_ids=[self.turn], logprobs=[-0.1], text=calls[self.turn], finished=True) for _ in contexts]
            self.turn += 1
            return out

    trajs = multi_turn(Engine(), Tokenizer(), [(task, 1, 0)], None, lambda t: RepoEnv(), max_turns=20,
                       max_episode_tokens=10_000, max_prompt_tokens=100)
    traj = trajs[0]
    assert traj.verification is None and traj.turns == len(calls)
    assert traj.completion.startswith("diff --git a/")
    roles = [x["role"] for x in traj.transcript]
    assert roles[:2] == ["model", "tool"] and roles.count("model") == len(calls)


def test_refactor_shape_cannot_be_hidden_from_the_checks(verify):
    """An alias or a copy reached by strings, kept inside a block, or hidden behind a source
    encoding the checks do not read, and a file that does not parse: each fails."""
    for seed in range(30):
        task = task_of("refactor", seed, 0)
        spec = repo_task("refactor", task.meta["seed"], 0)
        first = spec.structure[0]
        files = dict(final(task, task.answer))
        if first["check"] == "absent":
            old, new, path = first["name"], spec.structure[1]["name"], spec.structure[1]["path"]
            tricks = {"string alias": files[path] + f"\nglobals()[{old!r}] = {new}\n",
                      "setattr alias": files[path] + f"\nimport sys\nsetattr(sys.modules[__name__], '{old[:2]}' + '{old[2:]}', {new})\n",
                      "exec alias": files[path] + f"\nexec('{old[:2]}' + '{old[2:]} = {new}')\n"}
        else:
            name, old_path = first["name"], spec.structure[1]["path"]
            copy = KERNELS[name].source.replace("\n", "\n    ")
            tricks = {"copy in a block": files[old_path] + f"\nif True:\n    {copy}\n",
                      "copy as a lambda": files[old_path] + f"\n{name} = lambda *a: None\n",
                      "copy by exec": files[old_path] + f"\nexec({KERNELS[name].source!r})\n"}
            path = old_path
        tricks["does not parse"] = files[path] + "\ndef (:\n"
        for trick, text in tricks.items():
            changed = tree_diff(repo_task("refactor", task.meta["seed"], 0).files, {**files, path: text})
            verdict = verify(changed, task)
            assert verdict.outcome is Outcome.FAIL and verdict.reward == 0.0, (seed, trick, verdict.details)
        utf7 = tree_diff(spec.files, {**files, path: "# coding: utf-7\n" + files[path]})
        verdict = verify(utf7, task)
        assert verdict.outcome is Outcome.PARSE_ERROR and "utf-7" in verdict.details["error"]


def test_hostile_patches_diffs_and_fences_cost_a_bounded_amount_of_work():
    from trainer.verifiers.patches import MAX_DIFF_WORK, PatchError, _Budget
    from trainer.families.swe.verifier import final_tree

    task = task_of("bugfix", 1, 0)
    spec = repo_task("bugfix", task.meta["seed"], 0)
    # a file of alternating lines, then thousands of context-only hunks that match only far away
    big = "".join("A\n" if i == 0 else "B\n" if i == 99_999 else "\n" for i in range(100_000))
    patch = tree_diff(spec.files, {**spec.files, "big.py": big})
    patch += "".join(f"--- a/big.py\n+++ b/big.py\n@@ -1 +1 @@\n {'A' if i % 2 else 'B'}\n" for i in range(2_000))
    tree, why = final_tree(patch, task, spec)
    assert tree is None and "too long" in why
    with pytest.raises(PatchError):
        apply_patch({"f": big}, "".join(f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n {'A' if i % 2 else 'B'}\n" for i in range(2_000)))
    assert _Budget(10).left == 10
    # a diff too large for difflib is written as one block, and applies
    lines = [f"{i:03x}\n" for i in range(2_500)]
    shuffled = lines[1250:] + lines[:1250]
    assert len(lines) * len(shuffled) > MAX_DIFF_WORK
    diff = tree_diff({"x.py": "".join(lines)}, {"x.py": "".join(shuffled)})
    assert diff.count("@@ -") == 1 and apply_patch({"x.py": "".join(lines)}, diff) == {"x.py": "".join(shuffled)}
    # thousands of unclosed fences: no answer, found in one pass
    assert final_tree("```diff" * 70_000, task, spec) == (None, "no change: neither a unified diff nor tool calls")
    assert final_tree("x" * 600_000, task, spec)[0] is None


def test_trajectories_pickled_before_transcripts_existed_load_and_a_replay_names_the_right_stage():
    import pickle

    from trainer.episodes import Trajectory
    from trainer.environments.replay import environment_replay

    old = Trajectory(task=Task("d", "1", "p"), group=0, prompt_ids=[1])
    del old.__dict__["transcript"]  # as a checkpoint written before the field holds it
    assert pickle.loads(pickle.dumps(old)).transcript == []
    task = task_of("bugfix", 1, 0)
    verdict = environment_replay(task.answer, task, env="repo")
    assert verdict.outcome is Outcome.FAIL and "repo_tests" in verdict.details["error"]
