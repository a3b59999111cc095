"""Host side of the agent protocol (agent.py), shared by every backend (Docker, warm and cold bwrap).

A stream object provides `send(kind, payload)`, `next_frame(timeout) -> (kind, payload) | None`,
`eof`, `agent_stderr` and `lost`; `run_agent_job` sends one job over it and supervises it:
output caps and CPU time (read from the sandbox's cgroup) end the job with a kill frame, and
peak memory and OOM kills are read from the cgroup. The agent enforces wall time and, after the
result, kills everything, resets the sandbox and sends a ready frame (collected later with
`wait_for(4, ...)`).

The line between infrastructure and the job is the delivery of the job frame: until its first
byte is accepted, a dead or silent agent is the infrastructure's failure (SandboxError:
`sandbox_error`, retried by the pool on another sandbox). From then on whatever happens is the
job's outcome, because the job may have caused it: an agent that dies, closes its stream, sends
garbage or stops answering gives `runtime_error` (`memory_limit` when the cgroup counted an OOM
kill, the limit's status when a limit had been hit), the stream is marked `lost` and the backend
retires the sandbox, and nothing is retried. So no job can turn its own failure into the masked
`sandbox_error`.
"""
from __future__ import annotations

import json
import marshal
import math
import os
import select
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import cgroups
from .agent import PYTHON_PREFIX
from .agent_outputs import OutputsReader
from .bwrap import ENV_ALLOW
from .elastic_pool import ElasticSizing
from .outcome import Capture, check_command, check_files, classify
from .types import Limits, Outputs, SandboxError, Verdict

if TYPE_CHECKING:
    from .pool import PoolConfig

RETIRE_STATUSES = frozenset({"timeout_cpu", "timeout_wall", "memory_limit", "output_limit"})
"""Verdicts after which a pooled backend never reuses the sandbox (container)."""
GRACE_S = 10.0
"""How long past the wall limit the host waits for the agent's result before giving up on it."""
MAX_FRAME = 1 << 20
"""Largest frame the agent sends (output comes in chunks of at most 64 KiB); more is garbage."""
FRAME_KINDS = frozenset({1, 2, 3, 4, 5, 6})
"""Frame types the agent sends: stdout, stderr, result, ready, agent error, an output file."""
KILLED = frozenset({None, "wall", "cpu", "output", "host"})
"""What the agent's result may give as the reason it killed the job."""


class FrameError(ValueError):
    """Bytes from the agent that are not a frame it would send."""


class SendError(SandboxError):
    """Writing a frame to the agent failed after `accepted` bytes of it had gone through."""

    def __init__(self, message: str, accepted: int):
        super().__init__(message)
        self.accepted = accepted


class AgentLost(Exception):
    """The agent failed while it held a job: died, closed its stream, sent garbage, went silent."""


