"""The Docker backend: pre-warmed containers per domain, one job at a time per container.

Containers: no network, read-only root, tmpfs /work /tmp /dev/shm, pids/memory(=memory+swap)/CPU
limits, all capabilities dropped, no-new-privileges, non-root, docker-init as pid 1, ulimits, no
Docker socket and an empty environment. Each job is one `exec` as the container's own job uid
(not the uid of the container's main process, so `kill -9 -1` cannot take the container down):
a small sh launcher unpacks the files from a tar on stdin, sets rlimits and execs the command.
The host supervises: output caps, CPU and wall limits (from the container's cgroup), and kills
every process of the job uid at the end. Between jobs a container is reset (work dirs wiped)
and health-checked; it is retired after a limit was hit, after `max_uses` jobs, or when its lease
nears expiry. Labels (pool, domain, worker, lease expiry) let `reap_containers` remove whatever a
dead worker left behind.
"""
from __future__ import annotations

import io
import itertools
import math
import os
import select
import socket
import struct
import tarfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import cgroups
from .bwrap import ENV_ALLOW
from .image import IMAGE
from .outcome import Capture, check_command, check_files, classify
from .pool import PoolConfig
from .types import Limits, SandboxError, Verdict

LABEL = "temper.sandbox"
"""Label present on every Temper sandbox container (value: the pool id)."""
JOB_UID_BASE = 200000
"""Job uids are JOB_UID_BASE + n, one per container, so per-user rlimits never collide."""
START_MARK = b"@@temper-start\n"
"""Written to stderr by the launcher just before it execs the command; stripped by the host."""
STDIN_PATH = "/tmp/.temper_stdin"
"""Where the job's stdin travels inside the tar; opened as fd 0 and unlinked before exec."""
CONTAINER_MAIN_UID = "65534:65534"
"""User of the container's main process (sleep): differs from every job uid."""

LAUNCHER = f"""
cd /work || exit 125
tar -xf - --no-same-owner -C / || exit 125
if [ -e {STDIN_PATH} ]; then exec 0< {STDIN_PATH}; rm -f {STDIN_PATH}; else exec 0< /dev/null; fi
ulimit -c 0
ulimit -S -t "$T_CPU" && ulimit -H -t "$((T_CPU + 1))" || exit 125
ulimit -f "$T_FSIZE" && ulimit -n "$T_NOFILE" && ulimit -p "$T_NPROC" || exit 125
unset T_CPU T_FSIZE T_NOFILE T_NPROC
printf '@@temper-start\\n' >&2
exec "$@"
"""
"""sh script run by each job exec; "$@" is the command."""

RESET = (
    "rm -rf /work/* /work/.[!.]* /work/..?* /tmp/* /tmp/.[!.]* /tmp/..?* "
    "/dev/shm/* /dev/shm/.[!.]* /dev/shm/..?* 2>/dev/null; "
    'test -z "$(ls -A /work /tmp /dev/shm)" && echo temper-ok'
)
"""Reset and health check between jobs (runs as the job uid)."""

_worker_start = None


def _proc_start(pid: int) -> str:
    """Start time of a process in clock ticks since boot ('' when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def worker_labels() -> dict[str, str]:
    """Labels naming this worker process (host, pid and pid start time, to survive pid reuse)."""
    return {"temper.worker_host": socket.gethostname(), "temper.worker_pid": str(os.getpid()),
            "temper.worker_start": _proc_start(os.getpid())}


def _worker_alive(labels: dict[str, str]) -> bool:
    """True unless we can tell the labelled worker is gone (only decidable on its own host)."""
    if labels.get("temper.worker_host") != socket.gethostname():
        return True
    pid = labels.get("temper.worker_pid", "")
    if not pid.isdigit():
        return False
    return _proc_start(int(pid)) == labels.get("temper.worker_start") != ""


def _client(timeout: int = 60):
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as e:  # docker raises several unrelated types when the engine is down
        raise SandboxError(f"Docker engine unreachable: {e}") from e


def reap_containers(*, all_workers: bool = False, client=None) -> int:
    """Remove Temper sandbox containers whose lease expired or whose worker is dead.

    all_workers=True removes every Temper sandbox container (for tests and shutdown scripts).
    """
    client = client or _client()
    now = time.time()
    removed = 0
    try:
        containers = client.containers.list(all=True, filters={"label": LABEL})
    except Exception as e:
        raise SandboxError(f"cannot list containers: {e}") from e
    for c in containers:
        labels = c.labels or {}
        try:
            expired = float(labels.get("temper.lease_expiry", "0")) < now
        except ValueError:
            expired = True
        if all_workers or expired or not _worker_alive(labels):
            try:
                c.remove(force=True)
                removed += 1
            except Exception:
                pass
    return removed


@dataclass(eq=False)
class Container:
    """One warm container and what the host knows about it."""

    id: str
    """Docker container id."""
    key: tuple
    """(domain, memory_mb, pids, tmpfs_mb): only jobs with the same key may use it."""
    job_uid: int
    """Uid the jobs in this container run as."""
    expiry: float
    """Lease expiry (unix time) written on its labels."""
    cgroup: cgroups.JobCgroup | None = None
    """The container's cgroups seen from the host (None when not accessible)."""
    uses: int = 0
    """Jobs served so far."""
    api: object = field(default=None, repr=False)
    """docker low-level API client."""


