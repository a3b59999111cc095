"""E-mail to the members of the rule's team (their account's address) or to addresses in
``TEMPER_ALERT_EMAIL_DOMAINS``: a rule is no relay for mail to anyone, checked when the rule is
saved and again at each delivery (a member who left the team gets no more of its alerts)."""
from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail

from controlplane.accounts.models import Membership
from controlplane.alerts import transport
from controlplane.alerts.channels.base import Channel
from controlplane.common.errors import FieldError


def email_errors(addresses: list[str], team_id: int | None, path: str) -> list[FieldError]:
    """Each address that is neither a member's of the team nor in ``TEMPER_ALERT_EMAIL_DOMAINS``."""
    members = {e.lower() for e in Membership.objects.filter(team_id=team_id).values_list("user__email", flat=True) if e} \
        if team_id is not None else set()
    domains = {d.lower().lstrip("@") for d in settings.TEMPER_ALERT_EMAIL_DOMAINS}
    return [FieldError(f"{path}[{i}]", f"{a} is not the address of a member of the team nor in TEMPER_ALERT_EMAIL_DOMAINS")
            for i, a in enumerate(addresses) if a.lower() not in members and a.lower().rsplit("@", 1)[-1] not in domains]


class Email(Channel):
    kind = "email"
    schema = {"type": "object", "additionalProperties": False, "required": ["type", "to"],
              "properties": {"type": {"const": "email"},
                             "to": {"type": "array", "minItems": 1, "maxItems": 20, "uniqueItems": True,
                                    "items": {"type": "string", "maxLength": 254, "pattern": r"^[^@\s]+@[^@\s]+\.[^@\s]+$"}}}}

    def target(self, channel: dict) -> str:
        return ", ".join(channel["to"])

    def key(self, channel: dict) -> str:
        return ",".join(sorted(a.lower() for a in channel["to"]))

    def errors(self, channel: dict, path: str, team_id: int | None) -> list[FieldError]:
        return email_errors(channel["to"], team_id, f"{path}.to")

    def out(self, channel: dict, reveal: bool) -> dict:
        return dict(channel) if reveal else {"type": self.kind, "recipients": len(channel["to"])}

    def shown(self, target: str, reveal: bool) -> str:
        return target if reveal else f"{len([a for a in target.split(',') if a.strip()])} address(es)"

    def send(self, delivery, channel: dict, payload: dict) -> None:
        run = payload.get("run") or {}
        subject = f"[Temper] {payload['rule']['name']}" + (f": run {run.get('name')}" if run else "")
        to = [a for a in channel["to"] if not email_errors([a], delivery.rule.team_id, "")]
        if not to:
            raise transport.Refused("none of the rule's addresses belongs to a member of its team any more")
        send_mail(" ".join(subject.split())[:200], f"{payload.get('message', '')}\n\n{payload.get('url', '')}\n",
                  settings.DEFAULT_FROM_EMAIL, to)
        return None
