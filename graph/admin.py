from django.contrib import admin

from graph import models


@admin.register(models.Job)
class JobAdmin(admin.ModelAdmin[models.Job]):
    list_display = ("name", "namespace", "job_type", "integration", "updated_at")
    list_filter = ("namespace", "job_type", "integration")
    search_fields = ("name",)
    raw_id_fields = ("parent", "latest_run")


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin[models.Run]):
    list_display = ("run_uuid", "job", "state", "started_at", "ended_at")
    list_filter = ("state",)
    search_fields = ("run_uuid", "job__name")
    raw_id_fields = ("job", "parent")


@admin.register(models.TableEdge)
class TableEdgeAdmin(admin.ModelAdmin[models.TableEdge]):
    list_display = ("job", "direction", "dataset", "valid_from", "valid_to")
    list_filter = ("direction",)
    raw_id_fields = ("job", "dataset")


@admin.register(models.ColumnEdge)
class ColumnEdgeAdmin(admin.ModelAdmin[models.ColumnEdge]):
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
class TaintAdmin(admin.ModelAdmin[models.Taint]):
    list_display = ("dataset", "reason", "created_at", "cleared_at")
    raw_id_fields = ("dataset", "created_by", "cleared_by")


admin.site.register(models.RunDataset)
