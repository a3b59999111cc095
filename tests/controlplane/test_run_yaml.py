"""A run body as YAML (the run form's YAML view, POST /api/runs/yaml/parse and /dump) and the
CLI's YAML files: JSON's values only, and what is not says where it is."""
from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.test import Client

from controlplane.common import yaml_text
from controlplane.common.cli import read_data_file
from controlplane.runs.models import Run
from tests import factories


@pytest.fixture
def client(db):
    team = factories.team("yaml")
    user = factories.member(team, "member", "yaml-member")
    c = Client()
    c.force_login(user)
    c.team = team
    return c


def _post(client, path, body):
    return client.post(path, data=body, content_type="application/json")


def test_a_body_round_trips_through_yaml_with_its_key_order_and_types(client):
    body = factories.run_payload(["addition"], team=client.team.slug)
    body["config"] = {"rollout": {"n": 4, "temperature": 0.7, "engine": "torch"}, "seed": 0}
    body["name"] = "on: yes 2026-12-06"  # YAML words and a date, kept as text
    dumped = _post(client, "/api/runs/yaml/dump", {"body": body})
    assert dumped.status_code == 200, dumped.content
    text = dumped.json()["text"]
    assert text.splitlines()[0].startswith(next(iter(body)) + ":")
    assert "  rollout:\n" in text
    parsed = _post(client, "/api/runs/yaml/parse", {"text": text})
    assert parsed.status_code == 200, parsed.content
    assert parsed.json()["body"] == body
    assert list(parsed.json()["body"]) == list(body)


@pytest.mark.parametrize("text, words", [
    ("name: a\ndomains: [\n", "line 3"),
    ("base: &b {n: 1}\nconfig: *b\n", "line 2, column 9: aliases"),
    ("name: a\nconfig: {rollout: {temperature: .nan}}\n", "config.rollout.temperature: nan is not a finite number"),
    ("name: a\npriority: -.inf\n", "priority: -inf is not a finite number"),
    ("name: !!binary aGVsbG8=\n", "name: a bytes is not a JSON value"),
    ("name: !!python/object/apply:os.system [true]\n", "line 1, column 7"),
    ("tags: !!set {a, b}\n", "tags: a set is not a JSON value"),
    ("1: one\n", "key 1 is not text"),
    ("- just\n- a list\n", "must be a mapping"),
    ("", "must be a mapping (name: ..., domains: ..., config: ...), not empty"),
    ("[" * 20000, "nested too deep"),
])
def test_yaml_that_is_not_a_json_body_is_refused_at_text_saying_where(client, text, words):
    response = _post(client, "/api/runs/yaml/parse", {"text": text})
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert [e["path"] for e in errors] == ["text"]
    assert words in errors[0]["message"], errors
    assert not Run.objects.exists()


def test_an_over_long_text_and_a_body_that_is_not_an_object_are_refused(client):
    long = _post(client, "/api/runs/yaml/parse", {"text": "a: 1\n" * (yaml_text.MAX_TEXT // 5 + 1)})
    assert long.status_code == 422 and long.json()["errors"][0]["path"] == "text"
    listed = _post(client, "/api/runs/yaml/dump", {"body": [1, 2]})
    assert listed.status_code == 422 and listed.json()["errors"][0]["path"] == "body"


def test_the_cli_reads_yaml_files_by_the_same_rules(tmp_path):
    good = tmp_path / "run.yaml"
    good.write_text("name: cli\nwhen: 2026-12-06\n")
    assert read_data_file(str(good)) == {"name": "cli", "when": "2026-12-06"}
    bad = tmp_path / "bomb.yaml"
    bad.write_text("a: &a [1, 2]\nb: [*a, *a]\n")
    with pytest.raises(CommandError, match=r"bomb.yaml: not valid YAML: line 2, column 5: aliases"):
        read_data_file(str(bad))
