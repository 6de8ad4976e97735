from django.apps import AppConfig
from django.db.models.signals import post_migrate


class CatalogConfig(AppConfig):
    name = "catalog"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from catalog import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from catalog.roles import ensure_roles

        post_migrate.connect(ensure_roles, sender=self, dispatch_uid="catalog.ensure_roles")
