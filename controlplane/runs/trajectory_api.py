"""API: a run's sampled trajectories (the trajectory explorer) and their artifacts' downloads."""
from __future__ import annotations

from typing import Any, Optional

from django.http import FileResponse, HttpRequest
from django.urls import reverse
from ninja import Path, Query, Router, Schema
from ninja.pagination import paginate

from controlplane.common.api import ERRORS, MAX_ID
from controlplane.runs import selectors, series
from controlplane.runs.store import MAX_LISTED

router = Router(tags=["runs"])

DOWNLOAD_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox; default-src 'none'",
                    "Cache-Control": "private, no-store"}
"""On every artifact download: never sniffed, never rendered as a page (a report or a diff is bytes
a policy shaped), never kept by a shared cache."""


class ArtifactOut(Schema):
    name: str
    """A path under the job's directory (``report.xml``, ``logs/build.log``) or a file a stage made (``final.diff``)."""
    size: int
    """The file's size in bytes where it was made (more than was kept when ``truncated``)."""
    truncated: bool
    refused: str
    """Why its bytes were not kept ('' when they were): missing, a symbolic link, over a bound, ..."""
    stored: bool
    url: Optional[str] = None
    """Where to download it (stored ones)."""


class TrajectoryOut(Schema):
    id: int
    step: int
    domain: str
    task_id: str
    prompt: str
    completion: str
    reward: Optional[float] = None
    outcome: str
    details: dict[str, Any]
    verifier_version: Optional[int] = None
    judge_version: Optional[int] = None
    timings: dict[str, Any]
    artifacts: list[ArtifactOut] = []

    @staticmethod
    def resolve_artifacts(obj) -> list[dict[str, Any]]:
        entries = obj.artifacts if isinstance(obj.artifacts, list) else []
        return [{**e, "url": reverse("api:run_trajectory_artifact", kwargs={"run_id": obj.run_id, "trajectory_id": obj.id, "index": i})
                 if e.get("stored") else None} for i, e in enumerate(entries) if isinstance(e, dict)]


@router.get("/runs/{run_id}/trajectories", response={200: list[TrajectoryOut], **ERRORS})
@paginate
def run_trajectories(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID),
                     step: Optional[int] = Query(None, ge=0, le=series.MAX_STEP), domain: str = Query("", max_length=100),
                     outcome: str = Query("", max_length=16), task_id: str = Query("", max_length=200),
                     min_reward: Optional[float] = Query(None, ge=-1e9, le=1e9), max_reward: Optional[float] = Query(None, ge=-1e9, le=1e9),
                     min_length: Optional[int] = Query(None, ge=0, le=10**9), max_length: Optional[int] = Query(None, ge=0, le=10**9),
                     trajectory: Optional[int] = Query(None, ge=1, le=MAX_ID),
                     flag: str = Query("", max_length=16)):
    """Sampled trajectories: one step or all, by domain, outcome, task (the same task across
    steps), reward range, completion length range (characters), reward-hacking evidence (``flag``:
    impossible canaries, episodes that touched tests or harness files, passes a stricter regrade
    failed), or one by id (a shared link). Each lists its artifacts, with a download URL for the
    stored ones."""
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    return selectors.trajectory_list(run=run, step=step, domain=domain, outcome=outcome, task_id=task_id,
                                     min_reward=min_reward, max_reward=max_reward, min_length=min_length,
                                     max_length=max_length, trajectory=trajectory, flag=flag)


@router.get("/runs/{run_id}/trajectories/{trajectory_id}/artifacts/{index}", response={200: None, **ERRORS},
            url_name="run_trajectory_artifact",
            openapi_extra={"responses": {"200": {"description": "The artifact's bytes, as an attachment",
                                                 "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}})
def run_trajectory_artifact(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID),
                            trajectory_id: int = Path(..., ge=1, le=MAX_ID), index: int = Path(..., ge=0, lt=MAX_LISTED)):
    """Download one artifact of a sampled trajectory, with the trajectory's permissions (another
    team's run is not found). Always ``application/octet-stream`` as an attachment, whatever the
    name says: the browser saves it, never renders it."""
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    entry, path = selectors.trajectory_artifact(run=run, trajectory_id=trajectory_id, index=index)
    response = FileResponse(path.open("rb"), as_attachment=True, filename=entry["name"].rsplit("/", 1)[-1],
                            content_type="application/octet-stream")
    for header, value in DOWNLOAD_HEADERS.items():
        response[header] = value
    return response
