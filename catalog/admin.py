"""The admin shows the catalog, the lineage and their evidence, and edits none of them.

A steward's edit goes through the catalog's pages, the API or the catalog file: they apply
the naming rules, record the edit in the dataset's history and carry a flag to every copy
of the column. An edit here would do none of that (a flag set here reached no copy, an
owner changed here had no history), and a deletion here would take the evidence with it.
What the admin does manage: the operations' subscriptions (ops/admin.py), users and their
roles, and revoking API tokens.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from catalog import models


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Shown, never added, changed or deleted here (see the module's docstring)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline[Any, Any]):
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class FieldInline(ReadOnlyInline):
    model = models.DatasetField
    fields = ("name", "type", "pii_category", "subject_kind", "flag_source", "sensitivity")


class OwnershipInline(ReadOnlyInline):
    model = models.DatasetOwnership


@admin.register(models.Dataset)
class DatasetAdmin(ReadOnlyAdmin):
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
class DatasetFieldAdmin(ReadOnlyAdmin):
    list_display = ("name", "dataset", "type", "pii_category", "subject_kind", "flag_source")
    list_filter = ("pii_category", "subject_kind", "flag_source")
    search_fields = ("name", "dataset__name")
    raw_id_fields = ("dataset",)


@admin.register(models.ChangeRecord)
class ChangeRecordAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_name", "source", "dataset", "field_name", "attribute")
    list_filter = ("source", "attribute")
    raw_id_fields = ("dataset", "actor")


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[models.ApiToken]):
    """A token is revoked here (or by ``revoke_token``) and issued by ``issue_token``: one
    added here would have no secret to send."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


for model in (
    models.Namespace,
    models.SubjectKind,
    models.RetentionPolicy,
    models.Tag,
    models.Owner,
    models.DatasetVersion,
):
    admin.site.register(model, ReadOnlyAdmin)
admin.site.site_header = "Lineage Explorer administration"
admin.site.index_title = "Users, roles and subscriptions (the catalog is edited on its own pages)"
