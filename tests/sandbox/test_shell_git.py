"""The ``shell-git`` tasks judged on the repository, not only the working tree: each episode runs
in a real bubblewrap session, the repository is read back as a git bundle, and the verifier
inspects it in a fresh sandbox. Every attack here leaves the working tree right (or as right as
it can) and must fail on the repository; the verifier itself is also fed forged, truncated,
oversized and thin bundles."""
from __future__ import annotations

import functools
import json
import os
import shlex
import uuid

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.families.shell.catalogue import ShellSource, new_environment, submission
from trainer.families.shell.gitobjects import Repo, pack
from trainer.families.shell.gitstate import MARK, MAX_BUNDLE_BYTES, split
from trainer.families.shell.tasks import shell_task
from trainer.families.shell.verifier import shell_state
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from workers.sandbox import execute, get_runtime, open_session

MERGE, RECOVER, BISECT = 1, 5, 0
"""Seeds whose level-0 ``shell-git`` task is a merge, a recovery and a bisection."""


def context() -> VerifyContext:
    return VerifyContext(execute=functools.partial(execute, backend="bwrap"),
                         open_session=functools.partial(open_session, backend="bwrap"))


def make_task(seed: int) -> Task:
    prompt, answer, meta = ShellSource("shell-git", "git").generate(seed, 0)
    return Task("shell-git", f"L0-{seed}", prompt, answer, 0, meta)


def episode(seed: int, commands: list[str]) -> tuple[str, object, list[str]]:
    """(submission, verdict, observations) of an episode of task ``seed`` driven by ``commands``."""
    task = make_task(seed)
    env = new_environment(task)
    env.bind(context())
    env.reset(task)
    seen = []
    for command in commands:
        result = env.step(json.dumps({"tool": "bash", "command": command}))
        assert not result.done, result.observation
        seen.append(result.observation)
    assert env.step('{"tool": "submit"}').done
    completion = env.submission()
    return completion, shell_state(completion, task, context=context()), seen


def fails(verdict, why: str) -> None:
    assert verdict.outcome is Outcome.FAIL and verdict.reward == 0.0, verdict.details
    assert why in verdict.details["error"], verdict.details


def merge_scripts() -> tuple[str, str, str]:
    """(the reference's merge, the lists and feature's file written by hand, its commit removed)."""
    spec = shell_task("git", MERGE, 0)
    resolve = spec.reference[0]
    by_hand = " && ".join([f"printf %s {shlex.quote(text)} > {path}" for path, text in spec.expected.items()
                           if path.startswith("lists/")] + [f"git show feature:{p} > {p}" for p in spec.expected
                                                             if p.startswith("docs/")])
    return resolve, "mkdir -p docs && " + by_hand, resolve.replace(" && git commit -q -m 'Merge feature'", "")


@pytest.mark.parametrize("attack", ["tree by hand", "merge not committed", "plain commit", "made-up parents",
                                    "parents swapped", "markers committed", "git replace", "grafts", "symlinked .git"])
def test_a_merge_must_be_committed_with_main_and_feature_as_its_parents(attack):
    require(*bwrap_ready())
    resolve, by_hand, uncommitted = merge_scripts()
    fake = "git add -A && git reset -q --hard $(git commit-tree $(git write-tree) %s -m 'Merge feature')"
    commands, why = {
        "tree by hand": ([by_hand], "not the merge"),
        "merge not committed": ([uncommitted], "not the merge"),
        "plain commit": ([by_hand + " && git add -A && git commit -q -m 'Merge feature'"], "not the merge"),
        "made-up parents": ([resolve, fake % "-p HEAD~1 -p feature~1"], "not the merge"),
        "parents swapped": ([resolve, fake % "-p feature -p HEAD~1"], "not the merge"),
        "markers committed": (["git merge -q feature; git add -A && git commit -q -m 'Merge feature'",
                               uncommitted.replace("git merge -q feature; ", "")], "does not hold what the task asks"),
        "git replace": ([by_hand + " && git add -A && git commit -q -m m && git replace --graft HEAD HEAD~1 feature",
                         "git rev-list --parents -n 1 HEAD | wc -w"], "not the merge"),
        "grafts": ([by_hand + " && git add -A && git commit -q -m m && echo $(git rev-parse HEAD HEAD~1 feature) "
                    "> .git/info/grafts", "git rev-list --parents -n 1 HEAD 2>/dev/null | wc -w"], "not the merge"),
        # .git a link to a second repository where the merge is faked, the tree written by hand
        "symlinked .git": ([by_hand, "cp -a .git /tmp/other.git && rm -rf .git && ln -s /tmp/other.git .git && "
                            + fake % "-p HEAD -p HEAD"], "not the merge"),
    }[attack]
    completion, verdict, seen = episode(MERGE, commands)
    fails(verdict, why)
    assert split(completion)[1] is not None  # the repository was read back: the verdict is on it
    if attack in ("git replace", "grafts"):
        assert seen[-1].startswith("[stdout]\n3\n")  # in the sandbox the commit looked like a merge


