"""The bubblewrap backend: one fresh set of namespaces per execution, nothing shared.

Each execution runs as its own slot uid (so per-user rlimits of one job cannot starve another),
inside its own cgroup (memory, pids, CPU accounting) where the machine allows, with rlimits as
backstops. Process chain: `sh` (as root: joins the cgroup, sets rlimits) -> `setpriv` (drops to
the slot uid, no capabilities) -> `bwrap` (namespaces, mounts) -> the command.
"""
from __future__ import annotations

import json
import math
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from . import cgroups
from .outcome import Capture, check_command, check_files, classify
from .types import Limits, SandboxError, Verdict

ENV_ALLOW = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
"""The whole environment inside a sandbox: nothing from the worker's environment passes."""

RO_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Runtime directories bound read-only (symlinks such as /bin -> usr/bin are recreated as links)."""
RO_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")
"""Files from /etc the runtime needs; the rest of /etc is not visible."""
WORK_DIR = "/work"
"""The program's working directory (a size-capped tmpfs)."""
POLL_S = 0.05
"""How often CPU time is checked against the limit while nothing else happens."""


@dataclass(frozen=True)
class BwrapSlot:
    """One concurrent execution place: the uid it runs as."""

    uid: int
    """Host uid of the sandboxed processes (root drops to it; ignored when not root)."""
    domain: str
    """Domain it serves (bwrap slots are never reused across jobs, so this is informational)."""


def available() -> bool:
    """True when bubblewrap is installed."""
    return shutil.which("bwrap") is not None


def _root_binds() -> list[str]:
    args: list[str] = []
    for d in RO_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in RO_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return args


def bwrap_args(limits: Limits, files: dict[str, bytes], fds: list[int], status_fd: int | None, privileged: bool,
               as_pid_1: bool = False) -> list[str]:
    """The bwrap command line (without the command) for one execution, or (as_pid_1) for a warm
    sandbox whose command, the agent, is the pid namespace's init."""
    tmpfs = str(limits.tmpfs_mb << 20)
    args = [
        "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
        "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv",
    ]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    if as_pid_1:
        args.append("--as-pid-1")
    for k, v in ENV_ALLOW.items():
        args += ["--setenv", k, v]
    if privileged:
        args += ["--cap-drop", "ALL"]
    args += _root_binds()
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", tmpfs, "--tmpfs", "/dev/shm",
             "--size", tmpfs, "--tmpfs", "/tmp",
             "--size", tmpfs, "--tmpfs", WORK_DIR]
    made: set[str] = set()
    for (name, content), fd in zip(files.items(), fds):
        parts = name.split("/")
        for i in range(1, len(parts)):
            sub = "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                args += ["--dir", f"{WORK_DIR}/{sub}"]
        mode = "0755" if content.startswith(b"#!") else "0644"
        args += ["--perms", mode, "--file", str(fd), f"{WORK_DIR}/{name}"]
    # bwrap's own root and /dev are writable tmpfs mounts: make them read-only, so that only
    # the size-capped /work, /tmp and /dev/shm (wiped between jobs of a warm sandbox) are writable
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK_DIR, "--"]
    return args


def _wrapper_script(limits: Limits, cg: cgroups.JobCgroup | None, uid: int | None) -> str:
    """sh script: join the cgroup, set rlimits, drop to the slot uid, exec bwrap ("$@")."""
    cpu_soft = max(1, math.ceil(limits.cpu_s))
    lines = []
    if cg is not None:
        lines += [f"echo 0 > {shlex.quote(p)} || exit 121" for p in cg.procs_files()]
    lines += [
        "ulimit -c 0",
        f"ulimit -S -t {cpu_soft}", f"ulimit -H -t {cpu_soft + 1}",
        f"ulimit -f {limits.file_size_mb * 2048}",
        f"ulimit -n {limits.open_files}",
    ]
    if cg is None:  # no memory cgroup: address-space limit as the (coarser) memory backstop
        lines.append(f"ulimit -v {max(limits.memory_mb, 64) * 1024}")
    if uid is not None:
        lines.append(f"ulimit -p {limits.pids + 16}")
        lines.append(f'exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all -- "$@"')
    else:
        lines.append('exec "$@"')
    return "\n".join(lines)


