"""The registry's command line runs the same services as the API: evaluate, compare, promote
(gated), override, rollback, export."""
from __future__ import annotations

import io
import json

import pytest
import yaml
from django.core.management import CommandError, call_command

from controlplane.accounts.models import AuditLog
from controlplane.registry.models import Alias, EvalRun, ModelVersion
from controlplane.runs.models import Checkpoint
from tests import factories

pytestmark = pytest.mark.django_db


def cli(*args, user="acme-admin"):
    out = io.StringIO()
    call_command("registry", "--user", user, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def setup(settings, tmp_path):
    import torch

    torch.set_num_threads(1)
    from trainer.models.tiny import build_tiny

    settings.VAR_DIR = tmp_path / "var"
    call_command("domains", "sync", "--no-progress", "--only", "builtin-reversal", verbosity=0)
    factories.audits_passed()  # audits gate evaluations too (tests/controlplane/test_audit_gate.py)
    team = factories.team("acme")
    factories.member(team, "admin", "acme-admin")
    factories.member(team, "member", "acme-member")
    model = build_tiny(tmp_path / "tiny", layers=2)
    run = factories.run(team, base_model=str(model), state="running")
    # Two "checkpoints" of the run: the base weights copied (the CLI does not train).
    for step in (1, 2):
        import shutil

        shutil.copytree(model, tmp_path / f"ckpt/step-{step}/model")
        Checkpoint.objects.create(run=run, step=step, path=str(tmp_path / f"ckpt/step-{step}"))
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"slug": "smoke", "team": "acme", "items": [
        {"domain": "builtin-reversal", "tasks": 6, "max_new_tokens": 4}]}))
    return run, suite, tmp_path


def test_registry_cli_end_to_end(setup):
    run, suite, tmp_path = setup
    listing = cli("versions")
    assert f"tiny@{run.id}/1" in listing and f"tiny@{run.id}/2" in listing
    assert "suite smoke is at v1 (1 items)" in cli("suite-save", str(suite))
    out = cli("evaluate", f"tiny@{run.id}/1", "--suite", "smoke", "--here")
    assert "completed" in out and "builtin-reversal" in out and "pass@1=" in out
    cli("evaluate", f"tiny@{run.id}/2", "--suite", "smoke", "--here")
    assert EvalRun.objects.filter(state="completed").count() == 2
    cmp = cli("compare", f"tiny@{run.id}/1", f"tiny@{run.id}/2")
    assert "builtin-reversal" in cmp and "Δ+0.000" in cmp  # identical weights: no difference
    assert f"tiny:production -> tiny@{run.id}/1" in cli("alias", "production", f"tiny@{run.id}/1", user="acme-member")
    assert f"-> tiny@{run.id}/2" in cli("alias", "production", f"tiny@{run.id}/2", user="acme-member")  # no regression
    assert f"rolled back to tiny@{run.id}/1" in cli("rollback", "tiny", user="acme-member")
    history = cli("history", "tiny")
    assert "rollback" in history and "acme-member" in history
    out = cli("export", "tiny:production", "--dest", str(tmp_path / "export"))
    assert (tmp_path / "export" / "model.safetensors").is_file() and "exported" in out
    assert Alias.objects.get(name="production").version == ModelVersion.objects.get(run=run, step=1)
    assert AuditLog.objects.filter(action__startswith="alias.").count() == 3


def test_cli_gate_refusal_names_the_regressing_domain(setup):
    run, suite, tmp_path = setup
    cli("suite-save", str(suite))
    for step in (1, 2):
        cli("evaluate", f"tiny@{run.id}/{step}", "--suite", "smoke", "--here")
    # Make step 2's results worse than step 1's on every task.
    good, bad = (EvalRun.objects.get(version__step=s).results.get() for s in (1, 2))
    good.per_task = [{**t, "rewards": [1.0]} for t in good.per_task]
    bad.per_task = [{**t, "rewards": [0.0]} for t in bad.per_task]
    good.save(); bad.save()
    cli("alias", "production", f"tiny@{run.id}/1")
    with pytest.raises(CommandError, match=r"promotion refused(.|\n)*builtin-reversal \(capability, smoke\): -1.000"):
        cli("alias", "production", f"tiny@{run.id}/2", user="acme-member")
    with pytest.raises(CommandError, match="needs a reason"):
        cli("alias", "production", f"tiny@{run.id}/2", "--override")
    assert "-> tiny@" in cli("alias", "production", f"tiny@{run.id}/2", "--override", "--reason", "accepted")
    assert AuditLog.objects.filter(action="alias.override", after__reason="accepted").exists()


def test_temper_registry_is_the_registry_command(setup):
    """``manage.py temper registry ...`` runs ``manage.py registry ...`` as the same user, options
    after the action included."""
    run, suite, tmp_path = setup

    def temper(*args, user="acme-member"):
        out = io.StringIO()
        call_command("temper", "--user", user, "registry", *args, stdout=out)
        return out.getvalue()

    assert f"tiny@{run.id}/2" in temper("versions", "--run", str(run.id))
    assert "suite smoke is at v1" in temper("suite-save", str(suite))
    for step in (1, 2):
        assert "completed" in temper("evaluate", f"tiny@{run.id}/{step}", "--suite", "smoke", "--here")
    out = json.loads(temper("compare", f"tiny@{run.id}/1", f"tiny@{run.id}/2", "--json"))
    assert out["suite"] == "smoke" and [r["domain"] for r in out["rows"]] == ["builtin-reversal"]
    assert f"tiny:candidate -> tiny@{run.id}/2" in temper("alias", "candidate", f"tiny@{run.id}/2")
    assert AuditLog.objects.get(action="alias.move").actor.username == "acme-member"  # acted as --user
    # Options right after "registry" are the registry command's too.
    assert f"tiny:canary -> tiny@{run.id}/1" in temper("--user", "acme-admin", "alias", "canary", f"tiny@{run.id}/1")
    assert AuditLog.objects.filter(action="alias.move").latest("id").actor.username == "acme-admin"
    with pytest.raises(CommandError, match="model version .tiny@999/1. not found"):
        temper("show", "tiny@999/1")
    with pytest.raises(CommandError, match="required"):
        temper()