class FrameReader:
    """Parses agent frames `type(1) length(4) payload` from bytes fed in."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def parse_one(self) -> tuple[int, bytes] | None:
        """The next complete frame, None when it has not all arrived; FrameError on garbage."""
        buf = self.buf
        if len(buf) < 5:
            return None
        kind, size = buf[0], struct.unpack(">I", buf[1:5])[0]
        if kind not in FRAME_KINDS or size > MAX_FRAME:
            raise FrameError(f"garbage from the sandbox agent (frame type {kind}, {size} bytes)")
        if len(buf) < 5 + size:
            return None
        frame = (kind, bytes(buf[5:5 + size]))
        del buf[:5 + size]
        return frame


def children(pid: int) -> list[int]:
    """Host pids of the children of process ``pid`` (a sandbox's chain: bwrap, the agent)."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


ZYGOTE_CMDLINE = b"\0".join(s.encode() for s in PYTHON_PREFIX) + b"\0PRELOAD = "
"""How the zygote's command line starts (agent_zygote.ZYGOTE_PROGRAM)."""


def zygote_of(agent_pid: int) -> int:
    """Host pid of the agent's zygote (0 when it has none): the child running the zygote's
    source. Outside a job the reset has killed every other process, so none can pose as it; the
    agent replaces a zygote a job changed, so its pid is looked up, never kept."""
    for pid in children(agent_pid) if agent_pid else []:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(ZYGOTE_CMDLINE):
                return pid
        except OSError:
            continue
    return 0


def _stderr_tail(stream) -> str:
    return bytes(stream.agent_stderr[-1000:]).decode("utf-8", "replace").strip()


def wait_for(stream, kind: int, timeout: float) -> None:
    """Read frames from `stream` until one of `kind` arrives; SandboxError on timeout, EOF or garbage."""
    end = time.monotonic() + timeout
    while True:
        try:
            frame = stream.next_frame(min(0.5, max(0.0, end - time.monotonic())))
        except FrameError as e:
            raise SandboxError(str(e)) from e
        if frame is not None and frame[0] == kind:
            return
        if frame is None and stream.eof:
            raise SandboxError("sandbox agent exited: " + _stderr_tail(stream))
        if time.monotonic() > end:
            raise SandboxError(f"sandbox agent did not answer within {timeout} s")


def check_idle(stream) -> None:
    """SandboxError unless the agent is idle and its stream open (nothing unread, no EOF)."""
    try:
        frame = stream.next_frame(0)
    except FrameError as e:
        raise SandboxError(str(e)) from e
    if frame is not None:
        raise SandboxError(f"sandbox agent sent frame type {frame[0]} while idle")
    if stream.eof:
        raise SandboxError("sandbox agent exited: " + _stderr_tail(stream))


class PipeAgentStream:
    """Frames to an agent's stdin pipe and from its stdout pipe; its stderr is kept (last 4 KiB)."""

    def __init__(self, stdin_fd: int, stdout_fd: int, stderr_fd: int):
        self.w, self.r, self.e = stdin_fd, stdout_fd, stderr_fd
        os.set_blocking(self.r, False)
        os.set_blocking(self.e, False)
        self.reader = FrameReader()
        self.agent_stderr = bytearray()
        self.eof = False
        self.lost = ""
        """Why the agent was lost during a job ('' while it is sound): the sandbox must go."""

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        if self.w < 0:
            raise SendError("sandbox agent stream closed", 0)
        data = memoryview(kind + struct.pack(">I", len(payload)) + payload)
        accepted = 0
        try:
            while accepted < len(data):
                accepted += os.write(self.w, data[accepted:])
        except OSError as e:
            raise SendError(f"sandbox agent unreachable: {e}", accepted) from e

    def next_frame(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame from the agent, or None when none arrived within `timeout` seconds."""
        frame = self.reader.parse_one()
        if frame is not None or self.eof:
            return frame
        if self.r < 0:  # closed
            self.eof = True
            return None
        fds = [self.r] + ([self.e] if self.e >= 0 else [])
        ready, _, _ = select.select(fds, [], [], timeout)
        if self.e in ready:
            try:
                chunk = os.read(self.e, 1 << 16)
            except BlockingIOError:
                chunk = None
            except OSError:
                chunk = b""
            if chunk:
                self.agent_stderr = (self.agent_stderr + chunk)[-4096:]
            elif chunk is not None:
                os.close(self.e)
                self.e = -1
        if self.r in ready:
            try:
                chunk = os.read(self.r, 1 << 20)
            except BlockingIOError:
                return None
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.reader.buf += chunk
        return self.reader.parse_one()

    def wait_for(self, kind: int, timeout: float) -> None:
        wait_for(self, kind, timeout)

    def close(self) -> None:
        for fd in (self.w, self.r, self.e):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.w = self.r = self.e = -1


def check_env(env: dict[str, str]) -> dict[str, str]:
    """A job's environment: names without ``=`` or NUL, string values without NUL."""
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of name -> str, got {type(env).__name__}")
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"env name {name!r}: must be a non-empty string without '=' or NUL")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"env {name}: the value must be a string without NUL")
    return dict(env)


