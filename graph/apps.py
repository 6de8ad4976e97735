from django.apps import AppConfig
from django.db.models.signals import post_delete, post_migrate, post_save


class GraphConfig(AppConfig):
    name = "graph"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from catalog.models import Dataset, DatasetField, Namespace
        from graph import propagation  # its receiver of catalog.signals.flags_changed
        from graph.models import Job
        from graph.nodeids import forget_resolved
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
        # Cached node-id resolutions go stale when a row goes away or a namespace appears
        # (a longer namespace can win the split of an id).
        for model in (Dataset, DatasetField, Job, Namespace):
            post_delete.connect(forget_resolved, sender=model, dispatch_uid=f"nodeids.{model}")
        post_save.connect(forget_resolved, sender=Namespace, dispatch_uid="nodeids.namespace")
