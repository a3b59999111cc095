"""Writes for the registry: versions, eval suites, evaluations (aliases, rollback and export: aliases.py).

Permissions: members and admins evaluate, define suites and move aliases; moving ``production``
past the promotion gate needs a team admin and a reason; every alias move is audited.
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.engines import engine_errors
from controlplane.common.errors import Conflict, FieldError, Forbidden, InvalidInput, NotFound, found
from controlplane.common.model_refs import BASE_PREFIX, REGISTRY_PREFIX, storage_dirs
from controlplane.common.storage import store_dir
from controlplane.common.validation import SLUG_SCHEMA, validate
from controlplane.domains.models import Domain, DomainVersion
from controlplane.domains.selectors import audit_gates
from controlplane.domains.services import audit_ensure
from controlplane.live.services import wake_on_commit
from controlplane.registry.models import BaseModel, EvalResult, EvalRun, EvalState, EvalSuite, EvalSuiteVersion, ModelVersion
from controlplane.registry.selectors import run_eval_suite, version_for_team
from controlplane.runs import series
from controlplane.runs.services import metric_domain
from controlplane.runs.models import TERMINAL_STATES, Checkpoint, MetricPoint, Run
from trainer.config import MAX_SEED, whole_number_at
from trainer.evaluation import summary_metrics
from trainer.rollout import ENGINES


# ----------------------------------------------------------------------------- names and files
def base_name(base_model: str) -> str:
    """Short name of a base model: its directory name, the last part of a hub id, or the name of
    a registered base model.

    >>> base_name("/srv/models/qwen2-0.5b/"), base_name("Qwen/Qwen2-0.5B"), base_name("base:qwen2")
    ('qwen2-0.5b', 'Qwen2-0.5B', 'qwen2')
    """
    if base_model.startswith(BASE_PREFIX):
        return base_model[len(BASE_PREFIX):]
    return Path(base_model.rstrip("/")).name or base_model


def version_name(base: str, run_id: int, step: int) -> str:
    """``<base>@<run>/<step>``.

    >>> version_name("tiny", 12, 40)
    'tiny@12/40'
    """
    return f"{base}@{run_id}/{step}"


def registry_root() -> Path:
    return store_dir() / "registry"


def _same_tree(src: Path, dst: Path) -> bool:
    """Whether ``dst`` already holds ``src``'s files (the same inodes, or copies of the same size
    and modification time) and nothing else."""
    if not dst.is_dir():
        return False
    names = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    if names != sorted(p.relative_to(dst) for p in dst.rglob("*") if p.is_file()):
        return False
    for name in names:
        a, b = (src / name).stat(), (dst / name).stat()
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) and (a.st_size, a.st_mtime_ns) != (b.st_size, b.st_mtime_ns):
            return False
    return True


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a directory as hard links where the file system allows (cheap, and the registry's
    copy survives the run pruning its old checkpoints); plain copies otherwise.

    A version registered again with the same files is left as it is, and new files replace the old
    by two renames, so an evaluation loading the version always finds its files (it was queued
    when the version was first registered, and a run saves its last step twice)."""
    if _same_tree(src, dst):
        return

    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    tmp, old = dst.with_name(dst.name + ".tmp"), dst.with_name(dst.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(src, tmp, copy_function=link)
    if dst.exists():
        dst.rename(old)
    tmp.rename(dst)
    shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------- base models for every team
BASE_MODEL_SCHEMA = {
    "type": "object", "required": ["name", "path"], "additionalProperties": False,
    "properties": {
        "name": SLUG_SCHEMA,
        "path": {"type": "string", "minLength": 1, "maxLength": 1000,
                 "description": "The model's directory on the workers' hosts (with config.json)."},
        "description": {"type": "string", "maxLength": 200},
    },
}


def _base_view(base: BaseModel) -> dict:
    return {"name": base.name, "path": base.path, "description": base.description}


@transaction.atomic
def base_model_register(*, actor: Principal, data: Any) -> BaseModel:
    """Register (or point elsewhere) a base model every team may name ``base:<name>``: platform
    admins only, as this is the allow decision for its directory. The directory is resolved
    (symlinks, ``..``, ``~``) and must hold a config.json and lie outside the server's storage:
    a team's trained weights are shared through the registry, never by path."""
    actor.require_platform_admin("registering a base model for every team")
    validate(data, BASE_MODEL_SCHEMA)
    real = Path(os.path.realpath(os.path.expanduser(data["path"].strip())))
    if any(real == s or s in real.parents for s in storage_dirs()):
        raise InvalidInput.one("path", f"{data['path']} is in the server's storage (teams' checkpoints, registry "
                                       "copies, exports): share a trained model through the registry instead")
    if not (real / "config.json").is_file():
        raise InvalidInput.one("path", f"no model at {data['path']} (expected a directory with config.json)")
    base = BaseModel.objects.select_for_update().filter(name=data["name"]).first()
    before = _base_view(base) if base else None
    if base is None:
        base = BaseModel(name=data["name"], created_by=actor.user)
    base.path, base.description = str(real), data.get("description", base.description)
    base.full_clean()
    base.save()
    audit_record(actor=actor, obj=base, action="base_model.register", before=before, after=_base_view(base))
    return base


@transaction.atomic
def base_model_remove(*, actor: Principal, name: str) -> None:
    """Remove a registered base model; refused (409) while a run that has not ended names it."""
    actor.require_platform_admin("removing a base model")
    base = found(BaseModel.objects.select_for_update().filter(name=name).first(), f"base model {name!r} not found")
    using = list(Run.objects.filter(base_model=f"{BASE_PREFIX}{name}").exclude(state__in=TERMINAL_STATES)
                 .values_list("pk", flat=True)[:10])
    if using:
        raise Conflict(f"base model {name!r} is named by runs that have not ended: {', '.join(map(str, using))}")
    audit_record(actor=actor, obj=base, action="base_model.remove", before=_base_view(base))
    base.delete()


# ----------------------------------------------------------------------------- versions
@transaction.atomic
def version_register_base(*, team: Team, base_model: str) -> ModelVersion:
    """The team's version for a base model (created once; the base is a stable asset, not copied)."""
    existing = ModelVersion.objects.filter(team=team, base_model=base_model, kind="base").first()
    if existing:
        return existing
    base = base_name(base_model)
    name, n = base, 1
    while ModelVersion.objects.filter(team=team, name=name).exists():
        n += 1
        name = f"{base}-{n}"
    version = ModelVersion(team=team, kind="base", name=name, base=name, base_model=base_model, step=0, path=base_model)
    version.full_clean()
    version.save()
    _auto_evaluate(version)
    return version


@transaction.atomic
def version_register_checkpoint(*, checkpoint: Checkpoint) -> ModelVersion:
    """Register (or refresh, when a step is saved again after a resume) the checkpoint's version.

    Lineage: base model, run, step, the run's config, its pinned domain versions, and the parent
    (the run's previous registered checkpoint, else the base model's version).
    """
    run = Run.objects.select_related("team").get(pk=checkpoint.run_id)
    base = _run_base_version(run)
    pins = list(run.run_domains.select_related("domain", "domain_version"))
    parent = (ModelVersion.objects.filter(run=run, step__lt=checkpoint.step).order_by("-step").first() or base)
    version, created = ModelVersion.objects.update_or_create(
        team=run.team, name=version_name(base.base, run.id, checkpoint.step),
        defaults={"base": base.base, "base_model": run.base_model, "run": run, "checkpoint": checkpoint,
                  "step": checkpoint.step, "parent": parent, "config": run.config or {},
                  "pinned": {rd.domain.slug: rd.domain_version.version for rd in pins},
                  "metrics": checkpoint.metrics or {}, "path": str(Path(checkpoint.path) / "model")})
    version.domain_versions.set([rd.domain_version for rd in pins])
    src = Path(checkpoint.path) / "model"
    if src.is_dir():
        dst = registry_root() / f"v{version.pk}" / "model"
        dst.parent.mkdir(parents=True, exist_ok=True)
        _link_tree(src, dst)
        ModelVersion.objects.filter(pk=version.pk).update(path=str(dst))
        version.path = str(dst)
    if created:
        _auto_evaluate(version)
        _record_base_curve(run, base)
    return version


def version_is_stored(version: ModelVersion) -> bool:
    """Whether the version's path is one the registry itself keeps for it: its copy under
    ``var/registry/v<id>``, or its own checkpoint's directory. Only those are loaded from the
    server's storage; any other path (a base model's, or a row written another way) is held to
    the rules for directories named directly (controlplane/common/model_refs.py)."""
    if version.kind != "checkpoint" or not version.path:
        return False
    real = Path(os.path.realpath(version.path))
    owned = [registry_root() / f"v{version.pk}"]
    if version.checkpoint_id is not None:
        owned.append(Path(version.checkpoint.path))
    roots = [Path(os.path.realpath(o)) for o in owned]
    return any(real == root or root in real.parents for root in roots)


def _run_base_version(run: Run) -> ModelVersion:
    """The version a run trains from: the registry version its ``base_model`` names
    (``registry:tiny@12/40``: its checkpoints continue that line), else the team's version of the
    base model directory or hub id, registered on first use."""
    if run.base_model.startswith(REGISTRY_PREFIX):
        version = version_for_team(ref=run.base_model[len(REGISTRY_PREFIX):].strip(), team_id=run.team_id)
        if version is not None:
            return version
    return version_register_base(team=run.team, base_model=run.base_model)


def _auto_evaluate(version: ModelVersion) -> list[EvalRun]:
    """Queue the evaluations of a new version on the suites marked ``auto_evaluate``."""
    suites = EvalSuite.objects.filter(auto_evaluate=True).filter(Q(team__isnull=True) | Q(team_id=version.team_id))
    out = []
    for suite in suites:
        sv = suite.versions.filter(version=suite.version).first()
        if sv is not None:
            out.append(_eval_create(version=version, suite_version=sv))
    return out


# ----------------------------------------------------------------------------- eval suites
MAX_SUITE_COMPLETIONS = 2**18
"""Completions one evaluation of a suite generates at most (tasks x samples over its items): each
item is bounded alone, but 500 items of 10,000 tasks x 256 samples would be 1.3 billion."""
MAX_SUITE_TOKENS = 2**30
"""Tokens one evaluation of a suite may generate or hold at most: completions x max_new_tokens for
a capability item; for an end-to-end item, completions x the larger of max_turns x max_new_tokens
and max_episode_tokens (an episode holds the environment's replies too, up to max_episode_tokens)."""

SUITE_ITEM = {
    "type": "object", "required": ["domain"], "additionalProperties": False,
    "properties": {
        "domain": {"type": "string", "minLength": 1},
        "layer": {"enum": ["capability", "end_to_end"]},
        "tasks": {"type": "integer", "minimum": 1, "maximum": 10000},
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "samples": {"type": "integer", "minimum": 1, "maximum": 256},
        "temperature": {"type": "number", "minimum": 0, "maximum": 5},
        "max_new_tokens": {"type": "integer", "minimum": 1, "maximum": 32768},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": 100},
        "max_episode_tokens": {"type": "integer", "minimum": 1, "maximum": 131072},
        "level": {"type": "integer", "minimum": 0, "maximum": 1000},
        "levels": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1000}, "maxItems": 64,
                   "uniqueItems": True,
                   "description": "pool the held-out tasks of these levels (an even share each) instead of one level"},
        "k": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 256}, "minItems": 1, "maxItems": 16,
              "uniqueItems": True},
    },
}
SUITE_SCHEMA = {
    "type": "object", "required": ["slug", "items"], "additionalProperties": False,
    "properties": {
        "slug": SLUG_SCHEMA,
        "title": {"type": "string", "maxLength": 200},
        "team": {"type": ["string", "null"]},
        "note": {"type": "string", "maxLength": 200},
        "auto_evaluate": {"type": "boolean", "description": "evaluate every new model version on this suite"},
        "items": {"type": "array", "minItems": 1, "maxItems": 500, "items": SUITE_ITEM},
    },
}
ITEM_DEFAULTS = {"layer": "capability", "tasks": 32, "seed": 1234, "samples": 1, "temperature": 0.0,
                 "max_new_tokens": 32, "max_turns": 4, "max_episode_tokens": 512, "level": 0, "k": [1]}
