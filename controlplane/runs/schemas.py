"""The run configuration as a JSON Schema, and the trainer's own checks of its config section.

Every trainer setting a run has comes from ``trainer.config``: the run's fields that fill one
(``staleness``, ``budget.steps``, ``budget.wall_s``: ``trainer.run_fields.RUN_OWNED``) take their
type, default and bounds from the setting (:func:`owned_fields`), and the ``config`` section is
the trainer's config less the settings the run owns, with the run's defaults (``RUN_DEFAULTS``).
Nothing here repeats a default or a bound.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from controlplane.common.errors import FieldError
from controlplane.common.validation import TEAM_SCHEMA, schema_errors
from controlplane.runs.cost import parse_amount
from trainer import run_fields
from trainer.config import ConfigError, has_path, load_config, put_path
from trainer.run_fields import RUN_DEFAULTS
from trainer.config_schema import config_json_schema, config_setting

MAX_MEMBER_PRIORITY = 50
"""Members may set priorities up to this; higher ones need a team admin."""


def from_setting(path: str, **override: Any) -> dict[str, Any]:
    """The JSON Schema of the trainer setting at ``path``, with ``override`` keys replaced (a key
    set to None is dropped), for a run field that fills that setting."""
    schema = {**config_setting(path).schema(), **override}
    return {k: v for k, v in schema.items() if v is not None}


_BUILT: dict[str, tuple[tuple, Any]] = {}
""":func:`owned_fields` and :func:`run_schema` as last built, each with the ``RUN_OWNED`` it was
built from: rebuilt only when that list is another (a test adds a field), never per request or
per run of a list (a build walks the trainer's config schema: milliseconds)."""


def _built(name: str, build: Callable[[], Any]) -> Any:
    """What ``build`` gives for the current ``RUN_OWNED`` (shared: callers do not change it)."""
    owned = run_fields.RUN_OWNED
    cached = _BUILT.get(name)
    if cached is None or cached[0] is not owned:
        _BUILT[name] = cached = (owned, build())
    return cached[1]


def owned_fields() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each run field that fills a trainer setting, by the field's place in the
    run body (``staleness``, ``budget.steps``): the setting's, with the run's differences
    (``trainer.run_fields.RUN_OWNED``, read as it is now). The run body's schema, the run form, the
    API's output and :class:`~controlplane.runs.spec.RunSpec` are built from it, so a new run
    field is one entry there."""
    return _built("owned_fields", lambda: {o.source: from_setting(o.path, **dict(o.schema))
                                           for o in run_fields.RUN_OWNED if o.scalar and not o.assigned})


MAX_BUDGET_TOKENS = 10**15
"""The run's ``budget.tokens`` at most: far beyond any run, and inside the database's bigint."""

_RUN_BODY = {
    "type": "object",
    "required": ["name", "base_model", "domains", "budget"],
    "additionalProperties": False,
    "properties": {
        "team": TEAM_SCHEMA,
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "base_model": {"type": "string", "minLength": 1, "maxLength": 500},
        "domains": {
            "type": "array",
            "minItems": 1,
            "maxItems": 500,
            "items": {
                "type": "object",
                "required": ["slug", "weight"],
                "additionalProperties": False,
                "properties": {
                    "slug": {"type": "string", "minLength": 1},
                    "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
                },
            },
        },
        "config": {"type": "object"},  # checked by the trainer: trainer_config_errors
        "budget": {
            "type": "object",
            "required": ["steps"],
            "additionalProperties": False,
            "properties": {
                "tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_BUDGET_TOKENS},
                "cost": {"type": ["number", "string", "null"], "maxLength": 40,
                         "description": "Money budget in the installation's currency (TEMPER_CURRENCY), a number or a "
                                        "decimal string above 0: the run completes at the step where its cost reaches "
                                        "it. Null: no limit."},
            },
        },
        "priority": {"type": "integer", "minimum": 1, "maximum": 99},
        "gpus": {"type": "integer", "minimum": 0, "maximum": 1024},
        "clone_from": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**63 - 1},
    },
}

"""The run body's own fields; :func:`run_schema` adds those that fill trainer settings."""


def _with_owned_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each of :func:`owned_fields` at its place (``budget.steps`` in the
    ``budget`` object, made where missing)."""
    for source, field_schema in owned_fields().items():
        node = schema
        for part in source.split(".")[:-1]:
            node = node["properties"].setdefault(part, {"type": "object", "additionalProperties": False, "properties": {}})
        node["properties"][source.rsplit(".", 1)[-1]] = field_schema
    return schema


def run_schema() -> dict[str, Any]:
    """The JSON Schema of a run body, its config section an object (checked by the trainer)."""
    return _built("run_schema", lambda: _with_owned_fields(copy.deepcopy(_RUN_BODY)))


RUN_SCHEMA = run_schema()
"""The run body's schema as it is at import (:func:`run_schema`)."""


def run_config_schema() -> dict[str, Any]:
    """The JSON Schema of a run's ``config`` section: the trainer's config schema without the
    settings the run owns, with the defaults a run gets. The run form renders it."""
    schema = copy.deepcopy(config_json_schema())
    for owned in run_fields.RUN_OWNED:
        *parents, leaf = owned.path.split(".")
        node = schema
        for part in parents:
            node = node["properties"][part]
        del node["properties"][leaf]
    for path, value in RUN_DEFAULTS.items():
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        node["default"] = value
    schema["properties"] = {name: prop for name, prop in schema["properties"].items()
                            if "properties" not in prop or prop["properties"]}
    return schema


def run_body_schema() -> dict[str, Any]:
    """The body of ``POST /api/runs`` as documented: :func:`run_schema` with its config section."""
    config = {k: v for k, v in run_config_schema().items() if not k.startswith("$")}
    body = run_schema()
    return {**body, "properties": {**body["properties"], "config": config}}


def _without(config: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    rest = copy.deepcopy(config)
    for path in paths:
        *parents, leaf = path.split(".")
        node = rest
        for part in parents:
            node = node[part]
        del node[leaf]
    return rest


def trainer_config_errors(config: dict[str, Any], prefix: str = "config",
                          run: dict[str, Any] | None = None) -> list[FieldError]:
    """The trainer's validation of a run's config section, with paths under ``prefix``: a setting
    the run owns is refused with the run field that sets it, every other one is checked by
    ``trainer.config.load_config``, with the numbers the run body ``run`` gives the settings it
    owns (a rule across settings, such as a verification budget needing staleness, sees them)."""
    owned = [o for o in run_fields.RUN_OWNED if has_path(config, o.path)]
    errors = [FieldError(f"{prefix}.{o.path}", o.refusal()) for o in owned]
    checked = _without(config, [o.path for o in owned])
    for o in run_fields.RUN_OWNED:
        value = body_field(run or {}, o.source)
        if not o.assigned and isinstance(value, (int, float, str)) and not isinstance(value, bool) \
                and _mappings_on_the_way(checked, o.path):  # else load_config says the section is wrong
            put_path(checked, o.path, value)
    try:
        load_config(checked)
    except ConfigError as exc:
        fields = {o.path: o.source for o in run_fields.RUN_OWNED if not o.assigned and o.scalar}
        # a cross-setting rule on a setting the run owns names the run field that sets it
        errors += [FieldError(fields[path] if path in fields else f"{prefix}.{path}" if path else prefix, message)
                   for path, message in exc.errors]
    return errors


def _mappings_on_the_way(config: dict[str, Any], path: str) -> bool:
    """Whether each section on the way to ``path`` in ``config`` is a mapping or absent."""
    node: Any = config
    for part in path.split(".")[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return True
        if not isinstance(node, dict):
            return False
    return True


def run_schema_errors(data: Any) -> list[FieldError]:
    """Every error of a run body's shape and of its config section, in one pass (a bad weight does
    not hide a bad setting); a run field with an error of its own is not lent to the config's
    cross-setting rules."""
    errors = schema_errors(data, run_schema())
    errors += budget_cost_errors(data, [e.path for e in errors])
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        bad = [e.path for e in errors]
        run = copy.deepcopy(data)
        for o in run_fields.RUN_OWNED:
            if any(p == o.source or p.startswith(o.source + ".") or p.startswith(o.source + "[") for p in bad):
                _drop(run, o.source)
        errors += trainer_config_errors(data["config"], run=run)
    return errors


def budget_cost_errors(data: Any, bad: list[str]) -> list[FieldError]:
    """``budget.cost`` that the schema let through but is no positive finite amount of money
    (NaN, Infinity, 0, a string that is no number), unless the schema already named it.

    >>> budget_cost_errors({"budget": {"cost": float("nan")}}, [])
    [FieldError(path='budget.cost', message="must be a finite amount of money, got 'nan'")]
    >>> budget_cost_errors({"budget": {"cost": "12.50"}}, []), budget_cost_errors({"budget": {"cost": None}}, [])
    ([], [])
    """
    value = body_field(data, "budget.cost") if isinstance(data, dict) else None
    if value is None or "budget.cost" in bad or not isinstance(value, (int, float, str)):
        return []
    try:
        parse_amount(value, positive=True)
    except ValueError as exc:
        return [FieldError("budget.cost", str(exc))]
    return []


def _drop(data: dict[str, Any], dotted: str) -> None:
    """Remove the value at ``dotted`` of a run body, where there is one."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.get(part) if isinstance(data, dict) else None
    if isinstance(data, dict):
        data.pop(leaf, None)


def body_field(data: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``budget.steps``) of a run body, or None."""
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data
