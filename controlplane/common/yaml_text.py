"""YAML that stands for JSON: what a run body, a domain file or a config pasted as YAML may hold.

``loads`` reads YAML into the values JSON has (mappings with string keys, lists, strings, finite
numbers, booleans, null) and refuses the rest with the place it is at: aliases (``*name``, which
let a few lines expand into gigabytes), tags that build other types (``!!binary``, ``!!set``,
``!!python/...``), non-string keys, and ``.nan`` / ``.inf``. Dates stay text (plain YAML would turn
``2026-12-06`` into a date, which JSON has not). ``dumps`` writes such values back as block YAML
with the keys in their given order.
"""
from __future__ import annotations

import math
from typing import Any

import yaml

MAX_TEXT = 256 * 1024
"""The longest text read (characters): a run body is a few kilobytes."""


class YamlTextError(ValueError):
    """Text that is not JSON-like YAML; ``line`` and ``column`` count from 1 where known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, path: str = ""):
        self.message, self.line, self.column, self.path = message, line, column, path
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"{where}{path + ': ' if path else ''}{message}")


class _Loader(yaml.SafeLoader):
    """SafeLoader without aliases and without timestamps."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise YamlTextError("aliases (*name) are not accepted: write the value out", mark.line + 1, mark.column + 1)
        return super().compose_node(parent, index)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check(value: Any) -> None:
    """The first value JSON has not, with its path; iterative, so any depth is safe to walk."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise YamlTextError(f"key {key!r} is not text: quote it", path=path or "(root)")
                stack.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise YamlTextError(f"{item} is not a finite number", path=path or "(root)")
        elif item is not None and not isinstance(item, (str, bool, int)):
            raise YamlTextError(f"a {type(item).__name__} is not a JSON value", path=path or "(root)")


def loads(text: str) -> Any:
    """The JSON-like value ``text`` holds; :class:`YamlTextError` saying what and where otherwise."""
    if len(text) > MAX_TEXT:
        raise YamlTextError(f"the text is {len(text)} characters; at most {MAX_TEXT} are read")
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except YamlTextError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(p for p in (exc.context, exc.problem) if p)
        if mark is not None:
            raise YamlTextError(message, mark.line + 1, mark.column + 1) from None
        raise YamlTextError(message) from None
    except yaml.YAMLError as exc:
        raise YamlTextError(str(exc)) from None
    except RecursionError:
        raise YamlTextError("lists and mappings nested too deep to read") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a tag SafeLoader cannot build
        raise YamlTextError(f"not readable: {exc}") from None
    _check(value)
    return value


def dumps(value: Any) -> str:
    """``value`` (JSON-like) as block YAML, keys in their order, text as plain as it safely goes."""
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
