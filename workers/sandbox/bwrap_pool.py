"""Warm bubblewrap sandboxes: pre-started per domain, one job at a time, reused within a domain.

Why: a fresh bwrap per job costs the namespace setup (clone with new user, mount, pid, net, ipc,
uts and cgroup namespaces, then the mounts: 20-55 ms on the build machine), a shell + setpriv
start, the agent's start and a cgroup create/remove. A warm sandbox pays that once: the bwrap
command line of `bwrap.bwrap_args` (every namespace unshared, no nested user namespaces,
die-with-parent, new session, cleared environment, capabilities dropped, read-only binds of the
runtime directories only, private /proc and /dev, read-only root and /dev, size-capped tmpfs
/work, /tmp and /dev/shm, /dev/mqueue), run as its own slot uid inside its own cgroup, with the
agent (agent.py, also the Docker backend's pid 1) as the pid namespace's init (`--as-pid-1`).
A job is then a frame over a pipe and a fork+exec inside: the agent gives it a fresh session,
rlimits (CPU, file size, open files, processes, no core), and after it resets the sandbox
(every process killed; IPC objects, message queues, keys and the writable dirs emptied; the
agent's own state checked) and reports ready. The host checks the sandbox is still alive and
that its cgroup holds only bwrap and the agent before reusing it: the health check. A sandbox
is retired after any timeout, memory or output limit, when the agent was lost during a job
(`runtime_error`, never retried: see agent_host.py), when its reset fails, and after
`max_uses` jobs.

Cgroup per sandbox, not per job: its memory limit is the idle agent's own charge (measured once
the agent is ready, a few MiB) plus the job's `memory_mb`; CPU time and peak memory are read as
differences / after a peak reset per job; pids.max is the job's `pids` plus bwrap and the agent.
If the worker dies, bwrap dies with it (die-with-parent), the agent sees EOF and exits, and the
cgroup is removed by the next `reap_cgroups()` (a worker start). The kernel takes "parent" to be
the thread that forked bwrap, so every sandbox is started from one long-lived thread of the
backend, never from a caller's thread (whose end would kill the sandbox under a later job).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import bwrap, cgroups
from .agent import AGENT_SOURCE, agent_zygote_args
from .agent_host import PipeAgentStream, PooledBackend, children, pool_key, run_agent_job, zygote_of
from .pool import PoolConfig
from .types import Limits, Outputs, SandboxError, Verdict

MAX_SLOTS = 100
"""Live sandboxes per worker process and backend (the uid block size)."""
WARM_UID_BASE = 1_400_000
"""Warm sandboxes run as WARM_UID_BASE + (worker pid % 1000) * MAX_SLOTS + n: a block apart
from the cold sandboxes' (bwrap_backend.SLOT_UID_BASE), so no two live sandboxes share a uid."""
READY_TIMEOUT_S = 20.0
"""Longest wait for a new sandbox's agent to report ready."""
RESET_TIMEOUT_S = 10.0
"""Longest wait for the agent's ready frame after a job (kill, wipe)."""
START_HEADROOM_MB = 64
"""Memory allowed while the agent starts, before the limit is set to its charge + the job's."""
KEYS_GONE_S = 5.0
"""Longest wait for a removed sandbox's keys to be collected before its uid may be used again."""
RESIDENT = 2
"""Processes of an idle sandbox in its cgroup: bwrap (outside the namespaces) and the agent."""


@dataclass(eq=False)
class WarmSandbox:
    """One warm sandbox and what the host knows about it."""

    key: tuple
    """(domain, memory_mb, pids, tmpfs_mb): only jobs with the same key may use it."""
    uid: int
    """Host uid of bwrap, the agent and every job in it (unique among live sandboxes)."""
    proc: subprocess.Popen
    """The outer bwrap process (sh and setpriv exec'd into it)."""
    stream: PipeAgentStream
    """Frames to and from the agent."""
    cgroup: cgroups.JobCgroup | None
    """The sandbox's cgroup (None where the machine allows none: rlimits only)."""
    agent_pid: int = 0
    """Host pid of the agent (the sandbox's pid 1)."""
    baseline_bytes: int = 0
    """Memory charged to the cgroup by the idle agent."""
    uses: int = 0
    """Jobs served so far."""
    retiring: bool = False
    """Being removed: no longer counted as one of its domain's warm sandboxes."""
    removed: bool = False
    """Killed and its cgroup removed (once)."""
    busy: bool = False
    """A job's thread is using its stream (the stream is closed only after)."""
    created: float = field(default_factory=time.monotonic)
    """When it was started."""
    idle_since: float = 0.0
    """When it last became idle (the pool's clock): long-idle sandboxes above the target go."""


