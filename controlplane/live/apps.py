from django.apps import AppConfig
from django.db.models.signals import post_save


class LiveConfig(AppConfig):
    name = "controlplane.live"
    label = "live"

    def ready(self):
        # lazy: Django app loading (models are importable only once every app is loaded)
        from controlplane.live import services
        from controlplane.runs.models import Run, RunEvent

        # A run's row or a new event: wake its page and its team's run list once committed.
        # (Metric points are bulk-inserted without signals; the driver's step write saves the run, which wakes for them.)
        post_save.connect(services.run_saved, sender=Run, dispatch_uid="live-run-saved")
        post_save.connect(services.event_saved, sender=RunEvent, dispatch_uid="live-event-saved")
