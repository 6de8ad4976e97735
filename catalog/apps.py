from django.apps import AppConfig
from django.db.models.signals import m2m_changed, post_delete, post_migrate, post_save


class CatalogConfig(AppConfig):
    name = "catalog"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from catalog import lookups, schema  # noqa: F401  (register __any_of, the OpenAPI auth)
        from catalog.auth import forget_grants
        from catalog.models import ApiToken
        from catalog.roles import ensure_roles

        post_migrate.connect(ensure_roles, sender=self, dispatch_uid="catalog.ensure_roles")
        user = get_user_model()
        for through in (
            user.groups.through,
            user.user_permissions.through,
            Group.permissions.through,
        ):
            m2m_changed.connect(forget_grants, sender=through, dispatch_uid=f"grants.{through}")
        for model in (user, Group, ApiToken):
            post_save.connect(forget_grants, sender=model, dispatch_uid=f"grants.save.{model}")
            post_delete.connect(forget_grants, sender=model, dispatch_uid=f"grants.del.{model}")
