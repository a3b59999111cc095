"""The repository at the end of a ``shell-git`` episode: read out of the sandbox as a git bundle,
carried in the submission beside the working tree's diff, and inspected in a fresh sandbox.

**Read-back** (:func:`read_state`, the environment's last step, before the tree is read): a
trusted ``git bundle create - HEAD --branches`` run in the episode's sandbox as an argv (the
session's ``read``: its first environment, not the shell's state), with no system or global
configuration, replace refs ignored, hooks pointed at /dev/null and no fsmonitor, its output
bounded by :data:`MAX_BUNDLE_BYTES`. Nothing else of ``.git`` leaves the sandbox: not its
configuration, hooks, info/grafts, alternates or attributes. The sandbox is the candidate's, so
its ``.git`` (a symbolic link, a config that runs a program) can shape what comes out; what
comes out is therefore only data, a bundle that the verifier checks like any other input.

**The submission** is the diff, then :data:`MARK` and the bundle in base64 (:func:`trailer`), or
:data:`MARK` and why there is none (no repository, a bundle over the bound). A diff never holds a
line that starts with ``#`` (file lines start with a space, ``+`` or ``-``, and a file name that
could start a line is left out of the diff), so the first such line is the trailer's.

**The inspection** (:func:`inspect`): in a fresh sandbox, :data:`CHECK_SCRIPT` makes an empty bare
repository with no configuration of the candidate's, fetches only the bundle's ``HEAD`` and
``refs/heads/main`` into refs of its own (a bundle whose objects are missing, truncated, forged,
or that needs commits it does not carry, fails to fetch), runs ``git fsck --strict``, and
reports facts as JSON: the commits HEAD and main name, main's parents, whether the task's own
last commit of main is an ancestor of main, and the files of main's tree that the task checks.
Commit ids are what the verdict compares (:mod:`~trainer.families.shell.gitobjects` computes the
task's own), so a history rebuilt to look the same, a ``git replace`` or a graft (neither
travels in a bundle) shows as what it is.

>>> diff, bundle, why = split("--- a/x\\n" + trailer(b"# v2 git bundle\\n"))
>>> diff, bundle, why
('--- a/x\\n', b'# v2 git bundle\\n', '')
>>> split(unreadable("no repository"))
('', None, 'no repository')
>>> split("--- a/x\\n")[2]
'the submission carries no repository'
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Callable

from trainer.outcomes import Outcome, Verification

MAX_BUNDLE_BYTES = 256 << 10
"""Largest bundle read back (a task's repository is 3 to 20 KiB)."""
MAX_FILE_BYTES = 64 << 10
"""Largest file of main's tree the inspection reports."""
MARK = "# git bundle"
"""Starts the submission's trailer line."""
_HEAD = re.compile(r"# git bundle \((\d+) bytes, base64\)")
_NONE = re.compile(r"# git bundle: none \((.*)\)")
GIT_ENV = ["GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_NO_REPLACE_OBJECTS=1", "GIT_OPTIONAL_LOCKS=0"]
READ_COMMAND = ["env", *GIT_ENV, "git", "--git-dir=/work/.git", "-c", "core.fsmonitor=false", "-c",
                "core.hooksPath=/dev/null", "bundle", "create", "--quiet", "-", "HEAD", "--branches"]
"""The read-back, run in the episode's sandbox (see the module docstring)."""


def trailer(bundle: bytes) -> str:
    """The submission's trailer carrying ``bundle``."""
    data = base64.b64encode(bundle).decode()
    return f"{MARK} ({len(bundle)} bytes, base64)\n" + "".join(data[i:i + 76] + "\n" for i in range(0, len(data), 76))


def unreadable(why: str) -> str:
    """The trailer saying why no bundle came out (one line of printable text)."""
    return f"{MARK}: none ({re.sub(r'[^ -~]', ' ', why)[:300]})\n"


def split(completion: str) -> tuple[str, bytes | None, str]:
    """(the diff, the bundle or None, why there is none) of a submission."""
    if completion.startswith(MARK):
        at = 0
    elif (at := completion.find("\n" + MARK) + 1) == 0:
        return completion, None, "the submission carries no repository"
    diff, rest = completion[:at], completion[at:]
    head, _, body = rest.partition("\n")
    if (none := _NONE.fullmatch(head)) is not None:
        return diff, None, none[1]
    if (sized := _HEAD.fullmatch(head)) is None:
        return diff, None, "the repository's trailer is malformed"
    if len(body) > 2 * MAX_BUNDLE_BYTES:
        return diff, None, f"the bundle is over {MAX_BUNDLE_BYTES} bytes"
    try:
        bundle = base64.b64decode("".join(body.split()), validate=True)
    except (binascii.Error, ValueError):
        return diff, None, "the bundle is not base64"
    if len(bundle) > MAX_BUNDLE_BYTES:
        return diff, None, f"the bundle has {len(bundle)} bytes, over {MAX_BUNDLE_BYTES}"
    if len(bundle) != int(sized[1]):
        return diff, None, f"the bundle has {len(bundle)} bytes, not the {sized[1]} its trailer states"
    return diff, bundle, ""


def read_state(session: Any) -> str:
    """The trailer of the episode's repository, read by trusted code at the end (see the module
    docstring); the ``none`` trailer when it cannot be read."""
    try:
        verdict = session.read(READ_COMMAND, MAX_BUNDLE_BYTES)
    except Exception as exc:  # a broken or closed session: the episode's, as an unreadable tree is
        return unreadable(f"the repository could not be read: {exc}")
    if verdict.status == "output_limit":
        return unreadable(f"the repository's bundle is over {MAX_BUNDLE_BYTES} bytes")
    if verdict.status != "ok" or verdict.exit_code != 0:
        stderr = verdict.stderr.decode("utf-8", "replace").strip().splitlines()
        return unreadable(f"git bundle create failed ({verdict.status}, exit {verdict.exit_code}): "
                          + (stderr[-1] if stderr else ""))
    return trailer(verdict.stdout)


CHECK_SCRIPT = r'''
import base64, json, subprocess, sys
want = json.loads(sys.argv[1])
env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LC_ALL": "C", "GIT_DIR": "/tmp/check.git", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0"}
def git(*args):
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "fetch.fsckObjects=true", *args],
                          env=env, capture_output=True)
def done(**facts):
    print(json.dumps(facts))
    sys.exit(0)
def refused(what, result):
    done(error=what + ": " + result.stderr.decode("utf-8", "replace").strip()[-300:])
if git("init", "-q", "--bare", "/tmp/check.git").returncode:
    done(infrastructure="git init failed")
heads = git("bundle", "list-heads", "candidate.bundle")
if heads.returncode:
    refused("git cannot read the bundle", heads)
names = {line.partition(b" ")[2] for line in heads.stdout.splitlines()}
specs = ["+%s:refs/check/%s" % (name, name.rpartition("/")[2]) for name in ("HEAD", "refs/heads/main") if name.encode() in names]
if specs:
    fetched = git("fetch", "-q", "--no-tags", "--no-write-fetch-head", "candidate.bundle", *specs)
    if fetched.returncode:
        refused("the bundle does not unbundle", fetched)
    checked = git("fsck", "--strict", "--no-dangling", "--no-progress")
    if checked.returncode:
        refused("the bundle's objects are broken", checked)
def commit(ref):
    found = git("rev-parse", "-q", "--verify", ref + "^{commit}")
    return found.stdout.decode().strip() if found.returncode == 0 else None
main = commit("refs/check/main")
facts = {"head": commit("refs/check/HEAD"), "main": main, "parents": [], "descends": False, "files": {}}
if main:
    facts["parents"] = git("rev-list", "--parents", "-n", "1", main).stdout.decode().split()[1:]
    facts["descends"] = git("merge-base", "--is-ancestor", want["base"], main).returncode == 0
    for path in want["paths"]:
        kind, size = git("cat-file", "-t", main + ":" + path), git("cat-file", "-s", main + ":" + path)
        if kind.stdout.strip() == b"blob" and int(size.stdout or 0) <= want["max_bytes"]:
            blob = git("cat-file", "blob", main + ":" + path).stdout
            facts["files"][path] = base64.b64encode(blob).decode()
done(**facts)
'''
"""The inspection, run by the sandbox's python3 in a fresh sandbox (see the module docstring)."""


def inspect(bundle: bytes, paths: list[str], base: str, run: Callable[[dict, list[str]], Any]) -> dict[str, Any] | Verification:
    """The facts :data:`CHECK_SCRIPT` reports on ``bundle`` (``paths``: main's files to report,
    ``base``: the commit main must descend from), or the failed Verification: ``sandbox_error``
    when the sandbox failed (masked), a failure the candidate earns for anything else (a bundle
    that breaks git's limits is the candidate's, as a program that does is)."""
    want = json.dumps({"paths": paths, "base": base, "max_bytes": MAX_FILE_BYTES})
    verdict = run({"candidate.bundle": bundle}, ["python3", "-I", "-c", CHECK_SCRIPT, want])
    if isinstance(verdict, Verification):
        return verdict
    status = str(getattr(verdict.status, "value", verdict.status))
    if status == "sandbox_error":
        return Verification.failed(Outcome.SANDBOX_ERROR, error=str(verdict.error)[:500])
    try:
        if status != "ok" or verdict.exit_code != 0:
            raise ValueError(f"{status} (exit {verdict.exit_code})")
        facts = json.loads(verdict.stdout)
        if "infrastructure" in facts:
            return Verification.failed(Outcome.SANDBOX_ERROR, error=str(facts["infrastructure"]))
        if "error" in facts:
            return Verification.failed(error=f"the repository could not be read back: {facts['error']}"[:500])
        facts["files"] = {p: base64.b64decode(facts["files"][p]).decode("utf-8", "replace") for p in paths
                          if p in facts["files"]}
    except (ValueError, TypeError, KeyError) as exc:
        return Verification.failed(error=f"the repository's inspection did not finish: {exc}"[:500])
    return facts
