"""A run's place in the store (``TEMPER_STORE``, controlplane/common/storage.py): its checkpoints
and the artifacts of its sampled trajectories.

    <store>/checkpoints/run-<id>/step-<n>/                       a checkpoint (trainer/checkpoint.py)
    <store>/checkpoints/run-<id>/artifacts/step-<n>/<traj>-<k>   the k-th artifact of trajectory <traj>

An artifact (:mod:`trainer.verifiers.artifacts`: a final diff, a test report, a solid) arrives
with its sampled trajectory when the run keeps them (``artifacts.keep``). Its bytes go to a file
whose path is made of numbers only (the run's id, the step, the trajectory's id, the artifact's
place in its list), never of its name, so nothing a verifier or a policy wrote can make the host
write or read outside the run's directory; the name, size and whether it was truncated or refused
are listed on the trajectory's row (``Trajectory.artifacts``). A step's trajectories are replaced
as a whole (a retried write), and forgotten with a rewind, and so are its artifacts; a run that
starts from nothing removes its directory (workers/driver.py).
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from controlplane.common.storage import store_dir
from controlplane.runs.models import Trajectory
from trainer.verifiers.artifacts import MAX_FILES, Artifact

log = logging.getLogger(__name__)

MAX_LISTED = 2 * MAX_FILES
"""Artifacts one trajectory lists at most (a job's outputs and what its stage's code made)."""


def checkpoint_root(run_id: int) -> Path:
    """The directory of a run's checkpoints in the store."""
    return store_dir() / "checkpoints" / f"run-{int(run_id)}"


def artifacts_root(run_id: int) -> Path:
    """Where a run's artifacts live (beside its checkpoints, never pruned with them)."""
    return checkpoint_root(run_id) / "artifacts"


def artifact_path(run_id: int, step: int, trajectory_id: int, index: int) -> Path:
    """The file of one artifact: numbers only."""
    return artifacts_root(run_id) / f"step-{int(step)}" / f"{int(trajectory_id)}-{int(index)}"


def listing(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], list[bytes | None]]:
    """A sample's artifacts as the row lists them (name, size, truncated, refused, stored) and
    their bytes (None for one refused); an entry that is not an artifact is left out, and at most
    :data:`MAX_LISTED` are taken."""
    rows, blobs = [], []
    for entry in (sample.get("artifacts") or [])[:MAX_LISTED]:
        try:
            artifact = Artifact.from_dict(entry)
        except ValueError:
            continue
        rows.append({"name": artifact.name, "size": artifact.size, "truncated": artifact.truncated,
                     "refused": artifact.refused, "stored": not artifact.refused})
        blobs.append(None if artifact.refused else artifact.data)
    return rows, blobs


def forget_steps(run_id: int, *, after: int | None = None, step: int | None = None) -> None:
    """Remove the artifacts of the steps after ``after``, or of ``step``."""
    root = artifacts_root(run_id)
    if step is not None:
        shutil.rmtree(root / f"step-{int(step)}", ignore_errors=True)
        return
    if not root.is_dir():
        return
    for child in root.iterdir():
        number = child.name.removeprefix("step-")
        if number.isdigit() and int(number) > int(after or 0):
            shutil.rmtree(child, ignore_errors=True)


def write(run_id: int, step: int, trajectory_id: int, blobs: list[bytes | None]) -> str:
    """Store one trajectory's artifact bytes (each written aside, then renamed); '' when stored,
    else why the store refused them."""
    try:
        for index, data in enumerate(blobs):
            if data is None:
                continue
            path = artifact_path(run_id, step, trajectory_id, index)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
    except OSError as exc:
        log.warning("run %s step %s: artifacts of trajectory %s not stored: %s", run_id, step, trajectory_id, exc)
        return f"the store could not write it: {exc.strerror or exc}"
    return ""


def keep(run_id: int, step: int, rows: list[Trajectory], listed: list[tuple[list[dict], list[bytes | None]]]) -> None:
    """Store the bytes of each new trajectory row's artifacts (``listed``: :func:`listing` of its
    sample, in the rows' order); a row whose bytes the store refused lists them as not stored, with why."""
    for row, (entries, blobs) in zip(rows, listed):
        if not any(b is not None for b in blobs):
            continue
        why = write(run_id, step, row.pk, blobs) if row.pk is not None else "the trajectory has no id to store it under"
        if why:
            row.artifacts = [{**e, "stored": False, "refused": e["refused"] or why} for e in entries]
            Trajectory.objects.filter(pk=row.pk).update(artifacts=row.artifacts)
