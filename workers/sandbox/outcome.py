"""Shared pieces of every backend: capped output capture, job validation and status rules."""
from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass, field

from .types import Limits

MEMORY_ERROR_RE = re.compile(
    rb"(^|\n)(MemoryError|[\w.]*bad_alloc|fatal error: runtime: out of memory|Cannot allocate memory)",
)
"""Allocation failures a program reports itself when the kernel refused its memory."""


@dataclass
class Capture:
    """Bytes of one output stream: the first `cap` bytes kept, all bytes counted."""

    cap: int
    """How many bytes to keep."""
    data: bytearray = field(default_factory=bytearray)
    """The kept bytes."""
    total: int = 0
    """Every byte read so far."""

    def feed(self, chunk: bytes) -> bool:
        """Add a chunk; returns True when the stream has now gone past its cap."""
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        return self.total > self.cap

    @property
    def truncated(self) -> bool:
        """True when more bytes came than were kept."""
        return self.total > self.cap


def check_files(files: dict[str, str | bytes]) -> dict[str, bytes]:
    """Validate job files (relative paths inside the work dir) and encode text as UTF-8.

    Text is encoded whatever it holds (lone surrogates pass through as their three bytes): a
    file's content is the job's, and what the program makes of it is the job's outcome, not an
    exception on the host."""
    if not isinstance(files, dict):
        raise TypeError(f"files must be a dict of path -> str|bytes, got {type(files).__name__}")
    out: dict[str, bytes] = {}
    for name, content in files.items():
        if not isinstance(name, str) or not name or name.startswith("/") or "\0" in name:
            raise ValueError(f"file name {name!r}: must be a non-empty relative path")
        parts = name.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"file name {name!r}: no empty, '.' or '..' components allowed")
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogatepass")
        if not isinstance(content, (bytes, bytearray)):
            raise TypeError(f"file {name!r}: content must be str or bytes, got {type(content).__name__}")
        out[name] = bytes(content)
    return out


def check_command(command: list[str]) -> list[str]:
    """Validate the argv list."""
    if not isinstance(command, (list, tuple)) or not command:
        raise ValueError(f"command must be a non-empty list of strings, got {command!r}")
    for arg in command:
        if not isinstance(arg, str) or "\0" in arg:
            raise ValueError(f"command argument {arg!r} must be a string without NUL bytes")
    return list(command)


def classify(
    *,
    exit_code: int | None,
    signal: int | None,
    killed_for: str | None,
    oom_events: int,
    cpu_s: float,
    limits: Limits,
    stderr: bytes,
) -> tuple[str, str]:
    """(status, error) for an execution that the backend did run.

    `killed_for` is why the backend killed it ('wall', 'cpu', 'output') or None.
    """
    if killed_for == "output":
        return "output_limit", f"output exceeded {limits.output_bytes} bytes"
    if oom_events > 0:
        return "memory_limit", f"memory limit of {limits.memory_mb} MiB reached"
    if killed_for == "cpu" or signal == _signal.SIGXCPU or (
        signal == _signal.SIGKILL and cpu_s >= limits.cpu_s * 0.98
    ):
        return "timeout_cpu", f"CPU limit of {limits.cpu_s} s reached"
    if killed_for == "wall":
        return "timeout_wall", f"wall-clock limit of {limits.wall_s} s reached"
    if exit_code == 0 and signal is None:
        return "ok", ""
    if MEMORY_ERROR_RE.search(stderr[-4096:]):
        return "memory_limit", "the program's allocation was refused (memory limit)"
    if signal == _signal.SIGXFSZ:
        return "runtime_error", f"file size limit of {limits.file_size_mb} MiB reached"
    if signal is not None:
        return "runtime_error", f"killed by signal {signal}"
    return "runtime_error", f"exited with code {exit_code}"
