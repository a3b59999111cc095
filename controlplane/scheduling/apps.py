from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "controlplane.scheduling"
    label = "scheduling"
    default_auto_field = "django.db.models.BigAutoField"
