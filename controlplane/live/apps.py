from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "controlplane.live"
    label = "live"

    def ready(self):
        from django.db.models.signals import post_save

        from controlplane.live.services import wake_on_commit
        from controlplane.runs.models import Run, RunEvent

        # A run's row or a new event: wake its page and its team's run list once committed.
        # (Metric points are bulk-inserted without signals; the driver's step write wakes for them.)
        post_save.connect(_run_saved, sender=Run, weak=False, dispatch_uid="live-run-saved")
        post_save.connect(lambda sender, instance, **kw: wake_on_commit(instance.run), sender=RunEvent, weak=False,
                          dispatch_uid="live-event-saved")


LEASE_ONLY = frozenset({"driver_seen_at", "updated_at"})
"""A driver's lease renewal changes nothing a page shows: no wake-up for it."""


def _run_saved(sender, instance, update_fields=None, **kw) -> None:
    from controlplane.live.services import wake_on_commit

    if update_fields is not None and set(update_fields) <= LEASE_ONLY:
        return
    wake_on_commit(instance)