"""An item's fields when not given. ``levels`` is not among them: an item without it (or with an
empty list) stores none, so the suites saved before it existed resolve to the same items."""
END_TO_END_KINDS = ("code", "tool_use")


def _resolve_items(actor: Principal, team: Team | None, items: list[dict]) -> list[dict]:
    """Items with defaults filled in and each domain pinned to its current version."""
    errors, out, seen = [], [], set()
    team_ids = [team.id] if team else []
    visible = Domain.objects.filter(Q(team__isnull=True) | Q(team_id__in=team_ids))
    for i, raw in enumerate(items):
        item = {**ITEM_DEFAULTS, **raw}
        if not item.get("levels"):
            item.pop("levels", None)
        domain = visible.filter(slug=item["domain"]).first()
        if domain is None:
            errors.append(FieldError(f"items[{i}].domain", f"unknown domain {item['domain']!r}"))
            continue
        key = (item["domain"], item["layer"])
        if key in seen:
            errors.append(FieldError(f"items[{i}]", f"{item['domain']} is listed twice in the {item['layer']} layer"))
        seen.add(key)
        if item["layer"] == "end_to_end" and domain.kind not in END_TO_END_KINDS:
            errors.append(FieldError(f"items[{i}].layer", f"end_to_end needs a multi-step or code domain ({', '.join(END_TO_END_KINDS)}); {domain.slug} is {domain.kind}"))
        if max(item["k"]) > item["samples"]:
            errors.append(FieldError(f"items[{i}].k", f"pass@{max(item['k'])} needs at least that many samples (samples is {item['samples']})"))
        if item["temperature"] == 0 and item["samples"] > 1:
            errors.append(FieldError(f"items[{i}].samples", "greedy decoding (temperature 0) gives one answer per task: use samples 1 or a temperature"))
        out.append({**item, "domain_version": domain.version})
    errors += _suite_size_errors(out)
    if errors:
        raise InvalidInput(errors)
    return out


