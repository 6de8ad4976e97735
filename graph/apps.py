from django.apps import AppConfig
from django.db.models.signals import post_migrate


class GraphConfig(AppConfig):
    name = "graph"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from graph import propagation  # its receiver of catalog.signals.flags_changed
        from graph.revision import install_triggers_after_migrate

        # SQLite drops a table's triggers when a schema change rebuilds it: reinstall.
        post_migrate.connect(
            install_triggers_after_migrate, sender=self, dispatch_uid="graph.revision_triggers"
        )
        post_migrate.connect(
            propagation.rebuild_if_rules_changed,
            sender=self,
            dispatch_uid="graph.propagation_rules",
        )
