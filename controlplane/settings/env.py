"""Reading settings from the environment: what every settings module shares (a module of its
own, so the integration modules need not import the settings package they are part of)."""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}: must be one of 1/0/true/false/yes/no/on/off, got {value!r}")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: must be an integer, got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name}: must be >= {minimum}, got {number}")
    return number


def debug() -> bool:
    """``DEBUG`` (on unless the environment says otherwise: the embedded default is a laptop's)."""
    return env_bool("DEBUG", True)
