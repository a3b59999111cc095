"""Per-execution cgroups: memory, pids and CPU accounting, on cgroup v2 or v1 hierarchies.

`detect()` finds what this machine allows once per process: a delegated cgroup v2 subtree with
the memory and pids controllers (and cpu where our cgroup delegates it already), else the v1
memory, pids and cpuacct hierarchies (and cpu where it is writable), writable as root, else
nothing (rlimits then remain the only limits). Every cgroup is created under a `temper-sandbox`
directory inside the worker's own cgroup and named `<owner pid>-<n>`, so the reaper can tell
which ones belong to dead workers.

Where the CPU controller can be used too, the `temper-sandbox` directory of its hierarchy holds
the sandboxes of every worker in one cgroup (all of a machine's where workers run in the root
cgroup, as here) under one CPU weight (:func:`set_cpu_weight`; the weight is the one the last
worker to start set). Without it each sandbox's fresh session is an autogroup of its own
(`kernel.sched_autogroup_enabled`), and the scheduler gives each the share of a whole session:
eight sandboxes starting at once took eight ninths of a contended core from the trainer's
generation, whatever their nice value.
"""
from __future__ import annotations

import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PARENT_NAME = "temper-sandbox"
"""Directory under the worker's own cgroup that holds every execution cgroup."""
OPTIONAL = frozenset({"cpu"})
"""Hierarchies (v1) an execution joins if it can: the CPU weight's."""

_counter = itertools.count()
_lock = threading.Lock()
_detected: "CgroupLayout | None | bool" = False


