"""A run's specification (controlplane/runs/spec.py): one typed value from the API body or the
stored run to the trainer config, and run fields generated from the trainer's run-owned list."""
from __future__ import annotations

import json
import re

import pytest

import trainer.run_fields as run_fields_module
from controlplane.runs.models import Run
from controlplane.runs.preflight import trainer_config
from controlplane.runs.schemas import run_body_schema
from controlplane.runs.selectors import run_domains
from controlplane.runs.spec import RunSpec
from tests import factories
from trainer.config import load_config
from trainer.run_fields import RunOwned
from trainer.config_schema import config_setting


@pytest.fixture
def temperature_owned(monkeypatch):
    """One new run-owned setting, added the way a maintainer would: one entry in ``RUN_OWNED``
    (the run field ``temperature`` fills ``rollout.temperature``)."""
    monkeypatch.setattr(run_fields_module, "RUN_OWNED",
                        (*run_fields_module.RUN_OWNED, RunOwned("rollout.temperature", "temperature")))
    return config_setting("rollout.temperature")


def _api(client, method: str, url: str, body=None):
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json") if body is not None \
        else getattr(client, method)(url)


@pytest.mark.django_db
def test_a_run_owned_setting_added_in_one_place_reaches_the_api_the_form_and_the_trainer(client, world, temperature_owned):
    setting = temperature_owned
    # The API: the documented body has the field with the setting's bounds; out of bounds is
    # refused at the field; the config section may no longer set it; a run stores and shows it.
    documented = run_body_schema()["properties"]["temperature"]
    assert documented["maximum"] == setting.bounds["le"] and documented["default"] == setting.default
    assert "temperature" not in run_body_schema()["properties"]["config"]["properties"]["rollout"]["properties"]
    client.force_login(world.users["member"])
    payload = factories.run_payload(["addition"], team="acme")
    too_hot = _api(client, "post", "/api/runs/validate", {**payload, "temperature": setting.bounds["le"] * 2})
    assert too_hot.status_code == 422
    assert [e["path"] for e in too_hot.json()["errors"]] == ["temperature"]
    in_config = _api(client, "post", "/api/runs/validate", {**payload, "config": {"rollout": {"temperature": 0.5}}})
    assert in_config.status_code == 422
    assert in_config.json()["errors"][0]["path"] == "config.rollout.temperature"
    assert "'temperature' field" in in_config.json()["errors"][0]["message"]
    created = _api(client, "post", "/api/runs", {**payload, "temperature": 0.7})
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    shown = _api(client, "get", f"/api/runs/{run.id}").json()
    assert shown["owned_fields"]["temperature"] == 0.7 and shown["owned_fields"]["budget"]["steps"] == 20
    # The trainer config the worker starts from the stored run.
    cfg = trainer_config(run, run_domains(run=run), {})
    assert cfg["rollout"]["temperature"] == 0.7 and load_config(cfg).rollout.temperature == 0.7
    # The form: an input of its own with the setting's bounds, and a clone starts from its value.
    page = client.get("/runs/new/").content.decode()
    field = re.search(r'<input[^>]*name="temperature"[^>]*>', page)
    assert field and "data-owned" in field.group(0) and f'max="{setting.bounds["le"]}"' in field.group(0)
    assert "<code>rollout.temperature</code>" in page
    clone = client.get(f"/runs/new/?clone={run.id}").content.decode()
    form_data = json.loads(re.search(r'<script id="form-data" type="application/json">(.*?)</script>', clone, re.S).group(1))
    assert form_data["clone"]["temperature"] == 0.7
    # A run that leaves it out runs with the setting's default.
    default = RunSpec.from_body(payload).trainer_config()
    assert default["rollout"]["temperature"] == setting.default


def test_a_body_and_its_stored_run_give_the_same_trainer_config(world):
    """The one mapping: a body's trainer config (what the API checks against the team's ceilings)
    is the stored run's (what the worker starts), less the control plane's assigned settings and
    the domains' share caps."""
    from controlplane.runs.services import run_create

    payload = factories.run_payload(["parity", "addition"], team="acme", staleness=2,  # not in slug order
                                    budget={"steps": 9, "wall_s": 60.5}, config={"rollout": {"n": 4}})
    payload["domains"][0]["weight"] = 3.0
    run = run_create(actor=factories.actor(world.users["member"]), data=payload)
    from_body = RunSpec.from_body(payload)
    from_run = RunSpec.from_run(run, run_domains(run=run))
    assert from_body == from_run  # typed, frozen, equal field by field
    stored = trainer_config(run, run_domains(run=run), {})
    assert stored["name"] == f"run-{run.id}" and stored["checkpoint"]["dir"].endswith(f"run-{run.id}")
    body = from_body.trainer_config()
    assert {k: v for k, v in stored.items() if k not in ("name", "checkpoint", "domains")} == \
           {k: v for k, v in body.items() if k not in ("name", "checkpoint", "domains")}
    assert body["domains"] == {"addition": 1.0, "parity": 3.0} and stored["domains"] == {"addition": 0.25, "parity": 0.75}
    assert list(body["domains"]) == list(stored["domains"])  # the trainer's domain order too
    assert (body["rollout"]["staleness"], body["limits"]["max_steps"], body["limits"]["max_wall_s"]) == (2, 9, 60.5)
    with pytest.raises(AttributeError):
        from_body.name = "changed"  # frozen


@pytest.mark.django_db
def test_autoscale_is_a_run_field_refused_when_invalid_at_its_name(client, world):
    """``autoscale`` (trainer/run_fields.py: ``rollout.autoscale``) reaches the API, the form and the
    trainer; a value it does not take, the setting in the config section, and ``on`` for a run in
    turn are each refused naming the field, and nothing is saved."""
    client.force_login(world.users["member"])
    payload = factories.run_payload(["addition"], team="acme", staleness=2)
    before = Run.objects.count()
    for bad, path, words in [({"autoscale": "maybe"}, "autoscale", "one of: off, on"),
                             ({"autoscale": True}, "autoscale", "off, on"),
                             ({"autoscale": "on", "staleness": 0}, "autoscale", "staleness of at least 1"),
                             ({"config": {"rollout": {"autoscale": "on"}}}, "config.rollout.autoscale", "'autoscale' field")]:
        refused = _api(client, "post", "/api/runs", {**payload, **bad})
        assert refused.status_code == 422, (bad, refused.content)
        errors = refused.json()["errors"]
        assert [e["path"] for e in errors] == [path], (bad, errors)
        assert words in errors[0]["message"], (bad, errors)
    assert Run.objects.count() == before
    created = _api(client, "post", "/api/runs", {**payload, "autoscale": "on"})
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    assert _api(client, "get", f"/api/runs/{run.id}").json()["owned_fields"]["autoscale"] == "on"
    assert load_config(trainer_config(run, run_domains(run=run), {})).rollout.autoscale == "on"
    assert RunSpec.from_body(payload).trainer_config()["rollout"]["autoscale"] == "off"  # left out: the default
    page = client.get("/runs/new/").content.decode()
    assert re.search(r'<select name="autoscale"[^>]*data-owned', page)
