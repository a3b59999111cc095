"""Running a stage with its timeout enforced from outside it.

``process`` stages run in a pool of worker processes (:mod:`trainer.verifiers._worker`). The
caller waits on the worker's pipe with ``select`` until the deadline; a worker that has not
answered by then is killed (SIGKILL to its process group) and replaced, and the stage is a
``timeout``. The clock starts once the worker has started and imported the stage's function
and run its ``warm_up`` attribute where it has one (the heavy libraries a stage imports on its
first call: math-verify and sympy, reasoning-gym), each within :data:`WORKER_START_S`: a
stage's timeout measures the stage, never a cold worker's start or its imports, which a loaded machine can stretch past a short timeout (a right
answer would then fail as a timeout). A worker that cannot start or import the function is the
verifier's failure: ``judge_error``, masked. ``thread`` stages (sandbox, judge: they wait on services that enforce their own
limits) run on a daemon thread the caller stops waiting for at the deadline. ``inline`` runs in
the caller with no timeout (benchmarks and debugging only).
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

ISOLATIONS = ("process", "thread", "inline")
READ_CHUNK = 1 << 16
"""Bytes asked of the worker's pipe per read: several small replies arrive in one."""
WORKER_START_S = 120.0
"""Longest wait for a new verifier worker to start, and for a worker to import a stage's function."""


class WorkerStartError(RuntimeError):
    """A verifier worker did not start, or could not import a stage's function."""


class _Spawner:
    """Starts worker processes from one long-lived thread.

    A worker asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG), and the kernel
    means the parent *thread*: a worker started from a short-lived thread (a verify thread, a
    thread pool's) would be killed when that thread ends, between two calls.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[tuple[tuple, dict, list, threading.Event]] = []
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._requests:
                    self._wake.wait()
                args, kwargs, box, done = self._requests.pop(0)
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box.append(exc)
            done.set()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        box: list[Any] = []
        done = threading.Event()
        with self._wake:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="temper-verifier-spawner", daemon=True)
                self._thread.start()
            self._requests.append((args, kwargs, box, done))
            self._wake.notify()
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


_spawner = _Spawner()


class _Worker:
    """One verifier worker process and its pipes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")
        self.proc = _spawner.popen(
            [sys.executable, "-m", "trainer.verifiers._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self.in_fd = self.proc.stdin.fileno()
        self.out_fd = self.proc.stdout.fileno()
        self.started = False
        self.loaded: set[str] = set()
        self._buffer = bytearray()

    def prepare(self, function: str) -> None:
        """Wait for the worker's start and have it import ``function`` (``module:attr``), each
        within :data:`WORKER_START_S`, before any stage's clock starts."""
        if not self.started:
            reply = self.receive(time.monotonic() + WORKER_START_S)
            if reply != ("ready",):
                raise WorkerStartError(f"the worker's first frame was {reply!r}, not ready")
            self.started = True
        if function not in self.loaded:
            self.send((function,))
            reply = self.receive(time.monotonic() + WORKER_START_S)
            if reply != ("loaded",):
                raise WorkerStartError(f"could not import {function}: {reply[1:] if reply[0] == 'error' else reply!r}")
            self.loaded.add(function)

    def send(self, obj: Any) -> None:
        body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(len(body).to_bytes(8, "big") + body)
        while view:
            view = view[os.write(self.in_fd, view) :]

    def _read_exact(self, n: int, deadline: float) -> bytes:
        """``n`` bytes of the worker's replies, by ``deadline``: what one read brings beyond them
        (the next replies of a :meth:`ProcessPool.call_many`) stays in the buffer."""
        buf = self._buffer
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.out_fd], [], [], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.out_fd, max(n - len(buf), READ_CHUNK))
            if not chunk:
                raise EOFError
            buf += chunk
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def receive(self, deadline: float) -> Any:
        size = int.from_bytes(self._read_exact(8, deadline), "big")
        return pickle.loads(self._read_exact(size, time.monotonic() + 60.0))  # the reply is being written

    def kill(self) -> int | None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return self.proc.wait()