@dataclass(frozen=True)
class CgroupLayout:
    """Where execution cgroups are created on this machine."""

    version: int
    """1 or 2."""
    parents: dict[str, Path]
    """Controller name -> the temper-sandbox parent directory ('unified' for v2)."""
    cpu_parent: Path | None = None
    """The temper-sandbox directory whose CPU weight every sandbox shares (one of ``parents``),
    or None where the CPU controller is not available to us."""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of cgroup mounts."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or '' for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def _try_v2(mounts, own) -> CgroupLayout | None:
    for point, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        base = Path(point) / own.get("", "/").lstrip("/")
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError:
            return None
        if not {"memory", "pids"} <= set(available):
            return None
        parent = base / PARENT_NAME
        try:
            parent.mkdir(exist_ok=True)
            # Our own cgroup must delegate first; this fails when it holds processes (not root).
            sub = (base / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(sub):
                (base / "cgroup.subtree_control").write_text("+memory +pids")
            # cpu is used where our cgroup already delegates it, never turned on here: in the root
            # cgroup that would move every top-level cgroup off the root task group (autogroups)
            delegated = set((parent / "cgroup.controllers").read_text().split())
            if not {"memory", "pids"} <= delegated:
                return None
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            return None
        if "cpu" in delegated:
            _write_optional(parent / "cgroup.subtree_control", "+cpu")
        return CgroupLayout(2, {"unified": parent}, parent if (parent / "cpu.weight").exists() else None)
    return None


def _try_v1(mounts, own) -> CgroupLayout | None:
    def point(ctrl: str) -> str | None:
        return next((p for p, t, o in mounts if t == "cgroup" and ctrl in o), None)

    parents: dict[str, Path] = {}
    for ctrl in ("memory", "pids", "cpuacct"):
        parent = _v1_parent(point(ctrl), own.get(ctrl, "/"))
        if parent is None:
            return None
        parents[ctrl] = parent
    # The CPU weight is optional: mounted with cpuacct (cpu,cpuacct) the cpu parent is cpuacct's,
    # a hierarchy of its own is used where it is writable.
    together = point("cpu") == point("cpuacct")
    cpu = parents["cpuacct"] if together else _v1_parent(point("cpu"), own.get("cpu", "/"))
    if cpu is None or not (cpu / "cpu.shares").exists():
        return CgroupLayout(1, parents)
    if not together:
        parents["cpu"] = cpu
    return CgroupLayout(1, parents, cpu)


def _v1_parent(point: str | None, own: str) -> Path | None:
    """The temper-sandbox directory in the v1 hierarchy mounted at ``point``, if we may create
    cgroups in it."""
    if point is None:
        return None
    parent = Path(point) / own.lstrip("/") / PARENT_NAME
    try:
        parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError:
        return None
    return parent


def detect() -> CgroupLayout | None:
    """The layout to use here, or None when no cgroup can be created (rlimits only). Cached."""
    global _detected
    with _lock:
        if _detected is False:
            if os.environ.get("TEMPER_SANDBOX_CGROUPS", "1") == "0":
                _detected = None
            else:
                mounts, own = _mounts(), _own_paths()
                _detected = _try_v2(mounts, own) or _try_v1(mounts, own)
        return _detected  # type: ignore[return-value]


def set_cpu_weight(layout: CgroupLayout, weight: int) -> bool:
    """Give every sandbox under ``layout`` together the CPU weight ``weight`` (cgroup v2's scale:
    100 is a whole process group's, 1-10000; v1's cpu.shares is scaled to it). Where the CPU is
    contended they get that share of it, against 100 for the trainer's session; an idle CPU is
    theirs whatever it is. Whether it was set (False where the CPU controller is not ours)."""
    if layout.cpu_parent is None:
        return False
    if layout.version == 2:
        return _write_optional(layout.cpu_parent / "cpu.weight", str(weight))
    return _write_optional(layout.cpu_parent / "cpu.shares", str(max(2, weight * 1024 // 100)))


def _read(path: str | Path) -> str:
    """A cgroup file's text (os calls: pathlib's read_text costs 3x as much, and the host reads
    a sandbox's CPU time for every batch of frames of a job)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


def _read_int(path: str | Path, default: int = 0) -> int:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return default


def _read_kv(path: str | Path, key: str) -> int:
    try:
        for line in _read(path).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def cpu_seconds(version: int, text: str) -> float:
    """CPU seconds from a cgroup's CPU file (v2 cpu.stat's usage_usec, v1 cpuacct.usage); 0 for
    text that holds none.

    >>> cpu_seconds(2, "usage_usec 2500000\\nuser_usec 1\\n"), cpu_seconds(1, "1500000000\\n"), cpu_seconds(1, "")
    (2.5, 1.5, 0.0)
    """
    try:
        if version == 2:
            return next((int(v) for k, _, v in (line.partition(" ") for line in text.splitlines()) if k == "usage_usec"), 0) / 1e6
        return int(text.split()[0]) / 1e9
    except (ValueError, IndexError):
        return 0.0


class CpuClock:
    """A cgroup's CPU seconds, read through one descriptor held while a job runs (the host reads
    them for every batch of the job's frames: 1.5 us a read, against 9 us opening the file each
    time). Reads 0.0 without a cgroup, or where the file cannot be read (as cpu_s does)."""

    def __init__(self, cg: "JobCgroup | None"):
        self.version = cg.layout.version if cg is not None else 0
        try:
            self.fd = os.open(cg.cpu_file(), os.O_RDONLY | os.O_CLOEXEC) if cg is not None else -1
        except OSError:
            self.fd = -1

    def __call__(self) -> float:
        if self.fd < 0:
            return 0.0
        try:
            return cpu_seconds(self.version, os.pread(self.fd, 1 << 16, 0).decode())
        except OSError:
            return 0.0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class JobCgroup:
    """The cgroup(s) of one execution: created with limits, joined by the sandbox, killed, removed."""

    @classmethod
    def existing(cls, layout: CgroupLayout, dirs: dict[str, Path]) -> "JobCgroup":
        """A view on cgroups someone else created (a container's): read, reset peak, kill."""
        self = cls.__new__(cls)
        self.layout, self.dirs, self._files = layout, dirs, {}
        return self

    def _file(self, ctrl: str, name: str) -> str:
        """Path of one of the cgroup's files, as a string made once (read for every job)."""
        path = self._files.get((ctrl, name))
        if path is None:
            path = self._files[(ctrl, name)] = os.path.join(self.dirs[ctrl], name)
        return path

    def reset_peak(self) -> None:
        """Start a new peak-memory measurement (v1: max_usage_in_bytes; v2: best effort)."""
        if self.layout.version == 1:
            _write_optional(self._file("memory", "memory.max_usage_in_bytes"), "0")
        else:
            _write_optional(self._file("unified", "memory.peak"), "0")

    def __init__(self, layout: CgroupLayout, memory_bytes: int, pids: int):
        self.layout, self._files = layout, {}
        name = f"{os.getpid()}-{next(_counter)}"
        self.dirs = {ctrl: parent / name for ctrl, parent in layout.parents.items()}
        try:
            for d in self.dirs.values():
                d.mkdir()
            if layout.version == 2:
                d = self.dirs["unified"]
                (d / "memory.max").write_text(str(memory_bytes))
                _write_optional(d / "memory.swap.max", "0")
                (d / "pids.max").write_text(str(pids))
            else:
                m = self.dirs["memory"]
                (m / "memory.limit_in_bytes").write_text(str(memory_bytes))
                _write_optional(m / "memory.memsw.limit_in_bytes", str(memory_bytes))
                _write_optional(m / "memory.swappiness", "0")
                (self.dirs["pids"] / "pids.max").write_text(str(pids))
        except OSError:
            self.remove()
            raise

    def memory_current(self) -> int:
        """Memory charged to the cgroup now, in bytes."""
        if self.layout.version == 2:
            return _read_int(self.dirs["unified"] / "memory.current")
        return _read_int(self.dirs["memory"] / "memory.usage_in_bytes")

    def set_memory_limit(self, memory_bytes: int) -> None:
        """Change the memory (and memory+swap) limit."""
        if self.layout.version == 2:
            (self.dirs["unified"] / "memory.max").write_text(str(memory_bytes))
            return
        m = self.dirs["memory"]
        old = _read_int(m / "memory.limit_in_bytes")
        # v1 refuses memory > memsw and memsw < memory: order the two writes accordingly
        order = ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"] if memory_bytes > old else \
            ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        for name in order:
            if name == "memory.limit_in_bytes":
                (m / name).write_text(str(memory_bytes))
            else:
                _write_optional(m / name, str(memory_bytes))

    def procs_files(self) -> list[str]:
        """cgroup.procs files the sandbox's first process writes `0` into to join (it must)."""
        return [str(d / "cgroup.procs") for ctrl, d in self.dirs.items() if ctrl not in OPTIONAL]

    def optional_procs_files(self) -> list[str]:
        """cgroup.procs files it joins where it can: v1's separate ``cpu`` hierarchy, for the
        CPU weight only (the kernel refuses to move a process under a real-time policy into a
        group without a real-time budget; such a sandbox runs without the weight)."""
        return [str(d / "cgroup.procs") for ctrl, d in self.dirs.items() if ctrl in OPTIONAL]

    def cpu_file(self) -> str:
        """The file that holds the cgroup's CPU time (see :func:`cpu_seconds`)."""
        return self._file("unified", "cpu.stat") if self.layout.version == 2 else self._file("cpuacct", "cpuacct.usage")

    def cpu_s(self) -> float:
        """CPU seconds used by everything that ran in this cgroup."""
        try:
            return cpu_seconds(self.layout.version, _read(self.cpu_file()))
        except OSError:
            return 0.0

    def peak_memory(self) -> int:
        """Peak memory in bytes (0 where the kernel does not report it)."""
        if self.layout.version == 2:
            return _read_int(self._file("unified", "memory.peak"))
        return _read_int(self._file("memory", "memory.max_usage_in_bytes"))

    def oom_events(self) -> int:
        """How often the memory limit was hit badly enough to kill or fail a charge."""
        if self.layout.version == 2:
            ev = self._file("unified", "memory.events")
            return _read_kv(ev, "oom_kill") + _read_kv(ev, "oom")
        return _read_kv(self._file("memory", "memory.oom_control"), "oom_kill")

    def pids(self) -> set[int]:
        """Processes currently in the cgroup."""
        found: set[int] = set()
        for d in self.dirs.values():
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, repeating until it is empty (forks race)."""
        if self.layout.version == 2 and _write_optional(self.dirs["unified"] / "cgroup.kill", "1"):
            return
        kill_pids(self.pids)

    def pids_current(self) -> int:
        """Tasks charged to the pids controller: unlike cgroup.procs this counts zombies until
        they are reaped, so 0 means every process of the execution is really gone."""
        ctrl = "unified" if "unified" in self.dirs else "pids"
        return _read_int(self._file(ctrl, "pids.current")) if ctrl in self.dirs else 0

    def remove(self) -> None:
        """Kill what is left and remove the directories (killed tasks may take a moment more to
        be reaped by the kernel; they can no longer run)."""
        self.kill_all()
        for d in self.dirs.values():
            remove_cgroup_dir(d)


def kill_pids(list_pids, rounds: int = 200) -> None:
    """SIGKILL the pids `list_pids()` returns until it returns none (or `rounds` passes)."""
    for i in range(rounds):
        pids = list_pids()
        if not pids:
            return
        if i:
            time.sleep(0.005)  # let the killed (zombie) processes be reaped
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def remove_cgroup_dir(d: Path, settle_s: float = 5.0) -> None:
    """Kill a cgroup's tasks, wait until they are reaped (pids.current), then rmdir it."""
    end = time.monotonic() + settle_s
    while time.monotonic() < end:
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not pids:
            break
        time.sleep(0.005)
    for _ in range(500):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            threading.Event().wait(0.002)


def _write_optional(path: str | Path, value: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def leftover_cgroups(only_dead_owners: bool = True) -> list[Path]:
    """Execution cgroups on this machine (by default only those whose owner process is gone)."""
    layout = detect()
    if layout is None:
        return []
    found = []
    for parent in layout.parents.values():
        try:
            children = list(parent.iterdir())
        except OSError:
            continue
        for child in children:
            if not child.is_dir():
                continue
            owner = child.name.split("-", 1)[0]
            if only_dead_owners and owner.isdigit() and pid_alive(int(owner)):
                continue
            found.append(child)
    return found


def cgroup_dirs_of(pid: int) -> dict[str, Path] | None:
    """The cgroup directories of a running process, keyed like CgroupLayout.parents."""
    layout = detect()
    if layout is None:
        return None
    mounts = _mounts()
    out: dict[str, Path] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        names = ctrls.split(",") if ctrls else [""]
        if layout.version == 2 and names == [""]:
            point = next((p for p, t, _ in mounts if t == "cgroup2"), None)
            if point:
                out["unified"] = Path(point) / path.lstrip("/")
        for ctrl in names:
            if layout.version == 1 and ctrl in layout.parents:
                point = next((p for p, t, o in mounts if t == "cgroup" and ctrl in o), None)
                if point:
                    out[ctrl] = Path(point) / path.lstrip("/")
    if set(out) != set(layout.parents) or not all(d.is_dir() for d in out.values()):
        return None
    return out


def pid_alive(pid: int) -> bool:
    """Whether a process of this host is alive (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_cgroups() -> int:
    """Kill and remove execution cgroups left by dead workers; returns how many were removed."""
    n = 0
    for d in leftover_cgroups(only_dead_owners=True):
        remove_cgroup_dir(d)
        n += 1
    return n
