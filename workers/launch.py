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

A run spread over several hosts (``config.parallel.hosts``; the scheduler placed it on one train
worker per host, ``Run.nodes``) is driven by its first node's worker: that worker takes a free
port on its own address (:func:`host_address`), publishes the rendezvous through the control plane
(a ``temper.train.join_run`` task to each other node's own queue, with its node rank, the address
and the port) and starts node 0's ranks; each other worker starts its node's ranks, and torchrun's
static rendezvous (a c10d store on the first host, no ``--standalone``) joins them into one
process group, global rank 0 on the driver's host.

Imports that wait for Django: ``python -m workers.launch`` starts before Django is set up, so
lazy: django is set up in main(), lazy: controlplane.runs.models once it is, and
lazy: workers.driver (it imports the models too) after that; lazy: trainer.ranks and
lazy: trainer.follower imports torch, which a rank needs and a worker's task does not.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
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
    nodes = run.nodes
    env = {"CUDA_VISIBLE_DEVICES": visible_devices(placement), DEVICES_PER_RANK: str(run.devices_per_rank)}
    if len(nodes) < 2:
        return drive_launched(run_id, worker, ranks=run.ranks, env=env)
    # lazy: Django is set up by then (the module starts before it; see above)
    from controlplane import dispatch
    from controlplane.scheduling.selectors import direct_queue

    address = host_address()
    master = f"{address}:{free_port(address)}"
    for node_rank, node in enumerate(nodes[1:], start=1):
        dispatch.send(JOIN_TASK, run_id, node_rank, master, queue=direct_queue(node["worker"]))
    return drive_launched(run_id, worker, ranks=run.ranks_per_host, env=env, nodes=len(nodes), master=master)


JOIN_TASK = "temper.train.join_run"


def join_node(run_id: int, worker: str, node_rank: int, master: str) -> str:
    """Start node ``node_rank`` of run ``run_id``'s ranks on this worker, joining the rendezvous
    at ``master`` that its driving worker published; returns how they ended. A message that
    outlived its placement (the run was placed anew) is left alone."""
    from controlplane.runs.models import Run

    run = Run.objects.filter(pk=run_id).only("placement", "gpus", "config").first()
    nodes = run.nodes if run is not None else []
    if not 0 < node_rank < len(nodes) or nodes[node_rank]["worker"] != worker:
        return f"not node {node_rank} of run {run_id} on {worker} (placement: {run.placement if run else 'none'})"
    env = {"CUDA_VISIBLE_DEVICES": visible_devices(nodes[node_rank]),
           DEVICES_PER_RANK: str(run.devices_per_rank)}
    reason = drive_launched(run_id, worker, ranks=run.ranks_per_host, env=env, nodes=len(nodes),
                            node_rank=node_rank, master=master)
    return f"node {node_rank} of run {run_id}: {reason}"


def host_address() -> str:
    """The address other hosts reach this one at, for a rendezvous it leads: ``TEMPER_HOST_ADDRESS``
    where set (a host with several networks names the one its ranks share), else what this
    host's name resolves to, else the address of the interface of its default route."""
    if address := os.environ.get("TEMPER_HOST_ADDRESS", "").strip():
        return address
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    if not address.startswith("127."):
        return address
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: sends nothing; picks the route's source address
        return probe.getsockname()[0]
    except OSError:
        return address
    finally:
        probe.close()


def free_port(address: str) -> int:
    """A TCP port free on ``address`` now (for the rendezvous store the first node's torchrun binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def drive_launched(run_id: int, worker: str, *, ranks: int, env: dict[str, str] | None = None, nodes: int = 1,
                   node_rank: int = 0, master: str = "") -> str:
    """Drive run ``run_id`` in a launched process (``ranks`` > 1 or ``nodes`` > 1: torchrun's
    ``ranks`` on this host, node ``node_rank`` of ``nodes`` joined at ``master``), with ``env``
    added to this process's environment; returns the driver's reason (a node other than the
    first: how its ranks ended)."""
    cmd = [sys.executable, "-m", "workers.launch", str(run_id), "--worker", worker, "--parent", str(os.getpid()),
           "--ranks", str(ranks)]
    if nodes > 1:
        cmd += ["--nodes", str(nodes), "--node-rank", str(node_rank), "--master", master]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reason = ""
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if line.startswith(RESULT):
            reason = line[len(RESULT):].strip()
        else:
            sys.stdout.write(line)
    code = proc.wait()
    if node_rank > 0:
        return f"its ranks exited with {code}"
    return reason or f"the driver's process exited with {code} before saying why"


def torchrun_command(run_id: int, worker: str, ranks: int, nodes: int = 1, node_rank: int = 0, master: str = "") -> list[str]:
    """The torchrun command line of a run's ranks on this host: one node with a free port of its
    own, or node ``node_rank`` of ``nodes`` whose static rendezvous is the store at ``master``
    (``address:port``, served by node 0's torchrun).

    >>> torchrun_command(7, "train@a", 2)[2:8]
    ['torch.distributed.run', '--standalone', '--nnodes', '1', '--nproc-per-node', '2']
    >>> torchrun_command(7, "train@b", 1, 2, 1, "10.0.0.1:29400")[2:13]
    ['torch.distributed.run', '--nnodes', '2', '--node-rank', '1', '--master-addr', '10.0.0.1', '--master-port', '29400', '--nproc-per-node', '1']
    """
    if nodes > 1:
        address, _, port = master.rpartition(":")
        where = ["--nnodes", str(nodes), "--node-rank", str(node_rank), "--master-addr", address, "--master-port", port]
    else:
        where = ["--standalone", "--nnodes", "1"]
    return [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(ranks),
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
    from trainer.follower import follow
    from workers.driver import follower_ready, run_environment_context

    slugs = follower_ready(run_id)
    follow(env_context=run_environment_context(slugs))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", type=int)
    parser.add_argument("--worker", required=True, help="the Celery worker the run is placed on (its lease holder)")
    parser.add_argument("--parent", type=int, default=0, help="die with this process (the worker's pool process)")
    parser.add_argument("--ranks", type=int, default=1, help="processes of the run's job on this host (torchrun's ranks when above 1)")
    parser.add_argument("--nodes", type=int, default=1, help="hosts the run's ranks are spread over")
    parser.add_argument("--node-rank", type=int, default=0, help="this host's place among them (0 drives)")
    parser.add_argument("--master", default="", help="ADDRESS:PORT of the first host's rendezvous store")
    args = parser.parse_args(argv)
    if "LOCAL_RANK" in os.environ:  # started by torchrun: die with its agent
        _die_with(os.getppid())
    elif args.parent:
        _die_with(args.parent)
    if (args.ranks > 1 or args.nodes > 1) and "LOCAL_RANK" not in os.environ:
        cmd = torchrun_command(args.run_id, args.worker, args.ranks, args.nodes, args.node_rank, args.master)
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