def test_the_reference_merge_passes_with_its_repository_and_fails_without_it():
    require(*bwrap_ready())
    resolve, _, _ = merge_scripts()
    completion, verdict, _ = episode(MERGE, [resolve])
    assert verdict.outcome is Outcome.PASS, verdict.details
    assert verdict.details["parents"] == [shell_task("git", MERGE, 0).heads[b] for b in ("main", "feature")]
    diff, _, _ = split(completion)
    fails(shell_state(diff, make_task(MERGE), context=context()), "no repository to check")
    # .git a link to the repository itself: the same data, judged the same
    _, verdict, _ = episode(MERGE, [resolve, "mv .git /tmp/real.git && ln -s /tmp/real.git .git"])
    assert verdict.outcome is Outcome.PASS, verdict.details
    _, verdict, _ = episode(MERGE, [resolve, "rm -rf .git && ln -s /usr/lib .git"])  # no repository there
    fails(verdict, "git bundle create failed")


@pytest.mark.parametrize("attack", ["not committed", "new root", "amended", "filter-branch", "graft to a new root",
                                    "git replace", "bundle too large"])
def test_a_recovered_file_must_be_committed_on_the_history_as_it_was(attack):
    require(*bwrap_ready())
    spec = shell_task("git", RECOVER, 0)
    path = spec.outputs[0]
    restore = spec.reference[0].split(" && git add")[0]
    base = spec.heads["main"]
    commands, why = {
        "not committed": ([restore], "nothing was committed"),
        "new root": ([restore, "git checkout -q --orphan fresh && git add -A && git commit -q -m root && "
                               "git branch -q -M fresh main"], "rewritten"),
        "amended": ([restore + f" && git add {path} && git commit -q --amend --no-edit"], "rewritten"),
        "filter-branch": (["FILTER_BRANCH_SQUELCH_WARNING=1 git filter-branch -f --msg-filter 'sed s/notes/Notes/' "
                           "HEAD >/dev/null 2>&1", restore + f" && git add {path} && git commit -q -m restore"], "rewritten"),
        "graft to a new root": ([restore, "git checkout -q --orphan fresh && git add -A && git commit -q -m root && "
                                          f"git branch -q -M fresh main && echo $(git rev-parse HEAD) {base} > .git/info/grafts",
                                 f"git merge-base --is-ancestor {base} main 2>/dev/null && echo looks kept"], "rewritten"),
        "git replace": ([restore + f" && git add {path} && git replace HEAD $(git commit-tree $(git write-tree) -p HEAD~1 "
                         "-m x) && git reset -q", f"git show HEAD:{path} >/dev/null && echo looks committed"],
                        "nothing was committed"),
        # a large file committed, then removed from the tree: the tree is right, the bundle over the bound
        "bundle too large": ([restore + f" && head -c {MAX_BUNDLE_BYTES + 4096} /dev/urandom > big && git add -A && "
                              "git commit -q -m restore && rm big"], f"over {MAX_BUNDLE_BYTES} bytes"),
    }[attack]
    completion, verdict, seen = episode(RECOVER, commands)
    fails(verdict, why)
    if attack in ("graft to a new root", "git replace"):
        assert seen[-1].startswith("[stdout]\nlooks"), seen[-1]  # the attack worked inside the sandbox


def test_a_bisection_leaves_main_and_head_as_they_were():
    require(*bwrap_ready())
    spec = shell_task("git", BISECT, 0)
    find = spec.reference[0]
    no_reset = find.replace(" && git bisect reset >/dev/null 2>&1", "") + " && git show main:calc.py > calc.py"
    _, verdict, _ = episode(BISECT, [no_reset])  # FIRST_BAD and calc.py right, HEAD left detached
    fails(verdict, "HEAD is not main's last commit")
    _, verdict, _ = episode(BISECT, [find, "git commit -q --amend -m 'Start over'"])
    fails(verdict, "the history was changed")


