"""A run's driver in a process of its own: on the devices the scheduler assigned, and on several
ranks (torchrun) when the run has more than one.

The train worker's task (``temper.train.drive_run``) does not drive the run in its pool process:
CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when a process first initialises it, and a pool
process is reused from run to run. It starts ``python -m workers.launch RUN_ID --worker NAME``
with ``CUDA_VISIBLE_DEVICES`` set to the run's devices (``Run.placement``), passes its output on
to the worker's log, and returns the driver's reason. A run of N ranks (one per GPU, or
``config.parallel.ranks`` on CPU) is started the same way by either drive task, and that process
becomes ``torchrun --standalone --nproc-per-node N``: rank 0 drives the run (it alone talks to the
database and the queues) and leads the others (``trainer/ranks.py``). Every launched process dies
with the one that started it (``PR_SET_PDEATHSIG``), so a killed worker leaves no driver or rank
behind to fight the next one for the run's lease.

Imports that wait for Django: ``python -m workers.launch`` starts before Django is set up, so
lazy: django is set up in main(), lazy: controlplane.runs.models once it is, and
lazy: workers.driver (it imports the models too) after that; lazy: trainer.ranks and
lazy: trainer.job import torch, which a rank needs and a worker's task does not.
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

DEVICES_PER_RANK = "TEMPER_DEVICES_PER_RANK"
"""GPUs of ``CUDA_VISIBLE_DEVICES`` each rank takes (its vLLM engine's tensor-parallel size)."""


def visible_devices(placement: dict) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a placement.

    >>> visible_devices({"worker": "train@a", "devices": [2, 3]})
    '2,3'
    """
    return ",".join(str(int(d)) for d in placement["devices"])


def drive_on_devices(run_id: int, worker: str) -> str:
    """Drive run ``run_id`` in a launched process on the devices the scheduler gave it on
    ``worker``, one rank per device; a run placed on another worker (a message that outlived a
    new placement) is left alone."""
    from controlplane.runs.models import Run

    run = Run.objects.filter(pk=run_id).only("placement", "gpus", "config").first()
    placement = (run.placement or {}) if run is not None else {}
    if placement.get("worker") != worker:
        return f"not placed on {worker} (placement: {placement or 'none'})"
    return drive_launched(run_id, worker, ranks=run.ranks,
                          env={"CUDA_VISIBLE_DEVICES": visible_devices(placement),
                               DEVICES_PER_RANK: str(run.devices_per_rank)})


def drive_launched(run_id: int, worker: str, *, ranks: int, env: dict[str, str] | None = None) -> str:
    """Drive run ``run_id`` in a launched process (``ranks`` > 1: torchrun's ranks), with ``env``
    added to this process's environment; returns the driver's reason."""
    cmd = [sys.executable, "-m", "workers.launch", str(run_id), "--worker", worker, "--parent", str(os.getpid()),
           "--ranks", str(ranks)]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reason = ""
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if line.startswith(RESULT):
            reason = line[len(RESULT):].strip()
        else:
            sys.stdout.write(line)
    code = proc.wait()
    return reason or f"the driver's process exited with {code} before saying why"


def torchrun_command(run_id: int, worker: str, ranks: int) -> list[str]:
    """The torchrun command line of a run's ranks (one node; a free port of its own).

    >>> torchrun_command(7, "train@a", 2)[2:8]
    ['torch.distributed.run', '--standalone', '--nnodes', '1', '--nproc-per-node', '2']
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", str(ranks),
            "-m", "workers.launch", str(run_id), "--worker", worker, "--ranks", str(ranks)]


def _die_with(parent: int) -> None:
    """Be killed when ``parent`` dies; exit at once if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's process group still takes it down
        pass
    if os.getppid() != parent:
        sys.exit(3)


def _rank_main(run_id: int, worker: str) -> int:
    """One of torchrun's ranks: rank 0 drives the run and leads, the others follow."""
    from controlplane.runs.models import Run
    from trainer import ranks

    run = Run.objects.filter(pk=run_id).only("config").first()
    rank, world = ranks.init_from_env(run.collective_timeout_s if run is not None else ranks.COLLECTIVE_TIMEOUT_S)
    if rank == 0:
        from workers.driver import drive

        def abort(reason: str) -> None:
            """A rank was lost while the driver waits in a collective with it: say why, end the
            ranks on this host (a stopped one would wait forever) and this process."""
            print(RESULT + reason, flush=True)
            ranks.end_local_ranks()
            os._exit(1)

        ranks.pause_on_terminate()  # torchrun's agent SIGTERMs the leader when a follower dies
        print(RESULT + drive(run_id, worker=worker, abort=abort), flush=True)
        # The others have been told to stop; do not wait on a peer that may be stuck in a collective.
        os._exit(0)
    from trainer.job import follow
    from workers.driver import follower_ready, run_environment_context

    slugs = follower_ready(run_id)
    follow(env_context=run_environment_context(slugs))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", type=int)
    parser.add_argument("--worker", required=True, help="the Celery worker the run is placed on (its lease holder)")
    parser.add_argument("--parent", type=int, default=0, help="die with this process (the worker's pool process)")
    parser.add_argument("--ranks", type=int, default=1, help="processes of the run's job (torchrun's ranks when above 1)")
    args = parser.parse_args(argv)
    if "LOCAL_RANK" in os.environ:  # started by torchrun: die with its agent
        _die_with(os.getppid())
    elif args.parent:
        _die_with(args.parent)
    if args.ranks > 1 and "LOCAL_RANK" not in os.environ:
        cmd = torchrun_command(args.run_id, args.worker, args.ranks)
        os.execv(cmd[0], cmd)  # keeps PR_SET_PDEATHSIG: torchrun's agent dies with the task too
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    if "LOCAL_RANK" in os.environ:
        return _rank_main(args.run_id, args.worker)
    from workers.driver import drive

    print(RESULT + drive(args.run_id, worker=args.worker), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
