"""Admission and preemption across runs, as a pure function of the current state.

A tick looks at the queued runs in priority order (then age) and admits each one that fits its
team's quota and a free slot of the pool it needs. When a run does not fit and runs of lower
priority hold the slots it needs, the lowest-priority of those (youngest first) are preempted:
they checkpoint, pause and go back to the queue, and resume when capacity returns. A run is never
preempted before it has run ``min_run_s`` since it last started, which rules out preemption loops.
Every run left waiting gets a reason naming the resource that binds it and the numbers.

Where the workers' GPUs are known (``hosts``: each live train worker's device indices, from its
heartbeat), a GPU run is admitted only with concrete devices: all of its GPUs on one worker, none
of them held by another running run. The worker with the fewest free devices that still fit is
chosen (best fit keeps whole workers free for large runs), and its lowest free indices.

A run spread over several hosts (``hosts`` above 1: torchrun's nodes) is placed on that many live
train workers on different machines (the part of a worker's name after ``@``), each with its
share of the run's GPUs free (best fit again); a CPU run of several hosts takes any such workers
(``workers``: every live train worker, with or without GPUs). The first node's worker drives.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunView:
    """What the scheduler needs to know about one run."""

    id: int
    team: str
    priority: int
    pool: str
    """The pool whose slots the run holds while it runs (``cpu`` or ``train_gpu``)."""
    slots: int
    """How many slots of ``pool`` it needs."""
    queued_at: float = 0.0
    """Seconds (any epoch) since it was queued: older runs go first at equal priority."""
    started_at: float | None = None
    """When it last started running (None while queued)."""
    preempting: bool = False
    """Asked to checkpoint and pause already; its slots free up when it does."""
    placement: tuple[str, tuple[int, ...]] | None = None
    """The worker and the device indices a running GPU run holds (None: none assigned)."""
    hosts: int = 1
    """Machines its ranks are spread over, each with ``slots // hosts`` of its slots."""
    nodes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Each worker and its device indices, for a running run placed on several hosts."""


@dataclass(frozen=True)
class Quota:
    max_gpus: int
    max_concurrent_runs: int


@dataclass
class Decision:
    admit: list[int] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    pending: dict[int, dict] = field(default_factory=dict)
    """run id -> {position, binding, reason, numbers}."""
    placements: dict[int, dict] = field(default_factory=dict)
    """admitted GPU run id -> {worker, devices} (only when the workers' devices are known); a run
    of several hosts also has ``nodes``: [{worker, devices}, ...], the first being ``worker``."""


Waiting = tuple[str, str, int, int]
"""Why a run waits: ``(binding, reason, used, limit)``, as :func:`_pending` records it."""


@dataclass
class _Books:
    """What the pools and the teams hold while one tick decides: the running runs, then each run
    it admits; the slots already coming back from runs that are checkpointing; the runs that may
    yield theirs (lowest priority, then youngest, first) and those this tick already asked to."""

    capacity: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    team_runs: dict[str, int] = field(default_factory=dict)
    team_gpus: dict[str, int] = field(default_factory=dict)
    freeing: dict[str, int] = field(default_factory=dict)
    preemptable: list[RunView] = field(default_factory=list)
    chosen: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, running: list[RunView], capacity: dict[str, int]) -> _Books:
        books = cls(capacity, used={pool: 0 for pool in capacity}, freeing={pool: 0 for pool in capacity})
        for r in running:
            books.hold(r)
            if r.preempting:
                books.freeing[r.pool] = books.freeing.get(r.pool, 0) + r.slots
        books.preemptable = sorted((r for r in running if not r.preempting), key=lambda r: (r.priority, -(r.started_at or 0.0)))
        return books

    def hold(self, r: RunView) -> None:
        """Count ``r`` as running: its slots of its pool, one of its team's runs, and (off the
        ``cpu`` pool) its team's GPUs."""
        self.used[r.pool] = self.used.get(r.pool, 0) + r.slots
        self.team_runs[r.team] = self.team_runs.get(r.team, 0) + 1
        if r.pool != "cpu":
            self.team_gpus[r.team] = self.team_gpus.get(r.team, 0) + r.slots

    def over_limits(self, run: RunView, quota: Quota) -> Waiting | None:
        """Why ``run`` waits whatever frees up now: its team's runs or GPUs, or a pool too small."""
        runs, gpus, cap = self.team_runs.get(run.team, 0), self.team_gpus.get(run.team, 0), self.capacity.get(run.pool, 0)
        if runs + 1 > quota.max_concurrent_runs:
            return "team_runs", f"team {run.team} has {runs} of {quota.max_concurrent_runs} concurrent runs", runs, quota.max_concurrent_runs
        if run.pool != "cpu" and gpus + run.slots > quota.max_gpus:
            return "team_gpus", f"team {run.team} uses {gpus} of {quota.max_gpus} GPUs and this run asks {run.slots}", gpus, quota.max_gpus
        if run.slots > cap:
            return run.pool, f"asks {run.slots} {run.pool} slots; the pool has {cap}", self.used.get(run.pool, 0), cap
        return None