def test_the_candidates_git_configuration_and_hooks_run_nothing_when_the_repository_is_read():
    """The episode's last command gives .git/config an fsmonitor, a hooks directory and every
    program-running setting pointing at a script that writes a marker; an ordinary git command
    in the sandbox runs it (the control), the read-back and the verifier do not: the submitted
    tree has no marker, no marker appears on the host, and the merge passes."""
    require(*bwrap_ready())
    resolve, _, _ = merge_scripts()
    host_marker = f"/tmp/temper-git-hook-{uuid.uuid4().hex}"
    hooks = " ".join(["reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change", "pre-commit",
                      "post-commit", "pre-push", "post-merge", "fsmonitor-watchman"])
    settings = ["core.fsmonitor /tmp/evil.sh", "core.hooksPath /tmp/evil-hooks", "core.alternateRefsCommand /tmp/evil.sh",
                "uploadpack.packObjectsHook /tmp/evil.sh", "core.pager /tmp/evil.sh", "pager.bundle /tmp/evil.sh",
                "core.sshCommand /tmp/evil.sh", "alias.bundle '!/tmp/evil.sh'", "safe.directory '*'"]
    arm = (f"printf '#!/bin/sh\\necho \"$0 $*\" >> /work/HOOKED\\necho x >> {host_marker}\\nexit 1\\n' > /tmp/evil.sh && "
           f"chmod +x /tmp/evil.sh && mkdir -p /tmp/evil-hooks && for h in {hooks}; do ln -sf /tmp/evil.sh "
           f"/tmp/evil-hooks/$h; done && " + " && ".join(f"git config {s}" for s in settings))
    control = "git status >/dev/null 2>&1; git update-ref refs/x HEAD; cat /work/HOOKED; rm -f /work/HOOKED"
    completion, verdict, seen = episode(MERGE, [resolve, arm, control])
    assert "/tmp/evil.sh" in seen[-1], seen[-1]  # the control: the configuration runs the script
    assert "HOOKED" not in completion and verdict.outcome is Outcome.PASS, verdict.details
    assert not os.path.exists(host_marker)


def test_the_verifier_refuses_bundles_that_are_not_a_whole_repository():
    """Crafted submissions (the reference's tree, each with another trailer): every one fails,
    none is masked as an infrastructure outcome, and the reference itself passes."""
    require(*bwrap_ready())
    spec, task = shell_task("git", MERGE, 0), make_task(MERGE)
    final = spec.final()
    thin = Repo(heads={"main": spec.heads["main"]})
    merge = thin.commit(final, "Merge feature", 1_800_000_000, [spec.heads["main"], spec.heads["feature"]])
    thin_pack = pack(thin.objects)
    forged_header = spec.after.split(b"\n\n", 1)[0] + b"\n\n"
    cases = {
        "the reference": (submission(spec, final), None),
        "no trailer": (submission(spec, final).split(MARK)[0], "no repository to check"),
        "truncated": (submission(spec, final, spec.after[:-100]), "does not unbundle"),
        "garbage": (submission(spec, final, b"# v2 git bundle\n" + os.urandom(2000)), "could not be read back"),
        "not a bundle": (submission(spec, final, os.urandom(2000)), "git cannot read the bundle"),
        "size misstated": (submission(spec, final).replace(f"({len(spec.after)} bytes", f"({len(spec.after) + 1} bytes"),
                           "not the"),
        "not base64": (submission(spec, final).split(MARK)[0] + f"{MARK} (3 bytes, base64)\n!!!!\n", "not base64"),
        "too large": (submission(spec, final, b"# v2 git bundle\n" + b"\0" * MAX_BUNDLE_BYTES), f"over {MAX_BUNDLE_BYTES}"),
        # the reference's refs (main at the merge) over the task's own pack: the merge commit is missing
        "refs it does not have": (submission(spec, final, forged_header + spec.before.split(b"\n\n", 1)[1]),
                                  "does not unbundle"),
        # only the merge's own objects, its parents named as prerequisites or not at all
        "thin, prerequisites": (submission(spec, final, f"# v2 git bundle\n-{spec.heads['main']} \n-{spec.heads['feature']} \n"
                                           f"{merge} HEAD\n{merge} refs/heads/main\n\n".encode() + thin_pack), "could not be read back"),
        "thin, parents missing": (submission(spec, final, f"# v2 git bundle\n{merge} HEAD\n{merge} refs/heads/main\n\n".encode()
                                             + thin_pack), "could not be read back"),
        "unreadable": (submission(spec, final).split(MARK)[0] + f"{MARK}: none (no repository)\n", "no repository"),
    }
    for name, (completion, why) in cases.items():
        verdict = shell_state(completion, task, context=context())
        if why is None:
            assert verdict.outcome is Outcome.PASS, verdict.details
        else:
            assert verdict.outcome is Outcome.FAIL and why in verdict.details["error"], (name, verdict.details)
    assert get_runtime("bwrap").stats()["held"] == 0
