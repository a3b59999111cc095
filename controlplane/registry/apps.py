from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "controlplane.registry"
    label = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # lazy: Django app loading (signals.py imports models, importable only once every app is loaded)
        from controlplane.registry import signals  # noqa: F401  (every checkpoint becomes a ModelVersion)