def _key_owners() -> set[int]:
    """Uids that own kernel keys now (/proc/key-users; keys outlive their sandbox a moment)."""
    try:
        with open("/proc/key-users") as f:
            return {int(line.split(":", 1)[0]) for line in f}
    except (OSError, ValueError):
        return set()


class WarmBwrapBackend(PooledBackend):
    """Pool of warm bwrap sandboxes per (domain, memory/pids/tmpfs shape)."""

    name = "bwrap"
    uid_base = WARM_UID_BASE
    """First uid of this backend's blocks (one block of MAX_SLOTS uids per worker process)."""
    zygote = True
    """Whether each sandbox's agent starts a zygote (agent_zygote.ZYGOTE_SOURCE): sandboxes that serve
    many jobs; a cold sandbox serves one, for which starting one would only cost."""

    @property
    def resident(self) -> int:
        """Processes of an idle sandbox in its cgroup: bwrap, the agent and its zygote."""
        return RESIDENT + (1 if self.zygote else 0)

    def __init__(self, config: PoolConfig | None = None):
        if not bwrap.available():
            raise SandboxError("bubblewrap is not installed (apt-get install bubblewrap)")
        self._init_pool(config or PoolConfig(), workers=2, thread_name="sandbox-bwrap")
        base = self.uid_base + (os.getpid() % 1000) * MAX_SLOTS
        self._free_uids = list(range(base, base + MAX_SLOTS))  # freed ones go to the back
        self._privileged = os.geteuid() == 0
        cgroups.reap_cgroups()  # a worker start reaps what dead workers left
        layout = cgroups.detect()
        self.cpu_weighted = bool(layout and cgroups.set_cpu_weight(layout, self.config.cpu_weight))
        """Whether the sandboxes share the CPU weight ``config.cpu_weight`` (cgroups.set_cpu_weight)."""
        # bwrap runs with --die-with-parent, whose "parent" is the thread that forked it: a
        # sandbox started from a caller's thread died when that thread ended, in the middle of a
        # later job. One long-lived thread of the backend starts them all.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-bwrap-spawn")

    def agent_pids(self) -> set[int]:
        """Host pids of the live sandboxes' bwrap, agent and zygote processes (they belong there)."""
        with self._lock:
            return {p for sb in self._all for p in (sb.proc.pid, sb.agent_pid, zygote_of(sb.agent_pid)) if p}

    def cgroup_dirs(self) -> set[Path]:
        """Cgroup directories held by live sandboxes."""
        with self._lock:
            return {d for sb in self._all if sb.cgroup is not None for d in sb.cgroup.dirs.values()}

    def sandboxes(self) -> list[WarmSandbox]:
        """Every live sandbox (idle, busy or resetting)."""
        with self._lock:
            return list(self._all)

    # ---- sandbox lifecycle ---------------------------------------------------------------
    def _take_uid(self) -> int:
        """The free uid freed longest ago that owns no kernel keys: a sandbox's keys are
        collected a moment after it ends, and until then a new sandbox of the same uid would
        see them. When none is free, the oldest idle sandbox is removed for one."""
        with self._lock:
            uid = self._clean_uid()
            if uid is not None:
                return uid
            victims = [sb for idle in self._idle.values() for sb in idle]
            if not victims:
                raise SandboxError("no free bwrap sandbox uid: too many live sandboxes")
            oldest = min(victims, key=lambda sb: sb.created)
            self._idle[oldest.key].remove(oldest)
        self._remove(oldest)
        end = time.monotonic() + KEYS_GONE_S
        while True:
            with self._lock:
                uid = self._clean_uid()
            if uid is not None:
                return uid
            if time.monotonic() > end:
                raise SandboxError("no free bwrap sandbox uid: the kernel kept the last sandboxes' keys")
            time.sleep(0.02)

    def _clean_uid(self) -> int | None:
        """Take the first free uid (freed longest ago) that owns no key; call with the lock held."""
        owners = _key_owners()
        for i, uid in enumerate(self._free_uids):
            if uid not in owners:
                return self._free_uids.pop(i)
        return None

    def _wrapper_script(self, cg: cgroups.JobCgroup | None, uid: int, pids: int) -> str:
        """sh: join the cgroup, set the sandbox-wide rlimits, drop to the slot uid, exec bwrap."""
        lines = []
        if cg is not None:
            lines += [f"echo 0 > '{p}' || exit 121" for p in cg.procs_files()]
            lines += [f"echo 0 > '{p}' 2>/dev/null || true" for p in cg.optional_procs_files()]
        lines += ["ulimit -c 0"]
        if self._privileged:
            lines += [f"ulimit -p {pids + 16}",
                      f'exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all -- "$@"']
        else:
            lines.append('exec "$@"')
        return "\n".join(lines)

    def _create(self, key: tuple) -> WarmSandbox:
        _domain, memory_mb, pids, tmpfs_mb = key
        uid = self._take_uid()
        cg = None
        layout = cgroups.detect()
        fds: list[int] = []
        try:
            if layout is not None:
                try:
                    cg = cgroups.JobCgroup(layout, (memory_mb + START_HEADROOM_MB) << 20, pids + self.resident)
                except OSError as e:
                    raise SandboxError(f"cannot create cgroup: {e}") from e
            shape = Limits(memory_mb=memory_mb, pids=pids, tmpfs_mb=tmpfs_mb)
            argv = bwrap.bwrap_args(shape, self._privileged) + ["/usr/bin/python3", "-I", "-S", "-c", AGENT_SOURCE,
                                                                 *(agent_zygote_args() if self.zygote else [])]
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            fds = [in_r, in_w, out_r, out_w, err_r, err_w]
            try:
                # cwd /: no process of the chain carries the worker's directory (nor, env={}, its environment)
                proc = self._spawner.submit(
                    subprocess.Popen, ["/bin/sh", "-c", self._wrapper_script(cg, uid, pids), "sh", *argv],
                    stdin=in_r, stdout=out_w, stderr=err_w, env={}, cwd="/",
                    start_new_session=True, close_fds=True).result()
            except (OSError, RuntimeError) as e:  # RuntimeError: the backend is closed
                raise SandboxError(f"cannot start bwrap: {e}") from e
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            fds = []
            stream = PipeAgentStream(in_w, out_r, err_r)
            sb = WarmSandbox(key, uid, proc, stream, cg)
            with self._lock:
                self._all.add(sb)
                self.started += 1
        except BaseException:
            for fd in fds:
                os.close(fd)
            if cg is not None:
                cg.remove()
            with self._lock:
                self._free_uids.append(uid)
            raise
        try:
            stream.wait_for(4, READY_TIMEOUT_S)
            kids = children(proc.pid)
            sb.agent_pid = kids[0] if kids else 0
            if cg is not None:
                sb.baseline_bytes = cg.memory_current()
                cg.set_memory_limit(sb.baseline_bytes + (memory_mb << 20))
        except (SandboxError, OSError) as e:
            self._remove(sb)
            raise SandboxError(f"warm bwrap sandbox did not start: {e}") from e
        return sb

    def _remove(self, sb: WarmSandbox) -> None:
        """Kill the sandbox (bwrap's pid namespace dies with it), remove its cgroup, free its uid.
        Runs once per sandbox (a second call, after shutdown removed it under a job, only closes
        the stream, which is left to the job's thread while it runs)."""
        sb.retiring = True
        with self._lock:
            first, sb.removed = not sb.removed, True
        if first:
            try:  # bwrap is not reaped before the wait below, so its pid (and group) is still its own
                os.killpg(sb.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                sb.proc.kill()
            except ProcessLookupError:
                pass
            if sb.cgroup is not None:
                sb.cgroup.remove()
            sb.proc.wait()
            with self._lock:
                if sb in self._all:
                    self._all.discard(sb)
                    self._free_uids.append(sb.uid)
                    self.retired += 1
        if not sb.busy:
            sb.stream.close()

    # ---- Backend protocol ----------------------------------------------------------------
    def acquire(self, domain: str, limits: Limits) -> WarmSandbox:
        key = pool_key(domain, limits)
        sb = self._idle_or_new(key)
        if self._missing(key) > 0:  # only then: a background wake-up per job costs CPU on the clock
            self._submit(self._top_up, key)
        return sb

    def run(self, sb: WarmSandbox, files: dict, command: list[str], limits: Limits, stdin: bytes | None, *,
            env: dict[str, str] | None = None, keep: bool = False, outputs: Outputs | None = None) -> Verdict:
        sb.uses += 1
        try:  # a sandbox that died while idle is not the next job's doing (WNOWAIT: not reaped)
            gone = os.waitid(os.P_PID, sb.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            gone = True
        if gone:
            raise SandboxError("warm bwrap sandbox exited while idle")
        address_space = None if sb.cgroup is not None else max(limits.memory_mb, 64) << 20
        return self._run_busy(sb, lambda: run_agent_job(sb.stream, sb.cgroup, files, command, limits, stdin,
                                                        "bwrap", address_space, env=env, keep=keep, outputs=outputs))

    def _reset(self, sb: WarmSandbox) -> None:
        """Wait for the agent's ready frame (it killed everything, removed IPC objects and wiped
        the writable dirs), then check the sandbox holds nothing but bwrap, the agent and its zygote."""
        try:
            sb.stream.wait_for(4, RESET_TIMEOUT_S)
            healthy = sb.proc.poll() is None and (sb.cgroup is None or sb.cgroup.pids_current() <= self.resident)
        except SandboxError:
            healthy = False
        self._reset_done(sb, healthy)

    def close(self) -> None:
        self._closed = True
        self._remove_all()
        self._spawner.shutdown(wait=True)
