"""A run that learns: its base model and last checkpoint, evaluated automatically, compare with a
significant improvement on the trained domains."""
from __future__ import annotations

import pytest

from controlplane.registry import selectors, services
from controlplane.registry.models import EvalRun, ModelVersion
from controlplane.runs.services import run_create
from tests import factories
from workers.driver import drive
from workers.evaluate import run_eval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_base_vs_last_checkpoint_shows_the_improvement(settings, tmp_path, monkeypatch):
    import torch

    torch.set_num_threads(1)
    from controlplane import dispatch
    from trainer.models.tiny import build_tiny

    queued = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: queued.append(args[0]) if name == "temper.eval.run" else None)
    settings.VAR_DIR = tmp_path
    model = str(build_tiny(tmp_path / "tiny", layers=2))
    _, actor = factories.synced_team(["builtin-addition", "builtin-reversal"])
    services.suite_save(actor=actor, data={"slug": "heldout", "team": "acme", "auto_evaluate": True, "items": [
        {"domain": "builtin-addition", "tasks": 32, "max_new_tokens": 3},
        {"domain": "builtin-reversal", "tasks": 48, "max_new_tokens": 4}]})
    run = run_create(actor=actor, data=factories.run_payload(
        ["builtin-addition", "builtin-reversal"], team="acme", base_model=model, budget={"steps": 2},
        config={"rollout": {"prompts_per_step": 8, "n": 4, "max_new_tokens": 4}, "sft": {"steps": 300, "lr": 3e-3, "batch_size": 16},
                "checkpoint": {"every_steps": 1}}))
    run.transition("queued"); run.transition("running"); run.save()
    assert drive(run.id, worker="w1", send=lambda *a: None) == "completed"
    assert len(queued) == 4  # base, step 0 (the policy after the SFT stage), step 1, step 2
    for eval_id in queued:
        assert run_eval(eval_id, worker="test") == "completed", EvalRun.objects.get(pk=eval_id).error
    base = ModelVersion.objects.get(kind="base")
    last = ModelVersion.objects.get(run=run, step=2)
    out = selectors.compare_versions(actor=actor, refs=[str(base.pk), str(last.pk)])
    rows = {r["domain"]: r["cells"] for r in out["rows"]}
    print({d: (c[0]["mean"], c[1]["mean"], c[1]["delta_lo"], c[1]["delta_hi"]) for d, c in rows.items()})
    assert rows["builtin-reversal"][1]["improvement"]
    assert rows["builtin-addition"][1]["mean"] > rows["builtin-addition"][0]["mean"]
    # The run's held-out curve starts at its policy after SFT (step 0), not at the random init.
    start = ModelVersion.objects.get(run=run, step=0)
    from controlplane.runs.models import MetricPoint

    base_eval = EvalRun.objects.get(version=base).results.get(domain="builtin-reversal").mean_reward
    start_eval = EvalRun.objects.get(version=start).results.get(domain="builtin-reversal").mean_reward
    point = MetricPoint.objects.get(run=run, step=0, key="eval/reward/builtin-reversal").value
    assert point == pytest.approx(start_eval) and start_eval != base_eval
    # The comparison page defaults to that start, names it, and keeps the base model one click away.
    from django.test import Client

    client = Client()
    client.force_login(actor.user)
    page = client.get(f"/registry/compare/?run={run.id}").content.decode()
    assert "starting policy after its SFT stage" in page and f"baseline <strong>{start.name}</strong>" in page
    page = client.get(f"/registry/compare/?run={run.id}&from=base").content.decode()
    assert f"baseline <strong>{base.name}</strong>" in page
