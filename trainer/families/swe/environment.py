"""Work in a small Python repository through tools, then submit the final tree (``swe-*``).

The repository (:mod:`trainer.families.swe.repos`) is rebuilt from the task's family, seed and level.
The episode's state is the working tree and its commits, held here, by trusted code: reading,
searching and editing are operations on that state, and no code of the policy's runs in this
process. ``run_tests`` ships the current tree to a fresh sandbox job (the context's executor) and
shows the tests' output; the policy's code runs only there. ``submit`` ends the episode; the
verdict is not the environment's: the trajectory's completion becomes the final diff (from the
starting tree), which the domain's ``repo_tests`` stage applies to the starting tree and judges
with the hidden tests in another fresh sandbox (:mod:`trainer.families.swe.verifier`).

Version control is kept the same way: ``git_commit`` records a snapshot of the tree,
``git_diff`` shows the working tree against the last commit in git's format, ``git_status`` and
``git_log`` what git shows. (The ``git`` program is not run: its configuration and attributes
files can run commands, and the state is the trusted side's.)

>>> from trainer.tasks.base import Task
>>> task = Task("swe-bugfix", "x", "...", meta={"environment": "repo", "family": "bugfix", "seed": 7, "level": 0})
>>> env = RepoEnv(); _ = env.reset(task)
>>> env.step('{"tool": "ls", "path": "tests"}').observation
'tests/__init__.py\\ntests/test_seqs.py\\ntests/test_text.py'
>>> env.step('{"tool": "write", "path": "NOTES.md", "content": "todo\\\\n"}').observation
'wrote 5 characters to NOTES.md (new file)'
>>> env.step('{"tool": "git_status"}').observation
'?? NOTES.md'
>>> env.step('{"tool": "run_tests"}').observation[:32]
'error: no sandbox in this proces'
>>> result = env.step('{"tool": "submit"}'); result.done, result.outcome
(True, None)
>>> env.submission().splitlines()[:2]
['diff --git a/NOTES.md b/NOTES.md', 'new file mode 100644']
"""
from __future__ import annotations

import re
from typing import Any

from trainer.environments.base import ActionError, StepResult, ToolEnvironment
from trainer.families.swe.repos import TEST_COMMAND, repo_task
from trainer.outcomes import Verification
from trainer.tasks.base import Task
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.verifiers.limits import Limits
from trainer.verifiers.patches import PatchError, apply_patch, tree_diff

MAX_READ_LINES = 200
MAX_OBSERVATION = 6_000
MAX_FILE_CHARS = 100_000
MAX_FILES = 200
MAX_TREE_CHARS = 1_000_000
TEST_LIMITS = Limits(cpu_s=10.0, wall_s=20.0, memory_mb=512, output_bytes=64 << 10)
"""Limits of one ``run_tests`` job."""
_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*){0,7}")


def check_path(path: Any) -> str:
    """A relative path inside the repository (letters, digits, ``_.-``, at most 8 parts), else ActionError."""
    if not isinstance(path, str) or not _PATH.fullmatch(path) or len(path) > 200 or ".." in path.split("/"):
        raise ActionError(f"invalid path {str(path)[:80]!r}: a relative path such as pkg/module.py")
    if path == ".git" or path.startswith(".git/"):
        raise ActionError(".git is not a file of the repository")
    return path


_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)


def coding_declaration(text: str) -> str | None:
    """The source encoding a Python file declares in its first two lines (PEP 263), if any.

    >>> coding_declaration("# -*- coding: utf-7 -*-\\nx = 1\\n"), coding_declaration("x = 1\\n")
    ('utf-7', None)
    """
    for line in text.split("\n", 2)[:2]:
        if match := _CODING.match(line):
            return match.group(1).lower()
    return None


def check_tree(tree: dict[str, str]) -> None:
    """ActionError when the tree is over the size limits, holds a path that is not allowed, or a
    Python file that declares an encoding other than UTF-8 (the interpreter would read other code
    than the checks read)."""
    for path in tree:
        check_path(path)
    if len(tree) > MAX_FILES:
        raise ActionError(f"the repository would have {len(tree)} files; at most {MAX_FILES}")
    if (size := sum(len(t) for t in tree.values())) > MAX_TREE_CHARS:
        raise ActionError(f"the repository would hold {size} characters; at most {MAX_TREE_CHARS}")
    for path, text in tree.items():
        if len(text) > MAX_FILE_CHARS:
            raise ActionError(f"{path} would have {len(text)} characters; at most {MAX_FILE_CHARS}")
        if path.endswith(".py") and (coding := coding_declaration(text)) not in (None, "utf-8", "utf8", "utf_8"):
            raise ActionError(f"{path} declares the encoding {coding}: Python files here are UTF-8")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OBSERVATION else text[:MAX_OBSERVATION] + f"\n... ({len(text) - MAX_OBSERVATION} more characters)"


