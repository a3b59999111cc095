"""Config loading: errors name the field, the schema exports defaults and descriptions."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from trainer.config import ConfigError, TrainerConfig, config_json_schema, load_config


def errors_of(data) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config(data)
    return info.value.errors


def test_errors_name_the_field():
    errs = errors_of({"algorithm": {"clip_high": 0}, "rollout": {"n": "many"}})
    assert ("algorithm.clip_high", "must be greater than 0") in errs
    assert ("rollout.n", "must be an integer") in errs


def test_str_lists_every_error_on_its_own_line():
    with pytest.raises(ConfigError) as info:
        load_config({"algorithm": {"clip_high": -1}, "rollout": {"n": 2.5}})
    lines = str(info.value).splitlines()
    assert "  algorithm.clip_high: must be greater than 0" in lines
    assert "  rollout.n: must be an integer" in lines


@pytest.mark.parametrize("data, path, fragment", [
    ({"rollout": {"engine": "jax"}}, "rollout.engine", "must be one of"),
    ({"rollout": {"nn": 3}}, "rollout.nn", "unknown field"),
    ({"optimizer": {"lr": "fast"}}, "optimizer.lr", "must be a number"),
    ({"optimizer": {"zero_stage": 1}}, "optimizer.zero_stage", "must be one of 0, 2, 3"),
    ({"algorithm": {"dynamic_sampling": "yes"}}, "algorithm.dynamic_sampling", "true or false"),
    ({"algorithm": {"clip_low": 1.5}}, "algorithm.clip_low", "less than 1"),
    ({"domains": {"builtin-addition": 0}}, "domains.builtin-addition", "greater than 0"),
    ({"domains": {}}, "domains", "at least one"),
    ({"sampler": "fast"}, "sampler", "must be a mapping"),
    ({"rollout": {"n": True}}, "rollout.n", "must be an integer"),
    ({"sampler": {"min_samples": 9, "max_samples": 4}}, "sampler.min_samples", "max_samples"),
])
def test_each_bad_value_is_reported_at_its_path(data, path, fragment):
    errs = errors_of(data)
    assert any(p == path and fragment in m for p, m in errs), errs


def test_round_trip_and_files(tmp_path):
    cfg = load_config({"model": {"path": "m"}, "rollout": {"n": 4, "max_new_tokens": 8},
                       "domains": {"builtin-parity": 2, "builtin-addition": 1}})
    assert isinstance(cfg, TrainerConfig) and cfg.rollout.n == 4 and cfg.domains["builtin-parity"] == 2.0
    assert load_config(cfg.to_dict()) == cfg
    (tmp_path / "c.json").write_text(json.dumps(cfg.to_dict()))
    (tmp_path / "c.yaml").write_text("model:\n  path: m\nrollout:\n  n: 4\n  max_new_tokens: 8\n"
                                     "domains:\n  builtin-parity: 2\n  builtin-addition: 1\n")
    assert load_config(tmp_path / "c.json") == cfg
    assert load_config(str(tmp_path / "c.yaml")) == cfg
    (tmp_path / "bad.yaml").write_text("rollout: [1, 2\n")
    assert errors_of(tmp_path / "bad.yaml")[0][0] == "(file)"


def test_schema_is_valid_draft_2020_12_with_defaults_and_descriptions():
    schema = config_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    clip = schema["properties"]["algorithm"]["properties"]["clip_high"]
    assert clip["default"] == 0.28 and clip["exclusiveMinimum"] == 0
    assert "clip-higher" in clip["description"]
    assert schema["properties"]["rollout"]["properties"]["engine"]["enum"] == ["torch", "vllm"]
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(load_config({"model": {"path": "x"}}).to_dict()))
    bad = list(validator.iter_errors({"rollout": {"n": "many"}, "algorithm": {"clip_high": 0}}))
    assert {tuple(e.absolute_path) for e in bad} == {("rollout", "n"), ("algorithm", "clip_high")}


def test_every_field_has_a_description():
    def walk(node, path):
        for name, prop in node.get("properties", {}).items():
            assert prop.get("description"), f"{path}{name} has no description"
            walk(prop, f"{path}{name}.")
    walk(config_json_schema(), "")


def test_config_module_does_not_import_torch():
    code = ("import sys, trainer.config as c; c.config_json_schema(); c.load_config({});"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
