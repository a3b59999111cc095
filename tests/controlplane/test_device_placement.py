"""GPUs bound to runs: the scheduler admits a GPU run only with concrete devices of one live
train worker (from the devices its heartbeat reports), sends the run's driver to that worker's own
queue, and shows on /queue/ which devices each run holds (controlplane/scheduling)."""
from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane import dispatch
from controlplane.runs.models import Run, RunEvent
from controlplane.scheduling.models import ResourcePool, TeamQuota, WorkerHeartbeat
from controlplane.scheduling.scheduler import Quota, RunView, schedule
from controlplane.scheduling.selectors import direct_queue, train_hosts
from controlplane.scheduling.services import heartbeat_record, schedule_tick
from tests import factories

Q = {"a": Quota(max_gpus=64, max_concurrent_runs=64), "b": Quota(max_gpus=64, max_concurrent_runs=64)}


def gpu(id, slots, *, team="a", priority=50, placement=None, started_at=None):
    return RunView(id=id, team=team, priority=priority, pool="train_gpu", slots=slots, queued_at=float(id),
                   started_at=started_at, placement=placement)


def decide(queued, running=(), hosts=None, capacity=64):
    return schedule(queued=list(queued), running=list(running), capacity={"train_gpu": capacity, "cpu": 4}, quotas=Q,
                    now=1000.0, min_run_s=60.0, hosts=hosts)


def test_best_fit_on_one_worker_and_devices_never_shared():
    hosts = {"w-big": (0, 1, 2, 3), "w-small": (0, 1)}
    d = decide([gpu(1, 2), gpu(2, 3), gpu(3, 2)], hosts=hosts)
    # Run 1 fills the small worker whole, run 2 takes three of the big one's four; run 3 would fit
    # the pools (64 slots) but no worker has two free GPUs left.
    assert d.placements == {1: {"worker": "w-small", "devices": [0, 1]}, 2: {"worker": "w-big", "devices": [0, 1, 2]}}
    assert d.admit == [1, 2]
    note = d.pending[3]
    assert note["binding"] == "devices" and (note["used"], note["limit"]) == (1, 2)
    assert "w-big 1 of 4 free" in note["reason"] and "w-small 0 of 2 free" in note["reason"]


def test_devices_held_by_running_runs_are_not_given_again():
    running = [gpu(1, 2, placement=("w", (0, 2)), started_at=0.0)]
    d = decide([gpu(2, 2), gpu(3, 1)], running=running, hosts={"w": (0, 1, 2, 3)})
    assert d.placements == {2: {"worker": "w", "devices": [1, 3]}}
    assert d.pending[3]["binding"] == "devices"


def test_a_gpu_run_waits_when_no_live_train_worker_reports_gpus_and_a_cpu_run_does_not():
    cpu = RunView(id=9, team="a", priority=50, pool="cpu", slots=1)
    d = decide([gpu(1, 1), cpu], hosts={})
    assert d.admit == [9] and d.placements == {}
    assert "no live worker on the train queue reports a GPU" in d.pending[1]["reason"]
    # Without a device inventory at all (hosts=None) the pools alone decide, as before.
    assert decide([gpu(1, 1)], hosts=None).admit == [1]


@pytest.mark.parametrize("seed", range(20))
def test_random_arrivals_never_put_two_runs_on_one_device(seed):
    rng = random.Random(seed)
    hosts = {f"w{i}": tuple(range(rng.choice([1, 2, 4, 8]))) for i in range(rng.randint(1, 4))}
    running: list[RunView] = []
    next_id = 1
    for tick in range(30):
        queued = [gpu(next_id + k, rng.choice([1, 1, 2, 3, 4, 8])) for k in range(rng.randint(0, 3))]
        next_id += len(queued)
        d = decide(queued, running=running, hosts=hosts)
        by_id = {r.id: r for r in queued}
        for rid in d.admit:
            p = d.placements[rid]
            running.append(gpu(rid, by_id[rid].slots, placement=(p["worker"], tuple(p["devices"])), started_at=0.0))
        held = [(r.placement[0], i) for r in running for i in r.placement[1]]
        assert len(held) == len(set(held)), "a device was given to two runs"
        assert all(i in hosts[w] for w, i in held)
        assert all(len(r.placement[1]) == r.slots for r in running)
        if running and rng.random() < 0.4:
            running.pop(rng.randrange(len(running)))  # a run ends, its devices free up


# -- the tick, on the database -------------------------------------------------------------

def _train_worker(name: str, indices, *, seen=None, direct=True):
    devices = [{"index": i, "name": "NVIDIA H200", "memory_gib": 140.4} for i in indices]
    hb = heartbeat_record(worker=name, queues=["train"] + ([direct_queue(name)] if direct else []),
                          meta={"pid": 1, "devices": devices})
    if seen is not None:
        WorkerHeartbeat.objects.filter(pk=hb.pk).update(last_seen=seen)