class RepoEnv(ToolEnvironment):
    """One episode: the starting tree, the working tree, the commits and the step budget."""

    name = "repo"

    def __init__(self, max_steps: int = 30, context: VerifyContext = NO_CONTEXT) -> None:
        super().__init__(max_steps)
        self.context = context

    def bind(self, context: VerifyContext) -> None:
        """Use ``context``'s sandbox for ``run_tests`` (the trainer passes its own)."""
        self.context = context

    def _start(self, task: Task) -> None:
        meta = task.meta
        self.repo = repo_task(meta["family"], int(meta["seed"]), int(meta["level"]))
        self.base = dict(self.repo.files)
        self.tree = dict(self.base)
        self.commits: list[tuple[str, dict[str, str]]] = [("initial commit", dict(self.base))]
        self.sandbox_s = 0.0
        self.test_runs = 0

    # -- tools --------------------------------------------------------------------------------
    def _tool(self, call: dict[str, Any]) -> str:
        tool = call["tool"]
        handler = getattr(self, f"_t_{tool}", None) if isinstance(tool, str) and tool.isidentifier() else None
        if handler is None:
            raise ActionError(f"unknown tool {str(tool)[:40]!r}; tools: ls, read, search, replace, write, delete, "
                              "apply_patch, run_tests, git_status, git_diff, git_commit, git_log, submit")
        return _clip(handler(call))

    def _file(self, call: dict[str, Any]) -> str:
        path = check_path(call.get("path"))
        if path not in self.tree:
            raise ActionError(f"no such file {path}")
        return path

    def _t_ls(self, call: dict[str, Any]) -> str:
        folder = str(call.get("path") or "").strip("/")
        names = [p for p in sorted(self.tree) if not folder or p == folder or p.startswith(folder + "/")]
        return "\n".join(names) if names else f"nothing under {folder[:80]!r}"

    def _t_read(self, call: dict[str, Any]) -> str:
        path = self._file(call)
        lines = self.tree[path].splitlines()
        try:
            start = max(int(call.get("start", 1)), 1)
            count = min(max(int(call.get("lines", MAX_READ_LINES)), 1), MAX_READ_LINES)
        except (TypeError, ValueError, OverflowError):
            raise ActionError("start and lines must be whole numbers") from None
        shown = [f"{n:4d}  {lines[n - 1]}" for n in range(start, min(start + count, len(lines) + 1))]
        if not shown:
            return f"{path} has {len(lines)} lines"
        more = f"\n({path}: lines {start}-{start + len(shown) - 1} of {len(lines)})"
        return "\n".join(shown) + more

    def _t_search(self, call: dict[str, Any]) -> str:
        query = call.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ActionError('search needs a query: {"tool": "search", "query": "def slugify"}')
        hits = []
        for path in sorted(self.tree):
            for number, line in enumerate(self.tree[path].splitlines(), 1):
                if query in line:
                    hits.append(f"{path}:{number}: {line[:200]}")
                    if len(hits) >= 100:
                        return "\n".join(hits) + "\n(first 100 matches)"
        return "\n".join(hits) if hits else f"no line contains {query[:60]!r}"

    def _t_replace(self, call: dict[str, Any]) -> str:
        path = self._file(call)
        old, new = call.get("old"), call.get("new", "")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ActionError("replace needs old (text in the file) and new (its replacement) as strings")
        count = self.tree[path].count(old)
        if count != 1:
            raise ActionError(f"old text occurs {count} times in {path}; it must occur exactly once "
                              "(include more of the surrounding lines)" if count else f"old text not found in {path}")
        self._set({**self.tree, path: self.tree[path].replace(old, new)})
        return f"replaced 1 occurrence in {path}"

    def _t_write(self, call: dict[str, Any]) -> str:
        path, content = check_path(call.get("path")), call.get("content")
        if not isinstance(content, str):
            raise ActionError("write needs content (the file's whole text) as a string")
        new = path not in self.tree
        self._set({**self.tree, path: content})
        return f"wrote {len(content)} characters to {path}{' (new file)' if new else ''}"

    def _t_delete(self, call: dict[str, Any]) -> str:
        path = self._file(call)
        self._set({p: t for p, t in self.tree.items() if p != path})
        return f"deleted {path}"

    def _t_apply_patch(self, call: dict[str, Any]) -> str:
        patch = call.get("patch")
        if not isinstance(patch, str):
            raise ActionError("apply_patch needs patch (a unified diff) as a string")
        try:
            tree = apply_patch(self.tree, patch)
        except PatchError as exc:
            raise ActionError(f"the patch does not apply: {exc}") from None
        changed = sorted(p for p in set(tree) | set(self.tree) if tree.get(p) != self.tree.get(p))
        self._set(tree)
        return f"patched {len(changed)} file{'s' if len(changed) != 1 else ''}: {', '.join(changed)}"

    def _set(self, tree: dict[str, str]) -> None:
        check_tree(tree)
        self.tree = tree

    def _t_run_tests(self, call: dict[str, Any]) -> str:
        if self.context.execute is None:
            return "error: no sandbox in this process; the tests cannot run here"
        pattern = call.get("pattern") or "test*.py"
        if not isinstance(pattern, str) or not re.fullmatch(r"[A-Za-z0-9_*?.-]{1,60}", pattern):
            raise ActionError("pattern is a file name pattern such as test_text.py or test*.py")
        command = ["python3", "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-p", pattern]
        domain = self.task.domain if self.task else "default"
        try:
            with self.context.slot(domain, TEST_LIMITS):
                verdict = self.context.execute(dict(self.tree), command, TEST_LIMITS, None, backend=None, domain=domain)
        except Exception as exc:  # noqa: BLE001 - the sandbox failing is infrastructure; the turn sees why
            return f"error: the sandbox could not run the tests ({type(exc).__name__}: {str(exc)[:200]})"
        self.test_runs += 1
        self.sandbox_s += float(getattr(verdict, "wall_s", 0.0) or 0.0)
        status = getattr(verdict, "status", "sandbox_error")
        if status == "sandbox_error":
            return f"error: the sandbox could not run the tests ({getattr(verdict, 'error', '')[:200]})"
        output = (getattr(verdict, "stderr", b"") or b"") + (getattr(verdict, "stdout", b"") or b"")
        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
        head = f"$ {TEST_COMMAND}" + (f" -p {pattern}" if pattern != "test*.py" else "")
        tail = text[-(MAX_OBSERVATION - 200):]
        return f"{head}\n{tail}\n(exit {getattr(verdict, 'exit_code', None)}, {status})"

    def _t_git_status(self, call: dict[str, Any]) -> str:
        head = self.commits[-1][1]
        lines = []
        for path in sorted(set(head) | set(self.tree)):
            if path not in head:
                lines.append(f"?? {path}")
            elif path not in self.tree:
                lines.append(f" D {path}")
            elif head[path] != self.tree[path]:
                lines.append(f" M {path}")
        return "\n".join(lines) or "nothing to commit, working tree clean"

    def _t_git_diff(self, call: dict[str, Any]) -> str:
        return tree_diff(self.commits[-1][1], self.tree) or "(no changes since the last commit)"

    def _t_git_commit(self, call: dict[str, Any]) -> str:
        message = str(call.get("message") or "").strip()
        if not message:
            raise ActionError('git_commit needs a message: {"tool": "git_commit", "message": "Fix ..."}')
        if self.tree == self.commits[-1][1]:
            return "nothing to commit, working tree clean"
        changed = sum(1 for p in set(self.tree) | set(self.commits[-1][1]) if self.tree.get(p) != self.commits[-1][1].get(p))
        self.commits.append((message[:200], dict(self.tree)))
        return f"[main {len(self.commits) - 1:07x}] {message[:200]}\n {changed} file{'s' if changed != 1 else ''} changed"

    def _t_git_log(self, call: dict[str, Any]) -> str:
        return "\n".join(f"{i:07x} {message}" for i, (message, _) in reversed(list(enumerate(self.commits))))

    # -- the end ------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if result.done:  # the verdict is the domain cascade's, on the submission
            return StepResult(result.observation, True, None)
        return result

    def evaluate(self) -> Verification | None:  # type: ignore[override]
        """None: the episode's verdict is the ``repo_tests`` stage's, on :meth:`submission`."""
        return None

    def submission(self) -> str:
        """What the verifier judges: the final tree as a diff from the starting tree."""
        return tree_diff(self.base, self.tree)

    def summary(self) -> dict[str, Any]:
        """Figures of the episode for its trajectory (test runs, sandbox seconds, commits)."""
        return {"test_runs": self.test_runs, "sandbox_s": round(self.sandbox_s, 3), "commits": len(self.commits) - 1,
                "steps": self.steps}
