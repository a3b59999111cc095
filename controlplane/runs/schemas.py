"""The run configuration as a JSON Schema, and the trainer's own checks of its config section."""
from __future__ import annotations

from typing import Any

from controlplane.common.errors import FieldError
from controlplane.common.validation import schema_errors

MAX_MEMBER_PRIORITY = 50
"""Members may set priorities up to this; higher ones need a team admin."""

RUN_SCHEMA = {
    "type": "object",
    "required": ["name", "base_model", "domains", "budget"],
    "additionalProperties": False,
    "properties": {
        "team": {"type": "string", "minLength": 1},
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
        "config": {"type": "object"},
        "staleness": {"type": "integer", "minimum": 0, "maximum": 16},
        "budget": {
            "type": "object",
            "required": ["steps"],
            "additionalProperties": False,
            "properties": {
                "steps": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
                "tokens": {"type": ["integer", "null"], "minimum": 1},
                "wall_s": {"type": ["number", "null"], "exclusiveMinimum": 0},
            },
        },
        "priority": {"type": "integer", "minimum": 1, "maximum": 99},
        "gpus": {"type": "integer", "minimum": 0, "maximum": 1024},
        "clone_from": {"type": ["integer", "null"], "minimum": 1},
    },
}

# Sections of the trainer config the run sets through its own fields.
RESERVED_CONFIG_KEYS = {"model": "base_model", "domains": "domains"}


def trainer_config_errors(config: dict[str, Any], prefix: str = "config") -> list[FieldError]:
    """The trainer's validation of the config section, with paths under ``prefix``."""
    errors = [
        FieldError(f"{prefix}.{key}", f"set it with the run's '{field}' field instead")
        for key, field in RESERVED_CONFIG_KEYS.items()
        if key in config
    ]
    if errors:
        return errors
    try:
        from trainer.config import ConfigError, load_config
    except ImportError:
        return []
    try:
        load_config({k: v for k, v in config.items()})
    except ConfigError as exc:
        return [FieldError(f"{prefix}.{path}" if path else prefix, message) for path, message in exc.errors]
    return []


def run_schema_errors(data: Any) -> list[FieldError]:
    errors = schema_errors(data, RUN_SCHEMA)
    if not errors and isinstance(data.get("config"), dict):
        errors += trainer_config_errors(data["config"])
    return errors
