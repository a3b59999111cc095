"""The bubblewrap command line of a sandbox, shared by the warm pool and the cold backend.

Every bwrap sandbox runs the Temper agent (agent.py) as its pid namespace's init
(`--as-pid-1`): the agent writes each job's files, forks and supervises the job, and resets the
sandbox afterwards. A sandbox is started by `sh` (as root: joins the cgroup, sets rlimits) ->
`setpriv` (drops to the sandbox's uid, no capabilities) -> `bwrap` (namespaces, mounts) -> the
agent; `sh` and `setpriv` exec into the next, so above the job there are only bwrap (outside
the sandbox's pid namespace, unreachable from it) and the agent.
"""
from __future__ import annotations

import os
import shutil

from .types import Limits

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


def bwrap_args(limits: Limits, privileged: bool) -> list[str]:
    """The bwrap command line, up to and including `--`, of a sandbox whose command (the agent)
    is the pid namespace's init."""
    tmpfs = str(limits.tmpfs_mb << 20)
    args = [
        "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
        "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv", "--as-pid-1",
    ]
    for k, v in ENV_ALLOW.items():
        args += ["--setenv", k, v]
    if privileged:
        args += ["--cap-drop", "ALL"]
    args += _root_binds()
    # /dev/mqueue: the IPC namespace's POSIX message queues, which the agent lists and removes
    # after each job (without the mount they exist all the same, only unseen)
    args += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue",
             "--size", tmpfs, "--tmpfs", "/dev/shm",
             "--size", tmpfs, "--tmpfs", "/tmp",
             "--size", tmpfs, "--tmpfs", WORK_DIR]
    # bwrap's own root and /dev are writable tmpfs mounts: make them read-only, so that only
    # the size-capped /work, /tmp and /dev/shm and /dev/mqueue (emptied between jobs) are writable
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK_DIR, "--"]
    return args
