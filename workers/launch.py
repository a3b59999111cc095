"""A GPU run's driver, in a process of its own on the devices the scheduler assigned.

The train worker's task (``temper.train.drive_run``) does not drive the run in its pool process:
CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when a process first initialises it, and a pool
process is reused from run to run. It starts ``python -m workers.launch RUN_ID --worker NAME``
with ``CUDA_VISIBLE_DEVICES`` set to the run's devices (``Run.placement``), passes its output on
to the worker's log, and returns the driver's reason. The launched process dies with the task's
process (``PR_SET_PDEATHSIG``), so a killed worker leaves no driver behind to fight the next one
for the run's lease.

Imports that wait for Django: ``python -m workers.launch`` starts before Django is set up, so
lazy: django is set up in main(), lazy: controlplane.runs.models once it is, and
lazy: workers.driver (it imports the models too) after that.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys

RESULT = "temper-driver-result: "
"""The prefix of the launched driver's last line: why it returned."""

PR_SET_PDEATHSIG = 1


def visible_devices(placement: dict) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a placement.

    >>> visible_devices({"worker": "train@a", "devices": [2, 3]})
    '2,3'
    """
    return ",".join(str(int(d)) for d in placement["devices"])


def drive_on_devices(run_id: int, worker: str) -> str:
    """Drive run ``run_id`` in a launched process on the devices the scheduler gave it on
    ``worker``; a run placed on another worker (a message that outlived a new placement) is left
    alone."""
    from controlplane.runs.models import Run

    run = Run.objects.filter(pk=run_id).only("placement").first()
    placement = (run.placement or {}) if run is not None else {}
    if placement.get("worker") != worker:
        return f"not placed on {worker} (placement: {placement or 'none'})"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible_devices(placement)}
    cmd = [sys.executable, "-m", "workers.launch", str(run_id), "--worker", worker, "--parent", str(os.getpid())]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reason = ""
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if line.startswith(RESULT):
            reason = line[len(RESULT):].strip()
        else:
            sys.stdout.write(line)
    code = proc.wait()
    return reason or f"the driver's process exited with {code} before saying why"


def _die_with(parent: int) -> None:
    """Be killed when ``parent`` (the task's process) dies; exit at once if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's process group still takes it down
        pass
    if os.getppid() != parent:
        sys.exit(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", type=int)
    parser.add_argument("--worker", required=True, help="the Celery worker the run is placed on (its lease holder)")
    parser.add_argument("--parent", type=int, default=0, help="die with this process (the worker's pool process)")
    args = parser.parse_args(argv)
    if args.parent:
        _die_with(args.parent)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from workers.driver import drive

    reason = drive(args.run_id, worker=args.worker)
    print(RESULT + reason, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
