"""Slack-compatible incoming webhooks: the firing's message as text, escaped so that a run's name
cannot ping a channel or forge a link, with a link to the chart."""
from __future__ import annotations

import json

from controlplane.alerts.channels.base import Channel
from controlplane.alerts.channels.http import post, shown_url, url_errors
from controlplane.common.errors import FieldError


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally.

    >>> slack_escape("run <!channel> & <http://x|y>")
    'run &lt;!channel&gt; &amp; &lt;http://x|y&gt;'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Slack(Channel):
    kind = "slack"
    schema = {"type": "object", "additionalProperties": False, "required": ["type", "url"],
              "properties": {"type": {"const": "slack"}, "url": {"type": "string", "minLength": 1, "maxLength": 2000}}}

    def target(self, channel: dict) -> str:
        return channel["url"]

    def errors(self, channel: dict, path: str, team_id: int | None) -> list[FieldError]:
        return url_errors(channel["url"], f"{path}.url")

    def out(self, channel: dict, reveal: bool) -> dict:
        return dict(channel) if reveal else channel | {"url": shown_url(channel["url"])}

    def shown(self, target: str, reveal: bool) -> str:
        return target if reveal else shown_url(target)

    def send(self, delivery, channel: dict, payload: dict) -> int:
        link = payload.get("url")
        text = f"[Temper] {slack_escape(payload.get('message', ''))}" + (f" <{link}|chart>" if link else "")
        return post(channel["url"], json.dumps({"text": text}).encode(), {})
