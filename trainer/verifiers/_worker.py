"""The verifier worker process: runs stage functions for :mod:`trainer.verifiers.isolation`.

Started as ``python -m trainer.verifiers._worker``. Writes ``("ready",)`` once started, then reads
length-prefixed pickles on stdin: ``(function_path,)`` imports a stage function and answers
``("loaded",)``, after calling the function's ``warm_up`` attribute if it has one (the host does
both before a stage's clock starts); ``(function_path, completion,
task, params)`` runs it; ``(function_path, [(completion, task, params), ...])`` runs it on each
in turn, writing each one's reply as soon as it has it (the host times each call from the
previous reply: :meth:`ProcessPool.call_many <trainer.verifiers.isolation.ProcessPool.call_many>`).
Replies go on its original stdout: ``("ok", Verification)`` or ``("error", kind, message)``;
everything a stage prints goes to stderr.
It dies with its parent (PR_SET_PDEATHSIG) and after EOF on stdin.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import resource
import signal
import sys
import traceback


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _limit_memory() -> None:
    mb = int(os.environ.get("TEMPER_VERIFIER_MEMORY_MB", "4096"))
    if mb > 0:
        limit = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _write(fd: int, obj: object) -> None:
    try:
        body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is reported, not fatal
        body = pickle.dumps(("error", "PicklingError", str(exc)))
    data = len(body).to_bytes(8, "big") + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _function(functions: dict[str, object], path: str) -> object:
    """The stage function ``module:attr`` (imported once)."""
    fn = functions.get(path)
    if fn is None:
        module, attr = path.split(":")
        fn = functions[path] = getattr(importlib.import_module(module), attr)
    return fn


def _run(fn: object, completion: object, task: object, params: dict) -> tuple:
    """One call of a stage function, as its reply."""
    try:
        return ("ok", fn(completion, task, **params))  # type: ignore[operator]
    except MemoryError:
        return ("error", "MemoryError", "the stage ran out of memory")
    except BaseException as exc:  # noqa: BLE001 - report every failure of the stage
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return ("error", type(exc).__name__, f"{exc}\n{''.join(tb[-3:])}"[:4000])


def main() -> int:
    _die_with_parent()
    if os.getppid() == 1:
        return 0
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stage prints must not corrupt the protocol
    in_fd = 0
    _limit_memory()
    _write(out_fd, ("ready",))
    functions: dict[str, object] = {}
    while True:
        header = _read_exact(in_fd, 8)
        if header is None:
            return 0
        body = _read_exact(in_fd, int.from_bytes(header, "big"))
        if body is None:
            return 0
        try:
            message = pickle.loads(body)
            if len(message) == 1:  # (function_path,): import it and warm it up, before the stage's clock starts
                warm_up = getattr(_function(functions, message[0]), "warm_up", None)
                if warm_up is not None:
                    warm_up()
                result = ("loaded",)
            elif len(message) == 2:  # (function_path, calls): each call's reply as soon as it is known
                fn = _function(functions, message[0])
                for completion, task, params in message[1]:
                    _write(out_fd, _run(fn, completion, task, params))
                continue
            else:
                path, completion, task, params = message
                result = _run(_function(functions, path), completion, task, params)
        except MemoryError:
            result = ("error", "MemoryError", "the stage ran out of memory")
        except BaseException as exc:  # noqa: BLE001 - report every failure of the stage
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            result = ("error", type(exc).__name__, f"{exc}\n{''.join(tb[-3:])}"[:4000])
        _write(out_fd, result)


if __name__ == "__main__":
    sys.exit(main())
