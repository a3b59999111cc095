"""What every alert channel is: its configuration's schema, where it sends, how it is checked and
shown, and how one delivery is sent (controlplane/alerts/channels/__init__.py lists them)."""
from __future__ import annotations

from typing import Any, ClassVar

from controlplane.common.errors import FieldError


class Channel:
    """One kind of channel. A rule's ``channels`` entry is a dict ``{"type": kind, ...}`` that
    :attr:`schema` validates; a firing makes one ``Delivery`` per delivered channel (tried by the
    notify worker, with retries) or, for a channel that is not :attr:`delivered`, is shown at once."""

    kind: ClassVar[str]
    """The ``type`` of the channel's entries."""
    schema: ClassVar[dict[str, Any]]
    """JSON Schema of one entry (``type`` included)."""
    delivered: ClassVar[bool] = True
    """False: the firing is shown in the app when it fires (no Delivery, nothing to retry)."""

    def target(self, channel: dict) -> str:
        """Where the channel sends (a URL, addresses): stored with each delivery."""
        return ""

    def key(self, channel: dict) -> str:
        """Two entries of one rule with the same kind and key send to the same place (refused)."""
        return self.target(channel)

    def errors(self, channel: dict, path: str, team_id: int | None) -> list[FieldError]:
        """What is wrong with an entry beyond its schema, each at its field under ``path``."""
        return []

    def kept(self, channel: dict, old: list[dict], path: str) -> tuple[dict, list[FieldError]]:
        """The entry to store on an update, given the rule's ``old`` entries (a secret left out is kept)."""
        return channel, []

    def out(self, channel: dict, reveal: bool) -> dict:
        """The entry as the API and the pages show it; ``reveal`` for those who edit the rule."""
        return {k: v for k, v in channel.items() if k != "secret"}

    def shown(self, target: str, reveal: bool) -> str:
        """A delivery's target as someone who may not edit the rule sees it."""
        return target

    def send(self, delivery: Any, channel: dict, payload: dict) -> int | None:
        """Send one delivery: the receiver's HTTP status, or None when there is none (mail)."""
        raise NotImplementedError(f"{self.kind} channels are not delivered")

    def notify(self, *, firing: Any, run: Any, message: str, path: str) -> None:
        """A channel that is not :attr:`delivered`: show ``message`` (linking ``path``) for ``firing``."""
        raise NotImplementedError(f"{self.kind} channels are delivered")

    def notify_test(self, *, user: Any, message: str) -> None:
        """A rule's test, shown to the user who asked for it (channels that are not delivered)."""
        raise NotImplementedError(f"{self.kind} channels are delivered")