def schedule(
    *,
    queued: list[RunView],
    running: list[RunView],
    capacity: dict[str, int],
    quotas: dict[str, Quota],
    now: float,
    min_run_s: float,
    hosts: dict[str, tuple[int, ...]] | None = None,
    workers: dict[str, tuple[int, ...]] | None = None,
) -> Decision:
    """``hosts``: each live train worker's device indices; None leaves devices out (pools only).
    ``workers``: every live train worker (with its devices, maybe none), for runs of several hosts."""
    decision = Decision()
    free_devices = None if hosts is None else _free_devices(hosts, running)
    books = _Books.of(running, capacity)
    for run in sorted(queued, key=lambda r: (-r.priority, r.queued_at, r.id)):
        position = len(decision.pending) + 1  # among the runs left waiting
        waiting = books.over_limits(run, quotas.get(run.team, Quota(max_gpus=0, max_concurrent_runs=0)))
        free = capacity.get(run.pool, 0) - books.used.get(run.pool, 0)
        if waiting is None and run.slots <= free:
            placed, waiting = _placement(run, free_devices, hosts, workers)
            if waiting is None:
                if placed is not None:
                    decision.placements[run.id] = placed
                decision.admit.append(run.id)
                books.hold(run)
                continue
        elif waiting is None:
            waiting = _make_room(run, free, books, running, decision, now=now, min_run_s=min_run_s)
        decision.pending[run.id] = _pending(position, *waiting)
    return decision