class DockerBackend:
    """Pre-warmed container pool per (domain, memory/pids/tmpfs shape)."""

    name = "docker"

    def __init__(self, config: PoolConfig | None = None, image: str = IMAGE, client=None, reap_on_start: bool = True):
        self.config = config or PoolConfig()
        self.image = image
        self.client = client or _client()
        self.api = self.client.api
        self.pool_id = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._idle: dict[tuple, list[Container]] = {}
        self._all: set[Container] = set()
        self._uids = itertools.count(JOB_UID_BASE + (os.getpid() % 1000) * 1000)
        self._bg = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-docker")
        self._closed = False
        self._pending: set = set()
        try:
            self.client.images.get(image)
        except Exception as e:
            raise SandboxError(f"sandbox image {image!r} missing: run `python -m workers.sandbox.image build` ({e})") from e
        if reap_on_start:
            reap_containers(client=self.client)
        self._reaper = threading.Thread(target=self._reap_loop, daemon=True, name="sandbox-reaper")
        self._reaper.start()

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
        """Wait until background resets, retirements and top-ups are done (tests, shutdown)."""
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

    def container_ids(self) -> list[str]:
        """Ids of every container this pool holds (idle or busy)."""
        with self._lock:
            return [c.id for c in self._all]

    # ---- container lifecycle -------------------------------------------------------------
    def _create(self, key: tuple) -> Container:
        import docker.types

        domain, memory_mb, pids, tmpfs_mb = key
        expiry = time.time() + self.config.lease_s
        labels = {LABEL: self.pool_id, "temper.pool": self.pool_id, "temper.domain": domain,
                  "temper.lease_expiry": f"{expiry:.0f}", **worker_labels()}
        tmpfs_opt = f"size={tmpfs_mb}m,mode=1777,exec"
        try:
            c = self.client.containers.run(
                self.image, ["sleep", "infinity"], detach=True, labels=labels,
                network_mode="none", read_only=True, user=CONTAINER_MAIN_UID, init=True,
                tmpfs={"/work": tmpfs_opt, "/tmp": tmpfs_opt}, shm_size=f"{tmpfs_mb}m",
                pids_limit=pids + 8, mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m",
                nano_cpus=int(1e9 * max(1, os.cpu_count() or 1)),
                cap_drop=["ALL"], security_opt=["no-new-privileges"], environment={},
                hostname="sandbox", working_dir="/work", ipc_mode="private",
                ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0),
                         docker.types.Ulimit(name="nofile", soft=4096, hard=4096)],
            )
            c.reload()
            pid = c.attrs["State"]["Pid"]
        except Exception as e:
            raise SandboxError(f"cannot start sandbox container: {e}") from e
        dirs = cgroups.cgroup_dirs_of(pid) if pid else None
        layout = cgroups.detect()
        cg = cgroups.JobCgroup.existing(layout, dirs) if (dirs and layout) else None
        cont = Container(c.id, key, next(self._uids), expiry, cg, api=self.api)
        with self._lock:
            self._all.add(cont)
        return cont

    def _remove(self, cont: Container) -> None:
        with self._lock:
            self._all.discard(cont)
        try:
            self.api.remove_container(cont.id, force=True)
        except Exception:
            pass

    def _top_up(self, key: tuple) -> None:
        with self._lock:
            missing = self.config.warm_per_domain - len(self._idle.get(key, []))
        for _ in range(max(0, missing)):
            if self._closed:
                return
            try:
                cont = self._create(key)
            except SandboxError:
                return
            with self._lock:
                self._idle.setdefault(key, []).append(cont)

    def warm(self, domain: str, limits: Limits | None = None) -> None:
        """Start the warm containers for a domain now (blocks until they are up)."""
        self._top_up(_key(domain, limits or Limits()))

    def acquire(self, domain: str, limits: Limits) -> Container:
        key = _key(domain, limits)
        cont = None
        with self._lock:
            idle = self._idle.setdefault(key, [])
            while idle:
                c = idle.pop()
                if c.expiry > time.time() + limits.wall_s + 30:
                    cont = c
                    break
                self._submit(self._remove, c)
        if cont is None:
            cont = self._create(key)
        self._submit(self._top_up, key)
        return cont

    def release(self, cont: Container, verdict: Verdict | None) -> None:
        retire = (verdict is None or verdict.status in ("timeout_cpu", "timeout_wall", "memory_limit", "output_limit")
                  or cont.uses >= self.config.max_uses or self._closed)
        if retire:
            self._submit(self._remove, cont)
            self._submit(self._top_up, cont.key)
        else:
            self._submit(self._reset, cont)

    def _reset(self, cont: Container) -> None:
        """Kill leftovers, wipe the work dirs and check the container answers; else retire."""
        try:
            self._kill_job(cont)
            out = self._exec_simple(cont, ["sh", "-c", RESET])
            healthy = b"temper-ok" in out
        except Exception:
            healthy = False
        if healthy and not self._closed:
            with self._lock:
                self._idle.setdefault(cont.key, []).append(cont)
        else:
            self._remove(cont)
            self._top_up(cont.key)

    def _exec_simple(self, cont: Container, cmd: list[str]) -> bytes:
        ex = self.api.exec_create(cont.id, cmd, user=f"{cont.job_uid}:{cont.job_uid}", stdin=False)
        return self.api.exec_start(ex["Id"])

    def _kill_job(self, cont: Container) -> None:
        """SIGKILL every process of the job uid in the container (host side)."""
        if cont.cgroup is None:
            try:
                self._exec_simple(cont, ["sh", "-c", "kill -9 -1"])
            except Exception:
                pass
            return

        def job_pids() -> list[int]:
            found = []
            for pid in cont.cgroup.pids():
                try:
                    uid_line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                                    if line.startswith("Uid:"))
                except (OSError, StopIteration):
                    continue
                if int(uid_line.split()[1]) == cont.job_uid:
                    found.append(pid)
            return found

        cgroups.kill_pids(job_pids)

    def _reap_loop(self) -> None:
        period = max(5.0, self.config.lease_s / 4)
        while not self._closed:
            time.sleep(period)
            if self._closed:
                return
            try:
                reap_containers(client=self.client)
            except SandboxError:
                pass

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conts = list(self._all)
            self._idle.clear()
        for c in conts:
            self._remove(c)
        self._bg.shutdown(wait=True)
        with self._lock:
            leftover = list(self._all)
        for c in leftover:
            self._remove(c)

    # ---- one job -------------------------------------------------------------------------
    def run(self, cont: Container, files: dict, command: list[str], limits: Limits,
            stdin: bytes | None) -> Verdict:
        enc = check_files(files)
        command = check_command(command)
        cont.uses += 1
        payload = _tar(enc, stdin)
        env = dict(ENV_ALLOW)
        env.update(T_CPU=str(max(1, math.ceil(limits.cpu_s))), T_FSIZE=str(limits.file_size_mb * 2048),
                   T_NOFILE=str(limits.open_files), T_NPROC=str(limits.pids + 8))
        cg = cont.cgroup
        if cg is not None:
            cg.reset_peak()
            cpu0, oom0 = cg.cpu_s(), cg.oom_events()
        t0 = time.monotonic()
        try:
            ex = self.api.exec_create(cont.id, ["/bin/sh", "-c", LAUNCHER, "sh", *command], stdin=True,
                                      user=f"{cont.job_uid}:{cont.job_uid}", workdir="/work", environment=env)
            sock = self.api.exec_start(ex["Id"], socket=True)
        except Exception as e:
            raise SandboxError(f"docker exec failed: {e}") from e
        raw: socket.socket = getattr(sock, "_sock", sock)
        try:
            out, err, killed_for, exec_pid = self._supervise(cont, ex["Id"], raw, payload, limits, t0)
        finally:
            self._kill_job(cont)
            try:
                sock.close()
            except Exception:
                pass
        wall = time.monotonic() - t0
        try:
            info = self.api.exec_inspect(ex["Id"])
        except Exception as e:
            raise SandboxError(f"docker exec_inspect failed: {e}") from e
        code = info.get("ExitCode")
        cpu = (cg.cpu_s() - cpu0) if cg is not None else 0.0
        peak = cg.peak_memory() if cg is not None else 0
        oom = (cg.oom_events() - oom0) if cg is not None else 0
        stderr = bytes(err.data)
        started = stderr.startswith(START_MARK)
        if started:
            stderr = stderr[len(START_MARK):]
        verdict = Verdict(status="sandbox_error", cpu_s=cpu, wall_s=wall, peak_memory_bytes=peak,
                          stdout=bytes(out.data), stderr=stderr,
                          stdout_truncated=out.truncated, stderr_truncated=err.truncated,
                          stdout_total_bytes=out.total,
                          stderr_total_bytes=err.total - (len(START_MARK) if started else 0),
                          backend="docker")
        if not started:
            if killed_for is None:
                verdict.error = f"launcher failed in container (exit {code}): " + stderr[-2000:].decode("utf-8", "replace")
                return verdict
        if code is None or (info.get("Running") and killed_for is None):
            verdict.error = "exec state unknown after the stream ended"
            return verdict
        if killed_for is not None:
            exit_code, sig = None, 9
        elif code > 128 and code - 128 < 65:
            exit_code, sig = None, code - 128
        else:
            exit_code, sig = code, None
        verdict.exit_code, verdict.signal = exit_code, sig
        verdict.status, verdict.error = classify(exit_code=exit_code, signal=sig, killed_for=killed_for,
                                                 oom_events=oom, cpu_s=cpu, limits=limits, stderr=verdict.stderr)
        return verdict

    def _supervise(self, cont: Container, exec_id: str, raw: socket.socket, payload: bytes,
                   limits: Limits, t0: float):
        """Send the tar, demultiplex stdout/stderr with caps, enforce limits."""
        out, err = Capture(limits.output_bytes), Capture(limits.output_bytes + len(START_MARK))
        try:
            raw.sendall(payload)
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the launcher may have died already; the verdict will say so
        pidfd = -1
        next_inspect = 0.0
        deadline = t0 + limits.wall_s
        killed_for = None
        buf = bytearray()
        exited_at = None
        eof = False
        cg = cont.cgroup
        cpu0 = cg.cpu_s() if cg is not None else 0.0
        raw.setblocking(False)
        try:
            while not eof:
                now = time.monotonic()
                if killed_for is None:
                    if now >= deadline:
                        killed_for = "wall"
                    elif cg is not None and cg.cpu_s() - cpu0 >= limits.cpu_s:
                        killed_for = "cpu"
                    if killed_for:
                        self._kill_job(cont)
                if exited_at is not None and now - exited_at > 0.05 and not killed_for:
                    self._kill_job(cont)  # the main process is gone: take daemons holding stdout
                if exited_at is not None and now - exited_at > 3.0:
                    break
                if pidfd < 0 and exited_at is None and now >= next_inspect:
                    # exec_start returns before the process exists: learn its pid (then wait on a
                    # pidfd) or that it already ended, so daemons holding stdout cannot stall us
                    next_inspect = now + 0.03
                    try:
                        info = self.api.exec_inspect(exec_id)
                    except Exception:
                        info = {}
                    if info.get("Pid"):
                        try:
                            pidfd = os.pidfd_open(info["Pid"])
                        except OSError:
                            exited_at = now
                    if info and not info.get("Running", True) and info.get("ExitCode") is not None:
                        exited_at = now
                rl = [raw] + ([pidfd] if pidfd >= 0 and exited_at is None else [])
                ready, _, _ = select.select(rl, [], [], 0.03 if killed_for is None else 0.2)
                if pidfd >= 0 and pidfd in ready:
                    exited_at = time.monotonic()
                if raw in ready:
                    try:
                        chunk = raw.recv(262144)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        eof = True
                    buf += chunk
                    while len(buf) >= 8:
                        stream, size = buf[0], struct.unpack(">I", buf[4:8])[0]
                        if len(buf) < 8 + size:
                            break
                        data = bytes(buf[8:8 + size])
                        del buf[:8 + size]
                        target = out if stream == 1 else err
                        if target.feed(data) and killed_for is None:
                            killed_for = "output"
                            self._kill_job(cont)
        finally:
            if pidfd >= 0:
                os.close(pidfd)
        return out, err, killed_for, None


def _key(domain: str, limits: Limits) -> tuple:
    return (domain, limits.memory_mb, limits.pids, limits.tmpfs_mb)


def _tar(files: dict[str, bytes], stdin: bytes | None) -> bytes:
    """Tar stream of the job files under work/ (and stdin under tmp/), extracted at /."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.GNU_FORMAT) as tf:
        dirs: set[str] = set()
        for name, content in files.items():
            parts = name.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    ti = tarfile.TarInfo("work/" + d)
                    ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                    tf.addfile(ti)
            ti = tarfile.TarInfo("work/" + name)
            ti.size, ti.mode = len(content), 0o755 if content.startswith(b"#!") else 0o644
            tf.addfile(ti, io.BytesIO(content))
        if stdin:
            ti = tarfile.TarInfo(STDIN_PATH.lstrip("/"))
            ti.size, ti.mode = len(stdin), 0o600
            tf.addfile(ti, io.BytesIO(stdin))
    return bio.getvalue()
