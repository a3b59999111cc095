"""Signed webhooks: the payload as JSON, ``X-Temper-Signature: sha256=<hex>`` the HMAC-SHA256 of
``<X-Temper-Timestamp>.<body>`` under the channel's secret (the receiver checks it and refuses old
timestamps)."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

from controlplane.alerts.channels.base import Channel
from controlplane.alerts.channels.http import post, shown_url, url_errors
from controlplane.common.errors import FieldError


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``.

    >>> sign("0123456789abcdef", 1700000000, b'{}')
    'sha256=e4f8e2ecae2295b2ddb2f0b5584c8275e226c0ebe9b3b819e70156bb67122e3e'
    """
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class Webhook(Channel):
    kind = "webhook"
    schema = {"type": "object", "additionalProperties": False, "required": ["type", "url"],
              "properties": {"type": {"const": "webhook"}, "url": {"type": "string", "minLength": 1, "maxLength": 2000},
                             "secret": {"type": "string", "minLength": 16, "maxLength": 200,
                                        "description": "HMAC key; omit on an update to keep the one this URL has"}}}

    def target(self, channel: dict) -> str:
        return channel["url"]

    def errors(self, channel: dict, path: str, team_id: int | None) -> list[FieldError]:
        return url_errors(channel["url"], f"{path}.url")

    def kept(self, channel: dict, old: list[dict], path: str) -> tuple[dict, list[FieldError]]:
        """Without a secret, the entry keeps the one its URL had; a new URL needs one."""
        if channel.get("secret"):
            return channel, []
        known = {c["url"]: c.get("secret") for c in old if c.get("type") == self.kind}
        errors = [] if known.get(channel["url"]) else [FieldError(
            f"{path}.secret", "a new webhook needs a secret of 16 to 200 characters (its deliveries are signed with it)")]
        return {**channel, "secret": known.get(channel["url"], "")}, errors

    def out(self, channel: dict, reveal: bool) -> dict:
        out = {k: v for k, v in channel.items() if k != "secret"} | {"secret_set": bool(channel.get("secret"))}
        return out if reveal else out | {"url": shown_url(channel["url"])}

    def shown(self, target: str, reveal: bool) -> str:
        return target if reveal else shown_url(target)

    def send(self, delivery, channel: dict, payload: dict) -> int:
        body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        ts = int(time.time())
        return post(channel["url"], body, {"X-Temper-Delivery": str(delivery.id), "X-Temper-Timestamp": str(ts),
                                           "X-Temper-Signature": sign(channel["secret"], ts, body)})
