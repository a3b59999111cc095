"""The command-line interface runs the same services as the API, with readable output."""
from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from controlplane.accounts.models import AuditLog
from controlplane.domains.models import Domain
from controlplane.runs.models import Run
from tests import factories


def cli(*args, user="acme-admin"):
    out = io.StringIO()
    call_command("temper", "--user", user, *args, stdout=out)
    return out.getvalue()


def test_run_lifecycle_from_the_cli(world, tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(factories.run_payload(["addition", "parity"], team="acme")))
    assert "valid: team acme, 2 domains" in cli("runs", "validate", str(spec))
    assert "created run" in cli("runs", "create", str(spec), "--start")
    run = Run.objects.get()
    assert run.state == "queued"
    assert f"run {run.id}: cancelled" in cli("runs", "cancel", str(run.id))
    listing = cli("runs", "list")
    assert "cancelled" in listing and "my run" in listing


def test_cli_errors_name_the_field(world, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(factories.run_payload(["addition"], team="acme", budget={"steps": 0})))
    with pytest.raises(CommandError, match=r"budget.steps: must be at least 1"):
        cli("runs", "validate", str(spec))
    with pytest.raises(CommandError, match="no such file"):
        cli("runs", "create", str(tmp_path / "missing.yaml"))


def test_viewer_is_refused_by_the_cli(world, tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(factories.run_payload(["addition"], team="acme")))
    with pytest.raises(CommandError, match="your role 'viewer' may not do this"):
        cli("runs", "create", str(spec), user="acme-viewer")


def test_domain_set_versions_and_diff(world):
    out = cli("domains", "set", "addition", "priority=75", "max_share=0.5", user="root")
    assert "addition is now at v2" in out
    assert "v2" in cli("domains", "versions", "addition")
    diff = cli("domains", "diff", "addition", "1", "2")
    assert "priority" in diff and "75" in diff and "max_share" in diff
    assert AuditLog.objects.filter(action="domain.quota").count() == 1


def test_tokens_from_the_cli(world):
    out = cli("tokens", "create", "--team", "acme", "--name", "laptop")
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("tmp_")
    assert "laptop" in cli("tokens", "list")


def test_domains_sync_is_idempotent(db):
    out = io.StringIO()
    call_command("domains", "sync", "--no-progress", stdout=out)
    first = Domain.objects.count()
    assert first >= 3 and "created" in out.getvalue()
    versions = sorted(Domain.objects.values_list("slug", "version"))
    out = io.StringIO()
    call_command("domains", "sync", "--no-progress", stdout=out)
    assert f"0 created, 0 updated, {first} unchanged" in out.getvalue()
    assert sorted(Domain.objects.values_list("slug", "version")) == versions


def test_domains_sync_leaves_out_the_uploads_a_run_registered_in_this_process(db):
    """A driver running in this process registers the uploads its run pins (workers/domains.py);
    sync stores the domains the code defines, never an upload (whose rows exist already)."""
    from trainer import catalogue
    from workers.domains import register_data_domains

    pin = catalogue.pinned("uploaded-sums", 1, {
        "title": "Uploaded sums", "kind": "math", "verifier": {"stages": [{"type": "exact", "params": {}, "timeout_s": 1.0}]},
        "task_source": {"family": "jsonl", "tasks": [{"domain": "uploaded-sums", "id": "1", "prompt": "1+1=", "answer": "2"}]}})
    register_data_domains([pin])
    try:
        assert "uploaded-sums" in catalogue.all_domains() and "uploaded-sums" not in catalogue.code_domains()
        out = io.StringIO()
        call_command("domains", "sync", "--no-progress", stdout=out)
        assert "created" in out.getvalue()
        assert not Domain.objects.filter(slug="uploaded-sums").exists()
        assert Domain.objects.filter(slug="builtin-addition").exists()
    finally:
        catalogue.unregister("uploaded-sums")
