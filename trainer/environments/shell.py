"""A shell in a sandbox: each turn is a command, its observation the real output and exit status.

The episode owns one shell session (``VerifyContext.open_session``, the sandbox runtime's
``open_session``: bubblewrap or Docker), opened at :meth:`ShellEnv.reset` with the task's files
in /work and its trusted ``setup`` script run, held behind the domain's sandbox quota
(``VerifyContext.slot``, taken for each of its jobs) and torn down when the episode ends. The working tree, the shell's
directory and its exported environment persist across turns; every budget (per command: wall
and CPU time, output; per episode: command time, commands, output) is the session's,
:class:`~trainer.verifiers.limits.SessionLimits` from the task's ``session_limits``. No code of
the policy's runs in this process: a command goes to the sandbox as an argument, and what comes
back is bounded bytes and an exit status read from the sandbox's supervisor.

Tools: ``bash`` {command}, ``submit``. The verdict is not the environment's: ``submit`` (or a
used-up budget) ends the episode, and the trajectory's completion becomes the final working
tree (read by trusted code) as a diff from the task's files (:meth:`ShellEnv.submission`), which
the domain's verifier judges in a fresh sandbox. A family that judges more of the final state
gives the environment a ``final_state`` reader, run first at the end (the ``shell-git`` tasks'
repository, read back as a git bundle: :func:`trainer.families.shell.gitstate.read_state`); what
it returns follows the diff.

>>> from trainer.tasks.base import Task
>>> env = ShellEnv(); _ = env.reset(Task("shell-x", "1", "Fix it.", meta={"environment": "shell"}))
>>> result = env.step('{"tool": "bash", "command": "ls"}')
>>> result.done, result.outcome.outcome.value, result.outcome.details["reason"][:28]
(True, 'sandbox_error', 'no sandbox in this process: ')
>>> render(exit_code=2, signal=None, status="runtime_error", error="", stdout=b"", stderr=b"ls: x: No such file\\n")
'[stderr]\\nls: x: No such file\\n[exit status 2]'
"""
from __future__ import annotations

import re
from typing import Any, Callable

from trainer.environments.base import ActionError, StepResult, parse_action
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.verifiers.limits import SessionLimits
from trainer.verifiers.patches import tree_diff

INSTRUCTIONS = (
    "\n\nYou are in a bash shell in /work (bash, git, python3, pytest; no network). Run one command per "
    'turn as {"tool": "bash", "command": "..."}; you will see its output and exit status. The '
    "directory, exported variables and files persist between commands; background processes do not. "
    'When you are done, reply {"tool": "submit"}.'
)
"""Appended to the task's prompt: how to act in the shell."""
LIMIT_WORDS = {"timeout_wall": "wall time limit", "timeout_cpu": "CPU time limit",
               "output_limit": "output limit", "memory_limit": "memory limit"}
"""How a command a limit ended is described to the model."""
MAX_TREE_BYTES = 4 << 20
"""Largest final working tree read back for the submission."""
_UNDIFFABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
"""Characters a file's name in a diff cannot hold: a newline or a tab in a name would write
headers of the candidate's choosing, a name that is not UTF-8 decodes to lone surrogates."""


def render(*, exit_code: int | None, signal: int | None, status: str, error: str, stdout: bytes,
           stderr: bytes) -> str:
    """The observation of one command: its stdout and stderr (as the session shows them,
    truncation markers included) and how it ended."""
    parts = []
    for name, data in (("stdout", stdout), ("stderr", stderr)):
        if data:
            text = data.decode("utf-8", "replace")
            parts.append(f"[{name}]\n{text}" + ("" if text.endswith("\n") else "\n"))
    if status in LIMIT_WORDS:
        parts.append(f"[killed: {LIMIT_WORDS[status]}]")
    elif exit_code is not None:
        parts.append(f"[exit status {exit_code}]")
    else:
        parts.append(f"[killed by signal {signal}]")
    return "".join(parts)


def ended(exit_code: int | None, signal: int | None, status: str) -> str:
    """How a command ended, in the words the trajectory explorer shows.

    >>> ended(0, None, "ok"), ended(None, None, "timeout_wall"), ended(None, 9, "runtime_error")
    ('exit 0', 'killed: wall time limit', 'killed by signal 9')
    """
    if status in LIMIT_WORDS:
        return f"killed: {LIMIT_WORDS[status]}"
    return f"exit {exit_code}" if exit_code is not None else f"killed by signal {signal}"