class ProcessPool:
    """A bounded pool of verifier workers; workers are reused until one must be killed."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or max(1, min(4, os.cpu_count() or 1))
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("verifier process pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.max_workers:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return _Worker()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, alive: bool) -> None:
        if not alive:
            worker.kill()
        with self._cond:
            if alive and not self._closed:
                self._idle.append(worker)
            else:
                self._count -= 1
                if alive:
                    worker.kill()
            self._cond.notify()

    def call(self, function: str, completion: str, task: Task, params: dict[str, Any], timeout_s: float) -> Verification:
        """Run ``function`` in a worker; a timeout, a crash or an exception becomes an outcome."""
        return self.call_many(function, [(completion, task, params)], timeout_s)[0][0]

    def call_many(self, function: str, calls: list[tuple[str, Task, dict[str, Any]]],
                  timeout_s: float) -> list[tuple[Verification, float]]:
        """Run ``function`` on each ``(completion, task, params)`` in one worker, sent in one
        message; each call's outcome (as :meth:`call` has it) and its seconds, in order. The
        worker answers each call as soon as it has run it, and each call has ``timeout_s`` from
        the previous answer (the first from the send): a call that overruns is a ``timeout`` and
        one that kills its worker a ``runtime_error``, that worker goes, and the calls after it
        run in a fresh worker, so no call's outcome depends on another's."""
        out: list[tuple[Verification, float]] = []
        while len(out) < len(calls):
            out += self._call_run(function, calls[len(out):], timeout_s)
        return out

    def _call_run(self, function: str, calls: list[tuple[str, Task, dict[str, Any]]],
                  timeout_s: float) -> list[tuple[Verification, float]]:
        """As many of ``calls`` as one worker answers, up to and including the first that ends it."""
        worker = self._acquire()
        try:
            worker.prepare(function)
        except (WorkerStartError, TimeoutError, EOFError, OSError, pickle.UnpicklingError) as exc:
            self._release(worker, alive=False)
            return [(Verification.failed(Outcome.JUDGE_ERROR, error=f"verifier worker not ready for {function} ({type(exc).__name__}: {exc})"), 0.0)]
        except BaseException:  # a task's soft time limit, an interrupt: the worker is not left counted but lost
            self._release(worker, alive=False)
            raise
        out: list[tuple[Verification, float]] = []
        started = time.monotonic()
        try:
            worker.send((function, calls[0][0], calls[0][1], calls[0][2]) if len(calls) == 1 else (function, calls))
            for _ in calls:
                reply = worker.receive(started + timeout_s)
                now = time.monotonic()
                out.append((reply_to_verification(reply), now - started))
                started = now
        except TimeoutError:
            self._release(worker, alive=False)
            failed = Verification.failed(Outcome.TIMEOUT, error=f"stage did not finish within {timeout_s:g} s; its worker was killed")
            return out + [(failed, time.monotonic() - started)]
        except (EOFError, BrokenPipeError, OSError, pickle.UnpicklingError) as exc:
            code = worker.proc.poll()
            self._release(worker, alive=False)
            code = worker.proc.returncode if code is None else code
            failed = Verification.failed(Outcome.RUNTIME_ERROR, error=f"verifier worker died ({type(exc).__name__}, exit code {code})")
            return out + [(failed, time.monotonic() - started)]
        except BaseException:  # as above: the worker may hold a half-read reply, so it goes
            self._release(worker, alive=False)
            raise
        self._release(worker, alive=True)
        return out

    def close(self) -> None:
        """Kill every idle worker; busy ones are killed when they are released."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.kill()


def reply_to_verification(reply: Any) -> Verification:
    """A worker's reply as a Verification (stage exceptions become outcomes)."""
    if reply[0] == "ok":
        result = reply[1]
        if not isinstance(result, Verification):
            return Verification.failed(Outcome.RUNTIME_ERROR, error=f"stage returned {type(result).__name__}, not a Verification")
        return result
    _, kind, message = reply
    if kind == "MemoryError":
        return Verification.failed(Outcome.MEMORY_LIMIT, error=message)
    return Verification.failed(Outcome.RUNTIME_ERROR, error=f"{kind}: {message}", stage_exception=kind)


def run_in_thread(fn: Any, completion: str, task: Task, params: dict[str, Any], timeout_s: float) -> Verification:
    """Run on a daemon thread; stop waiting at the timeout (the stage's service enforces its own)."""
    box: list[Any] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(("ok", fn(completion, task, **params)))
        except MemoryError:
            box.append(("error", "MemoryError", "the stage ran out of memory"))
        except BaseException as exc:  # noqa: BLE001
            box.append(("error", type(exc).__name__, str(exc)[:4000]))
        finally:
            done.set()

    threading.Thread(target=target, name="temper-verifier-stage", daemon=True).start()
    if not done.wait(timeout_s):
        return Verification.failed(Outcome.TIMEOUT, error=f"stage did not finish within {timeout_s:g} s")
    return reply_to_verification(box[0])


def run_inline(fn: Any, completion: str, task: Task, params: dict[str, Any]) -> Verification:
    """Run in the caller, no timeout (benchmarks and debugging)."""
    try:
        return reply_to_verification(("ok", fn(completion, task, **params)))
    except MemoryError:
        return reply_to_verification(("error", "MemoryError", "the stage ran out of memory"))
    except Exception as exc:  # noqa: BLE001
        return reply_to_verification(("error", type(exc).__name__, str(exc)[:4000]))


_pool: ProcessPool | None = None
_pool_lock = threading.Lock()


def default_pool() -> ProcessPool:
    """The process-wide worker pool (``TEMPER_VERIFIER_WORKERS`` sets its size)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._closed:
            size = int(os.environ.get("TEMPER_VERIFIER_WORKERS", "0")) or None
            _pool = ProcessPool(size)
            atexit.register(_pool.close)
        return _pool


def shutdown() -> None:
    """Close the process-wide pool (tests; the next call starts a new one)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
            _pool = None
