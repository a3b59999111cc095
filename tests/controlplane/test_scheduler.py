"""The scheduler: admission by priority then age, quotas, preemption without loops, liveness."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.scheduling.scheduler import Quota, RunView, schedule

Q = {"a": Quota(max_gpus=4, max_concurrent_runs=3), "b": Quota(max_gpus=4, max_concurrent_runs=3)}


def rv(id, priority, *, team="a", queued_at=0.0, started_at=None, slots=1, pool="cpu", preempting=False):
    return RunView(id=id, team=team, priority=priority, pool=pool, slots=slots, queued_at=queued_at,
                   started_at=started_at, preempting=preempting)


def test_admits_by_priority_then_age():
    d = schedule(queued=[rv(1, 10, queued_at=0), rv(2, 90, queued_at=5), rv(3, 90, queued_at=1)],
                 running=[], capacity={"cpu": 2}, quotas=Q, now=10, min_run_s=60)
    assert d.admit == [3, 2]
    assert d.pending[1]["binding"] == "cpu" and d.pending[1]["position"] == 1  # first of the runs still waiting
    assert "no free cpu slot: 2 of 2 in use" in d.pending[1]["reason"]


def test_high_priority_preempts_the_lowest_running_after_min_run_time():
    running = [rv(1, 10, started_at=0), rv(2, 30, started_at=0)]
    d = schedule(queued=[rv(3, 90, queued_at=100)], running=running, capacity={"cpu": 2}, quotas=Q, now=100, min_run_s=60)
    assert d.admit == [] and d.preempt == [1]
    assert "waiting for run 1 (priority 10) to checkpoint" in d.pending[3]["reason"]
    # Next tick, run 1 is checkpointing: no second victim is chosen.
    running = [replace(running[0], preempting=True), running[1]]
    d = schedule(queued=[rv(3, 90, queued_at=100)], running=running, capacity={"cpu": 2}, quotas=Q, now=101, min_run_s=60)
    assert d.preempt == [] and d.admit == []


def test_no_preemption_before_min_run_time_or_of_equal_priority():
    d = schedule(queued=[rv(3, 90)], running=[rv(1, 10, started_at=50)], capacity={"cpu": 1}, quotas=Q, now=100, min_run_s=60)
    assert d.preempt == [] and 3 in d.pending
    d = schedule(queued=[rv(3, 10)], running=[rv(1, 10, started_at=0)], capacity={"cpu": 1}, quotas=Q, now=100, min_run_s=60)
    assert d.preempt == []


def test_team_quotas_bind_with_numbers():
    quotas = {"a": Quota(max_gpus=2, max_concurrent_runs=1)}
    d = schedule(queued=[rv(2, 50)], running=[rv(1, 50, started_at=0)], capacity={"cpu": 4}, quotas=quotas, now=1, min_run_s=0)
    assert d.pending[2] == {"position": 1, "binding": "team_runs", "reason": "team a has 1 of 1 concurrent runs", "used": 1, "limit": 1}
    quotas = {"a": Quota(max_gpus=2, max_concurrent_runs=5)}
    d = schedule(queued=[rv(2, 50, pool="train_gpu", slots=2)], running=[rv(1, 50, pool="train_gpu", slots=1, started_at=0)],
                 capacity={"train_gpu": 8}, quotas=quotas, now=1, min_run_s=0)
    assert d.pending[2]["binding"] == "team_gpus" and "uses 1 of 2 GPUs" in d.pending[2]["reason"]


def test_a_run_larger_than_the_pool_says_so():
    d = schedule(queued=[rv(1, 50, pool="train_gpu", slots=9)], running=[], capacity={"train_gpu": 8},
                 quotas={"a": Quota(max_gpus=16, max_concurrent_runs=2)}, now=0, min_run_s=0)
    assert d.pending[1]["reason"] == "asks 9 train_gpu slots; the pool has 8"


ARRIVALS = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 99), st.sampled_from(["a", "b"]), st.integers(1, 15)),
    min_size=1, max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(arrivals=ARRIVALS, capacity=st.integers(1, 3), team_runs=st.integers(1, 3), min_run=st.integers(1, 6))
def test_random_arrivals_finish_without_preemption_loops(arrivals, capacity, team_runs, min_run):
    """Simulate ticks: admitted runs make one unit of progress per tick; a preempted run
    checkpoints on the next tick, keeps its progress and waits in the queue again."""
    quotas = {t: Quota(max_gpus=0, max_concurrent_runs=team_runs) for t in ("a", "b")}
    runs = {i: {"arrive": a, "priority": p, "team": t, "left": w} for i, (a, p, t, w) in enumerate(arrivals)}
    state = {i: "future" for i in runs}
    started: dict[int, int] = {}
    preempting: set[int] = set()
    preempted_at: dict[int, list[int]] = {i: [] for i in runs}
    horizon = 40 + sum(r["left"] for r in runs.values()) * 3 + 50
    for now in range(horizon):
        for i in list(preempting):  # checkpoint and pause, back to the queue
            state[i] = "queued"
            preempting.discard(i)
        for i, r in runs.items():
            if state[i] == "future" and r["arrive"] <= now:
                state[i] = "queued"
        view = lambda i, **kw: RunView(id=i, team=runs[i]["team"], priority=runs[i]["priority"], pool="cpu", slots=1,
                                       queued_at=runs[i]["arrive"], **kw)
        queued = [view(i) for i in runs if state[i] == "queued"]
        running = [view(i, started_at=started[i], preempting=i in preempting) for i in runs if state[i] == "running"]
        d = schedule(queued=queued, running=running, capacity={"cpu": capacity}, quotas=quotas, now=now, min_run_s=min_run)
        for i in d.preempt:
            assert state[i] == "running" and now - started[i] >= min_run, "preempted before its minimum run time"
            preempting.add(i)
            preempted_at[i].append(now)
        for i in d.admit:
            assert state[i] == "queued"
            state[i] = "running"
            started[i] = now
        active = [i for i in runs if state[i] == "running"]
        assert len(active) <= capacity
        for team in ("a", "b"):
            assert sum(runs[i]["team"] == team for i in active) <= team_runs
        for i in active:
            if i in preempting:
                continue
            runs[i]["left"] -= 1
            if runs[i]["left"] == 0:
                state[i] = "done"
        if all(s == "done" for s in state.values()):
            break
    assert all(s == "done" for s in state.values()), f"not every admitted run finished: {state}"
    for times in preempted_at.values():
        assert all(b - a >= min_run for a, b in zip(times, times[1:]))


def test_a_run_of_several_hosts_is_placed_on_as_many_machines_or_waits_naming_them():
    cpu = RunView(id=1, team="a", priority=50, pool="cpu", slots=2, hosts=2)
    one_machine = {"t@m": (), "u@m": ()}
    d = schedule(queued=[cpu], running=[], capacity={"cpu": 4}, quotas=Q, now=0, min_run_s=60, hosts={}, workers=one_machine)
    assert d.admit == [] and d.pending[1]["binding"] == "hosts"
    assert "asks 2 hosts; live train workers (with their own queue) run on 1 machine(s) (m)" in d.pending[1]["reason"]
    d = schedule(queued=[cpu], running=[], capacity={"cpu": 4}, quotas=Q, now=0, min_run_s=60, hosts={},
                 workers={**one_machine, "t@n": ()})
    assert d.admit == [1] and [n["worker"] for n in d.placements[1]["nodes"]] == ["t@m", "t@n"]
    # GPUs: each host gives its share, and what a running run of several hosts holds on each is not free.
    gpus = {"g@m": (0, 1), "g@n": (0, 1), "g@o": (0, 1, 2, 3)}
    holder = RunView(id=2, team="b", priority=50, pool="train_gpu", slots=2, started_at=0, hosts=2,
                     placement=("g@m", (0,)), nodes=(("g@m", (0,)), ("g@n", (0,))))
    run = RunView(id=3, team="a", priority=50, pool="train_gpu", slots=4, hosts=2)
    d = schedule(queued=[run], running=[holder], capacity={"train_gpu": 8}, quotas=Q, now=0, min_run_s=60,
                 hosts=gpus, workers=gpus)
    assert d.pending[3]["binding"] == "hosts" and "m 1 free, n 1 free, o 4 free" in d.pending[3]["reason"]
    d = schedule(queued=[run], running=[], capacity={"train_gpu": 8}, quotas=Q, now=0, min_run_s=60, hosts=gpus, workers=gpus)
    assert d.placements[3]["nodes"] == [{"worker": "g@m", "devices": [0, 1]}, {"worker": "g@n", "devices": [0, 1]}]
