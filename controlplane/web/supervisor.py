"""Keep processes running: start each again when it exits, with a backoff and a log line.

Used by ``manage.py demo`` (web, workers and beat) and ``manage.py supervise`` (one worker on a
host of its own, README "Scale out"). One crash (a broker outage a library did not survive, an
out-of-memory kill) then costs a queue seconds of service, never its worker for good.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_S = 60.0
"""A process that ran this long before exiting is restarted after ``BACKOFF_FIRST_S`` again."""


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: ask Linux for SIGTERM when the supervisor dies, even by SIGKILL.
    A child in a session of its own is out of reach of the terminal's signals, so without this a
    killed supervisor would leave its workers running unsupervised."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    cmd: list[str]
    log_path: Path | None
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    backoff_s: float = BACKOFF_FIRST_S
    restarts: int = 0
    pids: list[int] = field(default_factory=list)


class Supervisor:
    """Named child processes, each in its own session (so its own children go with it), started
    again ``backoff`` seconds after they exit: 1 s, doubling up to 60 s while they keep failing."""

    def __init__(self, *, log: Callable[[str], None], cwd: Path | str | None = None, env: dict | None = None,
                 backoff_first_s: float = BACKOFF_FIRST_S, backoff_max_s: float = BACKOFF_MAX_S,
                 stable_s: float = STABLE_S):
        self.log, self.cwd, self.env = log, cwd, env
        self.backoff_first_s, self.backoff_max_s, self.stable_s = backoff_first_s, backoff_max_s, stable_s
        self.children: dict[str, Child] = {}
        self._signalled: list[int] | None = None

    def add(self, name: str, cmd: list[str], *, log_path: Path | None = None) -> Child:
        child = self.children[name] = Child(name, list(cmd), log_path, backoff_s=self.backoff_first_s)
        self._start(child)
        return child

    def _start(self, child: Child) -> None:
        out = open(child.log_path, "ab") if child.log_path else None
        try:
            child.proc = subprocess.Popen(child.cmd, stdout=out, stderr=subprocess.STDOUT if out else None, cwd=self.cwd,
                                          env=self.env, start_new_session=True,
                                          preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        finally:
            if out:
                out.close()  # the child has its own copy of the descriptor
        child.started_at, child.restart_at = time.monotonic(), None
        child.pids.append(child.proc.pid)

    def poll(self) -> None:
        """Notice exits and start again those whose backoff has passed; call this often."""
        now = time.monotonic()
        for child in self.children.values():
            proc = child.proc
            if child.restart_at is None and proc is not None and proc.poll() is not None:
                self._reap_group(proc.pid)
                if now - child.started_at >= self.stable_s:
                    child.backoff_s = self.backoff_first_s
                code = proc.returncode
                how = f"signal {-code}" if code < 0 else f"code {code}"
                where = f"; see {child.log_path}" if child.log_path else ""
                self.log(f"{child.name} (pid {proc.pid}) exited with {how}; restarting in {child.backoff_s:g} s{where}")
                child.restart_at = now + child.backoff_s
                child.backoff_s = min(self.backoff_max_s, child.backoff_s * 2)
            if child.restart_at is not None and now >= child.restart_at:
                self._start(child)
                child.restarts += 1
                self.log(f"{child.name} restarted (pid {child.proc.pid}, restart {child.restarts})")

    @staticmethod
    def _reap_group(pid: int) -> None:
        """A process killed outright leaves its own children (a Celery worker's pool) behind:
        they go with it, so the restarted worker does not run beside orphans."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every child (SIGTERM, then SIGKILL after ``timeout``); nothing is restarted after."""
        stop_processes([c.proc for c in self.children.values() if c.proc is not None and c.proc.poll() is None],
                       timeout=timeout, then_kill="process")
        for c in self.children.values():
            if c.proc is not None:
                self._reap_group(c.proc.pid)
        self.children.clear()

    def trap_signals(self) -> list[int]:
        """From now on SIGINT and SIGTERM are noted (in the list returned), not fatal: call it
        before starting children, so that a signal in between still stops them in :meth:`serve`."""
        if self._signalled is None:
            self._signalled = []
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda signum, frame: self._signalled.append(signum))
        return self._signalled

    def serve(self, interval: float) -> None:
        """Keep the children running (a poll every ``interval`` s) until SIGINT or SIGTERM, then
        stop them all: the main loop of ``manage.py demo`` and ``manage.py supervise``."""
        signalled = self.trap_signals()
        try:
            while not signalled:
                self.poll()
                time.sleep(interval)
        finally:
            self.stop()


def stop_processes(procs: list[subprocess.Popen], *, timeout: float = 60, then_kill: str = "") -> None:
    """SIGTERM each of ``procs``, then wait up to ``timeout`` s for each. One still running then is
    SIGKILLed when ``then_kill`` says which: ``"process"`` (it alone) or ``"session"`` (it and its
    session: a Celery worker's pool); without it the wait's ``TimeoutExpired`` stands."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if then_kill == "process":
                proc.kill()
            elif then_kill == "session":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                raise
            proc.wait()
