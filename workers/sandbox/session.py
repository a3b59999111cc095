"""Shell sessions: one sandbox held by one episode, one turn per command (issue 46, point 1).

    from workers.sandbox import open_session
    with open_session({"app.py": "print(1)\\n"}, setup="git init -q && git add -A") as shell:
        turn = shell.run("cd sub 2>/dev/null || mkdir sub; export X=1; python3 ../app.py")
        turn.exit_code, turn.stdout, turn.stderr, turn.status
        shell.run("pwd; echo $X").stdout        # b"/work/sub\\n1\\n": directory and environment kept
        shell.files()                           # the working tree, read by trusted code

The session is a sandbox of the pool (warm bwrap, cold bwrap or Docker: every backend runs the
Temper agent as the sandbox's pid 1), held for the whole episode and retired at the end, never
reused. Each of its jobs takes a place of the pool's execution limits (per domain and global)
for its own length, as any job does: a batch of episodes all holding sandboxes while the model
generates never waits on itself.

**A turn** is one job of the agent: ``bash --noprofile --norc -c TURN_SCRIPT bash COMMAND``,
forked by the agent as every job is (a new session, the job's rlimits, stdin /dev/null). The
command's output reaches the host only as the agent's length-prefixed output frames, and its exit
status only in the agent's result frame, built from ``waitpid``: the command's bytes are data,
never read as control, so no output can end a turn early or forge a status
(``tests/sandbox/test_shell_session.py`` prints the agent's frames, a result and the script's
own words). The job has the ``keep`` flag: after it the agent kills every process of the
sandbox (so nothing a command started, ``&``, ``nohup`` or a double fork, outlives its turn)
but does not empty /work, /tmp and /dev/shm.

**What persists** between turns is the working tree (/work), /tmp and the shell's directory and
exported environment: ``TURN_SCRIPT`` reads :data:`STATE` (after unsetting every exported
variable, so an ``unset`` persists too), runs the command with ``eval`` in that shell, and on
exit (an EXIT trap, so ``exit N`` keeps its state too) writes its directory and every exported
``NAME=value`` to :data:`STATE`, NUL-separated. The state is data, never code: it is read with
``read`` and applied with ``export`` and ``cd`` only (bash builtins), so a command that rewrites
the file can set the next turn's variables and directory, which it may do anyway, and nothing
else. Shell variables that are not exported, functions, aliases and options do not persist,
nor do processes. A command that removes the file starts the next turn in /work with the
session's first environment; one that replaces the trap or ``exec``s leaves its turn's state
unsaved. The turn boundary and exit status never depend on the file.

**Budgets**, all enforced outside the sandbox (:class:`~trainer.verifiers.limits.SessionLimits`):
per command, wall time (the agent, pid 1, kills every process of the sandbox; the host gives up
on it ``GRACE_S`` later), CPU time (the host, from the sandbox's cgroup) and output (the host
kills the command past ``command_output_bytes``; the model is shown ``shown_bytes`` of each
stream, head and tail around :data:`OMITTED`); per episode, the commands' wall time in all, the
number of commands and the output in all (the host's count here). A command that reaches a
limit is killed and the session goes on (its files are kept); the session ends when an episode
budget is used up or the command broke the sandbox (its agent lost), and :attr:`ended` says why.

**Tear-down** (:meth:`close`): the pool retires the sandbox (bwrap: its pid, IPC and mount
namespaces go with the killed process tree; Docker: the container is removed), so files,
processes and IPC objects of one episode never reach another; the next session gets another
sandbox, from a pool that resets every sandbox it reuses.
"""
from __future__ import annotations

import dataclasses
import io
import tarfile
from typing import Any

from trainer.verifiers.limits import SessionLimits

from .bwrap import ENV_ALLOW
from .types import Limits, SandboxError, Verdict