def _suite_size_errors(items: list[dict]) -> list[FieldError]:
    """The suite's totals over its items, against MAX_SUITE_COMPLETIONS and MAX_SUITE_TOKENS.

    >>> item = {**ITEM_DEFAULTS, "tasks": 10000, "samples": 32, "temperature": 1.0}
    >>> [str(e) for e in _suite_size_errors([item])]
    ['items: 320000 completions an evaluation (tasks x samples over the items); at most 262144 are allowed']

    An end-to-end episode holds up to ``max_episode_tokens`` whatever its turns generate:

    >>> e2e = {**ITEM_DEFAULTS, "layer": "end_to_end", "tasks": 10000, "samples": 26, "max_new_tokens": 1,
    ...        "max_turns": 100, "max_episode_tokens": 131072}
    >>> [str(e).split(";")[0] for e in _suite_size_errors([e2e])]
    ['items: 34078720000 tokens an evaluation at most (completions x max_new_tokens, end to end x the larger of max_turns x max_new_tokens and max_episode_tokens)']
    """
    completions = sum(i["tasks"] * i["samples"] for i in items)
    tokens = sum(i["tasks"] * i["samples"] * (max(i["max_new_tokens"] * i["max_turns"], i["max_episode_tokens"])
                                               if i["layer"] == "end_to_end" else i["max_new_tokens"])
                 for i in items)
    errors = []
    if completions > MAX_SUITE_COMPLETIONS:
        errors.append(FieldError("items", f"{completions} completions an evaluation (tasks x samples over the items); "
                                          f"at most {MAX_SUITE_COMPLETIONS} are allowed"))
    if tokens > MAX_SUITE_TOKENS:
        errors.append(FieldError("items", f"{tokens} tokens an evaluation at most (completions x max_new_tokens, end to "
                                          f"end x the larger of max_turns x max_new_tokens and max_episode_tokens); "
                                          f"at most {MAX_SUITE_TOKENS} are allowed"))
    return errors


