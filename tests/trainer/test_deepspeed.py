"""DeepSpeed on CPU ranks (``DS_ACCELERATOR=cpu``, gloo), the path a multi-GPU run takes on NCCL.

One start of each rank group serves every case (DeepSpeed's import and engine builds are the
slow part): one process runs each stage alone, two gloo ranks run each stage on the same global
batch; then two led ranks (trainer/ranks.py, the way ``workers/launch.py`` runs a run) run ZeRO-3
to the end, two more are killed with SIGKILL after step 3 of 4, and two resume them from their
last checkpoint. Parameters are read from the
checkpoints' Hugging Face exports, so ZeRO-3's gathering for the export is what is compared.

- 2 ranks end with the parameters of 1 (below 1e-5 in fp32) at ZeRO 0, 2 and 3, and DeepSpeed
  at 0 and 2 ends with the plain backend's;
- the micro-batches (6, 6, 4 sequences) do not divide over 2 ranks: the short rank pads, and no
  rank waits forever;
- the learning rate at every step is the same under both backends (warm-up, then linear decay);
- the killed run, resumed, ends with the never-stopped run's parameters, every rank's optimizer
  shard and sampling RNG restored.
"""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.trainer.rank_groups import STAGES, STEPS, config_for, launch, max_diff, params_of


@pytest.fixture(scope="module")
def runs(tiny_path, tmp_path_factory):
    """Every rank group's results: one start each."""
    base_config = {"model": {"path": tiny_path}, "seed": 0,
                   "rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 3},
                   "optimizer": {"lr": 1e-3}, "limits": {}}
    root = tmp_path_factory.mktemp("deepspeed")
    one = [{"config": config_for(base_config, None), "final": str(root / "one-torch")}]
    one += [{"config": config_for(base_config, s), "final": str(root / f"one-z{s}")} for s in STAGES]
    two = [{"config": config_for(base_config, s), "final": str(root / f"two-z{s}")} for s in STAGES]
    straight = [{"config": config_for(base_config, 3), "final": str(root / "straight")}]
    killed_cfg = config_for(base_config, 3, str(root / "killed"))
    killed = [{"config": killed_cfg, "every": str(root / "killed"), "die_after": 3, "final": str(root / "never")}]
    exits = {"one": launch(one, 1, str(root / "one.json")),
             "two": launch(two, 2, str(root / "two.json")),
             "straight": launch(straight, 2, str(root / "straight.json"), led=True),
             "killed": launch(killed, 2, str(root / "killed.json"), led=True)}
    latest = max((p for p in (root / "killed").iterdir() if p.name.startswith("step-") and p.name[5:].isdigit()),
                 key=lambda p: int(p.name[5:]), default=None)
    resumed = [{"resume": str(latest), "final": str(root / "resumed")}] if latest else []
    exits["resumed"] = launch(resumed, 2, str(root / "resumed.json"), led=True) if latest else None
    return {"root": root, "exits": exits, "latest": latest,
            "one": json.load(open(root / "one.json")), "two": json.load(open(root / "two.json"))}


@pytest.mark.slow
def test_two_ranks_end_with_one_ranks_parameters_at_every_stage(runs):
    assert runs["exits"]["one"] == [0] and runs["exits"]["two"] == [0, 0]
    root = runs["root"]
    plain = params_of(str(root / "one-torch"))
    for stage in STAGES:
        one, two = params_of(str(root / f"one-z{stage}")), params_of(str(root / f"two-z{stage}"))
        assert max_diff(one, two) < 1e-5, stage
        if stage < 3:  # DeepSpeed's update is the plain backend's, to the same forward
            assert max_diff(plain, one) < 1e-5, stage
    # ZeRO-3's forward is the module's own (the lean forward needs whole parameters): the same
    # samples and losses, to rounding, and weights as near as Adam lets rounding stay
    for z3 in (runs["one"][3], runs["two"][2]):
        assert z3["losses"] == pytest.approx(runs["one"][0]["losses"], abs=1e-6)
    # ... and the updates moved the weights (the comparison is not of untouched models)
    from trainer.models.load import load_model  # noqa: F401  (the export loads as any model)
    start = params_of_model(runs)
    assert max_diff(start, plain) > 1e-4


def params_of_model(runs) -> dict:
    """The initial weights (the tiny model every run started from)."""
    from safetensors.torch import load_file

    cfg = json.load(open(os.path.join(runs["root"], "one-torch", "state.json")))["config"]
    return load_file(os.path.join(cfg["model"]["path"], "model.safetensors"))


@pytest.mark.slow
def test_uneven_micro_batches_pad_and_every_step_trains(runs):
    """16 sequences in micro-batches of 6 are 3 micro-batches: rank 0 runs two, rank 1 one real and
    one zero-weight. The runs above ended, so no rank waited; the losses match one rank's."""
    for stage, one, two in zip(STAGES, runs["one"][1:], runs["two"]):
        assert len(two["losses"]) == STEPS, stage
        assert two["losses"] == pytest.approx(one["losses"], rel=1e-4, abs=1e-6), stage


@pytest.mark.slow
def test_the_learning_rate_schedule_is_the_same_under_both_backends(runs):
    from trainer.optim import lr_factor

    lr = runs["one"][0]["lrs"]
    expected = [1e-3 * lr_factor(s, 2, "linear", STEPS) for s in range(STEPS)]
    assert lr == pytest.approx(expected, rel=1e-9)
    assert lr == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4])  # warm-up over 2 steps, then linear decay to 0
    for case in runs["one"][1:] + runs["two"]:
        assert case["lrs"] == pytest.approx(lr, rel=1e-9)


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_to_the_parameters_of_one_never_stopped(runs):
    exits = runs["exits"]
    assert exits["killed"][0] == -signal.SIGKILL  # the leader died after step 3, before its checkpoint
    assert exits["killed"][1] != 0  # ... and its follower noticed rather than waiting forever
    assert runs["latest"].name == "step-2"
    assert sorted(p.name for p in (runs["latest"] / "zero" / "shards").iterdir() if "optim" in p.name) == [
        "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert exits["resumed"] == [0, 0]
    assert exits["straight"] == [0, 0]
    diff = max_diff(params_of(str(runs["root"] / "straight")), params_of(str(runs["root"] / "resumed")))
    assert diff < 1e-6, diff


def test_a_zero_checkpoint_resumes_only_on_the_ranks_that_wrote_it():
    from trainer.config import ConfigError
    from trainer.optim import DeepSpeedBackend

    backend = DeepSpeedBackend.__new__(DeepSpeedBackend)
    backend.stage = 2
    import torch.distributed as dist

    from trainer.optim import ensure_process_group

    ensure_process_group()
    try:
        with pytest.raises(ConfigError) as info:
            backend.load_shards(None, {"deepspeed": {"stage": 2, "world": 2}})
        (path, message), = info.value.errors
        assert path == "parallel.ranks" and "over 2 ranks" in message and "not on 1" in message
    finally:
        dist.destroy_process_group()