def run(slot: BwrapSlot, files: dict[str, str | bytes], command: list[str], limits: Limits, stdin: bytes | None) -> Verdict:
    """Run one job in a fresh bubblewrap sandbox and return its verdict."""
    enc_files = check_files(files)
    command = check_command(command)
    layout = cgroups.detect()
    privileged = os.geteuid() == 0
    cg = None
    if layout is not None:
        try:
            cg = cgroups.JobCgroup(layout, limits.memory_mb << 20, limits.pids)
        except OSError as e:
            raise SandboxError(f"cannot create cgroup: {e}") from e
    fds: list[int] = []
    status_r = status_w = -1
    try:
        for name, content in enc_files.items():
            fd = os.memfd_create("f", 0)  # not CLOEXEC-free: pass_fds makes it inheritable
            os.write(fd, content) if len(content) < (1 << 16) else _write_all(fd, content)
            os.lseek(fd, 0, os.SEEK_SET)
            fds.append(fd)
        status_r, status_w = os.pipe()
        argv = bwrap_args(limits, enc_files, fds, status_w, privileged) + command
        script = _wrapper_script(limits, cg, slot.uid if privileged else None)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "sh", *argv],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(*fds, status_w), env={}, start_new_session=True, close_fds=True,
            )
        except OSError as e:
            raise SandboxError(f"cannot start bwrap: {e}") from e
        os.close(status_w)
        status_w = -1
        for fd in fds:
            os.close(fd)
        fds = []
        return _supervise(proc, t0, stdin, status_r, limits, cg)
    finally:
        for fd in fds:
            os.close(fd)
        if status_w >= 0:
            os.close(status_w)
        if status_r >= 0:
            os.close(status_r)
        if cg is not None:
            cg.remove()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _supervise(proc: subprocess.Popen, t0: float, stdin: bytes | None, status_r: int,
               limits: Limits, cg: cgroups.JobCgroup | None) -> Verdict:
    """Feed stdin, drain stdout/stderr with caps, enforce time limits, then kill the tree."""
    out, err = Capture(limits.output_bytes), Capture(limits.output_bytes)
    status_buf = bytearray()
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    sel.register(status_r, selectors.EVENT_READ, status_buf)
    sel.register(pidfd, selectors.EVENT_READ, None)
    pending = memoryview(stdin or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
    deadline = t0 + limits.wall_s
    killed_for: str | None = None
    exited_at: float | None = None
    open_streams = 3
    try:
        while open_streams > 0 or exited_at is None:
            now = time.monotonic()
            if killed_for is None:
                if now >= deadline:
                    killed_for = "wall"
                elif cg is not None and cg.cpu_s() >= limits.cpu_s:
                    killed_for = "cpu"
                if killed_for:
                    _kill(proc, cg)
            if exited_at is not None and now - exited_at > 2.0:
                break  # writers gone from the namespace; do not wait on stragglers
            timeout = min(POLL_S, max(0.0, deadline - now)) if killed_for is None else 0.2
            for key, _ in sel.select(timeout):
                target = key.data
                if target is None:  # pidfd: the sh/setpriv/bwrap process exited
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                    if cg is not None:
                        cg.kill_all()
                elif target == "stdin":
                    try:
                        n = os.write(key.fd, pending[:65536])
                        pending = pending[n:]
                    except (BrokenPipeError, OSError):
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fileobj)
                        proc.stdin.close()
                else:
                    try:
                        chunk = os.read(key.fd, 65536)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                    elif isinstance(target, Capture):
                        if target.feed(chunk) and killed_for is None:
                            killed_for = "output"
                            _kill(proc, cg)
                    else:
                        target += chunk
    finally:
        sel.close()
        os.close(pidfd)
        _kill(proc, cg)
        _, wstatus, rusage = os.wait4(proc.pid, 0)
        rc = proc.returncode = os.waitstatus_to_exitcode(wstatus)
        for f in (proc.stdout, proc.stderr, proc.stdin):
            if f is not None and not f.closed:
                f.close()
    wall = time.monotonic() - t0
    status = _parse_status(bytes(status_buf))
    cpu = cg.cpu_s() if cg is not None else 0.0
    peak = cg.peak_memory() if cg is not None else 0
    oom = cg.oom_events() if cg is not None else 0
    if cg is None:
        cpu, peak = rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss * 1024
    verdict = Verdict(status="sandbox_error", cpu_s=cpu, wall_s=wall, peak_memory_bytes=peak,
                      stdout=bytes(out.data), stderr=bytes(err.data),
                      stdout_truncated=out.truncated, stderr_truncated=err.truncated,
                      stdout_total_bytes=out.total, stderr_total_bytes=err.total, backend="bwrap")
    if "child-pid" not in status and killed_for is None:
        verdict.error = f"bwrap did not start the command (exit {rc}): " + bytes(err.data[-2000:]).decode("utf-8", "replace")
        return verdict
    code = status.get("exit-code")
    if code is None:  # bwrap itself was killed (by us): the tree died with it
        exit_code, sig = None, int(signal.SIGKILL)
    elif code > 128 and code - 128 < 65:
        exit_code, sig = None, code - 128
    else:
        exit_code, sig = code, None
    verdict.exit_code, verdict.signal = exit_code, sig
    verdict.status, verdict.error = classify(
        exit_code=exit_code, signal=sig, killed_for=killed_for, oom_events=oom,
        cpu_s=cpu, limits=limits, stderr=verdict.stderr,
    )
    return verdict


def _kill(proc: subprocess.Popen, cg: cgroups.JobCgroup | None) -> None:
    """Kill bwrap (its namespace init dies with it, taking every process along) and the cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(proc.pid, signal.SIGKILL)  # never reaped before our wait4, so the pid is ours
    except ProcessLookupError:
        pass
    if cg is not None:
        cg.kill_all()


def _parse_status(raw: bytes) -> dict:
    """Merge the JSON documents bwrap writes to --json-status-fd."""
    merged: dict = {}
    dec = json.JSONDecoder()
    text = raw.decode("utf-8", "replace")
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            break
        if isinstance(obj, dict):
            merged.update(obj)
    return merged
