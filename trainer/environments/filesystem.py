"""A small in-memory file system: edit configuration files until the check passes.

Tools: ``ls``, ``cat`` {path}, ``write`` {path, content}, ``replace`` {path, old, new},
``check`` (lists the requirements that still fail), ``submit``. Reward comes from the final
files: the fraction of requirements (``key = value`` lines in given files) that hold. A key set
on more than one line holds no value (which one would the service read?), so writing every
candidate value into a file satisfies nothing.

>>> from trainer.tasks.base import Task
>>> task = Task("tool-filesystem", "1", "...", meta={"files": {"app.ini": "port = 80\\n"},
...             "requirements": [["app.ini", "port", "8080"]]})
>>> env = FileSystemEnv(); _ = env.reset(task)
>>> env.step('{"tool": "check"}').observation
'FAIL app.ini: port must be 8080 (found 80)'
>>> env.step('{"tool": "replace", "path": "app.ini", "old": "port = 80", "new": "port = 8080"}').observation
'ok: 1 replacement in app.ini'
>>> env.step('{"tool": "submit"}').outcome.outcome.value
'pass'
>>> _ = env.reset(task)
>>> env.step('{"tool": "write", "path": "app.ini", "content": "port = 80\\\\nport = 8080\\\\n"}').observation
'ok: wrote 22 bytes to app.ini'
>>> env.step('{"tool": "check"}').observation
'FAIL app.ini: port is set on 2 lines'
"""
from __future__ import annotations

import re
from typing import Any

from trainer.environments.base import ActionError, ToolEnvironment
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

MAX_FILE_BYTES = 20_000


def settings(content: str, key: str) -> list[str]:
    """The values of every ``key = value`` line for ``key``, in order."""
    return re.findall(rf"^\s*{re.escape(key)}\s*=\s*(.*?)\s*$", content, re.M)


def read_setting(content: str, key: str) -> str | None:
    """The value of the last ``key = value`` line (None when absent)."""
    found = settings(content, key)
    return found[-1] if found else None


class FileSystemEnv(ToolEnvironment):
    """One episode's files and step budget."""

    name = "filesystem"
    files: dict[str, str]

    def _start(self, task: Task) -> None:
        self.files = dict(task.meta["files"])

    def failures(self) -> list[str]:
        """Requirements that do not hold, as messages."""
        assert self.task is not None
        out = []
        for path, key, value in self.task.meta["requirements"]:
            if path not in self.files:
                out.append(f"FAIL {path}: file missing")
                continue
            lines = settings(self.files[path], key)
            if len(lines) > 1:
                out.append(f"FAIL {path}: {key} is set on {len(lines)} lines")
                continue
            found = lines[0] if lines else None
            if found != value:
                out.append(f"FAIL {path}: {key} must be {value} (found {found if found is not None else 'nothing'})")
        return out

    def _path(self, call: dict[str, Any]) -> str:
        path = str(call.get("path", ""))
        if not re.fullmatch(r"[A-Za-z0-9_./-]{1,100}", path) or ".." in path:
            raise ActionError(f"invalid path {path!r}")
        return path

    def _tool(self, call: dict[str, Any]) -> str:
        tool = call["tool"]
        if tool == "ls":
            return "\n".join(sorted(self.files))
        if tool == "cat":
            path = self._path(call)
            if path not in self.files:
                raise ActionError(f"no such file {path}")
            return self.files[path]
        if tool == "write":
            path, content = self._path(call), str(call.get("content", ""))
            if len(content) > MAX_FILE_BYTES:
                raise ActionError("file too large")
            self.files[path] = content
            return f"ok: wrote {len(content)} bytes to {path}"
        if tool == "replace":
            path = self._path(call)
            old, new = str(call.get("old", "")), str(call.get("new", ""))
            if path not in self.files:
                raise ActionError(f"no such file {path}")
            count = self.files[path].count(old) if old else 0
            if not count:
                raise ActionError(f"text not found in {path}")
            self.files[path] = self.files[path].replace(old, new)
            return f"ok: {count} replacement{'s' if count > 1 else ''} in {path}"
        if tool == "check":
            return "\n".join(self.failures()) or "PASS: all requirements hold"
        raise ActionError(f"unknown tool {tool!r}; tools: ls, cat, write, replace, check, submit")

    def evaluate(self) -> Verification:
        """Reward from the files: the fraction of requirements that hold."""
        assert self.task is not None
        total = len(self.task.meta["requirements"])
        failures = self.failures()
        details = {"failures": failures, "steps": self.steps, "expected": self.task.meta["requirements"]}
        if not failures:
            return Verification.passed(**details)
        score = 1 - len(failures) / total
        return Verification(Outcome.PARTIAL, score, details) if score > 0 else Verification.failed(**details)