@transaction.atomic
def suite_save(*, actor: Principal, data: Any) -> EvalSuiteVersion:
    """Create a suite, or give an existing one a new version when its items change."""
    validate(data, SUITE_SCHEMA)
    team = None
    if data.get("team"):
        team = found(Team.objects.filter(slug=data["team"], pk__in=actor.team_ids).first(),
                     f"team {data['team']!r} not found")
        actor.require(team.id, "run.control", "team")
    suite = EvalSuite.objects.select_for_update().filter(slug=data["slug"]).first()
    if suite is not None:
        if suite.team_id is None and not actor.platform_admin:
            raise Forbidden("changing a shared suite needs a platform admin")
        if suite.team_id is not None:
            actor.require(suite.team_id, "run.control", "suite")
        team = suite.team
    elif team is None and not actor.platform_admin:
        raise InvalidInput.one("team", "required: only a platform admin creates suites for every team")
    items = _resolve_items(actor, team, data["items"])
    auto = bool(data.get("auto_evaluate", suite.auto_evaluate if suite else False))
    if suite is None:
        suite = EvalSuite(slug=data["slug"], title=data.get("title", ""), team=team, version=1, auto_evaluate=auto)
        suite.full_clean()
        suite.save()
    else:
        if suite.auto_evaluate != auto:
            audit_record(actor=actor, obj=suite, action="suite.auto_evaluate", before={"auto_evaluate": suite.auto_evaluate},
                         after={"auto_evaluate": auto}, team=team)
            suite.auto_evaluate = auto
            suite.save(update_fields=["auto_evaluate"])
        latest = suite.versions.order_by("-version").first()
        if latest and latest.items == items:
            return latest
        suite.version += 1
        suite.title = data.get("title", suite.title)
        suite.save()
    sv = EvalSuiteVersion.objects.create(suite=suite, version=suite.version, items=items, note=data.get("note", ""),
                                         created_by=actor.user)
    audit_record(actor=actor, obj=suite, action="suite.version", after={"version": sv.version, "items": items}, team=team)
    return sv


