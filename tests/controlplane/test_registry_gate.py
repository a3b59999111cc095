"""The promotion gate: a significant regression refuses moving production; a team admin's
override with a reason passes and is audited; rollback is one action; comparisons carry
bootstrap intervals. Evaluations are written directly here (test_registry_eval.py runs real ones)."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane.accounts.models import AuditLog
from controlplane.common.errors import Forbidden, InvalidInput
from controlplane.registry import aliases, selectors, services
from controlplane.registry.models import Alias, EvalResult, EvalRun, EvalSuite, ModelVersion
from tests import factories

N = 24


def version(team, name, base="tiny"):
    return ModelVersion.objects.create(team=team, name=name, base=base, base_model=f"/models/{base}", path="/nowhere")


def evaluated(v, sv, scores: dict[str, list[float]]):
    ev = EvalRun.objects.create(version=v, suite_version=sv, state="completed")
    for domain, rewards in scores.items():
        per_task = [{"task_id": f"t{i}", "rewards": [r], "outcomes": ["pass" if r == 1 else "fail"], "tokens": 3,
                     "seconds": 0.01, "completion": ""} for i, r in enumerate(rewards)]
        EvalResult.objects.create(eval_run=ev, domain=domain, domain_version=1, layer="capability", tasks=len(rewards),
                                  samples=len(rewards), pass_at={"1": sum(rewards) / len(rewards)},
                                  mean_reward=sum(rewards) / len(rewards), outcomes={}, per_task=per_task)
    return ev


@pytest.fixture
def reg(world):
    admin = factories.actor(world.users["admin"])
    member = factories.actor(world.users["member"])
    sv = services.suite_save(actor=admin, data={"slug": "core", "team": "acme", "items": [
        {"domain": "addition", "tasks": N}, {"domain": "parity", "tasks": N}]})
    good = [1.0] * N
    v1, v2, v3 = (version(world.team, f"tiny@1/{s}") for s in (10, 20, 30))
    evaluated(v1, sv, {"addition": good, "parity": [1.0, 0.0] * (N // 2)})
    evaluated(v2, sv, {"addition": [1.0, 0.0] * (N // 2), "parity": [1.0, 0.0] * (N // 2)})  # addition -0.5
    evaluated(v3, sv, {"addition": good, "parity": good})  # parity +0.5
    return type("Reg", (), {"admin": admin, "member": member, "sv": sv, "v1": v1, "v2": v2, "v3": v3, "world": world})


def production(team):
    return Alias.objects.get(team=team, base="tiny", name="production").version


def test_regression_refuses_and_audited_override_passes(reg):
    w = reg.world
    aliases.alias_move(actor=reg.member, version=reg.v1, name="production")  # nothing to compare with yet
    assert production(w.team) == reg.v1

    with pytest.raises(aliases.GateRefused) as refused:
        aliases.alias_move(actor=reg.member, version=reg.v2, name="production")
    verdict = refused.value.verdict
    assert not verdict["ok"] and [r["domain"] for r in verdict["regressions"]] == ["addition"]
    assert verdict["regressions"][0]["hi"] < 0 and verdict["regressions"][0]["delta"] == pytest.approx(-0.5)
    assert production(w.team) == reg.v1

    with pytest.raises(Forbidden):  # only an admin overrides
        aliases.alias_move(actor=reg.member, version=reg.v2, name="production", override=True, reason="hotfix")
    with pytest.raises(InvalidInput, match="reason"):
        aliases.alias_move(actor=reg.admin, version=reg.v2, name="production", override=True, reason=" ")
    assert production(w.team) == reg.v1

    aliases.alias_move(actor=reg.admin, version=reg.v2, name="production", override=True, reason="parity fix is urgent")
    assert production(w.team) == reg.v2
    audit = AuditLog.objects.filter(action="alias.override").get()
    assert audit.actor_name == "acme-admin" and audit.after["reason"] == "parity fix is urgent"
    assert audit.after["version"] == "tiny@1/20" and audit.before["version"] == "tiny@1/10"
    assert audit.after["gate"]["regressions"][0]["domain"] == "addition"

    # Rollback is one action, audited, and goes back to what production was before the last move.
    aliases.alias_rollback(actor=reg.member, team=w.team, base="tiny")
    assert production(w.team) == reg.v1
    assert AuditLog.objects.filter(action="alias.rollback").count() == 1

    # An improvement passes the gate without an override; every move is audited.
    aliases.alias_move(actor=reg.member, version=reg.v3, name="production")
    assert production(w.team) == reg.v3
    assert AuditLog.objects.filter(action__startswith="alias.").count() == 4


def test_gate_refuses_without_a_common_evaluation(reg):
    aliases.alias_move(actor=reg.member, version=reg.v1, name="production")
    unevaluated = version(reg.world.team, "tiny@1/40")
    gate = selectors.promotion_gate(candidate=unevaluated, current=reg.v1)
    assert not gate["ok"] and "no evaluation" in gate["reason"]
    # candidate and canary are not gated.
    aliases.alias_move(actor=reg.member, version=unevaluated, name="canary")
    assert Alias.objects.get(name="canary").version == unevaluated


def test_compare_has_intervals_and_flags_regressions(reg):
    out = selectors.compare_versions(actor=reg.member, refs=[str(reg.v1.pk), "tiny@1/20", "tiny@1/30"])
    assert out["suite"] == "core" and [v["name"] for v in out["versions"]] == ["tiny@1/10", "tiny@1/20", "tiny@1/30"]
    rows = {r["domain"]: r["cells"] for r in out["rows"]}
    base, worse, better = rows["addition"]
    assert base["mean"] == 1.0 and base["lo"] <= base["mean"] <= base["hi"]
    assert worse["regression"] and worse["delta_hi"] < 0 and worse["lo"] < worse["mean"] < worse["hi"]
    assert not better["regression"] and better["delta"] == 0
    assert rows["parity"][2]["improvement"] and not rows["parity"][1]["regression"]
    # Fixed bootstrap seed: the same intervals every time.
    again = selectors.compare_versions(actor=reg.member, refs=[str(reg.v1.pk), "tiny@1/20", "tiny@1/30"])
    assert again == out


def test_alias_api_refuses_with_the_gate_then_admin_overrides(reg):
    aliases.alias_move(actor=reg.member, version=reg.v1, name="production")
    member, admin = Client(), Client()
    member.force_login(reg.world.users["member"])
    admin.force_login(reg.world.users["admin"])
    body = {"version": "tiny@1/20"}
    r = member.post("/api/registry/aliases/production", json.dumps(body), content_type="application/json")
    assert r.status_code == 409, r.content
    assert r.json()["gate"]["regressions"][0]["domain"] == "addition" and "refused" in r.json()["detail"]
    r = admin.post("/api/registry/aliases/production", json.dumps({**body, "override": True}), content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "reason"
    r = admin.post("/api/registry/aliases/production", json.dumps({**body, "override": True, "reason": "known trade-off"}),
                   content_type="application/json")
    assert r.status_code == 200 and r.json()["version"] == "tiny@1/20"
    r = member.post("/api/registry/aliases/production/rollback", json.dumps({"base": "tiny"}), content_type="application/json")
    assert r.status_code == 200 and r.json()["version"] == "tiny@1/10"
    history = member.get("/api/registry/aliases/production/history?base=tiny").json()
    assert [h["kind"] for h in history] == ["rollback", "override", "move"]
    cmp = member.get("/api/registry/compare?versions=tiny@1/10,tiny@1/20").json()
    assert cmp["rows"][0]["cells"][1]["regression"] is True
    # Another team sees none of it.
    other = Client()
    other.force_login(reg.world.other_users["admin"])
    assert other.get("/api/registry/versions").json()["count"] == 0
    assert other.post("/api/registry/aliases/production", json.dumps(body), content_type="application/json").status_code == 404


def test_suite_versions_are_immutable_and_validated(reg):
    admin = reg.admin
    same = services.suite_save(actor=admin, data={"slug": "core", "items": [{"domain": "addition", "tasks": N}, {"domain": "parity", "tasks": N}]})
    assert same.pk == reg.sv.pk, "unchanged items make no new version"
    v2 = services.suite_save(actor=admin, data={"slug": "core", "items": [{"domain": "addition", "tasks": 8}]})
    assert v2.version == 2 and v2.items[0]["domain_version"] == 1 and v2.items[0]["seed"] == 1234
    with pytest.raises(InvalidInput) as bad:
        services.suite_save(actor=admin, data={"slug": "x", "team": "acme", "items": [
            {"domain": "nope"}, {"domain": "addition", "layer": "end_to_end"}, {"domain": "parity", "samples": 4, "k": [8]}]})
    paths = [e.path for e in bad.value.errors]
    assert paths == ["items[0].domain", "items[1].layer", "items[2].k", "items[2].samples"]
    with pytest.raises(InvalidInput) as big:  # each item within bounds; their totals are not
        services.suite_save(actor=admin, data={"slug": "big", "team": "acme", "items": [
            {"domain": "addition", "tasks": 10000, "samples": 256, "temperature": 1.0, "k": [1]},
            {"domain": "parity", "tasks": 10000, "samples": 200, "temperature": 1.0, "max_new_tokens": 32768}]})
    assert [(e.path, e.message.split(";")[1].strip()) for e in big.value.errors] == [
        ("items", f"at most {services.MAX_SUITE_COMPLETIONS} are allowed"), ("items", f"at most {services.MAX_SUITE_TOKENS} are allowed")]
    assert not EvalSuite.objects.filter(slug="big").exists()
    with pytest.raises(Forbidden):
        services.suite_save(actor=factories.actor(reg.world.users["viewer"]), data={"slug": "y", "team": "acme", "items": [{"domain": "addition"}]})