def _placement(run: RunView, free_devices: dict[str, list[int]] | None, hosts: dict[str, tuple[int, ...]] | None,
               workers: dict[str, tuple[int, ...]] | None) -> tuple[dict | None, Waiting | None]:
    """Where a run that fits its pool goes, as ``(placement, None)``: its hosts (a run of several),
    its devices (a GPU run, where they are known), or None (anywhere); or ``(None, why it waits)``."""
    if run.hosts > 1:
        gpu = run.pool != "cpu"
        pick_from = (free_devices or {}) if gpu else {w: [] for w in (workers or {})}
        placed = _place_nodes(pick_from, run.hosts, run.slots // run.hosts if gpu else 0)
        if placed is None:
            return None, ("hosts", _no_hosts(pick_from, run, gpu), len({_machine(w) for w in pick_from}), run.hosts)
        return placed, None
    if run.pool != "cpu" and free_devices is not None:
        placed = _place(free_devices, run.slots)
        if placed is None:
            return None, ("devices", _no_devices(free_devices, hosts, run.slots),
                          max((len(f) for f in free_devices.values()), default=0), run.slots)
        return placed, None
    return None, None


def _make_room(run: RunView, free: int, books: _Books, running: list[RunView], decision: Decision, *,
               now: float, min_run_s: float) -> Waiting:
    """A run short of free slots: is capacity already coming back, or can runs of lower priority
    yield (each past ``min_run_s``)? Then they are asked to (``decision.preempt``) and the slots are
    reserved for ``run``; either way it waits, and the reason says for whom."""
    cap = books.capacity.get(run.pool, 0)
    short = run.slots - free - books.freeing.get(run.pool, 0)
    victims = []
    for r in books.preemptable:
        if short <= 0:
            break
        if (r.id in books.chosen or r.pool != run.pool or r.priority >= run.priority
                or r.started_at is None or now - r.started_at < min_run_s):
            continue
        victims.append(r)
        short -= r.slots
    if short > 0:
        holders = sorted((r for r in running if r.pool == run.pool), key=lambda r: -r.priority)
        detail = ", ".join(_named(r, run.team) for r in holders[:5])
        return run.pool, f"no free {run.pool} slot: {cap - free} of {cap} in use" + (f" by {detail}" if detail else ""), cap - free, cap
    for r in victims:
        books.chosen.add(r.id)
        decision.preempt.append(r.id)
        books.freeing[run.pool] = books.freeing.get(run.pool, 0) + r.slots
    # The freed slots are reserved for this run: nothing behind it takes them this tick.
    books.freeing[run.pool] = books.freeing.get(run.pool, 0) - (run.slots - free)
    books.used[run.pool] = cap
    who = ", ".join(_named(r, run.team) for r in victims) or "runs already checkpointing"
    return run.pool, f"waiting for {who} to checkpoint and free {run.pool} slots", cap - free, cap


def _free_devices(hosts: dict[str, tuple[int, ...]], running: list[RunView]) -> dict[str, list[int]]:
    """Each worker's device indices that no running run holds."""
    held: dict[str, set[int]] = {}
    for r in running:
        for worker, devices in r.nodes or ((r.placement,) if r.placement is not None else ()):
            held.setdefault(worker, set()).update(devices)
    return {w: sorted(set(devices) - held.get(w, set())) for w, devices in hosts.items()}


def _place(free: dict[str, list[int]], n: int) -> dict | None:
    """Take ``n`` devices on one worker (best fit, then the worker's name; its lowest indices) out
    of ``free``; None when no worker has ``n`` free.

    >>> free = {"b": [0, 1, 2, 3], "a": [2, 3], "c": [5]}
    >>> _place(free, 2), free["a"]
    ({'worker': 'a', 'devices': [2, 3]}, [])
    >>> _place(free, 2), _place(free, 4)
    ({'worker': 'b', 'devices': [0, 1]}, None)
    """
    fits = sorted((len(devices), worker) for worker, devices in free.items() if len(devices) >= n)
    if not fits:
        return None
    worker = fits[0][1]
    taken, free[worker] = free[worker][:n], free[worker][n:]
    return {"worker": worker, "devices": taken}


def _machine(worker: str) -> str:
    """The machine a Celery worker runs on: its name's part after ``@`` (the whole name without)."""
    return worker.rpartition("@")[2]


def _place_nodes(free: dict[str, list[int]], hosts: int, each: int) -> dict | None:
    """Take ``each`` devices on each of ``hosts`` workers on different machines (per machine its
    best-fitting worker, then the best-fitting machines, then names) out of ``free``; None when
    fewer machines have that many free. ``each`` 0 takes any worker (a CPU run).

    >>> free = {"t@a": [0, 1], "t@b": [0, 1, 2, 3], "u@b": [4, 5], "t@c": [7]}
    >>> _place_nodes(free, 2, 2)
    {'worker': 't@a', 'devices': [0, 1], 'nodes': [{'worker': 't@a', 'devices': [0, 1]}, {'worker': 'u@b', 'devices': [4, 5]}]}
    >>> _place_nodes(free, 2, 2), _place_nodes({"x@m": [], "y@m": []}, 2, 0)
    (None, None)
    >>> _place_nodes({"x@m": [], "y@n": []}, 2, 0)["nodes"]
    [{'worker': 'x@m', 'devices': []}, {'worker': 'y@n', 'devices': []}]
    """
    best: dict[str, tuple[int, str]] = {}
    for worker, devices in free.items():
        if len(devices) >= each:
            machine = _machine(worker)
            best[machine] = min(best.get(machine, (len(devices), worker)), (len(devices), worker))
    chosen = sorted(best.values())[:hosts]
    if len(chosen) < hosts:
        return None
    nodes = []
    for _, worker in chosen:
        taken, free[worker] = free[worker][:each], free[worker][each:]
        nodes.append({"worker": worker, "devices": taken})
    return {"worker": nodes[0]["worker"], "devices": nodes[0]["devices"], "nodes": nodes}


def _no_hosts(free: dict[str, list[int]], run: RunView, gpu: bool) -> str:
    """Why a run of several hosts cannot be placed now: the machines with a live train worker
    (and, for GPUs, their most free devices)."""
    machines: dict[str, int] = {}
    for worker, devices in free.items():
        machines[_machine(worker)] = max(machines.get(_machine(worker), 0), len(devices))
    if gpu:
        each = ", ".join(f"{m} {n} free" for m, n in sorted(machines.items())[:8]) or "none"
        return (f"asks {run.hosts} hosts with {run.slots // run.hosts} free GPU(s) each; machines with a live train "
                f"worker: {each}")
    return (f"asks {run.hosts} hosts; live train workers (with their own queue) run on {len(machines)} machine(s)"
            + (f" ({', '.join(sorted(machines)[:8])})" if machines else ""))


def _no_devices(free: dict[str, list[int]], hosts: dict[str, tuple[int, ...]], n: int) -> str:
    """Why no worker can take a run of ``n`` GPUs now, with each worker's free and total devices."""
    if not hosts:
        return (f"asks {n} GPU(s); no live worker on the train queue reports a GPU (workers report nvidia-smi's "
                "devices in their heartbeat)")
    each = ", ".join(f"{w} {len(free[w])} of {len(hosts[w])} free" for w in sorted(hosts)[:8])
    return f"asks {n} GPU(s) on one worker; no live train worker has that many free ({each})"


def _named(r: RunView, team: str) -> str:
    """A run holding slots as the waiting run's team may read it: its own team's by id, another
    team's only as that (the note is shown to the waiting run's team)."""
    return f"run {r.id} (priority {r.priority})" if r.team == team else f"another team's run (priority {r.priority})"


def _pending(position: int, binding: str, reason: str, used: int, limit: int) -> dict:
    return {"position": position, "binding": binding, "reason": reason, "used": used, "limit": limit}