# ----------------------------------------------------------------------------- evaluations
@transaction.atomic
def eval_start(*, actor: Principal, version: ModelVersion, suite_version: EvalSuiteVersion, engine: str = "torch",
               enqueue: bool = True) -> EvalRun:
    """Queue an evaluation of ``version`` on ``suite_version`` (the eval queue runs it; with
    ``enqueue=False`` the caller runs it, e.g. ``manage.py registry evaluate --here``)."""
    actor.require(version.team_id, "run.control", "model version")
    if engine not in ENGINES:
        raise InvalidInput.one("engine", f"must be one of: {', '.join(ENGINES)}")
    if errors := engine_errors(engine, "engine"):
        raise InvalidInput(errors)
    if suite_version.suite.team_id not in (None, version.team_id):
        raise NotFound("suite not found")
    verdict, reasons = suite_audit_gate(suite_version)
    if verdict == "refuse":
        raise InvalidInput([FieldError(f"suite.items[{i}].domain", reason) for i, reason in reasons])
    return _eval_create(version=version, suite_version=suite_version, engine=engine, created_by=actor.user, enqueue=enqueue,
                        gate=(verdict, reasons))


def suite_audit_gate(suite_version: EvalSuiteVersion, now=None) -> tuple[str, list[tuple[int, str]]]:
    """Whether an evaluation on ``suite_version`` may run now: audits gate every use of a domain
    version, evaluations as runs (``domains.selectors.audit_gates``). ``(ok|wait|refuse, [(item
    index, reason)])``; the audit of a version that never had one is requested."""
    items = suite_version.items
    pins = {(dv.domain.slug, dv.version): dv for dv in DomainVersion.objects.filter(
        domain__slug__in=[i["domain"] for i in items]).select_related("domain")}
    pinned = [(i, pins[key]) for i, item in enumerate(items) if (key := (item["domain"], item["domain_version"])) in pins]
    gates = audit_gates(versions=[v for _, v in pinned], now=now)
    audit_ensure(versions=list({v.id: v for _, v in pinned if gates[v.id].verdict == "wait"}.values()),
                 note="an evaluation waits on it")
    verdict, reasons = "ok", []
    for i, v in pinned:
        gate = gates[v.id]
        if gate.verdict != "ok":
            reasons.append((i, gate.reason))
            verdict = "refuse" if "refuse" in (verdict, gate.verdict) else "wait"
    return verdict, reasons


