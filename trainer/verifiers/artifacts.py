"""Artifacts: named files a verification hands back beside its verdict (the final diff, a test
report, an output log, a CAD solid), kept with the trajectory when the run says so.

Two sources, one type (:class:`Artifact`):

* a **sandbox job** asks for files it leaves in its working directory (:class:`Outputs`: names
  relative to it, a per-file and a total byte bound). The sandbox's own agent reads them after
  every process of the job is dead, from inside the sandbox, one path component at a time with
  ``O_NOFOLLOW`` (regular files with one link only: no symbolic link, directory, fifo, device or
  hard link), and sends their bytes over its stream: the host never opens a path a job could
  have shaped (``workers/sandbox/agent_outputs.py``). A file over its bound is truncated (or, with
  ``truncate=False``, refused), and every refusal says why;
* a **stage's trusted code** makes one from what it already holds (:meth:`Artifact.of`: the diff
  it applied, the report it parsed, the mesh it checked).

Artifacts ride in a verification's ``details["artifacts"]`` (JSON-safe: the bytes as base64, so
they cross the verify queue like the rest of the details). The job applies the run's
``artifacts`` setting to every verification it receives (:func:`retaining`: dropped, or kept
within ``max_bytes``), and the sampled trajectories carry what is left to the control plane,
which stores the bytes in the checkpoint store and the listing on the trajectory. A verify
worker applies the same setting before it sends its results back (:func:`retain_results`: the
driver sends the run's setting with each batch), so artifacts a run drops never cross the queue.

>>> Outputs(("report.xml", "logs/build.log")).wire()["names"]
['report.xml', 'logs/build.log']
>>> output_name_problem("../etc/passwd"), output_name_problem("/etc/passwd"), output_name_problem("a/./b")
("'..' is not a file name", 'not a relative path of letters, digits and ._+-', "'.' is not a file name")
>>> a = Artifact.of("final.diff", "x" * 10, limit=4)
>>> a.data, a.size, a.truncated, Artifact.from_dict(a.to_dict()) == a
(b'xxxx', 10, True, True)
>>> [x.name for x in split({"artifacts": [a.to_dict()], "k": 1})[1]], split({"k": 1})
(['final.diff'], ({'k': 1}, []))
"""
from __future__ import annotations

import base64
import binascii
import string
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

KEY = "artifacts"
"""The key of a verification's ``details`` that holds its artifacts (a list of :meth:`Artifact.to_dict`)."""
MAX_FILES = 16
"""Files one job may ask back."""
MAX_FILE_BYTES = 512 << 10
"""The largest per-file bound a job may set (one frame of the sandbox agent's stream carries a file)."""
MAX_TOTAL_BYTES = 4 << 20
"""The largest total bound a job may set."""
MAX_NAME_CHARS = 200
MAX_REASON_CHARS = 200
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "._+-")
"""The characters of an output's name, ``/`` apart (no space, backslash or NUL: nothing a shell, a
download header or a path join could read otherwise)."""


