"""Resource limits of one sandboxed execution: the contract between a verifier and the sandbox.

The trainer owns it (a ``code_tests`` stage asks for limits; ``workers.sandbox`` enforces them),
so the stage's ``params.limits`` are validated against :func:`limits_json_schema` when a domain
is saved, and reach the sandbox as a :class:`Limits`, never as a dict.

>>> Limits.from_params({"cpu_s": 2, "memory_mb": 256}).memory_mb
256
>>> Limits.from_params(None) == Limits()
True
>>> Limits.from_params({"memory_mb": 1})
Traceback (most recent call last):
...
ValueError: Limits.memory_mb must be at least 16, got 1
>>> limits_json_schema()["properties"]["wall_s"]["maximum"]
3600
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _bounded(default: float, *, low: float, high: float, exclusive_low: bool = False) -> Any:
    return field(default=default, metadata={"low": low, "high": high, "exclusive_low": exclusive_low})


@dataclass(frozen=True)
class Limits:
    """Resource limits for one execution; every backend enforces all of them."""

    cpu_s: float = _bounded(10.0, low=0, high=3600, exclusive_low=True)
    """CPU seconds for the whole process tree (cgroup accounting; RLIMIT_CPU per process as backstop)."""
    wall_s: float = _bounded(20.0, low=0, high=3600, exclusive_low=True)
    """Wall-clock seconds from start until the whole tree is killed."""
    memory_mb: int = _bounded(512, low=16, high=65536)
    """Memory (RAM, swap included) for the whole tree, tmpfs pages included."""
    pids: int = _bounded(64, low=1, high=4096)
    """Maximum number of processes and threads alive at once."""
    output_bytes: int = _bounded(1 << 20, low=1024, high=1 << 30)
    """Bytes kept of stdout and of stderr each; more than this ends the run with output_limit."""
    file_size_mb: int = _bounded(16, low=1, high=4096)
    """Largest file the program may write (RLIMIT_FSIZE)."""
    open_files: int = _bounded(256, low=8, high=65536)
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmpfs_mb: int = _bounded(64, low=1, high=16384)
    """Size of each of the tmpfs mounts /work, /tmp and /dev/shm."""

    def __post_init__(self) -> None:
        _check_bounds(self)

    @classmethod
    def from_params(cls, params: dict[str, Any] | Limits | None) -> Limits:
        """Limits from a stage's ``params.limits`` (None: the defaults); ValueError names the field."""
        return _from_params(cls, params)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe copy."""
        return dataclasses.asdict(self)


def _check_bounds(obj: Any) -> None:
    """ValueError naming the field of a bounded dataclass whose value is not a number in bounds."""
    kind = type(obj).__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise ValueError(f"{kind}.{f.name} must be a number, got {value!r}")
        if f.type == "int" and not isinstance(value, int):
            raise ValueError(f"{kind}.{f.name} must be a whole number, got {value!r}")
        low, high, strict = f.metadata["low"], f.metadata["high"], f.metadata["exclusive_low"]
        if value < low or (strict and value == low):
            raise ValueError(f"{kind}.{f.name} must be {'greater than' if strict else 'at least'} {low}, got {value!r}")
        if value > high:
            raise ValueError(f"{kind}.{f.name} must be at most {high}, got {value!r}")


def _from_params(cls: Any, params: Any) -> Any:
    """An instance of the bounded dataclass ``cls`` from a dict (None: the defaults)."""
    if params is None:
        return cls()
    if isinstance(params, cls):
        return params
    if not isinstance(params, dict):
        raise ValueError(f"limits must be an object, got {type(params).__name__}")
    unknown = sorted(set(params) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"{cls.__name__} has no field {unknown[0]!r}")
    return cls(**params)


@dataclass(frozen=True)
class SessionLimits:
    """Budgets of one shell session (an episode of the ``shell`` environment), every one enforced
    outside the sandbox: per command by the sandbox's supervision (wall time by its agent, CPU and
    output by the host), per episode by the host's session object.

    >>> SessionLimits(command_wall_s=5).command_limits(2.5).wall_s
    2.5
    >>> SessionLimits(shown_bytes=10)
    Traceback (most recent call last):
    ...
    ValueError: SessionLimits.shown_bytes must be at least 256, got 10
    """

    command_wall_s: float = _bounded(30.0, low=0, high=3600, exclusive_low=True)
    """Wall seconds one command may run; then every process it started is killed."""
    command_cpu_s: float = _bounded(30.0, low=0, high=3600, exclusive_low=True)
    """CPU seconds one command's processes may use together."""
    command_output_bytes: int = _bounded(1 << 20, low=1024, high=1 << 30)
    """Bytes one command may write to stdout and to stderr each; more kills it (output_limit)."""
    shown_bytes: int = _bounded(8192, low=256, high=1 << 20)
    """Bytes of stdout and of stderr each shown to the model per command (head and tail, with a
    marker stating what was left out)."""
    episode_wall_s: float = _bounded(600.0, low=0, high=86400, exclusive_low=True)
    """Wall seconds the episode's commands may run in all (sandbox time, not the model's)."""
    episode_commands: int = _bounded(64, low=1, high=10_000)
    """Commands one episode may run."""
    episode_output_bytes: int = _bounded(8 << 20, low=1024, high=1 << 32)
    """Bytes of output the episode's commands may write in all."""
    memory_mb: int = _bounded(1024, low=16, high=65536)
    """Memory of the session's sandbox (RAM, swap and tmpfs pages)."""
    pids: int = _bounded(256, low=8, high=4096)
    """Processes and threads alive at once."""
    tmpfs_mb: int = _bounded(256, low=1, high=16384)
    """Size of each of /work (the working tree), /tmp and /dev/shm."""
    file_size_mb: int = _bounded(64, low=1, high=4096)
    """Largest file a command may write."""

    def __post_init__(self) -> None:
        _check_bounds(self)

    @classmethod
    def from_params(cls, params: dict[str, Any] | SessionLimits | None) -> SessionLimits:
        """From a task's or domain's ``session_limits`` (None: the defaults); ValueError names the field."""
        return _from_params(cls, params)

    def command_limits(self, wall_s: float | None = None) -> Limits:
        """The sandbox limits of one command (``wall_s``: what is left of the episode's, if less)."""
        wall = self.command_wall_s if wall_s is None else min(self.command_wall_s, wall_s)
        return Limits(cpu_s=self.command_cpu_s, wall_s=wall, memory_mb=self.memory_mb, pids=self.pids,
                      output_bytes=self.command_output_bytes, file_size_mb=self.file_size_mb,
                      open_files=1024, tmpfs_mb=self.tmpfs_mb)


def limits_json_schema() -> dict[str, Any]:
    """JSON Schema of a ``limits`` object (every field optional; bounds from the dataclass)."""
    props: dict[str, Any] = {}
    for f in dataclasses.fields(Limits):
        low, high, strict = f.metadata["low"], f.metadata["high"], f.metadata["exclusive_low"]
        prop: dict[str, Any] = {"type": "integer" if f.type == "int" else "number", "maximum": high, "default": f.default}
        prop["exclusiveMinimum" if strict else "minimum"] = low
        props[f.name] = prop
    return {"type": "object", "additionalProperties": False, "properties": props}