def _held_text(reasons: list[tuple[int, str]]) -> str:
    return "; ".join(dict.fromkeys(reason for _, reason in reasons))[:2000]


def _eval_create(*, version: ModelVersion, suite_version: EvalSuiteVersion, engine: str = "torch", created_by=None,
                 enqueue: bool = True, gate: tuple[str, list] | None = None) -> EvalRun:
    """An evaluation, sent to the eval queue, or held (``held`` says why) while the audits of the
    suite's domain versions have not cleared them: :func:`eval_holds_release` sends it once they do."""
    verdict, reasons = gate or suite_audit_gate(suite_version)
    ev = EvalRun(version=version, suite_version=suite_version, engine=engine, created_by=created_by,
                 held=_held_text(reasons) if verdict != "ok" else "")
    ev.full_clean()
    ev.save()
    if enqueue and not ev.held:
        dispatch.send_on_commit("temper.eval.run", ev.pk)
    return ev


@transaction.atomic
def eval_holds_release(*, now=None) -> int:
    """The scheduler tick's part for evaluations: each held evaluation whose suite's audits now clear
    it is sent to the eval queue; the others' reasons are brought up to date. How many were sent."""
    sent = 0
    for ev in EvalRun.objects.select_for_update().filter(state=EvalState.QUEUED).exclude(held="").select_related("suite_version"):
        verdict, reasons = suite_audit_gate(ev.suite_version, now=now)
        held = _held_text(reasons) if verdict != "ok" else ""
        if held != ev.held:
            ev.held = held
            ev.save(update_fields=["held"])
        if not held:
            dispatch.send_on_commit("temper.eval.run", ev.pk)
            sent += 1
    return sent


@transaction.atomic
def eval_claim(*, eval_run_id: int, worker: str) -> EvalRun | None:
    """Mark an evaluation running (again, when a worker died with it); None when it is done."""
    ev = EvalRun.objects.select_for_update().filter(pk=eval_run_id).first()
    if ev is None or ev.state in (EvalState.COMPLETED, EvalState.FAILED) or ev.held:
        return None  # finished, or held until the audits clear it (the scheduler tick sends it then)
    ev.results.all().delete()
    ev.state, ev.worker, ev.started_at, ev.error = EvalState.RUNNING, worker, timezone.now(), ""
    ev.save()
    return ev


