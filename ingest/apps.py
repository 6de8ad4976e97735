from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ingest import normalizer  # noqa: F401  (its receiver of catalog.signals.flags_changed)