def job_message(files: dict, command: list[str], limits: Limits, stdin: bytes | None,
                address_space: int | None = None, *, env: dict[str, str] | None = None,
                keep: bool = False, outputs: Outputs | None = None) -> bytes:
    """The job frame's payload for the agent: marshal of plain values (version 4, which every
    Python 3 reads), so the agent needs neither json nor base64 (their imports were most of
    its start-up). ``env`` replaces the sandbox environment (``ENV_ALLOW``); ``keep`` (a shell
    session's turn) skips the reset after the job but for the kill of every process;
    ``outputs`` are the files the agent sends back after the job (agent_outputs.py)."""
    enc = check_files(files)
    command = check_command(command)
    lim = {"cpu": max(1, math.ceil(limits.cpu_s)), "fsize": limits.file_size_mb << 20,
           "nofile": limits.open_files, "nproc": limits.pids + 4, "wall": limits.wall_s}
    if address_space:
        lim["as"] = address_space
    job = {"files": enc, "stdin": bytes(stdin) if stdin else None, "command": command,
           "env": dict(ENV_ALLOW) if env is None else check_env(env), "limits": lim}
    if keep:
        job["keep"] = True
    if outputs is not None:
        if not isinstance(outputs, Outputs):
            raise TypeError(f"outputs must be an Outputs, got {type(outputs).__name__}")
        job["outputs"] = outputs.wire()
    return marshal.dumps(job, 4)


def _result(payload: bytes) -> dict:
    """The agent's result frame, checked; AgentLost when it is not one the agent would send."""
    try:
        result = json.loads(payload)
        ok = (isinstance(result, dict) and result.get("killed") in KILLED
              and (isinstance(result.get("exit_code"), int) or isinstance(result.get("signal"), int)))
    except ValueError:
        ok = False
    if not ok:
        raise AgentLost(f"garbage result from the sandbox agent: {payload[:200]!r}")
    return result


def _on_frame(stream, kind: int, payload: bytes, out: Capture, err: Capture, handed: OutputsReader,
              killed_for: str | None) -> tuple[dict | None, str | None]:
    """One frame of a running job: its output (past the cap the job is killed: ``output``), one of
    its output files, or its result; ``(result or None, why it was killed)``. AgentLost for a
    frame the agent would not send during a job."""
    if kind in (1, 2):
        if (out if kind == 1 else err).feed(payload) and killed_for is None:
            stream.send(b"K", b"output")
            return None, "output"
        return None, killed_for
    if kind == 3:
        return _result(payload), killed_for
    if kind == 6:
        try:
            handed.feed(payload)
        except ValueError as e:
            raise AgentLost(f"garbage from the sandbox agent: {e}") from e
        return None, killed_for
    if kind == 5:
        raise AgentLost("the sandbox agent failed: " + payload.decode("utf-8", "replace"))
    raise AgentLost(f"the sandbox agent sent frame type {kind} during a job")


