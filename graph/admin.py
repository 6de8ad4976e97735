"""Jobs, runs and edges are what the events say (an edit here would be replayed away, and
answer otherwise than the evidence meanwhile); taints are marked and cleared on the dataset's
page or through the API, which tell the owners downstream. All are shown read-only."""

from django.contrib import admin

from catalog.admin import ReadOnlyAdmin
from graph import models


@admin.register(models.Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "job_type", "integration", "updated_at")
    list_filter = ("namespace", "job_type", "integration")
    search_fields = ("name",)
    raw_id_fields = ("parent", "latest_run")


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("run_uuid", "job", "state", "started_at", "ended_at")
    list_filter = ("state",)
    search_fields = ("run_uuid", "job__name")
    raw_id_fields = ("job", "parent")


@admin.register(models.TableEdge)
class TableEdgeAdmin(ReadOnlyAdmin):
    list_display = ("job", "direction", "dataset", "valid_from", "valid_to")
    list_filter = ("direction",)
    raw_id_fields = ("job", "dataset")


@admin.register(models.ColumnEdge)
class ColumnEdgeAdmin(ReadOnlyAdmin):
    list_display = (
        "source_field",
        "target_field",
        "job",
        "transformation_type",
        "transformation_subtype",
        "valid_from",
        "valid_to",
    )
    list_filter = ("transformation_type", "transformation_subtype")
    raw_id_fields = ("job", "source_field", "target_dataset", "target_field")


@admin.register(models.Taint)
class TaintAdmin(ReadOnlyAdmin):
    list_display = ("dataset", "reason", "created_at", "cleared_at")
    raw_id_fields = ("dataset", "created_by", "cleared_by")


admin.site.register(models.RunDataset, ReadOnlyAdmin)
