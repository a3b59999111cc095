"""Config loading: errors name the field, the schema exports defaults and descriptions."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from trainer.config import ConfigError, TrainerConfig, has_path, load_config, put_path
from trainer.run_fields import RUN_DEFAULTS, RUN_OWNED
from trainer.sizes import MAX_SEQUENCES_PER_STEP
from trainer.config_schema import config_json_schema, config_setting, config_settings


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
    ({"optimizer": {"zero_stage": 4}}, "optimizer.zero_stage", "must be one of 0, 1, 2, 3"),
    ({"optimizer": {"backend": "torch", "zero_stage": 2}}, "optimizer.zero_stage", "needs optimizer.backend deepspeed"),
    ({"optimizer": {"backend": "megatron"}}, "optimizer.backend", "must be one of"),
    ({"optimizer": {"zero_stage": 3}, "sft": {"steps": 5}}, "sft.steps", "plain torch optimizer"),
    ({"optimizer": {"backend": "deepspeed"}, "sft": {"steps": 5}}, "sft.steps", "plain torch optimizer"),
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
    code = ("import sys, trainer.config as c, trainer.config_schema as s; s.config_json_schema(); c.load_config({});"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_docstring_examples():
    import doctest

    import trainer.config
    import trainer.config_schema

    for module in (trainer.config, trainer.config_schema):
        result = doctest.testmod(module)
        assert result.attempted and not result.failed, module.__name__


HOST_BOUND = ["tokenizer.max_prompt_tokens", "rollout.prompts_per_step", "rollout.n", "rollout.max_new_tokens",
              "rollout.max_episode_tokens", "rollout.batch_size", "optimizer.micro_batch_size", "sampler.max_samples",
              "sft.batch_size", "eval.tasks_per_domain", "eval.max_new_tokens", "limits.max_steps"]
"""Settings that multiply memory or work: each has an upper bound a host survives."""


@pytest.mark.parametrize("path", HOST_BOUND)
def test_settings_that_can_take_the_host_down_have_an_upper_bound(path):
    setting = config_setting(path)
    assert "le" in setting.bounds, f"{path} has no upper bound"
    top = setting.bounds["le"]
    # alone at its bound: the products of settings (SIZES) have caps of their own
    data: dict = {"rollout": {"prompts_per_step": 1, "n": 2, "batch_size": 1}, "optimizer": {"micro_batch_size": 1}}
    put_path(data, path, top)
    assert load_config(data) is not None
    put_path(data, path, top + 1)
    assert (path, f"must be at most {top}") in errors_of(data)


def test_a_step_of_too_many_sequences_is_refused_with_the_product():
    n = config_setting("rollout.n").bounds["le"]
    prompts = MAX_SEQUENCES_PER_STEP // n + 1
    errs = errors_of({"rollout": {"prompts_per_step": prompts, "n": n}})
    assert [p for p, _ in errs] == ["rollout.prompts_per_step"]
    assert str(prompts * n) in errs[0][1] and str(MAX_SEQUENCES_PER_STEP) in errs[0][1]
    assert load_config({"rollout": {"prompts_per_step": MAX_SEQUENCES_PER_STEP // n, "n": n}})
    adaptive = {"rollout": {"prompts_per_step": prompts, "n": 2},
                "sampler": {"adaptive_budget": True, "min_samples": 2, "max_samples": n}}
    assert "sampler.max_samples" in errors_of(adaptive)[0][1]


def test_each_setting_is_its_schema():
    """``config_settings`` and ``config_json_schema`` are one description: same default, bounds, help."""
    schema = config_json_schema()
    for path, setting in config_settings().items():
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        expected = setting.schema()
        assert {k: node[k] for k in expected} == expected, path
        assert setting.help and setting.default == node["default"]


def test_the_run_tables_name_real_settings_with_valid_values():
    paths = [o.path for o in RUN_OWNED]
    assert len(paths) == len(set(paths))
    for owned in RUN_OWNED:
        config_setting(owned.path)  # KeyError when the table names a setting that is gone
    data: dict = {}
    for path, value in RUN_DEFAULTS.items():
        assert path not in paths, f"{path} is the run's own; it has no run default"
        assert config_setting(path).default != value, f"{path}: the run default is the trainer's; drop it"
        put_path(data, path, value)
    loaded = load_config(data).to_dict()
    assert all(has_path(loaded, p) for p in RUN_DEFAULTS)
    with pytest.raises(KeyError):
        config_setting("rollout.nope")