class ShellEnv:
    """One episode's shell session (see the module docstring)."""

    name = "shell"

    def __init__(self, context: VerifyContext = NO_CONTEXT, *, final_state: Callable[[Any], str] | None = None) -> None:
        self.context = context
        self.final_state = final_state
        """``final_state(session) -> str``: more of the final state, read by trusted code before the
        tree; it follows the diff in the submission."""
        self.state = ""
        self.task: Task | None = None
        self.session: Any = None
        self.limits = SessionLimits()
        self.done = False
        self.steps = 0
        self.base: dict[str, str] = {}
        self.final: dict[str, str] | None = None
        self.failure: Verification | None = None
        """An infrastructure outcome (the sandbox failed): the episode ends with it, masked."""

    def bind(self, context: VerifyContext) -> None:
        """Use ``context``'s sandbox for the session (the trainer passes its own)."""
        self.context = context

    def reset(self, task: Task) -> str:
        self.close()
        self.task, self.done, self.steps, self.final, self.failure, self.state = task, False, 0, None, None, ""
        meta = task.meta
        self.base = {k: v if isinstance(v, str) else v.decode("utf-8", "replace")
                     for k, v in dict(meta.get("files") or {}).items()}
        self.limits = limits = SessionLimits.from_params(meta.get("session_limits"))
        opener = self.context.open_session
        if opener is None:
            self.failure = Verification.failed(Outcome.SANDBOX_ERROR, reason="no sandbox in this process: "
                                               "the environment was not given a context with open_session")
            return task.prompt + INSTRUCTIONS
        try:
            with self._slot():
                self.session = opener(dict(meta.get("files") or {}), limits=limits, setup=str(meta.get("setup", "")),
                                      domain=task.domain)
        except Exception as exc:  # no place or sandbox came free, or the trusted setup failed
            self.close()
            self.failure = Verification.failed(Outcome.SANDBOX_ERROR, reason=f"{type(exc).__name__}: {exc}"[:500])
        return task.prompt + INSTRUCTIONS

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "step() before reset()"
        if self.failure is not None:
            return self._fail()
        if self.done:
            return StepResult("", True, None)
        self.steps += 1
        shown: dict[str, str] = {}
        try:
            call = parse_action(action)
            if call["tool"] == "submit":
                return self._finish("submitted")
            if call["tool"] != "bash":
                raise ActionError(f"unknown tool {call['tool']!r}; tools: bash, submit")
            command = call.get("command")
            if not isinstance(command, str) or not command.strip():
                raise ActionError('bash needs a "command" string')
            observation, how = self._run(command)
            shown = {"command": command, "exit": how}
        except ActionError as exc:
            observation = f"error: {exc}"
        if self.failure is not None:
            return self._fail()
        if self.session.ended:
            return self._finish(observation + f"\n[session over: {self.session.ended}]")
        return StepResult(observation, False, None, shown or None)

    def _slot(self) -> Any:
        """The domain's sandbox quota, held for one job of the session (its setup, a command, the
        final read): held for a whole episode, a batch larger than the quota would wait on itself."""
        assert self.task is not None
        return self.context.slot(self.task.domain, self.limits.command_limits())

    def _fail(self) -> StepResult:
        """End the episode with its infrastructure outcome (masked out of training)."""
        self.done = True
        self.close()
        return StepResult("", True, self.failure)

    def _run(self, command: str) -> tuple[str, str]:
        """One command's observation, and how it ended in words (``exit 0``, ``killed: ...``)."""
        try:
            with self._slot():
                verdict = self.session.run(command)
        except ValueError as exc:
            raise ActionError(str(exc)) from None
        except Exception as exc:  # the sandbox failed under the session: infrastructure
            self.failure = Verification.failed(Outcome.SANDBOX_ERROR, reason=f"{type(exc).__name__}: {exc}"[:500])
            return "", ""
        return (render(exit_code=verdict.exit_code, signal=verdict.signal, status=verdict.status,
                       error=verdict.error, stdout=verdict.stdout, stderr=verdict.stderr),
                ended(verdict.exit_code, verdict.signal, verdict.status))

    def _finish(self, observation: str) -> StepResult:
        """End the episode: read the final tree (trusted code), tear the session down."""
        self.done = True
        why = self._read_final()
        if why:
            observation += f"\n[the working tree could not be read: {why}]"[:500]
        self.close()
        return StepResult(observation, True, None)

    def _read_final(self) -> str:
        """Read the final state (trusted code): the family's ``final_state`` into ``state``, then the
        tree into ``final``; why the tree could not be read ('' when it was)."""
        try:
            with self._slot():
                if self.final_state is not None:
                    self.state = self.final_state(self.session)
                tree = self.session.files(MAX_TREE_BYTES)
        except Exception as exc:  # a tree too large to read back, or a session that broke: the episode's own
            return str(exc) or type(exc).__name__
        # A file whose name a diff cannot carry is left out (as symbolic links are): the diff is
        # then the tree trusted code read, never headers written by a file's name.
        self.final = {k: v.decode("utf-8", "replace") for k, v in tree.items() if not _UNDIFFABLE.search(k)}
        return ""

    def submission(self) -> str:
        """What the verifier judges: the final working tree as a diff from the task's files, then
        the ``final_state`` read ('' when the tree could not be read). An episode the runner cut
        (turn or token budget) has its state read here."""
        if self.final is None and self.session is not None:
            self._read_final()
        return tree_diff(self.base, self.final) + self.state if self.final is not None else ""

    def close(self) -> None:
        """Tear the session down (safe to call twice)."""
        session, self.session = self.session, None
        if session is not None:
            session.close()
