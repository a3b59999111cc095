"""The installs a new user runs: `make` asks pip for no retries of an index whose host does not
resolve, and pip then says nothing about it (one retry printed a warning for every project: 249
for the dev set)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def test_make_installs_with_no_retries_where_the_torch_index_does_not_resolve(tmp_path):
    if shutil.which("make") is None:
        pytest.fail("make is not installed (apt-get install make)")
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "-B", str(venv / ".installed-runtime"), f"VENV={venv}", f"PYTHON={sys.executable}"],
                         cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    installs = [line for line in dry.stdout.splitlines() if " install " in line and "-r requirements" in line]
    assert installs, dry.stdout
    expected = "--retries 5" if _resolves("download.pytorch.org") else "--retries 0"
    assert all(expected in line for line in installs), installs


def test_pip_says_nothing_of_an_unresolvable_index_with_no_retries(tmp_path):
    """What `--retries 0` buys: the project is found on the other indexes, with no warning a project."""
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "-d", str(tmp_path),
                           "--extra-index-url", "https://temper-unresolvable.invalid/simple", "six"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Retrying" not in done.stdout + done.stderr and "temper-unresolvable" not in done.stderr
    assert list(tmp_path.glob("six-*"))
