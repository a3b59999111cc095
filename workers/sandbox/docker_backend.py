"""The Docker backend: pre-warmed containers per domain, one job at a time per container.

Containers: no network, read-only root, tmpfs /work /tmp /dev/shm, pids/memory(=memory+swap)/CPU
limits, all capabilities dropped, no-new-privileges, a non-root uid of its own, ulimits, no Docker
socket and an empty environment. Pid 1 is the Temper agent (agent.py): an init that reaps
orphans, cannot be killed from inside, and runs each job the host sends over the attached
stdin/stdout (so a job costs a fork+exec in the container, not a `docker exec`). The host
supervises: output caps and CPU time (from the container's cgroup) end a job with a kill frame;
the agent enforces wall time and ends every job with kill(-1, SIGKILL), then wipes the work dirs
and reports ready (reset + health check). A container is retired after a limit was hit, after
`max_uses` jobs, when its lease nears expiry, or when it stops answering. Labels (pool, domain,
worker, lease expiry) let `reap_containers` remove whatever a dead worker left behind.
"""
from __future__ import annotations

import itertools
import os
import select
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import cgroups
from .agent import AGENT_SOURCE, agent_zygote_args
from .agent_host import FrameError, FrameReader, PooledBackend, SendError, pool_key, run_agent_job, wait_for, zygote_of
from .image import IMAGE
from .pool import PoolConfig
from .types import Limits, Outputs, SandboxError, Verdict

LABEL = "temper.sandbox"
"""Label present on every Temper sandbox container (value: the pool id)."""
JOB_UID_BASE = 200000
"""Each container runs as its own uid JOB_UID_BASE + n, so per-user rlimits never collide."""
READY_TIMEOUT_S = 30.0
"""Longest wait for a new container's agent to report ready."""

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
    client = None
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as e:  # docker raises several unrelated types when the engine is down
        error = f"Docker engine unreachable: {e}"
        if client is not None:
            client.close()
    # Raised outside the handler: the failed connection's exception (and, through its frames, its
    # socket) is freed now rather than by a later garbage collection, wherever that falls.
    raise SandboxError(error)


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


