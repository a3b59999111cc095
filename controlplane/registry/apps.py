from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "controlplane.registry"
    label = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.registry import signals  # noqa: F401  (every checkpoint becomes a ModelVersion)
