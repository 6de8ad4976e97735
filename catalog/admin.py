"""The admin shows the catalog, the lineage and their evidence, and edits none of them.

A steward's edit goes through the catalog's pages, the API or the catalog file: they apply
the naming rules, record the edit in the dataset's history and carry a flag to every copy
of the column. An edit here would do none of that (a flag set here reached no copy, an
owner changed here had no history), and a deletion here would take the evidence with it.
What the admin does manage: users and who holds which role, the operations' subscriptions
(ops/admin.py), retention policies, what describes an owner, tag, subject kind or namespace
(never its name), and revoking API tokens.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest

from catalog import actions, models
from catalog.auth import ROLES
from catalog.catalog_file import MAX_DAYS


class ReadOnly:
    """Shown, never added, changed or deleted here (see the module's docstring)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin[Any]):
    pass


class ReadOnlyInline(ReadOnly, admin.TabularInline[Any, Any]):
    extra = 0


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


class NamedAdmin(admin.ModelAdmin[Any]):
    """What datasets refer to by name (owners, tags, subject kinds, namespaces, retention
    policies): described here, never renamed (events, node ids and the history name it)
    nor deleted (that would strip it from every dataset with no history of it)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()


class RetentionPolicyForm(forms.ModelForm[models.RetentionPolicy]):
    """A policy's duration in whole days, as the catalog file gives it."""

    days = forms.IntegerField(min_value=0, max_value=MAX_DAYS, help_text="How long rows are kept")

    class Meta:
        model = models.RetentionPolicy
        fields = ("name", "action", "legal_basis", "description")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["days"].initial = self.instance.duration_days

    def save(self, commit: bool = True) -> models.RetentionPolicy:
        self.instance.duration = timedelta(days=self.cleaned_data["days"])
        return super().save(commit)


@admin.register(models.RetentionPolicy)
class RetentionPolicyAdmin(NamedAdmin):
    """Policies are defined here or in the catalog file (``catalog_import``)."""

    form = RetentionPolicyForm
    fields = ("name", "days", "action", "legal_basis", "description")
    list_display = ("name", "duration_days", "action", "legal_basis")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return True


@admin.register(models.ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are issued by ``issue_token`` and revoked here, by ``revoke_token`` or by
    their owner; a revoked token stays revoked, and stays on record."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    exclude = ("key_hash",)
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[models.ApiToken]) -> None:
        for token in queryset:
            actions.revoke_token(token)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("catalog.change_apitoken")


class RoleGroupAdmin(GroupAdmin):
    """The roles' groups hold the permissions the README's table gives them (set again at
    every migration): who holds a role is managed on the user's page."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name", "permissions") if obj is not None and obj.name in ROLES else ()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None or obj.name not in ROLES


admin.site.unregister(Group)
admin.site.register(Group, RoleGroupAdmin)
admin.site.register(models.DatasetVersion, ReadOnlyAdmin)
for model in (models.Namespace, models.SubjectKind, models.Tag, models.Owner):
    admin.site.register(model, NamedAdmin)
admin.site.site_header = "Lineage Explorer administration"
admin.site.index_title = "Users, roles and subscriptions (the catalog is edited on its own pages)"
