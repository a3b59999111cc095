"""Every checkpoint a run saves becomes a ModelVersion with its lineage; periodic evaluation
writes eval curves; held-out tasks are never drawn for training."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from controlplane.registry.models import ModelVersion
from controlplane.runs.models import MetricPoint
from controlplane.runs.services import run_create
from tests import factories
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

DOMAINS = ["builtin-addition", "builtin-reversal"]
SMALL = {"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 4},
         "checkpoint": {"every_steps": 1, "keep_last": 1}, "eval": {"every_steps": 2, "tasks_per_domain": 4}}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("tiny") / "tiny", layers=2))


@pytest.fixture
def setup(tiny_model, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)
    settings.VAR_DIR = tmp_path
    _, admin = factories.synced_team(DOMAINS)
    return admin, tiny_model


def test_every_checkpoint_is_a_version_with_lineage_and_eval_curves(setup):
    actor, model = setup
    run = run_create(actor=actor, data=factories.run_payload(DOMAINS, team="acme", base_model=model,
                                                             budget={"steps": 3}, config=SMALL))
    run.transition("queued"); run.transition("running"); run.save()
    assert drive(run.id, worker="w1", send=lambda *a: None) == "completed"

    steps = sorted(run.checkpoints.values_list("step", flat=True))
    assert steps == [1, 2, 3]
    versions = {v.step: v for v in ModelVersion.objects.filter(run=run)}
    assert sorted(versions) == steps, "one version per checkpoint"
    base = ModelVersion.objects.get(team=run.team, kind="base")
    assert base.name == "tiny" and base.path == model
    pins = {rd.domain.slug: rd.domain_version.version for rd in run.run_domains.select_related("domain", "domain_version")}
    for step, v in versions.items():
        assert v.name == f"tiny@{run.id}/{step}"
        assert v.base == "tiny" and v.base_model == model and v.run_id == run.id
        assert v.checkpoint.step == step
        assert v.pinned == pins
        assert {(dv.domain.slug, dv.version) for dv in v.domain_versions.select_related("domain")} == set(pins.items())
        assert v.config == run.config
        assert v.parent == (versions[step - 1] if step > 1 else base)
        # The registry keeps its own copy: checkpoints 1 and 2 were pruned (keep_last 1), their versions were not.
        assert (Path(v.path) / "config.json").is_file() and list(Path(v.path).glob("*.safetensors"))

    # Eval curves: the base point (step 0) and every 2 steps, per domain, beside the training curves.
    eval_steps = sorted(set(MetricPoint.objects.filter(run=run, key__startswith="eval/reward/").values_list("step", flat=True)))
    assert eval_steps == [0, 2]
    assert MetricPoint.objects.filter(run=run, step=2, key="eval/reward/builtin-reversal", domain="builtin-reversal").exists()
    # ... and in the series the run page reads (min/max/last buckets kept on write).
    from controlplane.runs.models import MetricBucket

    assert MetricBucket.objects.filter(run=run, key="eval/reward/builtin-reversal").exists()


def test_held_out_tasks_are_never_drawn_for_training():
    from trainer.config import SamplerConfig
    from trainer.holdout import HOLDOUT_FRACTION, heldout_tasks, is_heldout
    from trainer.sampler import TaskSampler
    from trainer.catalogue.builtin import ADDITION, REVERSAL

    sampler = TaskSampler({"builtin-addition": ADDITION, "builtin-reversal": REVERSAL},
                          {"builtin-addition": 1, "builtin-reversal": 1},
                          SamplerConfig(holdout_fraction=HOLDOUT_FRACTION), n=2, seed=0)
    drawn = {(t.domain, t.id) for t, _ in sampler.draw(3000)}
    held = {(t.domain, t.id) for src, slug in ((ADDITION, "builtin-addition"), (REVERSAL, "builtin-reversal"))
            for t in heldout_tasks(src, slug, 50, seed=1234)}
    assert held and not drawn & held
    assert not any(is_heldout(t, HOLDOUT_FRACTION) for t, _ in sampler.draw(500))
    # The SFT stage draws through the same rule.
    sft_rng = random.Random(5)
    assert not any(is_heldout(sampler.sample_task("builtin-addition", sft_rng), HOLDOUT_FRACTION) for _ in range(500))
    # Without a holdout, the same sampler does draw them (the rule is what keeps them out).
    plain = TaskSampler({"builtin-addition": ADDITION}, {"builtin-addition": 1}, SamplerConfig(), n=2, seed=0)
    assert any(is_heldout(t, HOLDOUT_FRACTION) for t, _ in plain.draw(500))


def test_registering_a_version_again_keeps_its_files_in_place(tmp_path):
    """A run saves its last step twice; the evaluation queued by the first registration may be
    loading the version's files meanwhile, so the same files stay where they are, and new ones
    replace the old without a moment when the path is missing."""
    from controlplane.registry.services import _link_tree

    src, dst = tmp_path / "ckpt" / "model", tmp_path / "registry" / "v1" / "model"
    src.mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"weights-1")
    (src / "config.json").write_text("{}")
    dst.parent.mkdir(parents=True)
    _link_tree(src, dst)
    inode = (dst / "model.safetensors").stat().st_ino
    _link_tree(src, dst)
    assert (dst / "model.safetensors").stat().st_ino == inode
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").write_bytes(b"weights-2")
    _link_tree(src, dst)
    assert (dst / "model.safetensors").read_bytes() == b"weights-2"
    assert sorted(p.name for p in dst.parent.iterdir()) == ["model"]
