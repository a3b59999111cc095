"""A run's ranks across hosts: two simulated hosts on one network (tests/hosts.py: each its own
network namespace, hostname, /etc/hosts and private TEMPER_VAR_DIR, joined by a bridge; both on
the same PostgreSQL and Redis through relays), each with a train worker. A run of 2 ranks over 2
hosts is placed on both, its first host's worker drives and publishes the rendezvous, the other's
ranks join it (no ``--standalone``), and it ends with the same parameters as the same run on 2
ranks of one host."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from controlplane.runs.models import Checkpoint, Run, RunEvent
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.models import ResourcePool
from controlplane.scheduling.selectors import train_workers
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.hosts import Network, host_services, start_host_worker
from tests.services import wait_for

STEPS = 4


def start_host(name: str, tmp_path: Path, env: dict, relays: dict, network: Network):
    return start_host_worker(name, tmp_path, env, relays, queues="control,rollout,train", worker="train", network=network)


def weak_base(tmp_path: Path) -> Path:
    """A tiny model with a short SFT stage on addition behind it: it answers some tasks, so the
    runs' groups have mixed rewards and their updates move the parameters."""
    from trainer.job import Job
    from trainer.models.tiny import build_tiny

    job = Job({"model": {"path": str(build_tiny(tmp_path / "tiny", layers=2, seed=0))}, "seed": 0,
               "domains": {"builtin-addition": 1.0}, "sft": {"lr": 3e-3, "batch_size": 16}})
    try:
        job.sft(120)
        job.model.save_pretrained(tmp_path / "model")
        job.tokenizer.save_pretrained(tmp_path / "model")
    finally:
        job.close()
    return tmp_path / "model"


def final_parameters(run: Run) -> dict[str, torch.Tensor]:
    last = Checkpoint.objects.filter(run=run).latest("step")
    assert last.step == STEPS
    return load_file(str(Path(last.path) / "model" / "model.safetensors"))


@pytest.mark.slow
def test_a_run_of_two_hosts_ends_as_the_same_run_on_one_host(transactional_db, tmp_path, settings):
    services = host_services(tmp_path, settings)
    env, relays = services.env, services.relays
    _, actor = factories.synced_team(["builtin-addition"], "member")
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=2)
    model = str(weak_base(tmp_path))

    def submit(hosts: int) -> Run:
        return run_create(actor=actor, data=factories.run_payload(
            ["builtin-addition"], team="acme", base_model=model, budget={"steps": STEPS}, name=f"on {hosts} hosts",
            config={"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2},
                    "parallel": {"ranks": 2, "hosts": hosts, "collective_timeout_s": 120}}))

    network = Network(tmp_path)
    hosts = {name: None for name in ("host-a", "host-b")}
    try:
        for name in hosts:
            network.add(name)
        for name in hosts:
            hosts[name] = start_host(name, tmp_path, env, relays, network)
        logs = [tmp_path / f"{name}.log" for name in hosts]
        live = wait_for(lambda: len(train_workers()) >= 2 and train_workers(), 60, "both hosts' train workers", logs=logs)
        assert {w.rpartition("@")[2] for w in live} == {"host-a", "host-b"}
        ended = {}
        for count in (1, 2):
            run = submit(count)
            run_start(actor=actor, run=run)
            ended[count] = wait_for(lambda: schedule_tick() is not None and Run.objects.filter(
                pk=run.pk, state__in=["completed", "failed", "paused"]).first(), 420, f"the run on {count} host(s)", logs=logs)
            assert ended[count].state == "completed", (ended[count].state, ended[count].error)
        # The other host's ranks end with the run: its join task returns how they exited.
        joined = f"node 1 of run {ended[2].id}: its ranks exited with 0"
        wait_for(lambda: any(joined in log.read_text() for log in logs), 120, "the joined node's ranks to end", logs=logs)
    finally:
        for proc in hosts.values():
            if proc is not None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in hosts.values():
            if proc is not None:
                proc.wait(timeout=60)
        network.close()

    one, two = ended[1], ended[2]
    # Placed on two machines; the first node's worker drove, the other's ranks joined it.
    nodes = two.placement["nodes"]
    assert {n["worker"].rpartition("@")[2] for n in nodes} == set(hosts) and two.placement["worker"] == nodes[0]["worker"]
    assert "on 2 hosts" in RunEvent.objects.filter(run=two, kind="admitted").latest("at").message
    ranks = RunEvent.objects.filter(run=two, kind="ranks").latest("at")
    assert ranks.data["world"] == 2 and ranks.data["hosts"] == [n["worker"] for n in nodes]
    assert joined in (tmp_path / f"{nodes[1]['worker'].rpartition('@')[2]}.log").read_text()
    assert len(RunEvent.objects.filter(run=one, kind="ranks").latest("at").data["hosts"]) == 1
    # Same parameters as the run on one host's two ranks.
    a, b = final_parameters(one), final_parameters(two)
    assert a.keys() == b.keys()
    diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    initial = load_file(str(Path(model) / "model.safetensors"))
    moved = max((a[k].float() - initial[k].float()).abs().max().item() for k in a)
    assert moved > 1e-4, "the runs did not train"
    print(f"2 hosts x 1 rank vs 1 host x 2 ranks: max |param diff| {diff:.3g}; moved from the base by {moved:.3g}")
    assert diff <= 1e-6, diff
