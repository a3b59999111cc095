"""The Python packages sandboxed programs may import (``requirements/sandbox.txt``).

A sandboxed job runs the system's ``python3 -I -S`` (no site-packages): a program that needs a
package (a CAD script importing manifold3d) puts :data:`SANDBOX_LIB` on ``sys.path`` itself. The
folder lives under ``/usr``, which every bubblewrap sandbox binds read-only, and is copied into the
Docker sandbox image (:mod:`workers.sandbox.image`). The wheels are for the sandbox's interpreter
(CPython 3.11 of Debian 12), whatever Python runs this installer.

    python -m workers.sandbox.libs install   # idempotent: skips when the folder holds the pinned set
    python -m workers.sandbox.libs status
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trainer.verifiers.cad import SANDBOX_LIB
from workers.sandbox.cli import make_or_status

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements" / "sandbox.txt"
MARKER = ".temper-requirements"
PYTHON_VERSION = "3.11"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")


def wanted() -> str:
    return REQUIREMENTS.read_text()


def installed() -> bool:
    """True when SANDBOX_LIB holds exactly the pinned set."""
    marker = Path(SANDBOX_LIB) / MARKER
    return marker.exists() and marker.read_text() == wanted()


def install(force: bool = False) -> Path:
    """Install the pinned wheels into SANDBOX_LIB (a fresh folder swapped in whole)."""
    target = Path(SANDBOX_LIB)
    if installed() and not force:
        print(f"sandbox libraries in {target} are current")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".temper-sandbox-", dir=target.parent))
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:", "--target", str(staging),
                    "--python-version", PYTHON_VERSION, *platforms, "-r", str(REQUIREMENTS)], check=True)
    (staging / MARKER).write_text(wanted())
    staging.chmod(0o755)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    print(f"installed sandbox libraries into {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    """``install [--force]`` or ``status`` (see the module docstring)."""
    return make_or_status(argv, prog="python -m workers.sandbox.libs", verb="install",
                          verb_help="install requirements/sandbox.txt for the sandbox's python3", force_help=None,
                          make=install, status_help="print whether the libraries are installed", present=installed,
                          label=str(SANDBOX_LIB), words=("current", "missing or stale"))

if __name__ == "__main__":
    sys.exit(main())
