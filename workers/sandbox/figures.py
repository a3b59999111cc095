"""The sandbox pools' figures of a host, for its worker's heartbeat (the queue page).

A worker's sandboxes live in the processes that run its verify tasks (Celery's prefork children),
while its heartbeat is sent by the main process. Each process that ran sandbox jobs writes its
pools' figures to ``<directory>/<host>-<pid>.json`` (:func:`write_pool_figures`, after each
batch); the heartbeat merges those of its own processes (:func:`read_pool_figures`):
sizes, idle and target sandboxes and creations per second add up, a domain's waits are the
largest p50 and p99 among the processes (an upper bound of the host's)."""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from .cgroups import pid_alive

FIGURES_MAX_AGE_S = 600.0
"""A process's figures older than this are not shown (it ran no sandbox job since)."""


def process_pool_figures(pools: list) -> dict[str, dict[str, Any]]:
    """The per-domain figures of this process's pools (``SandboxPool.stats()["pools"]``), merged."""
    return merge([pool.stats()["pools"] for pool in pools])


def merge(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per domain: counts and rates summed, waits the largest.

    >>> merge([{"d": {"size": 2, "idle": 1, "target": 2, "wait_p50_s": 0.01, "wait_p99_s": 0.2, "creations_per_s": 0.1}},
    ...        {"d": {"size": 3, "idle": 3, "target": 1, "wait_p50_s": None, "wait_p99_s": None, "creations_per_s": 0.05}}])
    {'d': {'size': 5, 'idle': 4, 'target': 3, 'creations_per_s': 0.15, 'wait_p50_s': 0.01, 'wait_p99_s': 0.2}}
    """
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for domain, f in part.items():
            row = out.setdefault(domain, {"size": 0, "idle": 0, "target": 0, "creations_per_s": 0.0,
                                          "wait_p50_s": None, "wait_p99_s": None})
            for name in ("size", "idle", "target"):
                row[name] += int(f.get(name) or 0)
            row["creations_per_s"] = round(row["creations_per_s"] + float(f.get("creations_per_s") or 0.0), 3)
            for name in ("wait_p50_s", "wait_p99_s"):
                if f.get(name) is not None:
                    row[name] = max(row[name] or 0.0, float(f[name]))
    return out


def write_pool_figures(directory: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Write this process's figures (atomically: a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{socket.gethostname()}-{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"at": time.time(), "pools": figures}))
    os.replace(tmp, path)


def read_pool_figures(directory: Path, now: float | None = None, pids: set[int] | None = None) -> dict[str, dict[str, Any]]:
    """The merged figures of this host's live processes (of ``pids``; default: this process and
    its children, a Celery worker's pool) written within FIGURES_MAX_AGE_S; the files of this
    host's dead processes are removed."""
    now = time.time() if now is None else now
    if pids is None:
        me = psutil.Process()
        pids = {me.pid} | {child.pid for child in me.children(recursive=True)}
    host = socket.gethostname()
    parts = []
    for path in sorted(directory.glob(f"{host}-*.json")) if directory.is_dir() else []:
        pid = path.stem.rsplit("-", 1)[-1]
        if not pid.isdigit():
            continue
        if not pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            continue
        if int(pid) not in pids:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and now - float(data.get("at") or 0) <= FIGURES_MAX_AGE_S:
            parts.append(data.get("pools") or {})
    return merge(parts)