STATE_DIR = "/tmp/.temper-shell"
"""The session's own directory (outside the working tree)."""
STATE = STATE_DIR + "/state"
"""The shell's exported environment and directory after the last turn (written by TURN_SCRIPT)."""
HOME = "/tmp/home"
"""The session's home: dot files (``git config --global``) stay out of the working tree."""
SESSION_ENV = {**ENV_ALLOW, "HOME": HOME, "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat",
               "GIT_AUTHOR_NAME": "Temper", "GIT_AUTHOR_EMAIL": "agent@temper.invalid",
               "GIT_COMMITTER_NAME": "Temper", "GIT_COMMITTER_EMAIL": "agent@temper.invalid",
               # Docker's /work is root's tmpfs: without this git refuses the tree ("dubious ownership")
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
"""The first turn's environment (and the one :meth:`ShellSession.files` runs with)."""
TURN_SCRIPT = r'''
if [ -r /tmp/.temper-shell/state ]; then
  for __temper_v in $(builtin compgen -e); do builtin unset "$__temper_v" 2>/dev/null; done
  {
    IFS= builtin read -r -d '' __temper_dir
    while IFS= builtin read -r -d '' __temper_v; do builtin export "$__temper_v" 2>/dev/null; done
  } < /tmp/.temper-shell/state
  builtin cd -- "$__temper_dir" 2>/dev/null || builtin cd /work
fi
__temper_save() {
  __temper_status=$?
  {
    builtin printf '%s\0' "$PWD"
    for __temper_v in $(builtin compgen -e); do builtin printf '%s=%s\0' "$__temper_v" "${!__temper_v}"; done
  } > /tmp/.temper-shell/state 2>/dev/null
  builtin exit "$__temper_status"
}
builtin trap __temper_save EXIT
__temper_cmd=$1
builtin unset __temper_v __temper_dir
builtin set --
builtin eval "$__temper_cmd"
'''
"""The trusted part of a turn (see the module docstring); the command is its first argument."""
SETUP_SCRIPT = "mkdir -p -m 700 /tmp/.temper-shell /tmp/home && cd /work && "
"""Run before a session's own setup (its output is not shown; a failure fails the open)."""
OMITTED = "\n[... {omitted} of {total} bytes of {stream} omitted ...]\n"
"""The marker between the head and the tail of an output longer than ``shown_bytes``."""
MAX_COMMAND_CHARS = 100_000
"""Longest command accepted (a longer one is refused before it reaches the sandbox)."""
READY_S = 15.0
"""Longest wait for the agent's ready frame after a turn."""


class SessionEnded(SandboxError):
    """A turn asked of a session that has ended (its reason is the message)."""


def shown(data: bytes, total: int, keep: int, stream: str) -> bytes:
    """``data`` as shown to the model: all of it when ``total <= keep``, else its head and tail
    around :data:`OMITTED`.

    >>> shown(b"abcdefghij", 10, 4, "stdout")
    b'ab\\n[... 6 of 10 bytes of stdout omitted ...]\\nij'
    >>> shown(b"abc", 3, 4, "stdout")
    b'abc'
    """
    if total <= keep and len(data) == total:
        return data
    head, tail = data[:keep // 2], data[len(data) - (keep - keep // 2):] if keep > 1 else b""
    marker = OMITTED.format(omitted=total - len(head) - len(tail), total=total, stream=stream)
    return head + marker.encode() + tail


class ShellSession:
    """One episode's sandbox, held from :func:`open_session` to :meth:`close`."""

    def __init__(self, pool: Any, domain: str, limits: SessionLimits) -> None:
        self.pool, self.domain, self.limits = pool, domain, limits
        self.slot: Any = None
        self.commands = 0
        """Commands run so far (the setup not counted)."""
        self.wall_s = 0.0
        """Wall seconds the commands ran in all."""
        self.output_bytes = 0
        """Bytes of output the commands wrote in all."""
        self.ended = ""
        """Why the session ended ('' while it is open)."""
        self.broken = False
        """True once the sandbox failed or a command broke it: nothing more can be read from it."""

    def _job(self, command: list[str], files: dict, limits: Limits) -> Verdict:
        """One job of the held sandbox with ``keep`` (behind the pool's execution limits for its
        length), then the agent's ready frame; SandboxError (the session ended) when the job did
        not reach the sandbox or no place came free."""
        try:
            with self.pool.admitted(self.domain):
                verdict = self.pool.backend.run(self.slot, files, command, limits, None, env=SESSION_ENV, keep=True)
        except SandboxError as e:
            self._break(f"the sandbox failed: {e}")
            raise
        stream = self.slot.stream
        if stream.lost:
            self._break("the command broke its sandbox: " + stream.lost)
            return verdict
        try:
            stream.wait_for(4, READY_S)
        except SandboxError as e:
            self._break(f"the sandbox did not come back after the command: {e}")
        return verdict

    def _setup(self, files: dict, setup: str) -> None:
        verdict = self._job(["bash", "--noprofile", "--norc", "-c", SETUP_SCRIPT + (setup or "true")], files,
                            self.limits.command_limits())
        if verdict.status != "ok" or self.ended:
            why = self.ended or f"{verdict.status} (exit {verdict.exit_code}): " + verdict.stderr[-500:].decode("utf-8", "replace")
            raise SandboxError(f"shell session setup failed: {why}")

    def run(self, command: str) -> Verdict:
        """Run one command as a turn; the verdict's stdout and stderr are what the model is shown
        (``*_total_bytes`` what the command wrote). SessionEnded once the session has ended;
        ValueError for a command that is not a string of at most MAX_COMMAND_CHARS without NUL."""
        if not isinstance(command, str) or "\0" in command or len(command) > MAX_COMMAND_CHARS:
            raise ValueError(f"command must be a string of at most {MAX_COMMAND_CHARS} characters without NUL")
        if self.ended:
            raise SessionEnded(self.ended)
        left = self.limits.episode_wall_s - self.wall_s
        verdict = self._job(["bash", "--noprofile", "--norc", "-c", TURN_SCRIPT, "bash", command], {},
                            self.limits.command_limits(left))
        self.commands += 1
        self.wall_s += verdict.wall_s
        self.output_bytes += verdict.stdout_total_bytes + verdict.stderr_total_bytes
        keep = self.limits.shown_bytes
        verdict.stdout = shown(verdict.stdout, verdict.stdout_total_bytes, keep, "stdout")
        verdict.stderr = shown(verdict.stderr, verdict.stderr_total_bytes, keep, "stderr")
        verdict.stdout_truncated = verdict.stdout_total_bytes > keep
        verdict.stderr_truncated = verdict.stderr_total_bytes > keep
        if self.commands >= self.limits.episode_commands:
            self._end(f"the episode's {self.limits.episode_commands} commands are used up")
        elif self.wall_s >= self.limits.episode_wall_s:
            self._end(f"the episode's {self.limits.episode_wall_s:g} s of command time are used up")
        elif self.output_bytes >= self.limits.episode_output_bytes:
            self._end(f"the episode's {self.limits.episode_output_bytes} bytes of output are used up")
        return verdict

    def read(self, command: list[str], max_bytes: int) -> Verdict:
        """Run a trusted ``command`` (an argv, never a turn: the session's first environment, not
        the shell's state, and no command of the budget counted) with its output bounded by
        ``max_bytes``: how trusted code reads the final state (:meth:`files`; the ``shell-git``
        tasks' repository as a bundle). Works after a budget ended the session; SessionEnded when
        the sandbox is broken or closed."""
        if self.broken or self.slot is None:
            raise SessionEnded(self.ended)
        limits = dataclasses.replace(self.limits.command_limits(), output_bytes=max(1024, max_bytes))
        return self._job(command, {}, limits)

    def files(self, max_bytes: int = 4 << 20) -> dict[str, bytes]:
        """The working tree's regular files (``.git`` left out), read by a trusted ``tar`` run
        (:meth:`read`) and parsed here; symbolic links and other kinds are skipped. Works after a
        budget ended the session; SandboxError when the tree cannot be read within ``max_bytes``
        or the sandbox is broken or closed."""
        verdict = self.read(["tar", "-C", "/work", "--exclude=./.git", "-cf", "-", "."], max_bytes)
        if verdict.status != "ok":
            raise SandboxError(f"the working tree could not be read: {verdict.status} {verdict.error}".strip())
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(verdict.stdout), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    handle = tar.extractfile(member)
                    out[member.name.removeprefix("./")] = handle.read() if handle is not None else b""
        return out

    def _end(self, why: str) -> None:
        self.ended = self.ended or why

    def _break(self, why: str) -> None:
        self.broken = True
        self._end(why)

    def close(self) -> None:
        """Tear the session down: the sandbox is retired (never reused)."""
        self._end("the session was closed")
        slot, self.slot = self.slot, None
        if slot is not None:
            self.pool.let_go(slot)

    def __enter__(self) -> "ShellSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_session(pool: Any, files: dict | None = None, *, limits: SessionLimits | None = None,
                  setup: str = "", domain: str = "shell") -> ShellSession:
    """Hold a sandbox of ``pool`` for a session, write ``files`` into /work and run ``setup`` (a
    trusted shell script, e.g. ``git init``) there. SandboxError when no sandbox could be held or
    the setup failed (then nothing is held)."""
    session = ShellSession(pool, domain, limits or SessionLimits())
    session.slot = pool.hold(domain, session.limits.command_limits())
    try:
        session._setup(files or {}, setup)
    except BaseException:
        session.close()
        raise
    return session