@transaction.atomic
def eval_record(*, eval_run: EvalRun, results: list[dict]) -> EvalRun:
    """Write every domain's result and complete the evaluation (replaces earlier partial rows)."""
    ev = EvalRun.objects.select_for_update().get(pk=eval_run.pk)
    ev.results.all().delete()
    EvalResult.objects.bulk_create([EvalResult(eval_run=ev, **r) for r in results])
    ev.state, ev.finished_at = EvalState.COMPLETED, timezone.now()
    ev.save()
    version = ev.version
    if version.run_id is not None:
        targets = [(version.run, version.step)]
    elif version.is_base:  # step 0 of the runs that train from it (later ones: at their first checkpoint)
        targets = [(run, 0) for run in Run.objects.filter(team_id=version.team_id, base_model=version.base_model)
                   if not starts_after_sft(run)]
    else:
        targets = []
    for run, step in targets:
        _record_run_curve(run=run, step=step, eval_run=ev)
    return ev


def _record_run_curve(*, run: Run, step: int, eval_run: EvalRun) -> None:
    """An evaluation of one of the run's versions on the suite its held-out curve comes from
    (``run_eval_suite``) becomes the run's ``eval/...`` points at the version's step, and the
    reward-hacking watch looks at them; an evaluation on another suite does not."""
    from controlplane.runs import watch  # lazy: the watch reads the points written here

    sv = run_eval_suite(run)
    if sv is None or sv.suite_id != eval_run.suite_version.suite_id:
        return
    metrics = summary_metrics([(r.domain, {"mean_reward": r.mean_reward, "pass_at": r.pass_at,
                                           "tokens_per_task": r.tokens_per_task, "seconds_per_task": r.seconds_per_task})
                               for r in eval_run.results.all()])
    if run_record_eval(run=run, step=step, metrics=metrics):
        watch.run_watch_heldout(run=run, step=step)


def starts_after_sft(run: Run) -> bool:
    """Whether the run's RL starts from its own SFT stage's policy (``sft.steps`` above 0): its step
    0 is that policy's checkpoint (saved by the driver after the stage), not its base model."""
    return (whole_number_at(run.config, "sft.steps") or 0) > 0


def _record_base_curve(run: Run, base: ModelVersion) -> None:
    """Step 0 of a run's held-out curve: its base model's evaluation on the run's suite, where it
    completed before the run existed (a base model evaluated for an earlier run). A run with an
    SFT stage takes its step 0 from its own step-0 checkpoint instead."""
    if starts_after_sft(run):
        return
    sv = run_eval_suite(run)
    ev = EvalRun.objects.filter(version=base, suite_version__suite_id=sv.suite_id, state=EvalState.COMPLETED) \
        .order_by("-finished_at", "-id").first() if sv is not None else None
    if ev is not None:
        _record_run_curve(run=run, step=0, eval_run=ev)


@transaction.atomic
def eval_fail(*, eval_run: EvalRun, error: str) -> EvalRun:
    ev = EvalRun.objects.select_for_update().get(pk=eval_run.pk)
    ev.state, ev.finished_at, ev.error = EvalState.FAILED, timezone.now(), error[-10000:]
    ev.save()
    return ev


# ----------------------------------------------------------------------------- eval curves
@transaction.atomic
def run_record_eval(*, run: Run, step: int, metrics: dict[str, float]) -> int:
    """Write a periodic evaluation's ``eval/...`` points at ``step`` (idempotent) and wake the page."""
    domains = set(run.run_domains.values_list("domain__slug", flat=True))
    now = timezone.now()
    points = [MetricPoint(run=run, step=step, domain=metric_domain(k, domains), key=k, value=float(v), time=now)
              for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)]
    # As the driver's step writes: a retried write keeps what is there; only new points join the buckets.
    present = set(MetricPoint.objects.filter(run=run, step=step, key__startswith="eval/").values_list("domain", "key"))
    points = [p for p in points if (p.domain, p.key) not in present]
    MetricPoint.objects.bulk_create(points, ignore_conflicts=True)
    series.rollup(points)
    wake_on_commit(run)
    return len(points)
