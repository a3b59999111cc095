"""The pinned packages and their source trees (``pins.json``).

Each pin is a pure-Python package whose PyPI source distribution ships its test suite and whose
tests pass on the sandbox's Python with Debian's pytest and no other third-party package. The
sdist is downloaded once into ``$TEMPER_VAR_DIR/pkgs/sdists/`` (default ``var/``), its SHA-256
checked against the pin (a mismatch is refused), and read as text files.

>>> PINS["toolz"].filename
'toolz-1.0.0.tar.gz'
>>> [is_test_path(p) for p in ("toolz/tests/test_dicttoolz.py", "conftest.py", "a/b_test.py", "toolz/dicttoolz.py")]
[True, True, True, False]
>>> [is_source_path(p) for p in ("toolz/dicttoolz.py", "setup.py", "docs/conf.py", "tests/test_x.py", "README.rst")]
[True, False, False, False, False]
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import posixpath
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PINS_FILE = Path(__file__).with_name("pins.json")
"""The pins: a JSON list of ``{name, version, filename, url, sha256[, deselect]}``."""
TEST_DIRS = frozenset({"tests", "test", "testing"})
"""Folder names whose content is test code or test data."""
TOP_SCRIPTS = frozenset({"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "runtests.py", "run_tests.py",
                         "pavement.py", "bootstrap.py", "ez_setup.py", "release.py", "version.py", "conf.py", "benchmark.py"})
"""Top-level Python files that are build or project scripts, not the package's code."""
NOT_SOURCE_DIRS = frozenset({"docs", "doc", "documentation", "examples", "example", "benchmarks", "bench", "scripts", "tools"})
"""Top-level folders whose Python files are not the package's code."""
MAX_FILE_BYTES = 2 << 20
"""A file larger than this is left out of a source tree."""


class PinError(RuntimeError):
    """A pinned sdist that cannot be had as pinned (download failed, hash mismatch, bad archive)."""


@dataclass(frozen=True)
class Pin:
    """One pinned source distribution."""

    name: str
    """The PyPI project name."""
    version: str
    """The pinned version."""
    filename: str
    """The sdist's file name."""
    url: str
    """Where the sdist is downloaded from."""
    sha256: str
    """The sdist's SHA-256 (hex); anything else is refused."""
    deselect: tuple[str, ...] = field(default=())
    """Node id prefixes left out of the package's suite (each with its reason in pins.json)."""


def _load() -> dict[str, Pin]:
    pins = {}
    for row in json.loads(PINS_FILE.read_text()):
        deselect = tuple(d["id"] for d in row.get("deselect", ()))
        pins[row["name"]] = Pin(row["name"], row["version"], row["filename"], row["url"], row["sha256"], deselect)
    return pins


PINS: dict[str, Pin] = _load()
"""Every pin, by name."""


def sdist_dir() -> Path:
    """Where downloaded sdists are kept: ``$TEMPER_VAR_DIR/pkgs/sdists`` (default ``var/``)."""
    return Path(os.environ.get("TEMPER_VAR_DIR") or ROOT / "var") / "pkgs" / "sdists"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sdist_bytes(name: str) -> bytes:
    """The pinned sdist's bytes, downloaded once; PinError when they are not the pinned ones."""
    pin = _pin(name)
    path = sdist_dir() / pin.filename
    if path.exists():
        data = path.read_bytes()
        if _digest(data) == pin.sha256:
            return data
    try:
        with urllib.request.urlopen(pin.url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise PinError(f"{name}: cannot download {pin.url}: {exc}") from None
    if _digest(data) != pin.sha256:
        raise PinError(f"{name}: {pin.filename} has SHA-256 {_digest(data)}, the pin says {pin.sha256}: refused")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return data


def _pin(name: str) -> Pin:
    try:
        return PINS[name]
    except KeyError:
        raise PinError(f"no pinned package named {name!r}") from None


def _members(data: bytes, filename: str) -> list[tuple[str, bytes]]:
    """``(path, bytes)`` of the archive's regular files."""
    out = []
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.is_dir() and info.file_size <= MAX_FILE_BYTES:
                    out.append((info.filename, archive.read(info)))
        return out
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for member in archive.getmembers():
            if member.isfile() and member.size <= MAX_FILE_BYTES:
                handle = archive.extractfile(member)
                if handle is not None:
                    out.append((member.name, handle.read()))
    return out


def tree_from_sdist(data: bytes, filename: str) -> dict[str, str]:
    """The archive's text files, paths relative to its top folder (binary, undecodable, egg-info
    and unsafe paths left out)."""
    tree = {}
    for name, raw in _members(data, filename):
        parts = posixpath.normpath(name).split("/")
        if len(parts) < 2 or any(p in ("", ".", "..") for p in parts) or name.startswith("/"):
            continue
        rel = "/".join(parts[1:])
        if any(p.endswith(".egg-info") or p == "__pycache__" for p in parts[1:]) or rel.endswith((".pyc", ".so")):
            continue
        if b"\0" in raw:
            continue
        try:
            tree[rel] = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
    if not tree:
        raise PinError(f"{filename}: no text files in the archive")
    return tree


@functools.lru_cache(maxsize=None)
def _tree(name: str) -> tuple[tuple[str, str], ...]:
    pin = _pin(name)
    return tuple(sorted(tree_from_sdist(sdist_bytes(name), pin.filename).items()))


def source_tree(name: str) -> dict[str, str]:
    """The pinned sdist's text files (a new dict each call; downloaded and read once)."""
    return dict(_tree(name))


def is_test_path(path: str) -> bool:
    """True for test modules, ``conftest.py`` and anything under a test folder."""
    parts = path.split("/")
    base = parts[-1]
    if any(p in TEST_DIRS for p in parts[:-1]):
        return True
    return base == "conftest.py" or (base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py")))


def is_source_path(path: str) -> bool:
    """True for a ``.py`` file of the package's own code: not a test path, not ``setup.py`` or
    another top-level script (:data:`TOP_SCRIPTS`), not under docs/examples/benchmarks."""
    parts = path.split("/")
    if not path.endswith(".py") or is_test_path(path):
        return False
    if len(parts) == 1:  # a single-module package (six.py, tabulate.py)
        return path not in TOP_SCRIPTS
    return parts[0] not in NOT_SOURCE_DIRS and not parts[0].startswith(".")
