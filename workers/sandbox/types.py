"""Limits and verdicts of one sandboxed execution (no Django, no backend code).

``Limits`` is the trainer's (:mod:`trainer.verifiers.limits`): the contract a verifier asks for;
so are ``Outputs`` (the files a job hands back) and ``Artifact`` (one of them, or why not), from
:mod:`trainer.verifiers.artifacts`.
"""
from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trainer.verifiers.artifacts import Artifact, Outputs
from trainer.verifiers.limits import Limits

__all__ = ["STATUSES", "SandboxError", "SandboxBusy", "TestResult", "Verdict", "Limits", "Outputs", "Artifact"]

STATUSES = (
    "ok",
    "runtime_error",
    "timeout_cpu",
    "timeout_wall",
    "memory_limit",
    "output_limit",
    "sandbox_error",
)
"""Every status a Verdict can carry; `sandbox_error` is infrastructure, never a wrong answer."""


class SandboxError(RuntimeError):
    """An infrastructure failure (engine down, image missing, cgroup trouble): not the program's fault."""


class SandboxBusy(SandboxError):
    """Refused fast: the domain or global concurrency limit is reached and the queue is full or timed out."""


@dataclass
class TestResult:
    """One test's result as reported by explicit pass/fail markers of the harness."""

    name: str
    """Test name given when the job was built."""
    passed: bool
    """True only when the harness printed this test's pass marker after its asserts ran."""
    message: str = ""
    """Failure message (exception type and text) or why no result came back."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe copy."""
        return {"name": self.name, "passed": self.passed, "message": self.message}


@dataclass
class Verdict:
    """What happened to one execution."""

    status: str
    """One of STATUSES."""
    exit_code: int | None = None
    """Exit code when the program exited by itself, else None."""
    signal: int | None = None
    """Signal number that ended the program, else None."""
    cpu_s: float = 0.0
    """CPU seconds used by the whole process tree."""
    wall_s: float = 0.0
    """Wall seconds from start to the end of the tree."""
    peak_memory_bytes: int = 0
    """Peak memory of the tree (cgroup peak, or largest process RSS without cgroups)."""
    stdout: bytes = b""
    """First Limits.output_bytes bytes of stdout."""
    stderr: bytes = b""
    """First Limits.output_bytes bytes of stderr."""
    stdout_truncated: bool = False
    """True when stdout had more bytes than kept."""
    stderr_truncated: bool = False
    """True when stderr had more bytes than kept."""
    stdout_total_bytes: int = 0
    """Bytes of stdout read before the end (may stop early on output_limit)."""
    stderr_total_bytes: int = 0
    """Bytes of stderr read before the end."""
    tests: list[TestResult] = field(default_factory=list)
    """Per-test results, when the job was built by python_test_job (else empty)."""
    error: str = ""
    """Explanation for sandbox_error and limit statuses; empty when ok."""
    backend: str = ""
    """Backend that ran it: bwrap or docker."""
    wait_s: float = 0.0
    """Seconds the job waited for its sandbox (a place in the pool, then an idle or new sandbox)."""
    pool_size: int = 0
    """Live sandboxes of the job's domain in this process when it got its own (0: not pooled)."""
    creations_per_s: float = 0.0
    """Sandboxes of the job's domain started per second over the last minute (0: not pooled)."""
    artifacts: list[Artifact] = field(default_factory=list)
    """The files the job asked back (its ``outputs``), in order: each one's bytes, or why not."""

    @property
    def ok(self) -> bool:
        """True when the program exited 0 within every limit."""
        return self.status == "ok"

    @property
    def all_passed(self) -> bool:
        """True when the run was ok, had tests, and every test printed its pass marker."""
        return self.ok and bool(self.tests) and all(t.passed for t in self.tests)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe copy: output bytes as UTF-8 text with replacement plus base64 of the raw bytes."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("stdout", "stderr"):
            raw: bytes = d[key]
            d[key] = raw.decode("utf-8", errors="replace")
            d[key + "_b64"] = base64.b64encode(raw).decode("ascii")
        d["tests"] = [t.to_dict() for t in self.tests]
        d["artifacts"] = [a.to_dict() for a in self.artifacts]
        return d