def run_agent_job(stream, cg: cgroups.JobCgroup | None, files: dict, command: list[str], limits: Limits,
                  stdin: bytes | None, backend: str, address_space: int | None = None,
                  oom_killed: Callable[[], bool] | None = None, *, env: dict[str, str] | None = None,
                  keep: bool = False, outputs: Outputs | None = None) -> Verdict:
    """Send one job to an idle agent and supervise it to its verdict (see the module docstring;
    ``env``, ``keep`` and ``outputs`` as in :func:`job_message`; the files come back as the
    verdict's ``artifacts``, each or why not).

    Raises SandboxError only when the job did not reach the agent. When the agent is lost after
    that, the verdict is the job's and `stream.lost` says why (the caller retires the sandbox);
    `oom_killed` then tells whether the sandbox was OOM-killed where its cgroup went with it
    (a container whose pid 1 died)."""
    message = job_message(files, command, limits, stdin, address_space, env=env, keep=keep, outputs=outputs)
    check_idle(stream)
    handed = OutputsReader(outputs)
    clock = cgroups.CpuClock(cg)
    try:
        if cg is not None:
            cg.reset_peak()
            oom0 = cg.oom_events()
        cpu0 = clock()
        out, err = Capture(limits.output_bytes), Capture(limits.output_bytes)
        t0 = time.monotonic()
        killed_for = None
        result = None
        try:
            stream.send(b"J", message)
        except SendError as e:
            if not e.accepted:
                raise  # nothing of the job reached the sandbox: infrastructure
            stream.lost = str(e)  # part of it did: from here on it is the job's outcome
        try:
            while not stream.lost and result is None:
                now = time.monotonic()
                if killed_for is None and cg is not None and clock() - cpu0 >= limits.cpu_s:
                    killed_for = "cpu"
                    stream.send(b"K", b"cpu")
                if now > t0 + limits.wall_s + GRACE_S:
                    killed_for = killed_for or "wall"
                    raise AgentLost(f"the sandbox agent gave no result {GRACE_S:.0f} s past the wall limit")
                frame = stream.next_frame(0.05)
                while frame is not None and result is None:
                    result, killed_for = _on_frame(stream, *frame, out, err, handed, killed_for)
                    frame = stream.next_frame(0) if result is None else None
                if result is None and stream.eof:
                    raise AgentLost("the sandbox agent exited: " + _stderr_tail(stream))
        except (AgentLost, FrameError, SendError) as e:
            stream.lost = str(e) or type(e).__name__
        wall = time.monotonic() - t0
        cpu = max(0.0, clock() - cpu0)
    finally:
        clock.close()
    peak = cg.peak_memory() if cg is not None else 0
    oom = max(0, cg.oom_events() - oom0) if cg is not None else 0
    if stream.lost and not oom and oom_killed is not None and oom_killed():
        oom = 1
    result = result or {}
    if killed_for is None and result.get("killed"):
        killed_for = result["killed"]
    exit_code, sig = result.get("exit_code"), result.get("signal")
    if cg is None and result.get("rusage"):
        cpu, peak = result["rusage"]
    verdict = Verdict(status="runtime_error", exit_code=exit_code, signal=sig, cpu_s=cpu, wall_s=wall,
                      peak_memory_bytes=peak, stdout=bytes(out.data), stderr=bytes(err.data),
                      stdout_truncated=out.truncated, stderr_truncated=err.truncated,
                      stdout_total_bytes=out.total, stderr_total_bytes=err.total, backend=backend,
                      artifacts=handed.artifacts())
    if stream.lost and killed_for is None and cpu >= limits.cpu_s:
        killed_for = "cpu"
    verdict.status, verdict.error = classify(exit_code=exit_code, signal=sig, killed_for=killed_for,
                                             oom_events=oom, cpu_s=cpu, limits=limits, stderr=verdict.stderr)
    if stream.lost:
        verdict.error = ("the job broke its sandbox: " if verdict.status == "runtime_error"
                         else verdict.error + "; the sandbox broke: ") + stream.lost
    return verdict


class BackgroundWork:
    """Resets, retirements and top-ups a pooled backend runs off the job's path. The backend sets
    ``_bg`` (an executor), ``_lock`` and ``_pending`` (a set) in its constructor."""

    _bg: ThreadPoolExecutor
    _lock: threading.Lock
    _pending: set

    def _submit(self, fn, *args) -> None:
        try:
            fut = self._bg.submit(fn, *args)
        except RuntimeError:  # executor shut down: do it inline
            fn(*args)
            return
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut) -> None:
        with self._lock:
            self._pending.discard(fut)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until background resets, retirements and top-ups are done (tests, benches, shutdown)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return True
            for fut in pending:
                try:
                    fut.result(timeout=max(0.0, end - time.monotonic()))
                except Exception:
                    pass
        return False


def pool_key(domain: str, limits: Limits) -> tuple:
    """The key a pooled backend keeps its sandboxes under: a domain and a memory/pids/tmpfs shape."""
    return (domain, limits.memory_mb, limits.pids, limits.tmpfs_mb)


