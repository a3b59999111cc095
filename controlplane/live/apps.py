from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "controlplane.live"
    label = "live"
