"""Promotion in the registry: aliases (``production`` behind the promotion gate), rollback, export.

Members and admins move aliases; moving ``production`` past the promotion gate needs a team admin
and a reason; every alias move and export is audited. A version that an alias ever pointed at may
be exported as a Hugging Face directory.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from django.db import transaction

from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import Conflict, InvalidInput, found
from controlplane.common.storage import store_dir
from controlplane.registry.models import ALIASES, Alias, AliasMove, ModelVersion
from controlplane.registry.selectors import promotion_gate


class GateRefused(Conflict):
    """Moving production would let a domain regress beyond the threshold."""

    def __init__(self, message: str, verdict: dict):
        super().__init__(message)
        self.verdict = verdict


# ----------------------------------------------------------------------------- aliases
def _alias_view(alias: Alias | None) -> dict | None:
    return {"version": alias.version.name, "version_id": alias.version_id} if alias else None


def _move(actor: Principal, alias: Alias | None, team: Team, base: str, name: str, version: ModelVersion,
          kind: str, reason: str, gate: dict) -> Alias:
    before = _alias_view(alias)
    previous = alias.version if alias else None
    if alias is None:
        alias = Alias(team=team, base=base, name=name, version=version)
    alias.version = version
    alias.full_clean()
    alias.save()
    AliasMove.objects.create(alias=alias, from_version=previous, to_version=version, actor=actor.user, kind=kind,
                             reason=reason, gate=gate)
    audit_record(actor=actor, obj=alias, action=f"alias.{kind}", before=before,
                 after={**_alias_view(alias), "alias": name, "reason": reason, "gate": gate}, team=team)
    return alias


@transaction.atomic
def alias_move(*, actor: Principal, version: ModelVersion, name: str, reason: str = "", override: bool = False,
               suite: str = "") -> Alias:
    """Point ``name`` of the version's model line at ``version``.

    Moving ``production`` runs the promotion gate against the current production version: a
    domain whose mean reward drops by more than the threshold, significantly (the bootstrap
    interval of the paired difference is below 0), refuses the move (409) — unless a team admin
    overrides it with a reason, which is audited as ``alias.override``.
    """
    actor.require(version.team_id, "run.control", "model version")
    if name not in ALIASES:
        raise InvalidInput.one("alias", "must be one of: " + ", ".join(ALIASES))
    alias = Alias.objects.select_for_update().filter(team_id=version.team_id, base=version.base, name=name).first()
    if alias is not None and alias.version_id == version.pk:
        return alias
    kind, gate = "move", {}
    if name == "production":
        gate = promotion_gate(candidate=version, current=alias.version if alias else None, suite=suite)
        if not gate["ok"]:
            if not override:
                raise GateRefused("promotion refused: " + gate["reason"]
                                  + "; a team admin may override with a reason", gate)
            actor.require(version.team_id, "team.admin", "model version")
            if not reason.strip():
                raise InvalidInput.one("reason", "an override needs a reason")
            kind = "override"
    return _move(actor, alias, version.team, version.base, name, version, kind, reason.strip(), gate)


@transaction.atomic
def alias_rollback(*, actor: Principal, team: Team, base: str, name: str = "production", reason: str = "") -> Alias:
    """Undo the alias's last move: it points at the version it pointed at before (one action)."""
    actor.require(team.id, "run.control", "alias")
    alias = found(Alias.objects.select_for_update().filter(team=team, base=base, name=name).first(),
                  f"{base} has no {name} alias")
    last = alias.moves.order_by("-at", "-id").first()
    if last is None or last.from_version is None:
        raise Conflict(f"{base}:{name} has no earlier version to roll back to")
    return _move(actor, alias, team, base, name, last.from_version, "rollback", reason.strip(), {})


# ----------------------------------------------------------------------------- export
EXPORT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model")


def version_export(*, actor: Principal, version: ModelVersion, dest: str = "") -> Path:
    """Write a promoted version as a Hugging Face directory: safetensors weights, config, generation
    config, tokenizer and ``temper.json`` (lineage). transformers and vLLM load it as it is."""
    actor.require(version.team_id, "run.control", "model version")
    if not AliasMove.objects.filter(to_version=version).exists():
        raise Conflict(f"{version.name} was never promoted (no alias ever pointed at it); move an alias first")
    src = Path(version.path)
    weights = sorted(src.glob("*.safetensors")) + sorted(src.glob("*.safetensors.index.json"))
    if not weights or not (src / "config.json").is_file():
        raise Conflict(f"{version.name}: no safetensors weights and config under {src}")
    out = Path(dest) if dest else export_dir(version.team, version.name.replace("/", "_").replace("@", "_at_"))
    held = _exported_version(out)
    if out.exists() and held != version.name:
        what = f"an export of {held}" if held else "files that are not an export of this version"
        raise Conflict(f"{out.name}: the destination already holds {what}; choose another name")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written whole beside the destination, then swapped in: a re-export of the same version
    # replaces the directory, never mixes its files with an earlier one's.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for f in weights + [src / n for n in EXPORT_FILES if (src / n).is_file()]:
            shutil.copy2(f, staging / f.name)
        lineage = {"name": version.name, "base_model": version.base_model, "run": version.run_id, "step": version.step,
                   "pinned_domains": version.pinned, "config": version.config,
                   "aliases": list(version.aliases.values_list("name", flat=True))}
        (staging / "temper.json").write_text(json.dumps(lineage, indent=1, default=str))
        staging.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    audit_record(actor=actor, obj=version, action="version.export",
                 after={"dest": str(out)}, team=version.team)
    return out


def export_dir(team: Team, name: str) -> Path:
    """Where the API writes team ``team``'s export ``name``: ``var/exports/<team>/<name>``, so two
    teams' exports of the same name never meet."""
    return store_dir() / "exports" / team.slug / name


def _exported_version(path: Path) -> str | None:
    """The version an export directory holds (its ``temper.json``), or None."""
    try:
        return json.loads((path / "temper.json").read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return None