class PooledBackend(BackgroundWork, ElasticSizing):
    """What the pooled backends (warm bwrap sandboxes, Docker containers) share: sandboxes kept
    by :func:`pool_key` (all of them, the idle ones, how many are being reset), warming a domain,
    marking a sandbox busy for a job, a release that resets or retires it, the end of a reset
    and the removals of a close. A backend calls :meth:`_init_pool` in its constructor and
    provides ``_create(key)``, ``_remove(sb)`` (which marks it retiring first), ``_top_up(key)``
    and ``_reset(sb)``; its sandboxes have ``key``, ``stream``, ``uses``, ``busy`` and ``retiring``."""

    def _init_pool(self, config: "PoolConfig", *, workers: int, thread_name: str) -> None:
        """The pool's configuration, bookkeeping, lock and background executor."""
        self.config = config
        self._lock = threading.RLock()
        self._returned = threading.Condition(self._lock)
        self._idle: dict[tuple, list] = {}
        self._resetting: dict[tuple, int] = {}
        self._all: set = set()
        self._bg = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)
        self._pending = set()
        self._closed = False
        self.started = 0
        """Sandboxes (containers) started so far."""
        self.retired = 0
        """Sandboxes (containers) removed so far."""
        self._init_elastic(config, thread_name)

    def warm(self, domain: str, limits: Limits | None = None) -> None:
        """Start the warm sandboxes (containers) for a domain now (blocks until they are up)."""
        self._top_up(pool_key(domain, limits or Limits()))

    def _idle_or_new(self, key: tuple, usable: Callable[[Any], bool] = lambda sb: True):
        """An idle sandbox of ``key`` (one being reset comes back within milliseconds: up to 2 s
        are spent waiting for it rather than starting one), else a new one (``_create``). An
        idle one that is not ``usable`` is removed in the background and the next one tried."""
        if self._closed:
            raise SandboxError("the sandbox backend is closed")
        with self._lock:
            idle = self._idle.setdefault(key, [])
            end = time.monotonic() + 2.0
            while True:
                while idle:
                    sb = idle.pop()
                    if usable(sb):
                        return sb
                    self._submit(self._remove, sb)
                if not self._resetting.get(key) or not self._returned.wait(max(0.0, end - time.monotonic())):
                    if not idle:
                        break
        with self._lock:
            self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            return self._start(key, self.config.queue_timeout_s)
        finally:
            with self._lock:
                self._waiting[key] -= 1

    def _run_busy(self, sb, job: Callable[[], Verdict]) -> Verdict:
        """``job()``'s verdict, with ``sb`` marked busy while it runs; a sandbox lost while this
        backend closed was removed by the close (SandboxError), not by the job."""
        sb.busy = True
        try:
            verdict = job()
        finally:
            sb.busy = False
        if sb.stream.lost and self._closed:  # we removed it (shutdown), not the job
            raise SandboxError("the sandbox backend was closed during the job")
        return verdict

    def release(self, sb, verdict: Verdict | None) -> None:
        """After a job: retire the sandbox (and start another) when the job broke it, it served
        ``max_uses`` jobs or the backend is closed, else reset it in the background."""
        retire = (verdict is None or verdict.status in RETIRE_STATUSES or sb.stream.lost
                  or sb.uses >= self.config.max_uses or self._closed)
        if retire:
            sb.retiring = True
            self._submit(self._remove, sb)
            self._submit(self._top_up, sb.key)
            return
        with self._lock:
            self._resetting[sb.key] = self._resetting.get(sb.key, 0) + 1
        self._submit(self._reset, sb)

    def _reset_done(self, sb, healthy: bool) -> None:
        """The end of a reset: a healthy sandbox goes back to the idle ones (waking a waiting
        ``acquire``), any other is removed and replaced."""
        with self._lock:
            self._resetting[sb.key] -= 1
            if healthy and not self._closed:
                self._put_idle(sb)
            self._returned.notify_all()
        if not (healthy and not self._closed):
            sb.retiring = True
            self._remove(sb)
            self._top_up(sb.key)

    def _remove_all(self) -> None:
        """For a close (``_closed`` already set): remove every sandbox, wait for the background
        work, then remove any sandbox it started meanwhile."""
        self._stop_shrink.set()
        with self._lock:
            sandboxes = list(self._all)
            self._idle.clear()
        for sb in sandboxes:
            self._remove(sb)
        self._bg.shutdown(wait=True)
        with self._lock:
            leftover = list(self._all)
        for sb in leftover:
            self._remove(sb)
