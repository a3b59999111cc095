"""Alert channels, one small class per kind and one file each (webhook, Slack, e-mail, in-app),
in one registry: a new kind is a new file and a line in :data:`CHANNELS`; the rules' schema, their
checks, how they are shown and how a delivery is sent all come from it."""
from __future__ import annotations

from typing import Any

from controlplane.alerts.channels.base import Channel
from controlplane.alerts.channels.email import Email
from controlplane.alerts.channels.in_app import InApp
from controlplane.alerts.channels.slack import Slack
from controlplane.alerts.channels.webhook import Webhook

CHANNELS: dict[str, Channel] = {c.kind: c for c in (Webhook(), Slack(), Email(), InApp())}
"""Every kind of channel, by the ``type`` of its entries."""


def channel(kind: str) -> Channel:
    """The channel class of ``kind`` (a rule's entries were validated against :func:`list_schema`)."""
    try:
        return CHANNELS[kind]
    except KeyError:
        raise ValueError(f"unknown channel {kind!r}; known: {', '.join(sorted(CHANNELS))}") from None


def list_schema() -> dict[str, Any]:
    """JSON Schema of a rule's ``channels``: each entry is one of the kinds, validated by its own schema."""
    return {"type": "array", "minItems": 1, "maxItems": 10,
            "items": {"type": "object", "required": ["type"], "properties": {"type": {"enum": sorted(CHANNELS)}},
                      "allOf": [{"if": {"properties": {"type": {"const": k}}}, "then": c.schema} for k, c in CHANNELS.items()]}}