def output_name_problem(name: Any) -> str:
    """Why ``name`` cannot name an artifact ('' when it can): it must be a relative path under the
    job's working directory, without ``.`` or ``..`` components."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        return f"must be a string of 1 to {MAX_NAME_CHARS} characters"
    for part in name.split("/"):
        if not part or not set(part) <= NAME_CHARS:
            return "not a relative path of letters, digits and ._+-"
        if part in (".", ".."):
            return f"{part!r} is not a file name"
    return ""


@dataclass(frozen=True)
class Outputs:
    """The files a sandbox job hands back, read from its working directory after it ended."""

    names: tuple[str, ...]
    """Paths relative to the job's working directory (the job's ``files`` are written there too)."""
    file_bytes: int = 64 << 10
    """Bytes kept of each file (at most :data:`MAX_FILE_BYTES`)."""
    total_bytes: int = 256 << 10
    """Bytes kept of all of them together, in the order of ``names`` (at most :data:`MAX_TOTAL_BYTES`)."""
    truncate: bool = True
    """A file over its bound comes back truncated (its first bytes) when True, refused when False
    (a diff or a solid cut short is no file at all)."""

    def __post_init__(self) -> None:
        names = tuple(self.names) if isinstance(self.names, (list, tuple)) else self.names
        object.__setattr__(self, "names", names)
        if not isinstance(names, tuple) or not 1 <= len(names) <= MAX_FILES:
            raise ValueError(f"Outputs.names: 1 to {MAX_FILES} names")
        for name in names:
            if problem := output_name_problem(name):
                raise ValueError(f"Outputs.names: {name!r}: {problem}")
        if len(set(names)) != len(names):
            raise ValueError("Outputs.names: a name is given twice")
        for field_name, high in (("file_bytes", MAX_FILE_BYTES), ("total_bytes", MAX_TOTAL_BYTES)):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"Outputs.{field_name} must be an integer from 1 to {high}, got {value!r}")

    def wire(self) -> dict[str, Any]:
        """What the sandbox agent receives (plain values)."""
        return {"names": list(self.names), "file": self.file_bytes, "total": self.total_bytes,
                "truncate": bool(self.truncate)}


@dataclass(frozen=True)
class Artifact:
    """One named file handed back, or why it was not."""

    name: str
    data: bytes = b""
    """The bytes kept (the file's first ``len(data)`` bytes)."""
    size: int = 0
    """The file's size where it was made or read (more than ``len(data)`` when truncated; 0 when
    it was refused before its size was known)."""
    refused: str = ""
    """Why no bytes came back ('' when they did): missing, a symbolic link, over a bound, ..."""

    @property
    def truncated(self) -> bool:
        """Bytes came back, but fewer than the file held."""
        return not self.refused and len(self.data) < self.size

    @classmethod
    def of(cls, name: str, data: bytes | str, limit: int, *, truncate: bool = True) -> "Artifact":
        """Bytes a stage's trusted code made, within ``limit`` bytes: truncated past it, or
        refused when ``truncate`` is False."""
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else bytes(data)
        if len(raw) > limit and not truncate:
            return cls(name, b"", len(raw), f"{len(raw)} bytes: over the bound of {limit}")
        return cls(name, raw[:limit], len(raw))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe copy (the bytes as base64)."""
        return {"name": self.name, "size": self.size, "refused": self.refused,
                "data_b64": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, data: Any) -> "Artifact":
        """The artifact :meth:`to_dict` wrote; ValueError for anything else."""
        if not isinstance(data, dict):
            raise ValueError("an artifact must be an object")
        name, size, refused, b64 = data.get("name"), data.get("size"), data.get("refused", ""), data.get("data_b64", "")
        if problem := output_name_problem(name):
            raise ValueError(f"artifact name {name!r}: {problem}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"artifact {name}: size must be a whole number of bytes")
        if not isinstance(refused, str) or not isinstance(b64, str):
            raise ValueError(f"artifact {name}: refused and data_b64 must be strings")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"artifact {name}: data_b64 is not base64") from exc
        if len(raw) > size or (refused and raw):
            raise ValueError(f"artifact {name}: more bytes than its size, or bytes beside a refusal")
        return cls(name, raw, size, refused[:MAX_REASON_CHARS])


def detail(artifacts: Iterable[Artifact]) -> dict[str, Any]:
    """``{"artifacts": [...]}``, to spread into a Verification's details."""
    return {KEY: [a.to_dict() for a in artifacts]}


DIFF_BYTES = 256 << 10
"""The largest final diff handed back (a longer one is listed, refused: a diff cut short applies to nothing)."""


def final_diff(diff: str) -> dict[str, Any]:
    """``{"artifacts": [final.diff]}``: an episode's change to its starting tree, as a file to
    download and ``git apply`` (a stage spreads it into its details)."""
    return detail([Artifact.of("final.diff", diff, DIFF_BYTES, truncate=False)])


def split(details: dict[str, Any]) -> tuple[dict[str, Any], list[Artifact]]:
    """``details`` without its artifacts, and the artifacts (an entry that is not one is left out)."""
    if KEY not in details:
        return details, []
    rest = {k: v for k, v in details.items() if k != KEY}
    out = []
    for entry in details[KEY] if isinstance(details[KEY], list) else []:
        try:
            out.append(Artifact.from_dict(entry))
        except ValueError:
            continue
    return rest, out


def sample_fields(details: dict[str, Any]) -> dict[str, Any]:
    """A sampled trajectory's ``details`` and, apart, its ``artifacts`` (what the control plane
    stores in the checkpoint store: their bytes never sit in the trajectory's details).

    >>> sample_fields({"k": 1, **final_diff("+x")})["artifacts"][0]["name"], sample_fields({"k": 1})
    ('final.diff', {'details': {'k': 1}})
    """
    rest, artifacts = split(details)
    return {"details": rest, **({KEY: [a.to_dict() for a in artifacts]} if artifacts else {})}


def retain(artifacts: list[Artifact], *, keep: bool, max_bytes: int) -> list[Artifact]:
    """The run's ``artifacts`` setting applied to one verification's artifacts: none when not
    ``keep``, else those whose bytes fit ``max_bytes`` together, in order; one that does not fit
    stays listed, its bytes dropped with the reason.

    >>> arts = [Artifact.of("a", b"12345", 100), Artifact.of("b", b"123", 100), Artifact.of("c", b"1", 100)]
    >>> [(a.name, a.data, a.refused) for a in retain(arts, keep=True, max_bytes=6)]
    [('a', b'12345', ''), ('b', b'', "3 bytes: over the run's artifacts.max_bytes (6)"), ('c', b'1', '')]
    >>> retain(arts, keep=False, max_bytes=6)
    []
    """
    if not keep:
        return []
    left, out = max_bytes, []
    for artifact in artifacts:
        if len(artifact.data) > left:
            why = f"{artifact.size} bytes: over the run's artifacts.max_bytes ({max_bytes})"
            artifact = replace(artifact, data=b"", refused=why)
        left -= len(artifact.data)
        out.append(artifact)
    return out


def retain_details(details: dict[str, Any], *, keep: bool, max_bytes: int) -> dict[str, Any]:
    """A verification's ``details`` with only the artifacts :func:`retain` keeps.

    >>> d = {"k": 1, **final_diff("+x")}
    >>> retain_details(d, keep=False, max_bytes=100), retain_details(d, keep=True, max_bytes=100) == d
    ({'k': 1}, True)
    """
    if KEY not in details:
        return details
    rest, artifacts = split(details)
    kept = retain(artifacts, keep=keep, max_bytes=max_bytes)
    return {**rest, **(detail(kept) if kept else {})}


def retain_results(results: list[dict[str, Any]], setting: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Verification results as a verify worker sends them back (``{outcome, score, details}``),
    with only the artifacts the run's ``setting`` (``{keep, max_bytes}``, None: all) keeps, so
    artifacts a run drops never cross the verify queue.

    >>> r = [{"outcome": "ok", "score": 1.0, "details": {"k": 1, **final_diff("+x")}}]
    >>> retain_results(r, {"keep": False, "max_bytes": 0})[0]["details"], retain_results(r, None) is r
    ({'k': 1}, True)
    """
    if setting is None:
        return results
    keep, max_bytes = bool(setting.get("keep", True)), int(setting.get("max_bytes", MAX_TOTAL_BYTES))
    return [{**r, "details": retain_details(r["details"], keep=keep, max_bytes=max_bytes)}
            if isinstance(r.get("details"), dict) and KEY in r["details"] else r for r in results]


def retaining(verify_batch: Callable[[list], list], setting: Any) -> Callable[[list], list]:
    """``verify_batch`` whose verifications hold only the artifacts the run keeps (``setting``:
    the run's ``artifacts`` config, with ``keep`` and ``max_bytes``), so a trajectory never holds
    more than the run would store."""
    def verify(items: list) -> list:
        out = []
        for verification in verify_batch(items):
            if KEY in verification.details:
                details = retain_details(verification.details, keep=setting.keep, max_bytes=setting.max_bytes)
                verification = replace(verification, details=details)
            out.append(verification)
        return out
    return verify
