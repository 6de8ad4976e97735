from django.contrib import admin

from catalog import models


class FieldInline(admin.TabularInline[models.DatasetField, models.Dataset]):
    model = models.DatasetField
    extra = 0
    fields = ("name", "type", "pii_category", "subject_kind", "flag_source", "sensitivity")


class OwnershipInline(admin.TabularInline[models.DatasetOwnership, models.Dataset]):
    model = models.DatasetOwnership
    extra = 0


@admin.register(models.Dataset)
class DatasetAdmin(admin.ModelAdmin[models.Dataset]):
    list_display = (
        "name",
        "namespace",
        "platform",
        "lifecycle_state",
        "retention_policy",
        "last_seen",
    )
    list_filter = ("lifecycle_state", "namespace", "sensitivity")
    search_fields = ("name", "description")
    inlines = [OwnershipInline, FieldInline]
    list_select_related = ("namespace", "retention_policy")


@admin.register(models.DatasetField)
class DatasetFieldAdmin(admin.ModelAdmin[models.DatasetField]):
    list_display = ("name", "dataset", "type", "pii_category", "subject_kind", "flag_source")
    list_filter = ("pii_category", "subject_kind", "flag_source")
    search_fields = ("name", "dataset__name")
    raw_id_fields = ("dataset",)


@admin.register(models.ChangeRecord)
class ChangeRecordAdmin(admin.ModelAdmin[models.ChangeRecord]):
    list_display = ("at", "actor_name", "source", "dataset", "field_name", "attribute")
    list_filter = ("source", "attribute")
    raw_id_fields = ("dataset", "actor")


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[models.ApiToken]):
    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")


admin.site.register(models.Namespace)
admin.site.register(models.SubjectKind)
admin.site.register(models.RetentionPolicy)
admin.site.register(models.Tag)
admin.site.register(models.Owner)
admin.site.register(models.DatasetVersion)
admin.site.site_header = "Lineage Explorer administration"
