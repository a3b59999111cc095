"""The run settings as the rest of Temper sees them: each setting's type, default, bounds and help
read off the dataclasses of :mod:`trainer.config` (:func:`config_settings`), and their JSON Schema
(:func:`config_json_schema`, which the run form renders and the API validates with).

>>> s = config_setting("rollout.staleness")
>>> s.default, s.bounds, s.schema()["maximum"]
(0, {'ge': 0, 'le': 16}, 16)
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from trainer.config import TrainerConfig
from trainer.sizes import SIZES


# ----------------------------------------------------------------------------- docstrings
@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The one-line docstring written under each field of a dataclass (and of the dataclasses it
    extends), by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is cls or dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


# ----------------------------------------------------------------------------- JSON schema
def _schema_for(tp: Any, default: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _object_schema(tp)
    if origin is Literal:
        choices = list(typing.get_args(tp))
        return {"enum": choices}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_for(typing.get_args(tp)[1], None)}
    return {bool: {"type": "boolean"}, int: {"type": "integer"}, float: {"type": "number"},
            str: {"type": "string"}}[tp]


SCHEMA_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
"""A field's bound operator -> its JSON Schema keyword."""


def _field_schema(tp: Any, default: Any, bounds: dict[str, float], doc: str,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    prop = {**_schema_for(tp, default), **(extra or {})}
    if doc:
        prop["description"] = doc
    if not dataclasses.is_dataclass(default):
        prop["default"] = default
    for op, value in bounds.items():
        prop[SCHEMA_BOUNDS[op]] = value
    return prop


def _object_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    instance = cls()
    props = {f.name: _field_schema(hints[f.name], getattr(instance, f.name), f.metadata.get("bounds", {}),
                                   docs.get(f.name, ""), f.metadata.get("schema"))
             for f in dataclasses.fields(cls)}
    return {"type": "object", "title": cls.__name__, "description": (cls.__doc__ or "").strip(),
            "properties": props, "additionalProperties": False}


def config_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of :class:`TrainerConfig`, with defaults and descriptions.

    The products of settings that JSON Schema cannot express (:data:`trainer.config.SIZES`) are
    listed under ``x-sizes`` with their bounds, for the form and the API docs to show.

    >>> config_json_schema()["x-sizes"]["sequences_per_step"]["maximum"]
    65536
    """
    schema = _object_schema(TrainerConfig)
    sizes = {s.name: {"maximum": s.bound, "description": s.help, "reported_at": s.path} for s in SIZES}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://temper.local/schemas/trainer-config.json", **schema, "x-sizes": sizes}


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """One leaf of :class:`TrainerConfig` as everything else sees it: the run form, the API's
    validation and the Run model read these, never a copy of a default or a bound."""

    path: str
    """Dotted path, e.g. ``rollout.staleness``."""
    type: Any
    """The type hint: ``int``, ``float``, ``bool``, ``str``, a ``Literal`` or a ``dict``."""
    default: Any
    """The trainer's default."""
    bounds: dict[str, float]
    """Numeric bounds by operator (``gt``, ``ge``, ``lt``, ``le``)."""
    help: str
    """The field's docstring."""
    extra: dict[str, Any] = field(default_factory=dict)
    """JSON Schema keywords the type and bounds do not give (e.g. the weights of ``domains``)."""

    def schema(self) -> dict[str, Any]:
        """This setting's JSON Schema, as :func:`config_json_schema` gives it."""
        return _field_schema(self.type, self.default, self.bounds, self.help, self.extra)


def _leaves(cls: type, prefix: str) -> Iterator[Setting]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    instance = cls()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield Setting(path=f"{prefix}{f.name}", type=hints[f.name], default=getattr(instance, f.name),
                          bounds=dict(f.metadata.get("bounds", {})), help=docs.get(f.name, ""),
                          extra=dict(f.metadata.get("schema", {})))


def config_settings() -> dict[str, Setting]:
    """Every setting of :class:`TrainerConfig` by dotted path, in the order they are declared."""
    return {s.path: s for s in _leaves(TrainerConfig, "")}


def config_setting(path: str) -> Setting:
    """The setting at the dotted ``path``; ``KeyError`` when there is none."""
    found = config_settings()
    if path not in found:
        raise KeyError(f"no trainer setting {path!r}")
    return found[path]
