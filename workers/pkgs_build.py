"""Build the swe-pkg task sets in the sandbox (``temper.pkgs.build``; ``manage.py domains build-swe``).

Thin: the trainer's build (:mod:`trainer.families.pkgs.build`) does the work; this module hands
it the sandbox executor (a job on the bwrap or Docker pool, domain ``swe-pkg-build``) and writes
the package's task file. Safe to run twice: the same pin and seed give the same file.
"""
from __future__ import annotations

from typing import Any

from trainer.families.pkgs import build
from trainer.verifiers.limits import Limits
from workers.sandbox import execute

DOMAIN = "swe-pkg-build"
"""The sandbox pool domain the build's jobs run in."""


def executor(backend: str | None = None) -> build.Executor:
    """``execute(files, command, limits)`` on the sandbox pool of ``backend`` (default: the
    runtime's default)."""
    def run(files: dict[str, str], command: list[str], limits: Limits) -> Any:
        return execute(files, command, limits, backend=backend, domain=DOMAIN)
    return run


def build_and_write(name: str, *, seed: int = 0, backend: str | None = None, parallel: int = 2,
                    progress: build.Progress | None = None) -> dict[str, Any]:
    """Build package ``name``'s task set, write ``tasks/<name>.json.gz`` and return the figures."""
    config = build.BuildConfig(seed=seed, parallel=parallel)
    doc, figures = build.build_package(name, executor(backend), config, progress)
    figures["path"] = str(build.write_tasks(doc))
    return figures
