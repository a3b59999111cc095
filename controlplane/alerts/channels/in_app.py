"""In-app notifications: every member of the run's team sees the firing in the bell's list at once."""
from __future__ import annotations

from controlplane.accounts.models import Membership
from controlplane.alerts.channels.base import Channel
from controlplane.alerts.models import Notification


class InApp(Channel):
    kind = "in_app"
    schema = {"type": "object", "additionalProperties": False, "required": ["type"],
              "properties": {"type": {"const": "in_app"}}}
    delivered = False

    def notify(self, *, firing, run, message: str, path: str) -> None:
        users = Membership.objects.filter(team_id=run.team_id).values_list("user_id", flat=True)
        Notification.objects.bulk_create([Notification(user_id=u, firing=firing, message=message, url=path) for u in users])

    def notify_test(self, *, user, message: str) -> None:
        if user is not None:
            Notification.objects.create(user=user, message=message, url="/alerts/")