@pytest.fixture
def gpu_team(db, monkeypatch):
    team = factories.team("acme")
    TeamQuota.objects.create(team=team, max_gpus=8, max_concurrent_runs=8)
    ResourcePool.objects.create(name="h200", kind="train_gpu", capacity=8)
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, queue=None, **kw: sent.append((name, args, queue)))
    team.sent = sent
    return team


def test_train_hosts_are_live_train_workers_with_their_own_queue_and_gpus(gpu_team):
    _train_worker("train@a", [0, 1])
    _train_worker("train@old", [0], seen=timezone.now() - timedelta(hours=1))  # stale
    _train_worker("train@nodirect", [0], direct=False)  # an older worker that does not consume its own queue
    heartbeat_record(worker="train@cpu", queues=["train", direct_queue("train@cpu")], meta={"devices": []})
    heartbeat_record(worker="rollout@b", queues=["rollout"], meta={"devices": [{"index": 0}]})
    assert train_hosts() == {"train@a": (0, 1)}


def test_the_tick_assigns_devices_and_sends_the_driver_to_that_workers_queue(gpu_team, django_capture_on_commit_callbacks):
    _train_worker("train@a", [0, 1, 2, 3])
    _train_worker("train@b", [0, 1])
    first = factories.run(gpu_team, state="queued", gpus=2, queued_at=timezone.now())
    second = factories.run(gpu_team, state="queued", gpus=3, queued_at=timezone.now() + timedelta(seconds=1))
    cpu = factories.run(gpu_team, state="queued", gpus=0, queued_at=timezone.now() + timedelta(seconds=2))
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    first.refresh_from_db(), second.refresh_from_db(), cpu.refresh_from_db()
    assert first.placement == {"worker": "train@b", "devices": [0, 1]}
    assert second.placement == {"worker": "train@a", "devices": [0, 1, 2]}
    assert cpu.placement == {} and cpu.state == "running"
    assert sorted(gpu_team.sent) == sorted([("temper.train.drive_run", (first.id,), direct_queue("train@b")),
                                            ("temper.train.drive_run", (second.id,), direct_queue("train@a")),
                                            ("temper.rollout.drive_run", (cpu.id,), None)])
    admitted = RunEvent.objects.get(run=first, kind="admitted")
    assert "on train@b, GPUs 0,1" in admitted.message and admitted.data["placement"]["devices"] == [0, 1]
    # A third run of two GPUs: the pools have 8, but worker a has one left and b none.
    third = factories.run(gpu_team, state="queued", gpus=2, queued_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    third.refresh_from_db()
    assert third.state == "queued" and third.scheduler_note["binding"] == "devices"
    assert "train@a 1 of 4 free" in third.scheduler_note["reason"]
    # The /queue/ page says which devices each run holds.
    admin = factories.member(gpu_team, "admin")
    client = Client()
    client.force_login(admin)
    page = client.get("/queue/").content.decode()
    assert "GPUs 0,1 on train@b" in page and "GPUs 0,1,2 on train@a" in page
    table = page[page.index('data-worker="train@a"'):]
    assert f"run #{second.id}" in table[:table.index("</tr>")] and "free" in table[:table.index("</tr>")]


def test_a_gpu_run_whose_worker_died_is_paused_and_placed_again_on_a_live_one(gpu_team, django_capture_on_commit_callbacks, settings):
    settings.TEMPER_DRIVER_LEASE_S = 5
    _train_worker("train@a", [0, 1])
    run = factories.run(gpu_team, state="queued", gpus=2, queued_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    run.refresh_from_db()
    assert run.placement["worker"] == "train@a"
    # Its driver went silent and worker a stopped heartbeating; worker b comes up.
    long_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(driver="train@a", driver_seen_at=long_ago)
    WorkerHeartbeat.objects.filter(worker="train@a").update(last_seen=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    run.refresh_from_db()
    assert run.state == "paused" and run.scheduler_note["resume_when_served"] == "train"
    paused = RunEvent.objects.filter(run=run, kind="paused").latest("at")
    assert paused.data["cause"] == "devices_lost" and "train@a, which holds its GPUs, is gone" in paused.message
    _train_worker("train@b", [0, 1, 2, 3])
    gpu_team.sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()  # back to the queue: a train worker is live
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()  # placed anew
    run.refresh_from_db()
    assert run.state == "running" and run.placement == {"worker": "train@b", "devices": [0, 1]}
    assert ("temper.train.drive_run", (run.id,), direct_queue("train@b")) in gpu_team.sent


def test_a_driver_message_for_another_worker_is_left_alone(gpu_team):
    """A message that outlived a new placement (the run was placed again elsewhere) does not claim it."""
    from workers.driver import drive
    from workers.launch import drive_on_devices

    run = factories.run(gpu_team, state="running", gpus=1, placement={"worker": "train@b", "devices": [0]})
    assert drive(run.id, worker="train@a") == "not claimed (its GPUs were assigned on train@b)"
    assert drive_on_devices(run.id, "train@a").startswith("not placed on train@a")
    run.refresh_from_db()
    assert run.driver == "" and not RunEvent.objects.filter(run=run, kind="driver").exists()


# -- ranks and tensor-parallel engines against the devices ------------------------------------

def test_a_runs_ranks_follow_its_gpus_and_engine_size(gpu_team):
    tp = {"rollout": {"engine": "vllm", "tensor_parallel_size": 2}}
    assert (factories.run(gpu_team, gpus=8, config=tp).ranks, factories.run(gpu_team, gpus=8, config=tp).slots) == (4, 8)
    assert factories.run(gpu_team, gpus=3).ranks == 3
    cpu = factories.run(gpu_team, gpus=0, config={"parallel": {"ranks": 2}})
    assert (cpu.ranks, cpu.slots, cpu.devices_per_rank) == (2, 2, 0)
    assert factories.run(gpu_team, gpus=0, config={"parallel": {"ranks": "two"}}).ranks == 1  # not a number: one


def test_the_driver_refuses_devices_that_do_not_fit_the_runs_settings(gpu_team):
    from controlplane.runs.preflight import placement_errors

    tp = {"rollout": {"engine": "vllm", "tensor_parallel_size": 2}}
    run = factories.run(gpu_team, gpus=4, config=tp, placement={"worker": "w", "devices": [0, 1, 2, 3]})
    assert placement_errors(run, world=2) == []
    assert placement_errors(run, world=4) == [("config.parallel.ranks", "2 rank(s) expected for 4 GPUs in engines of 2; this job has 4")]
    short = factories.run(gpu_team, gpus=4, config=tp, placement={"worker": "w", "devices": [0, 1]})
    assert placement_errors(short, world=2)[0][0] == "gpus"
    odd = factories.run(gpu_team, gpus=3, config=tp, placement={"worker": "w", "devices": [0, 1, 2]})
    assert placement_errors(odd, world=1)[0][0] == "config.rollout.tensor_parallel_size"


@pytest.mark.parametrize("gpus, config, extra, field, words", [
    (4, {"rollout": {"engine": "torch", "tensor_parallel_size": 2}}, {}, "config.rollout.tensor_parallel_size", "needs rollout.engine vllm"),
    (6, {"rollout": {"engine": "vllm", "tensor_parallel_size": 4}}, {}, "config.rollout.tensor_parallel_size", "must divide the GPUs"),
    (0, {"rollout": {"engine": "vllm", "tensor_parallel_size": 8}}, {}, "config.rollout.tensor_parallel_size",
     "engines of 8 tensor-parallel workers, one CPU slot each (8); the cpu pools hold 4"),
    (4, {"parallel": {"ranks": 3}}, {}, "config.parallel.ranks", "leave it out, or set 4"),
    (6, {"parallel": {"hosts": 4}}, {}, "config.parallel.hosts", "spreads 6 ranks (one per GPU) over 4 hosts"),
    (0, {"parallel": {"ranks": 3, "hosts": 2}}, {}, "config.parallel.hosts", "spreads 3 ranks over 2 hosts"),
    (0, {"parallel": {"ranks": 2, "hosts": 0}}, {}, "config.parallel.hosts", "at least 1"),
])
def test_submission_refuses_ranks_and_engines_the_gpus_cannot_hold(gpu_team, gpus, config, extra, field, words):
    from django.core.management import call_command

    from controlplane.common.errors import InvalidInput
    from controlplane.runs.services import run_create

    call_command("domains", "sync", "--no-progress", "--only", "builtin-addition", verbosity=0)
    ResourcePool.objects.create(name="cpu4", kind="cpu", capacity=4)
    actor = factories.actor(factories.member(gpu_team, "admin"))
    with pytest.raises(InvalidInput) as refused:
        run_create(actor=actor, data=factories.run_payload(["builtin-addition"], team="acme", gpus=gpus, config=config,
                                                           **extra))
    assert any(e.path == field and words in e.message for e in refused.value.errors), refused.value.errors
    assert not Run.objects.exists()  # nothing is saved


@pytest.mark.parametrize("worker", ["train@vm", "demo@my-host.local", "gpu_1@node3", "a@b c", "w@hôte", "x@\U0001f600"])
def test_a_workers_direct_queue_is_a_name_every_transport_takes(worker, tmp_path):
    """The embedded default's broker (kombu's file-system transport) refused ``train.demo@vm`` and
    the worker's heartbeat died with it: the queue and its exchange are declared there, a message
    sent to it is received, and two workers never share one."""
    from kombu import Connection, Exchange, Queue

    name = direct_queue(worker)
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
               "control_folder": str(tmp_path / "control")}
    with Connection("filesystem://", transport_options=options) as conn:
        queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
        with conn.Producer() as producer:
            producer.publish({"run": 7}, exchange=queue.exchange, routing_key=name, declare=[queue])
        with conn.SimpleQueue(queue) as simple:
            assert simple.get(timeout=5).payload == {"run": 7}
    others = {direct_queue(w) for w in ("train@vm", "train_40vm", "train@v_m", "train@v-m")}
    assert len(others) == 4