class AgentStream:
    """Framed messages to and from a container's agent over the attach socket (docker's
    8-byte stream headers are removed first; the agent's own stderr is kept as `agent_stderr`)."""

    def __init__(self, sock):
        self.sock = sock
        self.raw: socket.socket = getattr(sock, "_sock", sock)
        self.raw.setblocking(False)
        self._docker = bytearray()
        self._frames = FrameReader()  # the agent's own frames, once docker's headers are removed
        self.agent_stderr = bytearray()
        self.eof = False
        self.lost = ""
        """Why the agent was lost during a job ('' while it is sound): the container must go."""

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        data = memoryview(kind + struct.pack(">I", len(payload)) + payload)
        accepted = 0
        self.raw.setblocking(True)
        try:
            while accepted < len(data):
                accepted += self.raw.send(data[accepted:])
        except OSError as e:
            raise SendError(f"sandbox agent unreachable: {e}", accepted) from e
        finally:
            self.raw.setblocking(False)

    def next_frame(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame from the agent, or None when none arrived within `timeout` seconds;
        FrameError on bytes that are not docker's stream frames around the agent's frames."""
        frame = self._frames.parse_one()
        if frame is not None or self.eof:
            return frame
        ready, _, _ = select.select([self.raw], [], [], timeout)
        if not ready:
            return None
        try:
            chunk = self.raw.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
        self._docker += chunk
        while len(self._docker) >= 8:
            stream, size = self._docker[0], struct.unpack(">I", self._docker[4:8])[0]
            if stream not in (1, 2):
                raise FrameError(f"garbage from the container's attach stream (stream {stream})")
            if len(self._docker) < 8 + size:
                break
            data = self._docker[8:8 + size]
            del self._docker[:8 + size]
            if stream == 1:
                self._frames.buf += data
            else:
                self.agent_stderr = (self.agent_stderr + data)[-4096:]
        return self._frames.parse_one()

    def wait_for(self, kind: int, timeout: float) -> None:
        """Read frames until one of `kind` arrives; raises SandboxError on timeout or EOF."""
        wait_for(self, kind, timeout)

    def close(self) -> None:
        """Close the attach socket (the file object docker-py returns does not close it)."""
        for s in (self.sock, self.raw):
            try:
                s.close()
            except Exception:
                pass


RESIDENT = 2
"""Processes of an idle container: the agent and its zygote."""


@dataclass(eq=False)
class Container:
    """One warm container and what the host knows about it."""

    id: str
    """Docker container id."""
    key: tuple
    """(domain, memory_mb, pids, tmpfs_mb): only jobs with the same key may use it."""
    uid: int
    """Uid the agent and its jobs run as (unique to this container)."""
    expiry: float
    """Lease expiry (unix time) written on its labels."""
    stream: AgentStream
    """Connection to the agent."""
    cgroup: cgroups.JobCgroup | None = None
    """The container's cgroups seen from the host (None when not accessible)."""
    agent_pid: int = 0
    """Host pid of the agent (the container's pid 1)."""
    uses: int = 0
    """Jobs served so far."""
    retiring: bool = False
    """Being removed: no longer counted as one of its domain's warm containers."""
    removed: bool = False
    """Removed from the engine (once)."""
    busy: bool = False
    """A job's thread is using its stream (the stream is closed only after)."""
    idle_since: float = 0.0
    """When it last became idle (the pool's clock): long-idle containers above the target go."""


class DockerBackend(PooledBackend):
    """Pre-warmed container pool per (domain, memory/pids/tmpfs shape)."""

    name = "docker"

    def __init__(self, config: PoolConfig | None = None, image: str = IMAGE, client=None, reap_on_start: bool = True):
        self._init_pool(config or PoolConfig(), workers=4, thread_name="sandbox-docker")
        self.image = image
        self._own_client = client is None
        self.client = client or _client()
        self.api = self.client.api
        self.pool_id = uuid.uuid4().hex[:12]
        self._uids = itertools.count(JOB_UID_BASE + (os.getpid() % 1000) * 1000)
        self._stop = threading.Event()
        try:
            self._check_engine(image)
        except SandboxError:
            if self._own_client:  # its socket closes now, not whenever the failed object is collected
                self.client.close()
            raise
        if reap_on_start:
            reap_containers(client=self.client)
        self._reaper = threading.Thread(target=self._reap_loop, daemon=True, name="sandbox-reaper")
        self._reaper.start()

    def _check_engine(self, image: str) -> None:
        """The image is there and the engine answers (SandboxError naming which is not; raised
        outside the handlers, so the engine's exception and the response and socket its frames
        hold are freed at once, not by a later garbage collection)."""
        error = ""
        try:
            self.client.images.get(image)
        except Exception as e:
            error = f"sandbox image {image!r} missing: run `python -m workers.sandbox.image build` ({e})"
        if error:
            raise SandboxError(error)
        # With the cgroupfs driver every container becomes a top-level cgroup, so each competes
        # for CPU like one process rather than all containers sharing the single weight of the
        # /docker group (under load that made 4 concurrent containers run as slowly as 1).
        try:
            self._cgroup_parent = "/" if self.client.info().get("CgroupDriver") == "cgroupfs" else None
        except Exception as e:
            error = f"Docker engine unreachable: {e}"
        if error:
            raise SandboxError(error)

    def agent_pids(self) -> set[int]:
        """Host pids of the agents of this pool's containers and their zygotes."""
        with self._lock:
            return {p for c in self._all for p in (c.agent_pid, zygote_of(c.agent_pid)) if p}

    def container_ids(self) -> list[str]:
        """Ids of every container this pool holds (idle or busy)."""
        with self._lock:
            return [c.id for c in self._all]

    # ---- container lifecycle -------------------------------------------------------------
    def _create(self, key: tuple) -> Container:
        import docker.types

        domain, memory_mb, pids, tmpfs_mb = key
        expiry = time.time() + self.config.lease_s
        uid = next(self._uids)
        labels = {LABEL: self.pool_id, "temper.pool": self.pool_id, "temper.domain": domain,
                  "temper.lease_expiry": f"{expiry:.0f}", **worker_labels()}
        tmpfs_opt = f"size={tmpfs_mb}m,mode=1777,exec"
        cid = None
        try:
            host_config = self.api.create_host_config(
                network_mode="none", read_only=True, init=False, cgroup_parent=self._cgroup_parent,
                tmpfs={"/work": tmpfs_opt, "/tmp": tmpfs_opt}, shm_size=f"{tmpfs_mb}m",
                pids_limit=pids + 4, mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m",
                nano_cpus=int(1e9 * self.config.container_cpus),
                cap_drop=["ALL"], security_opt=["no-new-privileges"], ipc_mode="private",
                ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0),
                         docker.types.Ulimit(name="nofile", soft=4096, hard=4096)],
            )
            cid = self.api.create_container(
                self.image, ["python3", "-I", "-S", "-c", AGENT_SOURCE, *agent_zygote_args()], user=f"{uid}:{uid}", stdin_open=True,
                labels=labels, environment={}, hostname="sandbox", working_dir="/work",
                network_disabled=True, host_config=host_config,
            )["Id"]
            sock = self.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            stream = AgentStream(sock)
            self.api.start(cid)
            stream.wait_for(4, READY_TIMEOUT_S)
            pid = self.api.inspect_container(cid)["State"]["Pid"]
        except Exception as e:
            if cid is not None:
                try:
                    self.api.remove_container(cid, force=True)
                except Exception:
                    pass
            raise SandboxError(f"cannot start sandbox container: {e}") from e
        dirs = cgroups.cgroup_dirs_of(pid) if pid else None
        layout = cgroups.detect()
        cg = cgroups.JobCgroup.existing(layout, dirs) if (dirs and layout) else None
        cont = Container(cid, key, uid, expiry, stream, cg, pid)
        with self._lock:
            self._all.add(cont)
            self.started += 1
        return cont

    def _remove(self, cont: Container) -> None:
        """Remove the container (once); its stream is closed once no job's thread uses it."""
        cont.retiring = True
        with self._lock:
            first, cont.removed = not cont.removed, True
            if cont in self._all:
                self._all.discard(cont)
                self.retired += 1
        if first:
            try:
                self.api.remove_container(cont.id, force=True)
            except Exception:
                pass
        if not cont.busy:
            cont.stream.close()

    def acquire(self, domain: str, limits: Limits) -> Container:
        key = pool_key(domain, limits)
        # an idle container whose lease would run out during the job is removed instead
        cont = self._idle_or_new(key, lambda c: c.expiry > time.time() + limits.wall_s + 30)
        self._submit(self._top_up, key)
        return cont

    def _reset(self, cont: Container) -> None:
        """Wait for the agent's ready frame (it killed everything and reset the container), then
        check the container holds nothing but the agent and its zygote."""
        try:
            cont.stream.wait_for(4, 10.0)
            healthy = cont.cgroup is None or cont.cgroup.pids_current() <= RESIDENT
        except SandboxError:
            healthy = False
        self._reset_done(cont, healthy)  # (marks it retiring before removing it, as _remove does first)

    def _reap_loop(self) -> None:
        period = max(5.0, self.config.lease_s / 4)
        while not self._stop.wait(period):
            try:
                reap_containers(client=self.client)
            except SandboxError:
                pass

    def close(self) -> None:
        """Remove every container, stop the reaper and close the Docker client's connections
        (when this backend opened the client)."""
        self._closed = True
        self._stop.set()
        self._remove_all()
        self._reaper.join(timeout=30)
        if self._own_client:
            self.client.close()

    # ---- one job -------------------------------------------------------------------------
    def run(self, cont: Container, files: dict, command: list[str], limits: Limits, stdin: bytes | None, *,
            env: dict[str, str] | None = None, keep: bool = False, outputs: Outputs | None = None) -> Verdict:
        cont.uses += 1
        return self._run_busy(cont, lambda: run_agent_job(cont.stream, cont.cgroup, files, command, limits, stdin,
                                                          "docker", oom_killed=lambda: self._oom_killed(cont),
                                                          env=env, keep=keep, outputs=outputs))

    def _oom_killed(self, cont: Container) -> bool:
        """Whether the container's pid 1 was OOM-killed (its cgroup is gone with it): asked once
        the agent was lost during a job."""
        try:
            self.api.wait(cont.id, timeout=10)
            return bool(self.api.inspect_container(cont.id)["State"].get("OOMKilled"))
        except Exception:
            return False
