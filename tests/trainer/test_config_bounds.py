"""Every number of the trainer config has an upper bound a host survives, non-finite numbers are
refused wherever a config comes from (a dict, YAML, JSON), the products of settings have bounds of
their own, and a team's ceilings are checked against the settings they bound."""
from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from trainer.ceilings import ceiling_errors, ceiling_map_errors, numeric_settings
from trainer.config import ConfigError, TrainerConfig, load_config, put_path
from trainer.sizes import SIZES, sequence_tokens
from trainer.config_schema import config_json_schema, config_setting

NO_UPPER_BOUND: dict[str, str] = {}
"""Numeric settings allowed without an upper bound, each with the reason. None today: a count that
allocates nothing (a seed, a step count) still has one, so that no value overflows a database
column, an engine's seed or a ``range``."""

_SMALL = {"rollout": {"prompts_per_step": 1, "n": 2, "batch_size": 1}, "optimizer": {"micro_batch_size": 1}}
"""Every product of settings at its smallest, so that one setting can be tried alone."""


def errors_of(data) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        load_config(data)
    return err.value.errors


def _numeric_fields(cls: type, prefix: str = ""):
    """Every int or float field of the dataclasses under ``cls``, found by walking them (not by
    :func:`numeric_settings`, which is what is checked)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _numeric_fields(tp, f"{prefix}{f.name}.")
        elif tp in (int, float):
            yield f"{prefix}{f.name}", f


def test_every_numeric_setting_has_an_upper_bound():
    fields = dict(_numeric_fields(TrainerConfig))
    assert len(fields) > 40 and set(fields) == set(numeric_settings())
    missing = [path for path, f in fields.items()
               if not {"le", "lt"} & set(f.metadata.get("bounds", {})) and path not in NO_UPPER_BOUND]
    assert missing == [], f"numeric settings without an upper bound: {missing}"
    assert not set(NO_UPPER_BOUND) - set(fields), "an exemption names a setting that no longer exists"


def test_the_domain_weights_and_their_number_are_bounded_too():
    schema = config_json_schema()["properties"]["domains"]
    assert schema["additionalProperties"]["maximum"] == 1e6 and schema["maxProperties"] == 500
    assert ("domains.a", "must be at most 1e+06") in errors_of({"domains": {"a": 1e7}})
    assert load_config({"domains": {"a": 1e6, "b": 1}})
    assert ("domains", "must name at most 500 domains") in errors_of({"domains": {f"d{i}": 1 for i in range(501)}})


@pytest.mark.parametrize("path", sorted(numeric_settings()))
def test_a_billion_is_refused_for_every_numeric_setting(path):
    """The issue's report: 10^9 was accepted for prompts_per_step, n and max_new_tokens, and the
    trainer died of MemoryError 85 s later. Every numeric setting now refuses it by name."""
    bounds = config_setting(path).bounds
    top = bounds.get("le", bounds.get("lt"))
    data = json.loads(json.dumps(_SMALL))
    put_path(data, path, 10**9 if top < 10**9 else 10**12)
    assert path in [p for p, _ in errors_of(data)]


@pytest.mark.parametrize("path", sorted(p for p, bounds in numeric_settings().items() if "le" in bounds))
def test_each_setting_is_accepted_at_its_upper_bound_alone(path):
    """(A setting with an exclusive upper bound, ``lt``, has no largest value to try.)"""
    bounds = config_setting(path).bounds
    data = json.loads(json.dumps(_SMALL))
    put_path(data, path, bounds["le"])
    if path == "sampler.min_samples":
        put_path(data, "sampler.max_samples", bounds["le"])
    if path == "rollout.verify_budget_s":  # a budget needs an overlapped pipeline
        put_path(data, "rollout.staleness", 1)
    if path == "rollout.tensor_parallel_size":  # tensor parallel generation is vLLM's
        put_path(data, "rollout.engine", "vllm")
    assert load_config(data) is not None


@pytest.mark.parametrize("text", [".nan", ".NaN", ".inf", "-.inf", ".Inf"])
@pytest.mark.parametrize("path", ["rollout.temperature", "optimizer.lr", "optimizer.max_grad_norm", "limits.max_wall_s",
                                  "algorithm.kl_coef", "sampler.holdout_fraction"])
def test_non_finite_floats_are_refused_from_yaml(tmp_path, path, text):
    section, leaf = path.split(".")
    file = tmp_path / "run.yaml"
    file.write_text(f"{section}:\n  {leaf}: {text}\n")
    assert errors_of(str(file)) == [(path, "must be a finite number")]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_floats_are_refused_from_json_files_and_dicts(tmp_path, text):
    file = tmp_path / "run.json"
    file.write_text('{"optimizer": {"lr": %s}, "rollout": {"n": %s}}' % (text, text))
    assert errors_of(str(file)) == [("rollout.n", "must be an integer"), ("optimizer.lr", "must be a finite number")]
    value = float(text.replace("Infinity", "inf"))
    assert errors_of({"domains": {"a": value}}) == [("domains.a", "must be a finite number")]
    assert errors_of({"algorithm": {"clip_high": value}}) == [("algorithm.clip_high", "must be a finite number")]


def test_sizes_bound_the_products_of_settings():
    """Each setting alone at a size the host survives, their product not: refused at the setting
    the size names, with the numbers."""
    cases = {
        "sequences_per_step": {"rollout": {"prompts_per_step": 4096, "n": 1024}},
        "tokens_per_step": {"rollout": {"prompts_per_step": 4096, "n": 16, "batch_size": 1},
                            "tokenizer": {"max_prompt_tokens": 2048}, "optimizer": {"micro_batch_size": 1}},
        "tokens_per_generation_batch": {"rollout": {"batch_size": 4096, "max_new_tokens": 8192},
                                        "optimizer": {"micro_batch_size": 1}},
        "tokens_per_micro_batch": {"optimizer": {"micro_batch_size": 4096}, "tokenizer": {"max_prompt_tokens": 8192}},
        "eval_tasks": {"eval": {"every_steps": 10, "tasks_per_domain": 10_000}, "domains": {f"d{i}": 1 for i in range(11)}},
        "sft_check_tasks": {"sft": {"steps": 100, "until_pass_rate": 0.2, "check_tasks": 4096},
                            "domains": {f"d{i}": 1 for i in range(25)}},
    }
    assert set(cases) == {s.name for s in SIZES}
    for size in SIZES:
        errs = errors_of(cases[size.name])
        mine = [m for p, m in errs if p == size.path and size.name.replace("_", " ") in m]
        assert mine and str(size.bound) in mine[0], (size.name, errs)


def test_a_multi_turn_episode_counts_its_token_budget():
    single = load_config({"rollout": {"max_episode_tokens": 100_000}})
    assert sequence_tokens(single) == 512 + 64  # one turn: the episode budget is not reached
    multi = {"rollout": {"max_turns": 4, "max_episode_tokens": 100_000}}
    errs = errors_of(multi)
    assert errs == [("rollout.batch_size", f"times 100512 tokens a sequence is {256 * 100_512} tokens per generation "
                                           f"batch; at most {1 << 24} are allowed")]
    put_path(multi, "rollout.batch_size", 16)
    assert sequence_tokens(load_config(multi)) == 512 + 100_000


def test_the_schema_lists_the_sizes():
    sizes = config_json_schema()["x-sizes"]
    assert {name: s["maximum"] for name, s in sizes.items()} == {s.name: s.bound for s in SIZES}
    assert all(s["description"] and s["reported_at"] for s in sizes.values())


def test_a_ceiling_map_names_settings_and_sizes_within_their_global_bounds():
    assert ceiling_map_errors({"rollout.n": 1024, "limits.max_steps": 10, "sequences_per_step": 65_536}) == []
    assert ceiling_map_errors({"rollout.n": 1025}) == [("ceilings.rollout.n", "must be at most 1024")]
    assert ceiling_map_errors({"sequences_per_step": 65_537}) == [("ceilings.sequences_per_step", "must be at most 65536")]
    assert ceiling_map_errors({"rollout.n": 0}) == [("ceilings.rollout.n", "must be at least 1")]
    assert ceiling_map_errors({"model.path": 1})[0][1].startswith("not a numeric setting")
    assert ceiling_map_errors({"rollout.n": "8"}) == [("ceilings.rollout.n", "must be a number")]
    assert ceiling_map_errors({"rollout.n": float("inf")}) == [("ceilings.rollout.n", "must be a finite number")]
    assert ceiling_map_errors([]) == [("ceilings", "must be an object of setting path to ceiling")]


def test_a_config_above_a_ceiling_is_refused_and_one_at_it_is_not():
    cfg = load_config({"rollout": {"n": 8, "prompts_per_step": 8, "max_new_tokens": 512}})
    assert ceiling_errors(cfg, {"rollout.n": 8, "rollout.max_new_tokens": 512, "sequences_per_step": 64}, "team t") == []
    errs = ceiling_errors(cfg, {"rollout.n": 7, "rollout.max_new_tokens": 511, "sequences_per_step": 63}, "team t")
    assert errs == [("rollout.n", "is 8; at most 7 for team t"), ("rollout.max_new_tokens", "is 512; at most 511 for team t"),
                    ("rollout.prompts_per_step", "times rollout.n is 64 sequences per step; at most 63 for team t")]


def test_evaluation_tasks_count_only_when_evaluating():
    many = {"eval": {"tasks_per_domain": 10_000}, "domains": {f"d{i}": 1 for i in range(11)}}
    assert load_config(many)  # every_steps 0: nothing is evaluated
    put_path(many, "eval.every_steps", 5)
    assert errors_of(many) == [("eval.tasks_per_domain", "times 11 domains is 110000 eval tasks; at most 100000 are allowed")]
